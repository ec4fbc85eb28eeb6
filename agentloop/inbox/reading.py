"""What the inbox reads from Temporal: the runs waiting for a person (every page of one
visibility list on agentloop's search attributes, each run read from the memo its worker
sealed while it waits; a run no worker vouches for is counted, never asked), one run's
story, and the recent runs. Nothing here changes a run."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.client import Client, WorkflowFailureError, WorkflowQueryFailedError
from temporalio.converter import PayloadConverter
from temporalio.service import RPCError

from agentloop import search
from agentloop.client import first_run_of
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    CallRecord,
    RunStatusView,
)
from agentloop.digests import sha256_hex
from agentloop.inbox.wedged import wedged_text
from agentloop.moments import clock_of
from agentloop.run_client import RunClient
from agentloop.runtime.waiting_memos import memo_of, tenant_clause, waiting_runs
from agentloop.tool_spec import ASK_USER
from agentloop.waiting import (
    WaitingCall,
    WaitingKind,
    WaitingMemo,
)

KIND_NAMES: dict[WaitingKind, str] = {
    "approval": "approval",
    "question": "question",
    "unknown_write": "unknown write",
}
CONCURRENT_QUERIES = 16


@dataclass(frozen=True)
class WaitingItem:
    """One thing a person is asked for: a decision, an answer, or an unknown write's outcome."""

    workflow_id: str
    kind: WaitingKind
    tenant: str
    task: str
    tool: str
    call_id: str
    approvers: list[str]
    since: datetime | None
    text: str = ""
    """The question asked, or what is known of an unknown write."""
    until: datetime | None = None
    """When the run's wait times out."""

    def waited(self, now: datetime) -> str:
        if self.since is None:
            return "unknown"
        return duration((now - self.since).total_seconds())

    def times_out(self, now: datetime) -> str:
        if self.until is None:
            return "unknown"
        return from_now(self.until, now)

    def as_json(self, now: datetime) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "kind": self.kind,
            "kind_name": KIND_NAMES[self.kind],
            "tenant": self.tenant,
            "task": self.task,
            "tool": self.tool,
            "call_id": self.call_id,
            "approvers": self.approvers,
            "since": self.since.isoformat() if self.since else None,
            "waited": self.waited(now),
            "text": self.text,
            "until": self.until.isoformat() if self.until else None,
            "times_out": self.times_out(now),
        }


def from_now(moment: datetime, now: datetime) -> str:
    """`in 3 h 5 min (18:40)`; farther than a day, with the date; `now` once passed."""
    if moment <= now:
        return "now"
    return f"in {duration((moment - now).total_seconds())} ({clock_of(moment, now)})"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


@dataclass
class RunInputs:
    """The start input of each run chain read (`RunClient.start_input`, through
    continue-as-new), by workflow id and first run id: it never changes, and it holds what
    the status does not (the task, the principal's tenant)."""

    found: dict[tuple[str, str], AgentRunInput | None] = field(default_factory=dict)
    limit: int = 2_000

    async def of(self, run: RunClient, first_run_id: str) -> AgentRunInput | None:
        key = (run.id, first_run_id)
        if key in self.found:
            return self.found[key]
        read = await run.start_input(first_run_id=first_run_id)
        if len(self.found) >= self.limit:
            self.found.pop(next(iter(self.found)))
        self.found[key] = read
        return read


def tenant_of(run_input: AgentRunInput | None) -> str | None:
    """The run's tenant; None for a run started without an input agentloop reads (it failed
    at its start): only a user who sees every tenant sees it."""
    return run_input.principal.tenant if run_input is not None else None


@dataclass
class Waiting:
    """What an inbox view lists: the items of the runs a worker vouches for, and what it
    left out."""

    items: list[WaitingItem] = field(default_factory=list)
    unvouched: int = 0
    """Runs visibility says wait whose memo no worker sealed (a starter's made-up run, or a
    worker with another key): neither listed nor asked anything."""
    silent: list[str] = field(default_factory=list)
    """Vouched runs whose memo had no room for every call and that did not answer their
    `status` in time: listed with the calls their memo holds."""
    keyless: bool = False
    """The inbox had no key to check seals with: no run was listed."""
    listed_at: datetime | None = None
    """When the listing this was read from was complete (None: none is yet)."""


@dataclass(frozen=True)
class Listing:
    """One complete read of the waiting runs (of every tenant it was asked for), as each
    viewer's `Waiting` is cut from it."""

    items: list[WaitingItem]
    unvouched: Counter[str]
    """Runs no worker vouches for, by the tenant their search attribute names."""
    silent: dict[str, str]
    """Workflow id -> tenant of the vouched runs that did not answer in time."""
    keyless: bool
    listed_at: datetime

    def seen_by(self, tenants: Sequence[str] | None) -> Waiting:
        """What a viewer of `tenants` (None: every one) sees of it."""

        def sees(tenant: str) -> bool:
            return tenants is None or tenant in tenants

        return Waiting(
            items=[i for i in self.items if sees(i.tenant)],
            unvouched=sum(n for t, n in self.unvouched.items() if sees(t)),
            silent=[w for w, t in self.silent.items() if sees(t)],
            keyless=self.keyless,
            listed_at=self.listed_at,
        )


