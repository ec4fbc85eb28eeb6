"""[1] Many concurrent runs: 2-turn runs (failures, wall time, runs/s and the worker's RSS
growth per concurrent run), then 5-turn runs at several concurrencies (runs/s and RSS growth,
and what each run past the second-largest level added), each against the Temporal floor (no-op
activities) on the same dev server, in the same run; the 200 5-turn runs again on a worker with
fewer activity slots, against Temporal's default; the 2-turn runs also against the same runs on
the OpenAI Agents SDK peer (`bench.peer`). Every worker runs in its own OS process, so the RSS
figure is the worker's own."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory

from agentloop.activity_io import MODEL_CALL, RUN_TOOL
from agentloop.contract import WORKFLOW_NAME, AgentRunInput, AgentRunResult
from agentloop.runtime.config import Settings
from agentloop.scripted_provider.server import ScriptedProvider
from bench import run_state
from bench.floor import FLOOR_WORKFLOW, FloorStep
from bench.memory import PeakSampler
from bench.peer import PEER_WORKFLOW, RUN_TIMEOUT, PeerTask
from bench.processes import agentloop_worker, floor_worker, peer_worker
from bench.report import Figure, Section, ratio
from bench.scripts import (
    TRAVEL_ANSWER,
    long_input,
    peer_task,
    travel_input,
    travel_script,
    weather_script,
)

TARGET_RUNS_PER_SECOND_VS_PEER = 1.5
TARGET_WORKER_MIB_PER_RUN = 0.35
"""Issue #7: 200 concurrent runs, no failures, >= 1.5x the peer's runs/s, and worker RSS
growth under this per concurrent run."""
LOCAL_ACTIVITY_MARKER = "core_local_activity"
"""The marker Temporal records for each local activity that ran."""

RunOne = Callable[[int], Awaitable[bool]]


@dataclass
class Memory:
    """RSS of one process over a batch: before it, and the peak during it."""

    start_mib: float
    peak_mib: float

    @property
    def growth_mib(self) -> float:
        return max(0.0, self.peak_mib - self.start_mib)


@dataclass
class Batch:
    runs: int
    concurrency: int
    wall_seconds: float
    failures: int
    worker: Memory
    """The worker process alone (its own OS process)."""
    bench: Memory
    """This process: scripted provider, example service, the client and its 200 handles."""

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.wall_seconds

    @property
    def in_flight(self) -> int:
        return min(self.runs, self.concurrency)

    @property
    def worker_mib_per_run(self) -> float:
        return self.worker.growth_mib / self.in_flight

    @property
    def combined_mib_per_run(self) -> float:
        """Worker and bench process together: the scope of the figure measured before the
        worker had its own process (one process held worker, provider, service and client)."""
        return (self.worker.growth_mib + self.bench.growth_mib) / self.in_flight


async def run_batch(runs: int, concurrency: int, run_one: RunOne, worker_pid: int) -> Batch:
    """`runs` runs, at most `concurrency` in flight; a run that raises counts as a failure.
    The RSS of the worker process `worker_pid` and of this process are sampled throughout."""
    gate = asyncio.Semaphore(concurrency)
    errors: list[str] = []

    async def guarded(i: int) -> bool:
        async with gate:
            try:
                return await run_one(i)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                return False

    gc.collect()
    with PeakSampler(worker_pid) as worker, PeakSampler() as bench:
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(guarded(i) for i in range(runs)))
        wall = time.perf_counter() - started
    for error in errors[:3]:
        print(f"    run failed: {error}", file=sys.stderr)
    return Batch(
        runs=runs,
        concurrency=concurrency,
        wall_seconds=wall,
        failures=outcomes.count(False),
        worker=Memory(worker.start_mib, worker.peak_mib),
        bench=Memory(bench.start_mib, bench.peak_mib),
    )


def agentloop_runner(
    client: Client, task_queue: str, prefix: str, run_input: AgentRunInput | None = None
) -> RunOne:
    """Runs of `run_input` (default: the 2-turn travel run), workflow ids `prefix-i`."""
    played = run_input or travel_input()

    async def run_one(i: int) -> bool:
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            played,
            id=f"{prefix}-{i}",
            task_queue=task_queue,
            result_type=AgentRunResult,
        )
        result: AgentRunResult = await handle.result()
        return result.status == "completed"

    return run_one


def peer_runner(
    client: Client, task_queue: str, prefix: str, task: PeerTask, answer: str
) -> RunOne:
    """Runs of `task` on the peer, workflow ids `prefix-i`; done when its final output holds
    `answer` (the scripted provider checked the conversation on the way)."""

    async def run_one(i: int) -> bool:
        output: str = await client.execute_workflow(
            PEER_WORKFLOW,
            task,
            id=f"{prefix}-{i}",
            task_queue=task_queue,
            result_type=str,
            execution_timeout=RUN_TIMEOUT,
        )
        return answer in output

    return run_one


def floor_runner(client: Client, task_queue: str, prefix: str, steps: list[FloorStep]) -> RunOne:
    async def run_one(i: int) -> bool:
        done: int = await client.execute_workflow(
            FLOOR_WORKFLOW, steps, id=f"{prefix}-{i}", task_queue=task_queue, result_type=int
        )
        return done == len(steps)

    return run_one


async def warm_up(
    client: Client, task_queue: str, prefix: str, run_input: AgentRunInput | None = None
) -> WorkflowHistory:
    """One run before measuring (imports, connections, caches); its history names the
    activities the floor must run (and, for the travel run, is the 2-turn replay baseline)."""
    run_one = agentloop_runner(client, task_queue, prefix, run_input)
    if not await run_one(0):
        raise RuntimeError("the warm-up run did not complete")
    return await client.get_workflow_handle(f"{prefix}-0").fetch_history()


def floor_steps(history: WorkflowHistory) -> list[FloorStep]:
    """The activities a run scheduled, in order, local ones (recorded as markers) included."""
    steps: list[FloorStep] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            steps.append(FloorStep(name))
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                data = json.loads(marker.details["data"].payloads[0].data)
                steps.append(FloorStep(data["activity_type"], local=True))
    return steps


@dataclass
class ThroughputResult:
    section: Section
    two_turn_history: WorkflowHistory
    failures: int


@dataclass
class Level:
    """One concurrency level of the many-runs figures: agentloop and its floor."""

    runs: int
    agentloop: Batch
    floor: Batch
    history: WorkflowHistory
    """One 5-turn run of the level's (its warm-up)."""


