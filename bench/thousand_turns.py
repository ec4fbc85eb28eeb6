"""[5] A very long run: K weather reads in one run (1,000 in full mode), across whatever
continue-as-new boundaries Temporal suggests: does it complete, how long it took, the worker
CPU it took a turn, and its history (bytes, events, runs in the chain), against a short run of
the same script played just before it."""

from __future__ import annotations

import uuid
from pathlib import Path

from temporalio.client import Client

from agentloop.runtime.config import Settings
from agentloop.scripted_provider.server import ScriptedProvider
from bench.longrun import Attempt, attempt, history_bytes
from bench.processes import WorkerProcess, agentloop_worker, cpu_seconds
from bench.report import Figure, Section, ratio
from bench.scripts import long_input, weather_script

BASELINE_TURNS = 20
RUN_TIMEOUT_SECONDS = 900.0


async def play_weather(
    client: Client,
    provider: ScriptedProvider,
    worker: WorkerProcess,
    turns: int,
    continue_as_new_after_events: int | None,
) -> Attempt:
    name = f"bench-long-{turns}-{uuid.uuid4().hex[:8]}"
    # `turns` model calls, the last one the final answer: a run may make at most
    # MAX_RUN_CALLS, so a 1,000-turn run is 999 tool turns and the answer.
    script = weather_script(name, turns - 1)
    provider.register(script)
    run_input = long_input(script, ["get_weather"]).model_copy(
        update={"continue_as_new_after_events": continue_as_new_after_events}
    )
    return await attempt(client, worker.task_queue, name, run_input, RUN_TIMEOUT_SECONDS)


async def play_counting_cpu(
    client: Client,
    provider: ScriptedProvider,
    worker: WorkerProcess,
    turns: int,
    continue_as_new_after_events: int | None,
) -> tuple[Attempt, float]:
    """`play_weather`, and the CPU seconds the worker process used meanwhile."""
    before = cpu_seconds(worker.pid)
    played = await play_weather(client, provider, worker, turns, continue_as_new_after_events)
    return played, cpu_seconds(worker.pid) - before


async def measure(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    work_dir: Path,
    turns: int,
    continue_as_new_after_events: int | None,
) -> Section:
    """`continue_as_new_after_events` None: only when Temporal suggests it (full mode); a
    small count makes a short run cross boundaries too (short mode: the path never rots)."""
    async with agentloop_worker(settings, work_dir, f"bench-long-{uuid.uuid4().hex[:8]}") as w:
        await play_weather(client, provider, w, 1, None)  # warm-up: imports, connections
        short, short_cpu = await play_counting_cpu(client, provider, w, BASELINE_TURNS, None)
        long, long_cpu = await play_counting_cpu(
            client, provider, w, turns, continue_as_new_after_events
        )
    violations = len(provider.violations)
    provider.reset()
    if violations:
        raise RuntimeError(f"the scripted provider saw {violations} protocol violation(s)")
    return section(turns, long, short, continue_as_new_after_events, (long_cpu, short_cpu))


def per_turn(value: float, turns: int) -> float:
    return value / turns


def section(
    turns: int, long: Attempt, short: Attempt, every: int | None, cpu: tuple[float, float]
) -> Section:
    """`cpu`: the worker's CPU seconds during the long run and during the short one."""
    events = sum(len(h.events) for h in long.histories)
    short_events = sum(len(h.events) for h in short.histories)
    total, short_total = history_bytes(long.histories), history_bytes(short.histories)
    trigger = (
        f"continue-as-new after {every} events or when Temporal suggests it"
        if every
        else "continue-as-new only when Temporal suggests it"
    )
    result = Section(
        key="long_run",
        title=f"long run: {turns} turns (model calls), each but the last with one get_weather "
        f"read ({trigger})",
        baseline=f"a {BASELINE_TURNS}-turn run of the same kind, just before, same worker",
    )
    result.add(
        Figure(
            "completed",
            "yes" if long.completed else f"no ({long.outcome})",
            "yes" if short.completed else f"no ({short.outcome})",
            note="issue #7 target: a 1,000-turn run completes",
        ),
        Figure("wall time (s)", long.seconds, short.seconds),
        Figure(
            "wall per turn (ms)",
            1000 * per_turn(long.seconds, turns),
            1000 * per_turn(short.seconds, BASELINE_TURNS),
            ratio(per_turn(long.seconds, turns), per_turn(short.seconds, BASELINE_TURNS)),
        ),
        Figure(
            "worker CPU per turn (ms)",
            1000 * per_turn(cpu[0], turns),
            1000 * per_turn(cpu[1], BASELINE_TURNS),
            ratio(per_turn(cpu[0], turns), per_turn(cpu[1], BASELINE_TURNS)),
            "python -m agentloop.worker process, utime + stime; what grows is the request "
            "(the whole conversation is sent each call)",
        ),
        Figure("total history bytes", total, short_total),
        Figure(
            "history bytes per turn",
            per_turn(total, turns),
            per_turn(short_total, BASELINE_TURNS),
            ratio(per_turn(total, turns), per_turn(short_total, BASELINE_TURNS)),
            "all runs of the chain",
        ),
        Figure("history events", events, short_events),
        Figure(
            "history events per turn",
            per_turn(events, turns),
            per_turn(short_events, BASELINE_TURNS),
            ratio(per_turn(events, turns), per_turn(short_events, BASELINE_TURNS)),
        ),
        Figure("continue-as-new count", len(long.histories) - 1, len(short.histories) - 1),
    )
    return result
