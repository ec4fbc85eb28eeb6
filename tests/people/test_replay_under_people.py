"""No run diverges from its history when people decide while others read it (issue 42).

At each place a run waits or reads (`replay_pressure.PHASES`), runs receive two or three inputs
of each kind it takes there, 0, 20, 50 and 100 ms apart, while four readers query `status`
every 5-20 ms; every history is then replayed against today's `AgentRun`, and every write is
counted at the example service. Before the fix (local activities answered early when a query
came), about one run in ten at 20-50 ms did not replay: 5 to 8 of 40 runs that got two
decisions 20 ms apart (docs/upstream/local-activity-query-split).

CI runs the slice where that bug showed most (`ci_cases`); `make soak` (AGENTLOOP_FUZZ=long,
the `soak` marker) runs the whole matrix, `SOAK_REPEATS` runs per (kind, inputs, spacing)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from agentloop.contract import AgentRunResult
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider
from agentloop.testing.patience import CEILING_SECONDS
from agentloop.worker import running_worker
from agentloop.workflows.steps import LOOKUP_RETRY
from tests.fuzzing import LONG, cases
from tests.people.replay_pressure import (
    APPROVAL,
    PHASES,
    UNKNOWN_WRITE,
    Case,
    Outcome,
    Phase,
    decide,
    finished,
    outcome,
    play,
    reading,
    replay_runs,
    start_case,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.soak,
    pytest.mark.usefixtures("clean_fakes"),
]

SPACINGS_MS = (0, 20, 50, 100)
INPUTS = (2, 3)
SOAK_REPEATS = cases(short=20, long=20)
"""Runs per (kind, inputs, spacing) under `make soak`: 40 per (kind, spacing), 1,120 runs in all
(a 1-in-10 divergence of one (kind, spacing) goes unseen with probability 0.9**40, 1.5%)."""
CI_SPACING_MS = 20
CI_DECISIONS = ("approve", "decide_approval")
CI_DECISION_RUNS = 16
"""Runs per kind of decision (a signal, an update) in CI, two decisions `CI_SPACING_MS` apart:
32 runs where the old bug diverged 5 to 8 of 40, so it would go unseen with probability
0.875**32, under 1.5%."""
CI_OTHER_RUNS = 4
"""Runs in CI of every other kind of input (a cancel, a message, a long answer, answers read
by the next step, an operator's word), two `CI_SPACING_MS` apart: each kind still replays."""
AT_ONCE = 8
"""Runs in flight together: the machine's dev server and worker are shared with the suite."""


def phase_cases(phase: Phase) -> list[Case]:
    """Under `make soak`, every (kind, inputs, spacing) `SOAK_REPEATS` times; in CI, the slice
    around the old bug (`CI_DECISION_RUNS`, `CI_OTHER_RUNS`): 52 runs in all."""
    if LONG:
        grid = itertools.product(phase.kinds, INPUTS, SPACINGS_MS)
        return [Case(phase, *cell) for cell in grid for _ in range(SOAK_REPEATS)]
    return [
        Case(phase, kind, 2, CI_SPACING_MS)
        for kind in phase.kinds
        for _ in range(CI_DECISION_RUNS if kind in CI_DECISIONS else CI_OTHER_RUNS)
    ]


@pytest.mark.parametrize("phase", PHASES, ids=lambda p: p.name)
async def test_runs_decided_while_read_replay_and_write_once(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    phase: Phase,
) -> None:
    matrix = phase_cases(phase)
    if phase is UNKNOWN_WRITE:
        # Every run's write commits and loses its answer; no lookup can tell: an operator must.
        example_service.inject_fault("support.reply", "commit_then_drop", count=len(matrix))
        lookups = len(matrix) * LOOKUP_RETRY.maximum_attempts
        example_service.inject_fault("support.operation", "unavailable", count=lookups)
    gate = asyncio.Semaphore(AT_ONCE)
    batch = uuid.uuid4().hex[:6]

    async def one(n: int, case: Case) -> Outcome:
        async with gate:
            workflow_id = f"people-replay-{phase.name}-{batch}-{n}-{case.kind}"
            return await play(client, worker, scripted_provider, example_service, case, workflow_id)

    outcomes = await asyncio.gather(*(one(n, case) for n, case in enumerate(matrix)))
    reports = await replay_runs(client, [o.workflow_id for o in outcomes])

    label = {o.workflow_id: o.case.label for o in outcomes}
    diverged = [f"{label[r.workflow_id or '']}: {r.line()}" for r in reports if not r.ok]
    print(f"{phase.name}: {len(reports)} runs replayed, {len(diverged)} did not replay")
    assert diverged == [], f"{len(diverged)}/{len(reports)} did not replay:\n" + "\n".join(diverged)
    wrong = [f"{o.case.label}: {p}" for o in outcomes for p in o.write_problems()]
    assert wrong == [], "\n".join(wrong)
    unfinished = [
        f"{o.case.label}: " + (o.wedged or "")
        if o.result is None
        else f"{o.case.label}: {o.result.status} ({o.result.stop_reason})"
        for o in outcomes
        if o.result is None or (o.case.kind != "cancel" and o.result.status != "completed")
    ]
    assert unfinished == [], "\n".join(unfinished)


async def finish_read(
    handle: WorkflowHandle[Any, AgentRunResult],
) -> tuple[AgentRunResult | None, str | None]:
    """The run's result, read while it finishes; (None, why) when it wedged."""
    async with reading(handle) as reads:
        return await finished(handle, reads, seconds=CEILING_SECONDS), reads.failure


RESTART_ROUNDS = cases(short=1, long=10)
RUNS_PER_ROUND = 8


async def test_runs_approved_while_read_finish_on_a_fresh_worker_writing_once(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    """Approved twice 20 ms apart while read, then their worker stops: a fresh worker (no
    cache: it replays each run's history from the start) finishes them, each write once. A
    history the fresh worker cannot replay would wedge its run: it would never finish."""
    case = Case(APPROVAL, "approve", inputs=2, spacing_ms=20)
    for round_ in range(RESTART_ROUNDS):
        settings = worker_settings.model_copy(
            update={"task_queue": f"people-replay-restart-{run_id[-8:]}-{round_}"}
        )
        ids = [f"people-replay-restart-{run_id[-8:]}-{round_}-{n}" for n in range(RUNS_PER_ROUND)]
        async with running_worker(client, settings):
            handles = [
                await start_case(client, settings, scripted_provider, case, workflow_id)
                for workflow_id in ids
            ]

            async def decided(handle: WorkflowHandle[Any, AgentRunResult]) -> None:
                async with reading(handle) as reads:
                    await decide(handle, case, reads)

            await asyncio.gather(*(decided(handle) for handle in handles))
        async with running_worker(client, settings):
            results = await asyncio.gather(*(finish_read(handle) for handle in handles))
        outcomes = [
            outcome(example_service, case, handle, *result)
            for handle, result in zip(handles, results, strict=True)
        ]
        assert [o.wedged for o in outcomes if o.result is None] == []
        assert [o.result and o.result.status for o in outcomes] == ["completed"] * RUNS_PER_ROUND
        wrong = [f"{o.workflow_id}: {p}" for o in outcomes for p in o.write_problems()]
        assert wrong == [], "\n".join(wrong)
        reports = await replay_runs(client, ids)
        assert [r.line() for r in reports if not r.ok] == []
