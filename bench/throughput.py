"""[1] Many concurrent 2-turn runs: failures, wall time, runs/s and RSS growth per concurrent
run, against the Temporal floor (no-op activities) on the same dev server, in the same run."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from agentloop.config import Settings
from agentloop.contract import WORKFLOW_NAME, AgentRunResult
from agentloop.demo.scripted_provider.server import ScriptedProvider
from bench.floor import FLOOR_WORKFLOW, BenchFloor, noop
from bench.memory import PeakSampler
from bench.report import Figure, Section, ratio
from bench.scripts import travel_input, travel_script

REFERENCE_RUNS_PER_SECOND = 6.5
"""The OpenAI Agents SDK on Temporal, same 2-turn case, measured earlier on this machine."""

RunOne = Callable[[int], Awaitable[bool]]


@dataclass
class Batch:
    runs: int
    concurrency: int
    wall_seconds: float
    failures: int
    growth_mib: float
    start_mib: float
    peak_mib: float

    @property
    def runs_per_second(self) -> float:
        return self.runs / self.wall_seconds

    @property
    def mib_per_run(self) -> float:
        return self.growth_mib / min(self.runs, self.concurrency)


async def run_batch(runs: int, concurrency: int, run_one: RunOne) -> Batch:
    """`runs` runs, at most `concurrency` in flight; a run that raises counts as a failure."""
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
    with PeakSampler() as memory:
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
        growth_mib=memory.growth_mib,
        start_mib=memory.start_mib,
        peak_mib=memory.peak_mib,
    )


def agentloop_runner(client: Client, settings: Settings, prefix: str) -> RunOne:
    async def run_one(i: int) -> bool:
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            travel_input(),
            id=f"{prefix}-{i}",
            task_queue=settings.task_queue,
            result_type=AgentRunResult,
        )
        result: AgentRunResult = await handle.result()
        return result.status == "completed"

    return run_one


def floor_runner(client: Client, task_queue: str, prefix: str, steps: list[str]) -> RunOne:
    async def run_one(i: int) -> bool:
        done: int = await client.execute_workflow(
            FLOOR_WORKFLOW, steps, id=f"{prefix}-{i}", task_queue=task_queue, result_type=int
        )
        return done == len(steps)

    return run_one


async def warm_up(client: Client, settings: Settings, prefix: str) -> WorkflowHistory:
    """One run before measuring (imports, connections, caches); its history is the 2-turn
    replay baseline and names the activities the floor must run."""
    run_one = agentloop_runner(client, settings, prefix)
    if not await run_one(0):
        raise RuntimeError("the warm-up travel run did not complete")
    return await client.get_workflow_handle(f"{prefix}-0").fetch_history()


def activity_types(history: WorkflowHistory) -> list[str]:
    scheduled = EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    return [
        event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == scheduled
    ]


@dataclass
class ThroughputResult:
    section: Section
    two_turn_history: WorkflowHistory
    failures: int


async def measure(
    client: Client, settings: Settings, provider: ScriptedProvider, runs: int, concurrency: int
) -> ThroughputResult:
    provider.register(travel_script())
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    history = await warm_up(client, settings, f"{prefix}-warm")
    matched = activity_types(history)
    two = ["call_model", "run_tool"]
    agentloop = await run_batch(runs, concurrency, agentloop_runner(client, settings, prefix))
    floor_queue = f"{prefix}-floor"
    async with Worker(client, task_queue=floor_queue, workflows=[BenchFloor], activities=[noop]):
        await floor_runner(client, floor_queue, f"{prefix}-floor-warm", matched)(0)
        floor = await run_batch(
            runs, concurrency, floor_runner(client, floor_queue, f"{prefix}-floor", matched)
        )
        floor_two = await run_batch(
            runs, concurrency, floor_runner(client, floor_queue, f"{prefix}-floor2", two)
        )
    violations = len(provider.violations)
    provider.reset()
    section = Section(
        key="throughput",
        title=f"throughput and memory: {runs} 2-turn travel runs, concurrency {concurrency}",
        baseline=(
            f"Temporal floor measured in this run on the same dev server: {runs} workflows of "
            f"{len(matched)} no-op activities ({', '.join(matched)}, as AgentRun schedules)"
        ),
    )
    section.add(*figures(agentloop, floor, floor_two, violations, len(two)))
    return ThroughputResult(section, history, agentloop.failures + floor.failures + violations)


def figures(
    agentloop: Batch, floor: Batch, floor_two: Batch, violations: int, two: int
) -> list[Figure]:
    rate = agentloop.runs_per_second
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
            "runs/s vs reference peer",
            rate,
            REFERENCE_RUNS_PER_SECOND,
            ratio(rate, REFERENCE_RUNS_PER_SECOND),
            "OpenAI Agents SDK on Temporal, measured earlier on this machine, not in this run",
        ),
        Figure(
            "RSS growth per concurrent run (MiB)",
            agentloop.mib_per_run,
            floor.mib_per_run,
            ratio(agentloop.mib_per_run, floor.mib_per_run),
            "(peak - before) / concurrent runs; the whole process: worker, scripted "
            "provider and example service",
        ),
        Figure(
            "RSS before -> peak (MiB)", f"{agentloop.start_mib:.0f} -> {agentloop.peak_mib:.0f}"
        ),
    ]
