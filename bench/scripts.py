"""The scripted model turns and run inputs the benchmarks play (offline, scripted provider)."""

from __future__ import annotations

from datetime import date, timedelta

from agentloop.contract import AgentRunInput, Limits
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from bench.peer import PeerTask

TRAVEL_SCRIPT = "bench-travel"
TRAVEL_ANSWER = "Weather in Shanghai on 2026-12-01: "
"""How the travel run's final answer starts (the forecast's condition follows)."""
WEATHER_ANSWER = "done"
FIRST_DAY = date(2026, 1, 1)


def travel_script() -> Script:
    """Two turns: one weather read, then a final answer quoting it."""
    call = ScriptedToolCall(
        id="call_weather", name="get_weather", arguments={"city": "Shanghai", "date": "2026-12-01"}
    )
    return Script(
        name=TRAVEL_SCRIPT,
        turns=[
            ScriptTurn(tool_calls=[call]),
            ScriptTurn(text=TRAVEL_ANSWER + "{{call_weather.condition}}."),
        ],
    )


def travel_input() -> AgentRunInput:
    return AgentRunInput(
        task="What is the weather in Shanghai on 2026-12-01?",
        provider="openai-chat",
        model=TRAVEL_SCRIPT,
        tools=["get_weather"],
    )


def weather_script(name: str, turns: int) -> Script:
    """`turns` tool turns, each one weather read for another day (never a repeated call, so
    no-progress detection stays quiet), then a short final answer."""
    calls = [
        ScriptTurn(
            tool_calls=[
                ScriptedToolCall(
                    id=f"call_{i:04d}",
                    name="get_weather",
                    arguments={"city": "Shanghai", "date": (FIRST_DAY + timedelta(i)).isoformat()},
                )
            ]
        )
        for i in range(turns)
    ]
    return Script(name=name, turns=[*calls, ScriptTurn(text=WEATHER_ANSWER)])


def report_script(name: str, turns: int, tool: str) -> Script:
    """`turns` tool turns, each one call to `tool` for another day, then a final answer."""
    calls = [
        ScriptTurn(
            tool_calls=[ScriptedToolCall(id=f"call_{i:04d}", name=tool, arguments={"day": i})]
        )
        for i in range(turns)
    ]
    return Script(name=name, turns=[*calls, ScriptTurn(text="done")])


def long_input(script: Script, tools: list[str], provider: str = "openai-chat") -> AgentRunInput:
    """A run allowed to play all of `script` (one call per tool turn), with no deadline."""
    model_calls = len(script.turns)
    return AgentRunInput.model_validate(
        {
            "task": "Collect the daily figures, one day per step, then say done.",
            "provider": provider,
            "model": script.name,
            "tools": tools,
            "limits": Limits(
                max_model_calls=model_calls,
                max_tool_calls=model_calls - 1,
                deadline_seconds=None,
            ),
        }
    )


def peer_task(script: Script, run_input: AgentRunInput) -> PeerTask:
    """The run `run_input` plays, as the OpenAI Agents SDK peer's task: the same prompt, script
    and tool, and as many model calls (its `max_turns`) as the script has turns."""
    return PeerTask(
        prompt=run_input.task,
        model=script.name,
        max_turns=len(script.turns),
        instructions=run_input.instructions,
    )
