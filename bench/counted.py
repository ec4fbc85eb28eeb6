"""[12] How often the provider's token counter is asked in a 20-turn run: with a generous
token cap (the bound on each call's input always fits: never), and with a tight one (the cap
is what the generous run used, and a little more: the bound binds near the end, and each
call it would refuse is counted instead of refused; without the count, the run would stop
there `limit_reached`)."""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import Client

from agentloop.contract import WORKFLOW_NAME, AgentRunResult
from agentloop.runtime.config import Settings
from agentloop.scripted_provider.server import ScriptedProvider
from bench.report import Figure, Section, ratio
from bench.scripts import long_input, weather_script

TURNS = 20
TIGHT_MARGIN = 40
"""The tight cap: what the generous run used in all, and this many tokens more."""
RUN_TIMEOUT_SECONDS = 120.0


async def measure(
    client: Client, settings: Settings, provider: ScriptedProvider, turns: int = TURNS
) -> Section:
    section = Section(
        "token_counter",
        f"Token counter asks in a {turns}-turn run (feature exact-count-when-bound-binds)",
        "the run's model calls (ratio: asks per call)",
    )
    generous = await _run(client, settings, provider, turns, 10_000_000)
    used = generous[0].usage.input_tokens + generous[0].usage.output_tokens
    tight_cap = used + TIGHT_MARGIN
    tight = await _run(client, settings, provider, turns, tight_cap)
    for label, (result, asks) in (
        ("asks, generous cap (10M tokens)", generous),
        (f"asks, tight cap ({tight_cap:,} tokens)", tight),
    ):
        calls = result.usage.model_calls
        note = f"{result.status}, {result.usage.input_tokens + result.usage.output_tokens:,} used"
        section.add(Figure(label, asks, calls, ratio(asks, calls), note))
    return section


async def _run(
    client: Client, settings: Settings, provider: ScriptedProvider, turns: int, cap: int
) -> tuple[AgentRunResult, int]:
    """The run's result, and how often the counter was asked for it."""
    script = weather_script(f"bench-counted-{uuid.uuid4().hex[:8]}", turns)
    provider.register(script)
    # Anthropic's count is of the very request it bills (Chat Completions is counted in the
    # Responses shape, with room per message, which a cap this tight may not leave).
    run_input = long_input(script, ["get_weather"], provider="anthropic")
    limits = run_input.limits.model_copy(update={"max_total_tokens": cap})
    run_input = run_input.model_copy(update={"limits": limits})
    result = await asyncio.wait_for(
        client.execute_workflow(
            WORKFLOW_NAME,
            run_input,
            id=script.name,
            task_queue=settings.task_queue,
            result_type=AgentRunResult,
        ),
        RUN_TIMEOUT_SECONDS,
    )
    asks = sum(1 for count in provider.token_counts if count["script"] == script.name)
    return result, asks
