"""Runs on a schedule, on Temporal Schedules: "every morning at 7, reconcile yesterday's
refunds" without a cron job calling `agentloop run`.

A schedule NAME holds one run input and when to start it (cron expressions or an interval).
The Temporal server fires it, durably (no worker or client needs to be up), and each firing
starts a normal `AgentRun` whose workflow id is NAME followed by the scheduled time (Temporal
appends it: `refunds-nightly-2026-12-08T07:00:00Z`), so one firing never starts two runs,
whatever restarts. Temporal marks each such run with the `TemporalScheduledById` search
attribute (`search.SCHEDULED_BY`, the schedule's name: `runs_query`, the inbox's runs page
filter); agentloop indexes it like any run, with the schedule's task family (the run input's,
or NAME when it names none), so `agentloop stats NAME` reads what the schedule's runs used.

Signed starts cannot be scheduled: a start signature is for one workflow id, once, within
ten minutes (`agentloop.runtime.start_signing`), and a firing is made by the Temporal server,
which holds no starter key. A run input carrying a signature is refused here; on workers that
require signatures (`AGENTLOOP_STARTER_KEYS`), each firing's run would be refused at its
start, so `agentloop schedule create` refuses to create one under such a configuration.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionResult,
    ScheduleActionStartWorkflow,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleListActionStartWorkflow,
    ScheduleListDescription,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import TypedSearchAttributes

from agentloop import search
from agentloop.contract import DEFAULT_TASK_QUEUE, WORKFLOW_NAME, AgentRunInput

Overlap = Literal[
    "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow_all"
]
"""What a firing does while the schedule's previous run still runs (Temporal's overlap
policies): `skip` (the default) starts nothing."""
OVERLAPS: dict[str, ScheduleOverlapPolicy] = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "buffer_all": ScheduleOverlapPolicy.BUFFER_ALL,
    "cancel_other": ScheduleOverlapPolicy.CANCEL_OTHER,
    "terminate_other": ScheduleOverlapPolicy.TERMINATE_OTHER,
    "allow_all": ScheduleOverlapPolicy.ALLOW_ALL,
}
DEFAULT_CATCHUP_WINDOW = timedelta(hours=1)
"""A firing missed while the Temporal server was down still starts when the server is back
within this (Temporal's own default is a year: a year of missed firings at once)."""
WHEN_MEMO = "agentloop_when"
"""The schedule's memo key holding its cron expressions and interval as given."""
MAX_WHEN = 20


class ScheduleSummary(BaseModel):
    """One schedule, as `list_schedules` and `agentloop schedule list` show it."""

    name: str
    paused: bool
    note: str = ""
    when: list[str]
    """Its cron expressions and intervals, as given."""
    next_times: list[str]
    """The next firings (ISO 8601, UTC)."""
    recent_runs: list[str]
    """The workflow ids of the runs its latest firings started."""


def scheduled_input(name: str, run_input: AgentRunInput) -> AgentRunInput:
    """The input each firing starts a run with: `run_input` with the schedule's task family
    (NAME when it names none). Raises ValueError for a name or input no run could be found
    by, or a signed input (a start signature counts once: it cannot be fired again)."""
    for field, value in (("schedule name", name), ("task_family", run_input.task_family)):
        problem = value is not None and search.unsearchable(field, value)
        if problem:
            raise ValueError(problem)
    if run_input.principal_signature is not None:
        raise ValueError(
            "a scheduled run cannot be signed: a start signature is for one workflow id, once,"
            " within ten minutes, and each firing is a new run started by the Temporal server"
        )
    problem = run_input.unbudgeted_continuation() or search.run_input_problem(run_input)
    if problem:
        raise ValueError(problem)
    return run_input.model_copy(update={"task_family": run_input.task_family or name})


async def create_schedule(
    client: Client,
    name: str,
    run_input: AgentRunInput,
    *,
    cron: Sequence[str] = (),
    every: timedelta | None = None,
    task_queue: str = DEFAULT_TASK_QUEUE,
    overlap: Overlap = "skip",
    catchup_window: timedelta = DEFAULT_CATCHUP_WINDOW,
    paused: bool = False,
    note: str = "",
    indexed: bool = True,
) -> ScheduleHandle:
    """Create schedule `name`: a run of `run_input` (`scheduled_input`) at each time one of
    `cron` (Temporal cron: 5 fields, or 7 with seconds first and year last) or `every` says.
    `indexed=False` starts its runs without agentloop's search attributes (a namespace without
    them; they are still found by schedule). Raises ValueError for bad arguments, and
    `temporalio.client.ScheduleAlreadyRunningError` for a name taken."""
    if not cron and every is None:
        raise ValueError("a schedule needs a cron expression or an interval (--cron, --every)")
    fired = scheduled_input(name, run_input)
    action = ScheduleActionStartWorkflow(
        WORKFLOW_NAME,
        fired,
        id=name,
        task_queue=task_queue,
        static_summary=fired.summary(),
        typed_search_attributes=search.initial(fired) if indexed else TypedSearchAttributes.empty,
    )
    spec = ScheduleSpec(
        cron_expressions=list(cron),
        intervals=[ScheduleIntervalSpec(every=every)] if every is not None else [],
    )
    policy = SchedulePolicy(overlap=OVERLAPS[overlap], catchup_window=catchup_window)
    state = ScheduleState(paused=paused, note=note or None)
    schedule = Schedule(action=action, spec=spec, policy=policy, state=state)
    when = [*cron, *([f"every {every}"] if every is not None else [])]
    return await client.create_schedule(name, schedule, memo={WHEN_MEMO: when})


async def list_schedules(client: Client) -> list[ScheduleSummary]:
    """The namespace's schedules that start agentloop runs."""
    found: list[ScheduleSummary] = []
    async for listed in await client.list_schedules():
        summary = await _listed(listed)
        if summary is not None:
            found.append(summary)
    return found


async def describe_schedule(client: Client, name: str) -> ScheduleSummary:
    """Schedule `name` now (read from it, not from visibility: right after its creation too).
    Raises `temporalio.service.RPCError` NOT_FOUND for no such schedule."""
    described = await client.get_schedule_handle(name).describe()
    state, info = described.schedule.state, described.info
    return ScheduleSummary(
        name=name,
        paused=state.paused,
        note=state.note or "",
        when=_when(await described.memo()),
        next_times=[t.isoformat() for t in info.next_action_times],
        recent_runs=_run_ids(info.recent_actions),
    )


async def _listed(listed: ScheduleListDescription) -> ScheduleSummary | None:
    """None: not a schedule of agentloop runs (or a server listing without the details)."""
    schedule, info = listed.schedule, listed.info
    if schedule is None or info is None:
        return None
    action = schedule.action
    if not isinstance(action, ScheduleListActionStartWorkflow) or action.workflow != WORKFLOW_NAME:
        return None
    return ScheduleSummary(
        name=listed.id,
        paused=schedule.state.paused,
        note=schedule.state.note or "",
        when=_when(await listed.memo()),
        next_times=[t.isoformat() for t in info.next_action_times],
        recent_runs=_run_ids(info.recent_actions),
    )


def _when(memo: Mapping[str, Any]) -> list[str]:
    """What the schedule was created with (the server keeps a cron expression only as the
    calendar it parsed it into): read from its memo, and only strings."""
    given = memo.get(WHEN_MEMO)
    return [str(w) for w in given[:MAX_WHEN]] if isinstance(given, list) else []


def _run_ids(recent: Sequence[ScheduleActionResult]) -> list[str]:
    return [
        a.action.workflow_id
        for a in recent
        if isinstance(a.action, ScheduleActionExecutionStartWorkflow)
    ]


async def pause_schedule(client: Client, name: str, note: str = "") -> None:
    """No firing starts a run until `resume_schedule` (runs already started go on)."""
    await client.get_schedule_handle(name).pause(note=note or None)


async def resume_schedule(client: Client, name: str, note: str = "") -> None:
    await client.get_schedule_handle(name).unpause(note=note or None)


async def trigger_schedule(client: Client, name: str) -> None:
    """Fire once now (the overlap policy applies), paused or not."""
    await client.get_schedule_handle(name).trigger()


async def delete_schedule(client: Client, name: str) -> None:
    """No more firings; the runs it started stay (found by `runs_query`)."""
    await client.get_schedule_handle(name).delete()


def runs_query(name: str) -> str:
    """A visibility query for the runs schedule `name` started. Raises `search.Unsearchable`."""
    return f"WorkflowType = '{WORKFLOW_NAME}' AND {search.schedule_clause(name)}"