MANY_RUNS_TOOL_TURNS = 4
"""A 5-turn run: four weather reads, then the final answer (5 model calls)."""


async def measure(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    runs: int,
    concurrency: int,
    work_dir: Path,
    levels: tuple[int, ...] = (),
) -> ThroughputResult:
    """The agentloop worker (`python -m agentloop.worker`) and the floor's worker each run in
    their own OS process, so their RSS is theirs alone; this process keeps the scripted
    provider (which records every request body), the example service and the client."""
    provider.register(travel_script())
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    async with agentloop_worker(settings, work_dir, f"{prefix}-agentloop") as worker:
        queue = worker.task_queue
        history = await warm_up(client, queue, f"{prefix}-warm")
        agentloop = await run_batch(
            runs, concurrency, agentloop_runner(client, queue, prefix), worker.pid
        )
        if agentloop.failures:
            print(f"    agentloop worker log (tail):\n{worker.child.log_tail()}", file=sys.stderr)
    matched = floor_steps(history)
    two = [FloorStep(MODEL_CALL), FloorStep(RUN_TOOL)]
    async with floor_worker(settings, work_dir, f"{prefix}-floor") as floor_process:
        queue = floor_process.task_queue
        await floor_runner(client, queue, f"{prefix}-floor-warm", matched)(0)
        floor = await run_batch(
            runs,
            concurrency,
            floor_runner(client, queue, f"{prefix}-floor", matched),
            floor_process.pid,
        )
        floor_two = await run_batch(
            runs,
            concurrency,
            floor_runner(client, queue, f"{prefix}-floor2", two),
            floor_process.pid,
        )
    travel = peer_task(travel_script(), travel_input())
    async with peer_worker(settings, provider.base_url, work_dir, f"{prefix}-peer") as process:
        run_peer = peer_runner(client, process.task_queue, f"{prefix}-peer", travel, TRAVEL_ANSWER)
        if not await run_peer(runs):  # warm-up: an id the batch does not use
            raise RuntimeError(f"the peer's warm-up run failed:\n{process.child.log_tail()}")
        peer = await run_batch(runs, concurrency, run_peer, process.pid)
    measured = [await many_runs(client, settings, provider, work_dir, n) for n in levels]
    compared = next((m for m in measured if m.runs == SLOTS_COMPARED_AT), None)
    if compared is None and measured:
        compared = measured[-1]
    slotted = (
        await slotted_runs(client, settings, provider, work_dir, compared.runs)
        if compared is not None
        else None
    )
    violations = len(provider.violations)
    provider.reset()
    section = Section(
        key="throughput",
        title=f"throughput and memory: {runs} 2-turn travel runs, concurrency {concurrency}"
        + (f"; {'/'.join(map(str, levels))} concurrent 5-turn runs" if levels else ""),
        baseline=(
            f"Temporal floor measured in this run on the same dev server: {runs} workflows of "
            f"{len(matched)} no-op activities ({', '.join(map(str, matched))}, as AgentRun "
            "schedules them), "
            "its worker in its own process too; for the 5-turn runs, as many floor workflows "
            "of the 5-turn run's activities, each level on fresh workers"
        ),
    )
    section.add(*figures(agentloop, floor, floor_two, violations, len(two)))
    section.add(*peer_figures(agentloop, peer))
    for level in measured:
        section.add(*level_figures(level))
    if len(measured) > 1:
        section.add(added_run_figure(measured[-2], measured[-1]))
    if slotted is not None and compared is not None:
        section.add(*slot_figures(slotted, compared))
    section.add(await state_figure("2-turn", history))
    if measured:
        section.add(await state_figure(f"{MANY_RUNS_TOOL_TURNS + 1}-turn", measured[0].history))
    failures = agentloop.failures + floor.failures + peer.failures + violations
    failures += sum(level.agentloop.failures + level.floor.failures for level in measured)
    failures += slotted.failures if slotted is not None else 0
    return ThroughputResult(section, history, failures)