async def waiting_items(
    client: Client, key: bytes | None, tenants: Sequence[str] | None, wait: timedelta
) -> Waiting:
    """Everything waiting for a person in the runs of `tenants` (None: all), oldest first
    (`listing`, read now)."""
    return (await listing(client, key, tenants, wait)).seen_by(tenants)


async def listing(
    client: Client, key: bytes | None, tenants: Sequence[str] | None, wait: timedelta
) -> Listing:
    """Every page of one visibility list of the runs of `tenants` (None: all) said to wait,
    each run as the memo its worker sealed under `key` (`waiting.vouched`) says; a run whose
    memo is not sealed is counted, never asked. A vouched run whose memo left calls out is
    asked its `status`, at most `CONCURRENT_QUERIES` at a time, all of them within `wait`."""
    items: list[WaitingItem] = []
    unvouched: Counter[str] = Counter()
    silent: dict[str, str] = {}
    partial: list[tuple[str, WaitingMemo]] = []
    async for info in waiting_runs(client, tenants):
        workflow_id = info.execution.workflow_id
        memo = await memo_of(client, key, info)
        if memo is None:
            unvouched[indexed_tenant(info)] += 1
        elif tenants is None or memo.tenant in tenants:  # the run's own word over the index
            if memo.left_out:
                partial.append((workflow_id, memo))
            else:
                items += items_of(workflow_id, memo.tenant, memo.task, memo.until, memo.calls)
    answered = await asked_items(client, partial, wait)
    for workflow_id, memo in partial:
        if workflow_id in answered:
            items += answered[workflow_id]
        else:
            items += items_of(workflow_id, memo.tenant, memo.task, memo.until, memo.calls)
            silent[workflow_id] = memo.tenant
    items.sort(key=lambda i: i.since or datetime.max.replace(tzinfo=UTC))
    return Listing(items, unvouched, silent, key is None, datetime.now(UTC))


def indexed_tenant(info: WorkflowExecutionInfo) -> str:
    """The tenant a run's search attribute names (whoever set it), "" for none readable."""
    raw = info.search_attributes.indexed_fields.get(search.AGENT_TENANT.name)
    try:
        value = PayloadConverter.default.from_payload(raw) if raw is not None else ""
    except (ValueError, TypeError, RuntimeError):
        return ""
    return value if isinstance(value, str) else ""


async def asked_items(
    client: Client, partial: list[tuple[str, WaitingMemo]], wait: timedelta
) -> dict[str, list[WaitingItem]]:
    """The items of each run of `partial` (workflow id, its vouched memo) from its `status`,
    by workflow id, for the runs that answered within `wait` (all asked at once, at most
    `CONCURRENT_QUERIES` in flight)."""
    asking = asyncio.Semaphore(CONCURRENT_QUERIES)

    async def ask(workflow_id: str, memo: WaitingMemo) -> list[WaitingItem]:
        async with asking:
            view = await RunClient(client, workflow_id, run_id=memo.run_id).status(timeout=wait)
        return items_of(workflow_id, memo.tenant, memo.task, view.wait_until, calls_of(view))

    if not partial:
        return {}
    tasks = {workflow_id: asyncio.create_task(ask(workflow_id, m)) for workflow_id, m in partial}
    await asyncio.wait(tasks.values(), timeout=wait.total_seconds())
    answered = {}
    for workflow_id, task in tasks.items():
        if not task.done():
            task.cancel()  # no answer in time: shown from its memo
        elif isinstance(task.exception(), RPCError | WorkflowQueryFailedError):
            pass  # ended meanwhile, or no worker answers now: shown from its memo
        else:
            answered[workflow_id] = task.result()  # raises anything else
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    return answered


def items_of(
    workflow_id: str, tenant: str, task: str, until: datetime | None, calls: list[WaitingCall]
) -> list[WaitingItem]:
    return [
        WaitingItem(
            workflow_id=workflow_id,
            kind=c.kind,
            tenant=tenant,
            task=task,
            tool=c.tool,
            call_id=c.call_id,
            approvers=c.approvers,
            since=c.since,
            text=c.text,
            until=until,
        )
        for c in calls
    ]


