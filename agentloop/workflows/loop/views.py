"""Read-only views of the run state: what `status` shows, what the UI's current details say,
what the result and the stop report list, and the facts restated when context is short."""

from __future__ import annotations

from datetime import datetime

from agentloop.contract import (
    CallRecord,
    CompensationLine,
    PendingApproval,
    PendingCall,
    RunStatus,
    RunStatusView,
    SideEffect,
    UnresolvedWrite,
    WriteAwaitingOperator,
)
from agentloop.digests import canonical_json
from agentloop.events import Event
from agentloop.policies import authorization, budgets
from agentloop.policies.bounds import as_text, clipped
from agentloop.policies.compensation import Decided, LeftAsIs, Offered, Written, plan_compensation
from agentloop.waiting import (
    MAX_MEMO_TEXT_CHARS,
    MAX_WAITING_MEMO_BYTES,
    SEAL_BYTES,
    WaitingCall,
    WaitingMemo,
)
from agentloop.workflows.loop import results
from agentloop.workflows.loop.plan import action_digest
from agentloop.workflows.loop.state import Batch, LoopState, seconds


def input_deadline(state: LoopState, batch: Batch) -> datetime:
    """When a question of the batch stops the run `input_timeout`."""
    assert batch.asked_at is not None
    return batch.asked_at + seconds(state.run_input.input_timeout_seconds)


def approval_deadline(state: LoopState, batch: Batch) -> datetime:
    """When the batch's undecided calls stop the run `approval_timeout` (some must wait)."""
    requested = min(batch.approvals[c].requested_at for c in batch.undecided())
    waits = 2 if batch.timeout_escalated else 1
    return requested + seconds(state.run_input.approval_timeout_seconds * waits)


def reconciliation_deadline(state: LoopState, batch: Batch) -> datetime:
    """When the batch's writes of unknown outcome stop the run `unresolved` (some must wait)."""
    since = min(r.since for r in batch.reconciling.values())
    return since + seconds(state.run_input.reconciliation_timeout_seconds)


def wait_until(state: LoopState) -> datetime | None:
    """When the wait for people the run is in times out; None when it waits for nobody."""
    batch = state.batch
    if batch is None or state.paused_since is None:
        return None
    if state.phase == "awaiting_input" and batch.questions:
        return input_deadline(state, batch)
    if state.phase == "awaiting_approval" and batch.undecided():
        return approval_deadline(state, batch)
    if state.phase == "awaiting_reconciliation" and batch.reconciling:
        return reconciliation_deadline(state, batch)
    return None


def refused_calls(state: LoopState) -> int:
    """Calls the runner refused before running them (not those a human rejected)."""
    return sum(1 for r in state.calls.values() if r.decision in results.REFUSAL_DECISIONS)


def pending_approvals(state: LoopState) -> list[PendingApproval]:
    """What an approver is shown: each call waiting for a decision with its exact arguments."""
    batch = state.batch
    if batch is None:
        return []
    return [batch.approvals[c] for c in batch.undecided()]


def side_effects(state: LoopState) -> list[SideEffect]:
    """Writes that happened (or may have), and how we know; the child runs' included."""
    delegated = [
        effect.model_copy(update={"via": f"{d.child_workflow_id} (delegate {call_id})"})
        for call_id, d in state.delegations.items()
        for effect in d.side_effects
    ]
    return [
        SideEffect(
            call_id=r.call_id,
            tool=r.tool,
            idempotency_key=r.idempotency_key,
            status=r.status,
            confirmed_by=_confirmation(r),
        )
        for r in state.calls.values()
        if _is_write(state, r.tool)
        and r.status in ("succeeded", "confirmed_after_query", "unknown")
    ] + delegated


def _is_write(state: LoopState, tool: str) -> bool:
    """A write of the run's tools, or an undo of one (an undo is a write too)."""
    spec = state.tool_spec(tool)
    return spec is not None and spec.effect == "write"


def _confirmation(record: CallRecord) -> str:
    if record.status == "succeeded":
        return "the system's response"
    if record.status == "unknown":
        return "not confirmed: outcome unknown"
    if record.resolution is not None:
        return f"operator ({record.resolution.said()})"
    return "lookup by idempotency key"


def unresolved(state: LoopState) -> list[WriteAwaitingOperator]:
    """Writes waiting for an operator's `resolve`, with what is known about each."""
    batch = state.batch
    if batch is None:
        return []
    return [
        WriteAwaitingOperator(
            **dict(r), arguments=state.calls[c].arguments, approvers=state.settlers(c)
        )
        for c, r in batch.reconciling.items()
    ]


