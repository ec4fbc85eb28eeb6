"""[3] Replay time of a long history (today's `AgentRun` against a recorded run), against
the replay of a 2-turn history, per model call."""

from __future__ import annotations

import time
import uuid

from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agentloop.activity_io import MODEL_CALLS
from agentloop.runtime.config import SandboxMode, Settings
from agentloop.scripted_provider.server import ScriptedProvider
from agentloop.worker import workflow_runner
from agentloop.workflows.agent_run import AgentRun
from bench.longrun import play
from bench.report import Figure, Section, ratio
from bench.scripts import long_input, weather_script
from bench.throughput import floor_steps


async def record_long(
    client: Client, settings: Settings, provider: ScriptedProvider, turns: int
) -> WorkflowHistory:
    name = f"bench-replay-{uuid.uuid4().hex[:8]}"
    script = weather_script(name, turns)
    provider.register(script)
    _, history = await play(client, settings.task_queue, name, long_input(script, ["get_weather"]))
    violations = len(provider.violations)
    provider.reset()
    if violations:
        raise RuntimeError(f"the scripted provider saw {violations} protocol violation(s)")
    return history


async def best_replay_seconds(
    history: WorkflowHistory, repeats: int, sandbox: SandboxMode = "off"
) -> float:
    """The fastest of `repeats` replays (each raises if the history does not replay), run as
    a worker with `AGENTLOOP_WORKFLOW_SANDBOX=sandbox` runs the workflow."""
    replayer = Replayer(
        workflows=[AgentRun],
        data_converter=pydantic_data_converter,
        workflow_runner=workflow_runner(sandbox),
    )
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        await replayer.replay_workflow(history)
        best = min(best, time.perf_counter() - started)
    return best


def model_calls(history: WorkflowHistory) -> int:
    return sum(step.activity in MODEL_CALLS for step in floor_steps(history))


async def measure(long: WorkflowHistory, short: WorkflowHistory, repeats: int) -> Section:
    long_calls, short_calls = model_calls(long), model_calls(short)
    long_s = await best_replay_seconds(long, repeats)
    short_s = await best_replay_seconds(short, repeats * 3)
    sandboxed_long_s = await best_replay_seconds(long, repeats, "on")
    sandboxed_short_s = await best_replay_seconds(short, repeats * 3, "on")
    long_per, short_per = long_s / long_calls, short_s / short_calls
    result = Section(
        key="replay",
        title=f"replay: a {long_calls - 1}-turn history ({long_calls} model calls, "
        f"{len(long.events):,} events)",
        baseline=(
            f"replay of a 2-turn history ({short_calls} model calls, {len(short.events)} events) "
            f"in this run; best of {repeats} (long) and {repeats * 3} (short) replays, "
            "unsandboxed as workers run AgentRun by default"
        ),
    )
    result.add(
        Figure("replay seconds", long_s, short_s),
        Figure("seconds per model call", long_per, short_per, ratio(long_per, short_per)),
        Figure(
            "replay seconds in the sandbox",
            sandboxed_long_s,
            sandboxed_short_s,
            note="AGENTLOOP_WORKFLOW_SANDBOX=on",
        ),
    )
    return result