def calls_of(view: RunStatusView) -> list[WaitingCall]:
    """What a `status` says the run waits for, as a run's memo says it."""
    found = [
        WaitingCall(
            kind="approval",
            call_id=p.call_id,
            tool=p.tool,
            approvers=list(p.approvers),
            since=p.requested_at,
        )
        for p in view.pending_approvals
    ]
    if view.question is not None:
        asked = next((c for c in reversed(view.calls) if asking(c)), None)
        found.append(
            WaitingCall(
                kind="question",
                call_id=asked.call_id if asked else "",
                tool=asked.tool if asked else "",
                since=view.question_asked_at,
                text=view.question,
            )
        )
    found += [
        WaitingCall(
            kind="unknown_write",
            call_id=u.call_id,
            tool=u.tool,
            since=u.since,
            text=u.known,
        )
        for u in view.unresolved
    ]
    return found


def asking(call: CallRecord) -> bool:
    """The call a question comes from: a tool that asked, or an `ask_user` not answered yet."""
    return call.status == "awaiting_input" or (
        call.tool == ASK_USER and call.status in ("pending", "proposed")
    )


@dataclass(frozen=True)
class RunStory:
    """One run as its page shows it: its input, and its live status or how it ended."""

    workflow_id: str
    execution: str
    """Temporal's word: RUNNING, COMPLETED, FAILED, TERMINATED, ..."""
    run_input: AgentRunInput | None
    """What the run's chain was started with (None: nothing agentloop reads)."""
    view: RunStatusView | None = None
    result: AgentRunResult | None = None
    failure: str | None = None

    @property
    def tenant(self) -> str | None:
        return tenant_of(self.run_input)

    def state_key(self) -> str:
        """What the page's state parts show, in short: the script puts in a part again only
        when this changed (a wait began or ended, a call settled, the run ended)."""
        view, result = self.view, self.result
        parts = [self.execution, self.failure or "", result.status if result else ""]
        if view is not None:
            parts += [view.phase, str(view.turn), view.question or ""]
            parts += [p.call_id for p in view.pending_approvals]
            parts += [u.call_id for u in view.unresolved]
            parts += [f"{c.call_id}:{c.status}:{c.decision}" for c in view.calls]
            parts.append(str(len(view.refused_decisions)))
        return sha256_hex("\n".join(parts))[:16]


async def read_story(
    client: Client, inputs: RunInputs, workflow_id: str, wait: timedelta
) -> RunStory:
    """Raises RPCError (NOT_FOUND) for a run that does not exist. A running run that does
    not answer its `status` within `wait` is shown as such."""
    run = RunClient(client, workflow_id)
    description = await run.handle.describe()
    execution = description.status.name if description.status else "UNKNOWN"
    run_input = await inputs.of(run, first_run_of(description))
    if execution == "RUNNING":
        wedged = await wedged_text(client, workflow_id, description)
        if wedged is not None:
            return RunStory(workflow_id, execution, run_input, failure=wedged)
        try:
            view = await run.status(timeout=wait)
        except (RPCError, WorkflowQueryFailedError) as exc:
            return RunStory(workflow_id, execution, run_input, failure=f"status unreadable: {exc}")
        return RunStory(workflow_id, execution, run_input, view=view)
    try:
        result = await run.result()
    except WorkflowFailureError as exc:
        return RunStory(workflow_id, execution, run_input, failure=str(exc.cause))
    return RunStory(workflow_id, execution, run_input, result=result)


@dataclass(frozen=True)
class RecentRun:
    workflow_id: str
    status: str
    """agentloop's status (`completed`, `limit_reached`, `failed`, ... or `running`), or
    Temporal's word for a run that ended without agentloop saying how."""
    phase: str
    tenant: str
    started: datetime | None
    schedule: str
    """The schedule that started it ("" for none)."""


ENDED_WITHOUT_RESULT = ("FAILED", "TERMINATED", "TIMED_OUT", "CANCELED")


async def recent_runs(
    client: Client, tenants: Sequence[str] | None, schedule: str = "", limit: int = 50
) -> list[RecentRun]:
    """The newest runs of `tenants` (None: every tenant), of `schedule` only when one is
    given. Raises `search.Unsearchable` for a schedule no query can name."""
    query = f"WorkflowType = {search.quoted('type', WORKFLOW_NAME)}" + tenant_clause(tenants)
    if schedule:
        query += f" AND {search.schedule_clause(schedule)}"
    runs = []
    async for execution in client.list_workflows(query, limit=limit):
        attributes = execution.typed_search_attributes
        status = attributes.get(search.AGENT_STATUS) or ""
        execution_status = execution.status.name if execution.status else ""
        if execution_status in ENDED_WITHOUT_RESULT:
            status = execution_status.lower()
        runs.append(
            RecentRun(
                workflow_id=execution.id,
                status=status or execution_status.lower(),
                phase=attributes.get(search.AGENT_PHASE) or "",
                tenant=attributes.get(search.AGENT_TENANT) or "",
                started=execution.start_time,
                schedule=attributes.get(search.SCHEDULED_BY) or "",
            )
        )
    return runs
