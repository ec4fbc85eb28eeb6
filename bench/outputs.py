"""[4] History by tool-output size: runs whose every turn reads the weather, its answer padded
to ~1 KB, ~100 KB or ~1 MB (the example service's padding knob), over several turn counts:
events and bytes of history per turn, against the 1 KB runs of the same length; then the
issue #7 targets: 20 turns of 100 KB under 1 MB of history, and a run of 1 MB outputs
completing."""

from __future__ import annotations

import statistics
import uuid
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider.server import ScriptedProvider
from bench.history import history_bytes_per_turn, history_events_per_turn
from bench.longrun import Attempt, attempt, history_bytes
from bench.processes import WorkerProcess, agentloop_worker
from bench.report import Figure, Section, ratio
from bench.scripts import long_input, weather_script

SIZES = {"1 KB": 1_000, "100 KB": 100_000, "1 MB": 1_000_000}
"""Padding characters added to each weather answer (its own ~200 chars come on top)."""
SMALL, MEDIUM, LARGE = SIZES
TARGET_TURNS, TARGET_HISTORY_BYTES = 20, 1_000_000
"""Issue #7: 20 turns of 100 KB outputs under 1 MB of history."""
RUN_TIMEOUT_SECONDS = 300.0
CONTEXT_BUDGET_CHARS = 300_000
"""What the model may be sent per call, about a 100K-token window: past it, older tool results
shrink to short previews (agentloop.context). Without one (the scripted model has no known
window), 100 turns of 8,000-char previews outgrow the scripted provider's 1 MiB request limit
(HTTP 413 at turn 97) -- as they would outgrow a real model's window."""


@dataclass
class Played:
    """One padded run: its outcome and its history, whole and per turn (medians)."""

    size: str
    turns: int
    run: Attempt
    bytes_per_turn: float
    events_per_turn: float

    @property
    def total_bytes(self) -> int:
        return history_bytes(self.run.histories)


async def play_padded(
    client: Client,
    provider: ScriptedProvider,
    service: ExampleService,
    worker: WorkerProcess,
    size: str,
    turns: int,
) -> Played:
    """A `turns`-turn weather run with every answer padded by `SIZES[size]` characters."""
    name = f"bench-output-{turns}x{size.replace(' ', '')}-{uuid.uuid4().hex[:8]}"
    script = weather_script(name, turns)
    provider.register(script)
    service.set_padding("weather", SIZES[size])
    try:
        run = await attempt(
            client,
            worker.task_queue,
            name,
            long_input(script, ["get_weather"]).model_copy(
                update={"context_budget_chars": CONTEXT_BUDGET_CHARS}
            ),
            RUN_TIMEOUT_SECONDS,
        )
    finally:
        service.set_padding(None, 0)
    # Per turn: medians over the turns of the first Temporal run (start-up cost left out).
    first = run.histories[0]
    per_turn_bytes = history_bytes_per_turn(first)[:turns]
    per_turn_events = history_events_per_turn(first)[:turns]
    return Played(
        size,
        turns,
        run,
        statistics.median(per_turn_bytes),
        statistics.median(per_turn_events),
    )


async def measure(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    service: ExampleService,
    work_dir: Path,
    turn_counts: tuple[int, ...],
    large_turns: int,
) -> Section:
    """Every size at every turn count in `turn_counts` (which must include `TARGET_TURNS`),
    then one run of `large_turns` turns of 1 MB outputs."""
    async with agentloop_worker(settings, work_dir, f"bench-outputs-{uuid.uuid4().hex[:8]}") as w:
        grid = {
            (size, turns): await play_padded(client, provider, service, w, size, turns)
            for turns in turn_counts
            for size in SIZES
        }
        large = await play_padded(client, provider, service, w, LARGE, large_turns)
    violations = len(provider.violations)
    provider.reset()
    if violations:
        raise RuntimeError(f"the scripted provider saw {violations} protocol violation(s)")
    return section(grid, turn_counts, large)


def section(
    grid: dict[tuple[str, int], Played], turn_counts: tuple[int, ...], large: Played
) -> Section:
    result = Section(
        key="history_by_output_size",
        title=(
            f"history by tool-output size: {'/'.join(SIZES)} weather answers (padding knob), "
            f"{'/'.join(map(str, turn_counts))} turns"
        ),
        baseline=(
            "per-turn figures: the 1 KB run of the same length, in this run (medians over its "
            "turns, from one call_model to the next); flatness: the same size at "
            f"{turn_counts[0]} turns; targets: issue #7; every run with a context budget of "
            f"{CONTEXT_BUDGET_CHARS:,} chars"
        ),
    )
    for (size, turns), played in grid.items():
        small = grid[(SMALL, turns)]
        if not played.run.completed:
            result.add(Figure(f"{size} x {turns} turns: completed", played.run.outcome, "yes"))
            continue
        result.add(
            Figure(
                f"{size} x {turns} turns: bytes/turn",
                played.bytes_per_turn,
                small.bytes_per_turn,
                ratio(played.bytes_per_turn, small.bytes_per_turn),
            ),
            Figure(
                f"{size} x {turns} turns: events/turn",
                played.events_per_turn,
                small.events_per_turn,
                ratio(played.events_per_turn, small.events_per_turn),
            ),
        )
    shortest, longest = turn_counts[0], turn_counts[-1]
    if longest != shortest:
        for size in SIZES:
            last, first = grid[(size, longest)], grid[(size, shortest)]
            if not (last.run.completed and first.run.completed):
                continue
            result.add(
                Figure(
                    f"{size}: bytes/turn at {longest} turns vs {shortest}",
                    last.bytes_per_turn,
                    first.bytes_per_turn,
                    ratio(last.bytes_per_turn, first.bytes_per_turn),
                    "flat in turn count: ~1.00x",
                )
            )
    target = grid[(MEDIUM, TARGET_TURNS)]
    result.add(
        Figure(
            f"{TARGET_TURNS} turns of 100 KB outputs: total history bytes",
            target.total_bytes,
            TARGET_HISTORY_BYTES,
            ratio(target.total_bytes, TARGET_HISTORY_BYTES),
            "baseline: the issue #7 target (under 1 MB)",
        ),
        Figure(
            f"{large.turns} turns of 1 MB outputs: completed",
            "yes" if large.run.completed else f"no ({large.run.outcome})",
            "yes",
            note=f"{large.run.seconds:.1f} s; issue #7 target: completes",
        ),
        Figure(
            f"{large.turns} turns of 1 MB outputs: total history bytes",
            large.total_bytes,
            large.turns * SIZES[LARGE],
            ratio(large.total_bytes, large.turns * SIZES[LARGE]),
            "baseline: the tool outputs' own size (what carrying them inline would cost)",
        ),
    )
    return result