def question(state: LoopState) -> str | None:
    """The question the run is waiting on the user to answer, if any."""
    batch = state.batch
    if batch is None or not batch.questions:
        return None
    call_id = batch.questions[0]
    if call_id in batch.asking:
        return f"{state.call(call_id).name} asks: {batch.asking[call_id].question}"
    return str(state.call(call_id).arguments.get("question", ""))


def waiting_calls(state: LoopState) -> list[WaitingCall]:
    """Each thing the run waits on a person for, as `status` shows them: the calls waiting
    for a decision, the question asked first, the writes waiting for an operator."""
    batch = state.batch
    if batch is None:
        return []
    found = [
        WaitingCall(
            kind="approval",
            call_id=call_id,
            tool=pending.tool,
            approvers=pending.approvers,
            since=pending.requested_at,
        )
        for call_id in batch.undecided()
        for pending in [batch.approvals[call_id]]
    ]
    asked = question(state)
    if asked is not None:
        call_id = batch.questions[0]
        found.append(
            WaitingCall(
                kind="question",
                call_id=call_id,
                tool=state.call(call_id).name,
                since=batch.asked_at,
                text=asked,
            )
        )
    found += [
        WaitingCall(kind="unknown_write", call_id=c, tool=r.tool, since=r.since, text=r.known)
        for c, r in batch.reconciling.items()
    ]
    return found


def waiting_memo(state: LoopState, run_id: str, until: datetime) -> WaitingMemo:
    """What the run keeps in its memo while it waits for people:
    `waiting_calls` with their texts and the task clipped, as many calls as fit in
    `MAX_WAITING_MEMO_BYTES` (the others counted in `left_out`)."""
    memo = WaitingMemo(
        run_id=run_id,
        tenant=state.run_input.principal.tenant,
        task=clipped(as_text(state.run_input.task), MAX_MEMO_TEXT_CHARS),
        until=until,
    )
    room = MAX_WAITING_MEMO_BYTES - SEAL_BYTES - _json_bytes(memo)  # sealed as upserted
    waiting = waiting_calls(state)
    for call in waiting:
        shown = call.model_copy(update={"text": clipped(as_text(call.text), MAX_MEMO_TEXT_CHARS)})
        room -= _json_bytes(shown) + 1  # and the comma between calls
        if room < 0:
            break
        memo.calls.append(shown)
    memo.left_out = len(waiting) - len(memo.calls)
    return memo


def _json_bytes(model: WaitingMemo | WaitingCall) -> int:
    return len(canonical_json(model.model_dump(mode="json")).encode())


def facts(state: LoopState) -> list[str]:
    """What must stay true for the model however its context is shortened: human decisions
    and the writes that happened, from run state."""
    decided = [
        f"{r.tool} {r.call_id} was {r.people_said()}"
        for r in state.calls.values()
        if r.approval is not None
    ]
    written = [
        f"{e.tool} {e.call_id} is {e.status} (confirmed by {e.confirmed_by})"
        for e in side_effects(state)
    ]
    known = [f"task state: {canonical_json(state.task_state)}"] if state.task_state else []
    return decided + written + known


MAX_WAITS_SHOWN = 3
"""Calls a wait's timer summary names (the others as a count): a summary stays short."""


def answers(state: LoopState) -> list[str]:
    """Each thing the run waits on a person for, with the CLI command that answers it and the
    signal's JSON (for any other client): the calls waiting for approval (who may decide),
    the question, the writes waiting for an operator."""
    run = state.workflow_id
    lines = []
    for pending in pending_approvals(state):
        call_id, digest, approvers = pending.call_id, pending.args_digest, pending.approvers
        who = ", ".join(approvers) if approvers else "any approver"
        approver = approvers[0] if len(approvers) == 1 else "NAME"
        signal = canonical_json(
            {"call_id": call_id, "args_digest": digest, "approved": True, "approver": approver}
        )
        lines.append(
            f"approval of {pending.tool} {call_id} by {who}: `agentloop approve {run}"
            f" {call_id} --approver {approver} --digest {digest}` (signal `approve` or update"
            f" `decide_approval`: {signal})"
        )
    asked = question(state)
    if asked:
        signal = canonical_json({"text": "ANSWER", "sender": "NAME"})
        lines.append(
            f"an answer to {asked!r}: `agentloop message {run} --sender NAME --text ANSWER`"
            f" (signal `message`: {signal})"
        )
    for write in unresolved(state):
        call_id = write.call_id
        signal = canonical_json({"call_id": call_id, "outcome": "applied", "operator": "NAME"})
        lines.append(
            f"an operator to settle {write.tool} {call_id}: `agentloop resolve {run} {call_id}"
            f" --outcome applied|not_applied --operator NAME` (signal `resolve`: {signal})"
        )
    return lines


