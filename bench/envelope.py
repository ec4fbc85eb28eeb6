"""[16] What the provenance envelope costs (issue 46): a 20-turn transcript of tool results,
built by each adapter with every result untrusted (in its envelope, the note said once) against
the same results declared trusted (sent as they came): request bytes, the bytes one envelope
adds (a token covers at least one byte, so this bounds its tokens; `~tokens` divides by 4, the
usual English ratio), the note's bytes, and `build_request` CPU. Pure: no dev stack.
`python -m bench.envelope` prints just this section."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from agentloop.adapters import anthropic_messages, openai_chat, openai_responses
from agentloop.adapters.base import ModelRequest
from agentloop.contract import ModelSettings, Provider
from agentloop.envelope import ENVELOPE_NOTE
from agentloop.events import Event, Instruction, ModelOutput, ToolCall, ToolResult, UserInput
from agentloop.tool_spec import ToolSpec
from bench.report import Figure, Section, ratio, render

BUILD: dict[Provider, Callable[[ModelRequest], dict[str, Any]]] = {
    "openai-chat": openai_chat.build_request,
    "openai-responses": openai_responses.build_request,
    "anthropic": anthropic_messages.build_request,
}
TURNS = 20
OUTPUT_CHARS = {"200-char outputs": 200, "8,000-char outputs": 8_000}
"""A short read's answer, and one at the default result cap."""
REPEATS = 200
CHARS_PER_TOKEN = 4


def transcript(output_chars: int, trusted: bool) -> list[Event]:
    events: list[Event] = [Instruction(text="Answer briefly."), UserInput(text="Plan my trip.")]
    for turn in range(TURNS):
        call_id = f"call_{turn:02d}_{'x' * 20}"  # about as long as providers' ids
        call = ToolCall(call_id=call_id, name="get_weather", arguments={"city": f"c{turn}"})
        events.append(ModelOutput(tool_calls=[call], stop="tool_calls"))
        content = json.dumps({"city": f"c{turn}", "report": "s" * output_chars})[:output_chars]
        events.append(
            ToolResult(call_id=call_id, tool="get_weather", content=content, trusted=trusted)
        )
    return events


def request(provider: Provider, events: list[Event], tools: bool) -> ModelRequest:
    specs = [ToolSpec(name="get_weather", description="Weather.")] if tools else []
    return ModelRequest(
        provider=provider, model="m", events=events, tools=specs, settings=ModelSettings()
    )


def body_bytes(body: dict[str, Any]) -> int:
    return len(json.dumps(body, ensure_ascii=False).encode("utf-8"))


def cpu_per_build(build: Callable[[ModelRequest], dict[str, Any]], model: ModelRequest) -> float:
    """Median CPU seconds of one `build_request`, over `REPEATS` builds in 5 rounds."""
    rounds = []
    for _ in range(5):
        started = time.process_time()
        for _ in range(REPEATS // 5):
            build(model)
        rounds.append((time.process_time() - started) / (REPEATS // 5))
    return statistics.median(rounds)


def measure() -> Section:
    section = Section(
        key="envelope",
        title=f"Provenance envelope: a {TURNS}-result request, every result untrusted",
        baseline="the same results declared trusted (no envelope, no note), same adapter",
    )
    note = len(ENVELOPE_NOTE.encode("utf-8"))
    section.add(
        Figure("note, said once (bytes)", note, note="~tokens " + str(note // CHARS_PER_TOKEN))
    )
    for label, chars in OUTPUT_CHARS.items():
        for provider, build in BUILD.items():
            wrapped = request(provider, transcript(chars, trusted=False), tools=True)
            plain = request(provider, transcript(chars, trusted=True), tools=False)
            sent, bare = body_bytes(build(wrapped)), body_bytes(build(plain))
            # What the tools' declaration adds is the same either way: leave it out.
            declared = body_bytes(build(request(provider, plain.events, tools=True))) - bare
            per_result = (sent - bare - declared - note) / TURNS
            section.add(
                Figure(f"{provider}, {label}: request bytes", sent, bare, ratio(sent, bare)),
                Figure(
                    f"{provider}, {label}: bytes one envelope adds",
                    round(per_result, 1),
                    note=f"~tokens {per_result / CHARS_PER_TOKEN:.0f}; at most {per_result:.0f}",
                ),
            )
            cpu, cpu_bare = cpu_per_build(build, wrapped), cpu_per_build(build, plain)
            section.add(
                Figure(
                    f"{provider}, {label}: build_request CPU (us)",
                    round(cpu * 1e6, 1),
                    round(cpu_bare * 1e6, 1),
                    ratio(cpu, cpu_bare),
                )
            )
    return section


def main() -> None:
    print(render(measure(), 16))


if __name__ == "__main__":
    main()
