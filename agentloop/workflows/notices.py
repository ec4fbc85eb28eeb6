"""The notices of a run waiting for people: the first notice of each call it waits on, then
the reminders and escalations of the worker's notice routes (`agentloop.policies.reminders`
decides which fall due when; the wait in `agentloop.workflows.steps` sleeps until the next).

Workflow code like `steps`: deterministic, no I/O, no clock but `workflow.now()`. Every notice
is a `notify_waiting` activity started and never awaited: the run never waits on one, and one
that fails after its retries only says so in `notice_failures`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

import agentloop.workflows.loop as loop
from agentloop.activity_io import NOTICE_DELIVERY, NOTIFY_WAITING, NoticeCall, WaitingNotice
from agentloop.contract import NoticeSent, Phase
from agentloop.policies import reminders
from agentloop.workflows.failures import describe_failure
from agentloop.workflows.loop import AwaitHumans, LoopState, TimeOutApprovals
from agentloop.workflows.visibility import audit

# Each webhook's own attempts run inside the activity (`NOTICE_DELIVERY`); the activity is
# tried again only when its worker is lost, and resumes from its heartbeats.
NOTICE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), backoff_coefficient=2, maximum_attempts=3
)
NOTICE_START_TO_CLOSE = timedelta(seconds=NOTICE_DELIVERY.longest_seconds + 15)
NOTICE_HEARTBEAT = timedelta(seconds=10)
NOTICE_KINDS: dict[Phase, Literal["approval", "question", "unknown_write"]] = {
    "awaiting_approval": "approval",
    "awaiting_input": "question",
    "awaiting_reconciliation": "unknown_write",
}
MAX_NOTICE_FAILURES = 20
MAX_NOTICE_FAILURE_CHARS = 1_000


def notify_waiting(state: LoopState, step: AwaitHumans, phase: Phase) -> None:
    """Start the notice of the calls this wait is the first to hold, and go on waiting."""
    new = [c for c in step.call_ids if c not in state.notified]
    if not new:
        return
    state.notified.extend(new)
    if state.notice_timers:  # their reminders and escalations count from now
        state.notified_at.update(dict.fromkeys(new, workflow.now()))
    kind = NOTICE_KINDS[phase]
    _send(state, _notice(state, kind, new), f"notify: {kind} {', '.join(new)}")


def send_due(state: LoopState, step: AwaitHumans, phase: Phase) -> None:
    """Start the reminders and escalations due now of the calls this wait still holds."""
    if not state.notice_timers:
        return
    now = workflow.now()
    tenant = state.run_input.principal.tenant
    due = reminders.due_notices(
        state.notice_timers, tenant, _waiting(state, step), state.notices_sent, now
    )
    _send_due(state, due, NOTICE_KINDS[phase], now)


def _send_due(
    state: LoopState,
    due: list[reminders.DueNotice],
    kind: Literal["approval", "question", "unknown_write"],
    now: datetime,
) -> None:
    for notice in due:
        sent = NoticeSent(
            stage=notice.stage, route=notice.route, to=notice.to, call_ids=notice.call_ids, at=now
        )
        state.notices_sent.append(sent)
        told = _notice(state, kind, notice.call_ids).model_copy(
            update={"stage": notice.stage, "to": notice.to}
        )
        _send(state, told, f"{notice.stage} to {notice.to}: {kind} {', '.join(notice.call_ids)}")
        audit(f"notice.{notice.stage}", route=notice.route, to=notice.to, call_ids=notice.call_ids)


def next_due(state: LoopState, step: AwaitHumans) -> tuple[datetime, str] | None:
    """When this wait's next reminder or escalation falls due, and what it is (None: none)."""
    if not state.notice_timers:
        return None
    tenant = state.run_input.principal.tenant
    return reminders.next_notice_at(
        state.notice_timers, tenant, _waiting(state, step), state.notices_sent
    )


def time_out_approvals(state: LoopState, step: TimeOutApprovals) -> None:
    """Carry out what the approval timeout does (`on_approval_timeout`): reject the calls, or
    escalate them at once to the groups their routes escalate to (those not told of them
    yet) and wait once more."""
    loop.record_approval_timeout(state, step, workflow.now())
    if step.action != "escalate" or not state.notify:
        return
    tools = {c: state.call(c).name for c in step.call_ids}
    tenant = state.run_input.principal.tenant
    escalations = reminders.escalations_now(state.notice_timers, tenant, tools, state.notices_sent)
    _send_due(state, escalations, "approval", workflow.now())


def _waiting(state: LoopState, step: AwaitHumans) -> dict[str, tuple[str, datetime]]:
    """The calls of this wait nobody answered yet, each with its tool and when it was first
    notified."""
    still = loop.awaiting_humans(state)
    return {
        c: (state.call(c).name, state.notified_at[c])
        for c in step.call_ids
        if c in still and c in state.notified_at
    }


def _notice(
    state: LoopState, kind: Literal["approval", "question", "unknown_write"], call_ids: list[str]
) -> WaitingNotice:
    pending = {a.call_id: a for a in loop.pending_approvals(state)}
    calls = [
        NoticeCall(
            call_id=c,
            tool=state.call(c).name,
            args_digest=state.call(c).args_digest,
            approvers=list(pending[c].approvers) if c in pending else [],
        )
        for c in call_ids
    ]
    return WaitingNotice(
        workflow_id=state.workflow_id,
        kind=kind,
        task=state.run_input.summary(),
        calls=calls,
        question=loop.question(state) if kind == "question" else None,
        tenant=state.run_input.principal.tenant,
    )


def _send(state: LoopState, notice: WaitingNotice, summary: str) -> None:
    sending = workflow.start_activity(
        NOTIFY_WAITING,
        notice,
        start_to_close_timeout=NOTICE_START_TO_CLOSE,
        heartbeat_timeout=NOTICE_HEARTBEAT,
        retry_policy=NOTICE_RETRY,
        summary=summary,
    )
    call_ids = [c.call_id for c in notice.calls]
    of = f"the {notice.stage}" + (f" to {notice.to}" if notice.to else "")

    def delivered(done: Any) -> None:
        if done.cancelled() or done.exception() is None:
            return
        failure = done.exception()
        reason = describe_failure(failure) if isinstance(failure, ActivityError) else str(failure)
        what = f"{of} of {notice.kind} {', '.join(call_ids)} was not delivered: {reason}"
        state.notice_failures.append(what[:MAX_NOTICE_FAILURE_CHARS])
        del state.notice_failures[:-MAX_NOTICE_FAILURES]
        audit("notice_failed", kind=notice.kind, call_ids=call_ids)

    sending.add_done_callback(delivered)