async def many_runs(
    client: Client, settings: Settings, provider: ScriptedProvider, work_dir: Path, runs: int
) -> Level:
    """`runs` 5-turn runs all at once on a fresh agentloop worker, then as many floor workflows
    of the same activities on a fresh floor worker: fresh, so what an earlier level left in a
    worker (grown heap, cached workflows) does not hide this level's RSS growth."""
    prefix = f"bench-many{runs}-{uuid.uuid4().hex[:8]}"
    agentloop, history = await five_turn_batch(client, settings, provider, work_dir, runs, prefix)
    steps = floor_steps(history)
    async with floor_worker(settings, work_dir, f"{prefix}-floor") as floor_process:
        floor_run = floor_runner(client, floor_process.task_queue, f"{prefix}-floor", steps)
        await floor_run(runs)  # warm-up: an id the batch does not use
        floor = await run_batch(runs, runs, floor_run, floor_process.pid)
    return Level(runs, agentloop, floor, history)


FEW_ACTIVITY_SLOTS = 20
"""Activity slots of the worker `slotted_runs` measures (`AGENTLOOP_MAX_CONCURRENT_ACTIVITIES`;
Temporal's default is 100)."""
SLOTS_COMPARED_AT = 200
"""The level whose runs are measured again with `FEW_ACTIVITY_SLOTS` (issue #21's scale; the
largest level when it is not measured)."""


async def slotted_runs(
    client: Client, settings: Settings, provider: ScriptedProvider, work_dir: Path, runs: int
) -> Batch:
    """The largest level's 5-turn runs again, on a fresh worker with `FEW_ACTIVITY_SLOTS`
    activity slots: what the calls in flight cost beside the runs themselves."""
    prefix = f"bench-slots{runs}-{uuid.uuid4().hex[:8]}"
    slots = {"AGENTLOOP_MAX_CONCURRENT_ACTIVITIES": str(FEW_ACTIVITY_SLOTS)}
    batch, _ = await five_turn_batch(client, settings, provider, work_dir, runs, prefix, slots)
    return batch


async def five_turn_batch(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    work_dir: Path,
    runs: int,
    prefix: str,
    worker_env: dict[str, str] | None = None,
) -> tuple[Batch, WorkflowHistory]:
    """`runs` 5-turn runs at once on a fresh agentloop worker (`worker_env` over its
    environment), after one warm-up run, whose history is returned beside the batch."""
    script = weather_script(prefix, MANY_RUNS_TOOL_TURNS)
    provider.register(script)
    run_input = long_input(script, ["get_weather"])
    async with agentloop_worker(settings, work_dir, prefix, worker_env) as worker:
        history = await warm_up(client, worker.task_queue, f"{prefix}-warm", run_input)
        runner = agentloop_runner(client, worker.task_queue, prefix, run_input)
        return await run_batch(runs, runs, runner, worker.pid), history


def added_run_figure(fewer: Level, more: Level) -> Figure:
    """What each run past the smaller level added to the worker's peak RSS: the runs' own
    cost, without what the calls in flight cost whatever the number of runs."""

    def added(smaller: Batch, larger: Batch) -> float:
        return (larger.worker.growth_mib - smaller.worker.growth_mib) / (larger.runs - smaller.runs)

    ours, floor = added(fewer.agentloop, more.agentloop), added(fewer.floor, more.floor)
    return Figure(
        f"5-turn runs: worker RSS per run added, {fewer.runs} -> {more.runs} concurrent (MiB)",
        ours,
        floor,
        ratio(ours, floor),
        "(growth at the larger level - at the smaller) / the runs between them",
    )


def slot_figures(slotted: Batch, level: Level) -> list[Figure]:
    """Against the same runs on a worker with Temporal's default 100 slots, in this run."""
    return compared(
        f"{FEW_ACTIVITY_SLOTS} activity slots, 5-turn runs, {level.runs} concurrent:",
        slotted,
        level.agentloop,
        rate_note="baseline: the same runs on a worker with 100 slots (Temporal's default)",
        mib_note="issue #21 target: <= 0.15",
    )