def wait_summary(state: LoopState, until: datetime) -> str:
    """The summary of a wait's timer: what the run waits for, until when, and the first
    commands that answer it."""
    waits = answers(state)
    shown = waits[:MAX_WAITS_SHOWN]
    more = f" (and {len(waits) - len(shown)} more)" if len(waits) > len(shown) else ""
    return f"{state.phase} until {until.isoformat(timespec='seconds')}: " + "; ".join(shown) + more


def details(state: LoopState, now: datetime, until: datetime | None = None) -> str:
    """The Temporal UI's "current details": where the run is and what it waits on; while it
    waits for people (`until` its deadline), what it waits for and how to answer."""
    left = budgets.limits_left(
        state.run_input.limits, state.reserved(), state.active_since(now), now
    )
    parts = [
        f"**{state.phase}** · turn {state.turn}",
        f"calls left: model {left.model_calls}, tools {left.tool_calls}",
    ]
    waiting = [f"{a.tool} ({a.call_id})" for a in pending_approvals(state)]
    if waiting:
        parts.append("awaiting approval: " + ", ".join(waiting))
    asked = question(state)
    if asked:
        parts.append(f"question: {asked}")
    unsettled = [u.call_id for u in unresolved(state)]
    if unsettled:
        parts.append("unresolved writes: " + ", ".join(unsettled))
    children = [d.child_workflow_id for d in state.delegations.values() if d.status == "running"]
    if children:
        parts.append("waiting for sub-agents: " + ", ".join(children))
    if until is not None:
        parts.append(f"waiting until {until.isoformat(timespec='seconds')} for:")
        parts += [f"- {line}" for line in answers(state)]
    return "\n".join(parts)


def status_view(state: LoopState | None, now: datetime) -> RunStatusView:
    """What the `status` query answers (before the run has started: that it is about to)."""
    if state is None:
        return RunStatusView(phase="calling_model", turn=0)
    return RunStatusView(
        phase=state.phase,
        turn=state.turn,
        pending_approvals=pending_approvals(state),
        question=question(state),
        question_asked_at=state.batch.asked_at if state.batch and state.batch.questions else None,
        unresolved=unresolved(state),
        usage=state.usage,
        chain_usage=state.chain_usage(),
        task_state=state.task_state,
        limits_left=budgets.limits_left(
            state.run_input.limits, state.reserved(), state.active_since(now), now
        ),
        calls=list(state.calls.values()),
        refused_decisions=state.refused_decisions,
        run_chain=state.run_chain,
        run_chain_left_out=state.run_chain_left_out,
        approval_signing=state.approval_signing,
        stop_reason=state.stop_reason,
        stop_cause=state.stop_cause,
        transcript_head=state.head,
        waiting_since=state.paused_since,
        wait_until=wait_until(state),
        notice_failures=state.notice_failures,
        notices_sent=state.notices_sent,
        compensation=state.compensation_at_stop or compensation_lines(state),
        model_switches=state.model_switches,
    )


def unresolved_writes(state: LoopState) -> list[UnresolvedWrite]:
    """Writes whose outcome is unknown at the stop: this run's, and those it inherited and
    nobody resolved."""
    own = [
        UnresolvedWrite(
            action_digest=action_digest(state.spec_of(r.call_id), r.arguments),
            tool=r.tool,
            call_id=r.call_id,
            idempotency_key=r.idempotency_key,
            workflow_id=state.workflow_id,
        )
        for r in state.calls.values()
        if r.status == "unknown" and state.tool_spec(r.tool) is not None
    ]
    return [*state.inherited_unresolved.values(), *own]


def pending_at_stop(state: LoopState) -> list[PendingCall]:
    """What was left undone when the run stopped."""
    waiting = {c.call_id for c in pending_approvals(state)}
    return [
        PendingCall(
            call_id=r.call_id,
            tool=r.tool,
            status="awaiting_approval" if r.call_id in waiting else r.status,
        )
        for r in state.calls.values()
        if r.status in ("proposed", "running", "unknown", "awaiting_input", "pending")
    ]