async def state_figure(run: str, history: WorkflowHistory) -> Figure:
    state = await run_state.measure(history)
    return Figure(
        f"AgentRun's own objects per cached {run} run (KiB)",
        state.total_bytes / 1024,
        note=f"largest fields of its state (KiB): {state.largest()}; shared objects left out",
    )


def level_figures(level: Level) -> list[Figure]:
    return compared(
        f"5-turn runs, {level.runs} concurrent:",
        level.agentloop,
        level.floor,
        mib_note=f"issue #7 target at 200: < {TARGET_WORKER_MIB_PER_RUN}",
    )


def compared(
    name: str, ours: Batch, baseline: Batch, rate_note: str = "", mib_note: str = ""
) -> list[Figure]:
    """Failures, runs/s and worker RSS growth per run of `ours` against `baseline`."""
    mib, baseline_mib = ours.worker_mib_per_run, baseline.worker_mib_per_run
    return [
        Figure(f"{name} failed", ours.failures, baseline.failures),
        Figure(
            f"{name} runs/s",
            ours.runs_per_second,
            baseline.runs_per_second,
            ratio(ours.runs_per_second, baseline.runs_per_second),
            rate_note,
        ),
        Figure(
            f"{name} worker RSS growth/run (MiB)",
            mib,
            baseline_mib,
            ratio(mib, baseline_mib),
            f"{ours.worker.start_mib:.0f} -> {ours.worker.peak_mib:.0f} MiB; {mib_note}",
        ),
    ]


def figures(
    agentloop: Batch, floor: Batch, floor_two: Batch, violations: int, two: int
) -> list[Figure]:
    rate = agentloop.runs_per_second
    worker, floor_worker = agentloop.worker_mib_per_run, floor.worker_mib_per_run
    combined, floor_combined = agentloop.combined_mib_per_run, floor.combined_mib_per_run
    return [
        Figure("failed runs (must be 0)", agentloop.failures, floor.failures),
        Figure("scripted-provider protocol violations", violations),
        Figure("wall time (s)", agentloop.wall_seconds, floor.wall_seconds),
        Figure("runs/s", rate, floor.runs_per_second, ratio(rate, floor.runs_per_second)),
        Figure(
            f"runs/s vs a {two}-activity floor",
            rate,
            floor_two.runs_per_second,
            ratio(rate, floor_two.runs_per_second),
            "floor: call_model + run_tool only",
        ),
        Figure(
            "worker RSS growth per concurrent run (MiB)",
            worker,
            floor_worker,
            ratio(worker, floor_worker),
            "(peak - before) / concurrent runs, the worker process alone (python -m "
            f"agentloop.worker); issue #7 target: < {TARGET_WORKER_MIB_PER_RUN}",
        ),
        Figure(
            "worker RSS before -> peak (MiB)",
            f"{agentloop.worker.start_mib:.0f} -> {agentloop.worker.peak_mib:.0f}",
            f"{floor.worker.start_mib:.0f} -> {floor.worker.peak_mib:.0f}",
        ),
        Figure(
            "combined RSS growth per concurrent run (MiB)",
            combined,
            floor_combined,
            ratio(combined, floor_combined),
            "worker + this process (scripted provider, example service, client): the scope "
            "of the single-process figure reported before",
        ),
        Figure(
            "bench process RSS before -> peak (MiB)",
            f"{agentloop.bench.start_mib:.0f} -> {agentloop.bench.peak_mib:.0f}",
            f"{floor.bench.start_mib:.0f} -> {floor.bench.peak_mib:.0f}",
        ),
    ]


def peer_figures(agentloop: Batch, peer: Batch) -> list[Figure]:
    """The same 2-turn runs against the OpenAI Agents SDK peer, measured in this run."""
    rate, peer_rate = agentloop.runs_per_second, peer.runs_per_second
    mib, peer_mib = agentloop.worker_mib_per_run, peer.worker_mib_per_run
    return [
        Figure("peer: failed runs (must be 0)", agentloop.failures, peer.failures),
        Figure(
            "runs/s vs the peer",
            rate,
            peer_rate,
            ratio(rate, peer_rate),
            "baseline: the OpenAI Agents SDK on Temporal (bench.peer), same runs, same "
            f"concurrency, in this run; issue #7 target: >= {TARGET_RUNS_PER_SECOND_VS_PEER}x",
        ),
        Figure(
            "worker RSS growth per concurrent run vs the peer (MiB)",
            mib,
            peer_mib,
            ratio(mib, peer_mib),
            f"peer worker {peer.worker.start_mib:.0f} -> {peer.worker.peak_mib:.0f} MiB",
        ),
    ]