def unsent_events(state: LoopState, stop_reason: str) -> list[Event]:
    """What the model has not seen at the stop, so that a continuing run can send it first:
    every call of the last tool-call output answered (calls that never ran say so)."""
    events = list(state.outbox)
    output = state.last_output
    if output is None or not output.offers_calls:
        return events
    answered = state.batch.results if state.batch else {}
    for call in output.tool_calls:
        result = answered.get(call.call_id)
        if result is None:
            status = state.calls[call.call_id].status if call.call_id in state.calls else ""
            result = results.not_run(call, status == "unknown", stop_reason)
        events.append(result)
    return events


def written(state: LoopState) -> list[Written]:
    """The run's own writes that happened (or may have), in the ledger's order, each with the
    undo prepared when its result came in (`LoopState.undos`); undos themselves are not, nor
    are the writes a roll back already decided on."""
    undos = {undo.call_id: undo for undo in state.undos}
    rolled_back = {line.call_id for line in state.rolled_back}
    found: list[Written] = []
    for record in state.calls.values():
        spec = state.tools.get(record.tool)
        if record.undoes or spec is None or spec.effect != "write":
            continue
        if record.call_id in rolled_back:  # decided when the model rolled back
            continue
        if record.status not in ("succeeded", "confirmed_after_query", "unknown"):
            continue
        undo = undos.get(record.call_id)
        undo_spec = state.tool_spec(spec.compensate) if spec.compensate else None
        found.append(
            Written(
                call_id=record.call_id,
                tool=record.tool,
                status=record.status,
                undo_tool=spec.compensate,
                undo_arguments=undo.arguments if undo else None,
                problem=undo.problem if undo else "no result was kept to prepare it from",
                undo_denied=authorization.denial(undo_spec, state.run_input.principal)
                if undo_spec
                else None,
            )
        )
    return found


def planned_compensation(state: LoopState, status: RunStatus | None) -> list[Decided]:
    """What becomes of the run's writes if it stops `status` (None: the model asked to roll
    back) (`plan_compensation`)."""
    run_input = state.run_input
    return plan_compensation(
        status, written(state), run_input.compensate, run_input.compensate_per_tool
    )


def compensation_line(decided: Decided) -> CompensationLine:
    """A write's line as compensation starts: an offered undo is `not_undone` until its
    result says otherwise (`compensation_lines`)."""
    if isinstance(decided, LeftAsIs):
        return CompensationLine(
            call_id=decided.call_id, tool=decided.tool, outcome="left_as_is", why=decided.why
        )
    return CompensationLine(
        call_id=decided.call_id,
        tool=decided.tool,
        outcome="not_undone",
        undo_call_id=decided.undo_call_id,
        undo_tool=decided.undo_tool,
        why="a person approves the undo" if decided.ask else "compensate: always",
    )


def compensation_lines(state: LoopState, status: RunStatus | None = None) -> list[CompensationLine]:
    """Each write of a run that ended (or ends, `status`) without delivering, newest first,
    and what became of it; an offered undo's line from its ledger record. Empty for a run
    that delivers, or that has not stopped and undoes nothing."""
    compensation = state.compensation
    if compensation is not None:
        now = [_undo_told(state, line) for line in compensation.lines]
    elif status is None:
        now = []
    else:
        # Nothing was offered (or the run would have compensated): every write stays as is.
        now = [
            compensation_line(LeftAsIs(d.call_id, d.tool, "not offered"))
            if isinstance(d, Offered)
            else compensation_line(d)
            for d in planned_compensation(state, status)
        ]
    return [*now, *state.rolled_back]


def _undo_told(state: LoopState, line: CompensationLine) -> CompensationLine:
    record = state.calls.get(line.undo_call_id) if line.undo_call_id else None
    if record is None:
        return line
    undone = record.status in ("succeeded", "confirmed_after_query")
    said = record.people_said()
    if undone:
        why = said or line.why
    elif record.status in ("proposed", "pending"):
        why = "its undo was not run: " + (said or "nobody decided on it before the run stopped")
    else:
        why = f"its undo ended {record.status}" + (f" ({said})" if said else "")
        if record.result_summary and record.status != "rejected":
            why += f": {record.result_summary}"
    return line.model_copy(
        update={
            "outcome": "undone" if undone else "not_undone",
            "undo_status": record.status,
            "why": why,
        }
    )
