"""What people say to a run: approvals, messages, an operator's word on an unknown write,
and the waits for them (which do not count against the run's deadline)."""

from __future__ import annotations

import json
from datetime import datetime

from agentloop.activity_io import InputReply
from agentloop.contract import (
    ApprovalDecision,
    ApprovalRecord,
    ApprovalVerdict,
    CancelRequest,
    RefusedApproval,
    RefusedDecision,
    RefusedResolution,
    RefusedSignal,
    ResolutionRecord,
    ResolveRequest,
    UserMessage,
)
from agentloop.events import ToolResult, UserInput
from agentloop.policies import approval
from agentloop.workflows.loop import results
from agentloop.workflows.loop.edits import apply_edit, edit_problem
from agentloop.workflows.loop.next_step import TimeOutApprovals
from agentloop.workflows.loop.plan import action_digest
from agentloop.workflows.loop.settle import close_if_answered, settle
from agentloop.workflows.loop.state import DecisionToCheck, LoopState

MAX_REFUSED_RECORDS = 100
"""Refusals `status` keeps (the newest): a flood of bad signals cannot grow the run state."""
MAX_WAITING_MESSAGE_CHARS = 400_000
"""Text of messages the model has not seen yet that a run holds; past it, a message is
refused (the next model call would not fit Temporal's payload limit)."""
MAX_ANSWER_CHARS = 200_000
"""Text of the answers one batch's questions hold: they ride
inline in the next model call, or in the tools' next runs, and in what continue-as-new
carries while the batch waits. Each answer gets an even share of what is left
(`answer_room`); a longer one is refused, and its question still waits."""
MIN_ANSWER_ROOM = 2_000
"""The least an answer may hold however many questions share the room (a tool that asks
again after the room is used is still answered: past `MAX_ANSWER_CHARS` by little)."""
MAX_WAITING_MESSAGES = 64
"""Messages the model has not seen yet that a run holds;
past it, a message is refused."""


def _refuse(state: LoopState, refused: RefusedDecision) -> None:
    """Record in `status.refused_decisions` what was refused, why and when."""
    state.refused_decisions.append(refused)
    del state.refused_decisions[:-MAX_REFUSED_RECORDS]


def record_refused_input(
    state: LoopState, signal: str, shown: str, reason: str, now: datetime
) -> None:
    """A signal whose payload was refused before anything could act on it."""
    _refuse(state, RefusedSignal(signal=signal, payload=shown, refused_because=reason, at=now))


MAX_DECISIONS_TO_CHECK = 16
"""Decisions a run holds for the worker to check; past it, a decision is refused (a flood of
approvals cannot grow the run state)."""


def receive_decision(
    state: LoopState, decision: ApprovalDecision, now: datetime
) -> ApprovalVerdict | DecisionToCheck:
    """A human's decision as it arrives: refused with the reason if it cannot count, applied
    held for the worker's check, which `record_checked_decision` then applies."""
    refused = _judged(state, decision) or edit_problem(state, decision)
    if refused is not None:
        return _refused_decision(state, decision, refused, now)
    held = _held_for_check(state, decision)
    if held is None:
        return _refused_decision(state, decision, TOO_MANY_TO_CHECK, now)
    return held


TOO_MANY_TO_CHECK = f"{MAX_DECISIONS_TO_CHECK} decisions already wait for the worker's check"


def _held_for_check(
    state: LoopState, asked: ApprovalDecision | ResolveRequest
) -> DecisionToCheck | None:
    """`asked`, held for the worker's check; None when too many already wait."""
    batch = state.batch
    assert batch is not None
    return _hold(state, asked, batch.to_check)


def _hold(
    state: LoopState,
    asked: ApprovalDecision | ResolveRequest | UserMessage | CancelRequest,
    holding: list[DecisionToCheck],
) -> DecisionToCheck | None:
    """`asked` added to `holding` under the next ticket; None when `holding` is full."""
    if len(holding) >= MAX_DECISIONS_TO_CHECK:
        return None
    state.decisions_received += 1
    held = DecisionToCheck(ticket=state.decisions_received, decision=asked)
    holding.append(held)
    return held


def record_checked_decision(
    state: LoopState, held: DecisionToCheck, problem: str, signing: str | None, now: datetime
) -> ApprovalVerdict:
    """The worker's word on a held decision: it counts (if it still can: another decision
    may have come first) or is refused with the worker's reason."""
    decision = held.decision
    assert isinstance(decision, ApprovalDecision)
    batch = state.batch
    if batch is not None and held in batch.to_check:
        batch.to_check.remove(held)
    if signing:
        state.approval_signing = signing
    refused = problem or _judged(state, decision) or edit_problem(state, decision)
    if refused:
        return _refused_decision(state, decision, refused, now)
    return _apply_decision(state, decision, now)


def receive_word(
    state: LoopState, word: UserMessage | CancelRequest, now: datetime
) -> ApprovalVerdict | DecisionToCheck:
    """A person's answer or cancel as it arrives: where the worker takes only signed ones
    (it said so at the start, or at its last check), held for its check, which
    `record_checked_word` then applies; elsewhere applied at once."""
    if state.approval_signing != "signed":
        return _apply_word(state, word, now)
    held = _hold(state, word, state.words_to_check)
    if held is None:
        reason = f"{MAX_DECISIONS_TO_CHECK} answers and cancels already wait for the worker's check"
        record_refused_input(state, _signal_of(word), _shown(word), reason, now)
        return ApprovalVerdict(accepted=False, reason=reason)
    return held


def record_checked_word(
    state: LoopState, held: DecisionToCheck, problem: str, signing: str | None, now: datetime
) -> ApprovalVerdict:
    """The worker's word on a held answer or cancel: applied, or refused and recorded with
    the worker's reason."""
    word = held.decision
    assert isinstance(word, UserMessage | CancelRequest)
    if held in state.words_to_check:
        state.words_to_check.remove(held)
    if signing:
        state.approval_signing = signing
    if problem:
        record_refused_input(state, _signal_of(word), _shown(word), problem, now)
        return ApprovalVerdict(accepted=False, reason=problem)
    return _apply_word(state, word, now)


def _apply_word(
    state: LoopState, word: UserMessage | CancelRequest, now: datetime
) -> ApprovalVerdict:
    if isinstance(word, CancelRequest):
        if state.cancel_reason is None:
            state.cancel_reason = word.reason
        return ApprovalVerdict(accepted=True)
    refused = record_message(state, word, now)
    return ApprovalVerdict(accepted=refused is None, reason=refused or "")


def _signal_of(word: UserMessage | CancelRequest) -> str:
    return "message" if isinstance(word, UserMessage) else "cancel"


def _shown(word: UserMessage | CancelRequest) -> str:
    """What the record keeps of a refused answer or cancel."""
    if isinstance(word, UserMessage):
        return f"{word.sender}: {word.text[:200]}"
    return f"{word.requested_by or 'someone'}: {word.reason[:200]}"


def _judged(state: LoopState, decision: ApprovalDecision) -> str | None:
    batch = state.batch
    pending = batch.approvals if batch else {}
    return approval.judge(decision, pending, batch.decisions if batch else {})


def _refused_decision(
    state: LoopState, decision: ApprovalDecision, reason: str, now: datetime
) -> ApprovalVerdict:
    refused = RefusedApproval(
        call_id=decision.call_id,
        args_digest=decision.args_digest,
        approved=decision.approved,
        approver=decision.approver,
        reason=decision.reason,
        refused_because=reason,
        at=now,
    )
    _refuse(state, refused)
    return ApprovalVerdict(accepted=False, reason=reason)


def _apply_decision(state: LoopState, decision: ApprovalDecision, now: datetime) -> ApprovalVerdict:
    batch = state.batch
    assert batch is not None
    batch.decisions[decision.call_id] = decision
    record = state.calls[decision.call_id]
    # Who decided, when, why and whether signed, as fields: nothing reads the sentence back.
    record.approval = ApprovalRecord(
        approved=decision.approved,
        approver=decision.approver,
        at=now,
        reason=decision.reason,
        # A signature counts only where the worker checks them (it did, before this).
        signed=bool(decision.signature) and state.approval_signing == "signed",
        response="" if decision.approved else decision.response,
    )
    apply_edit(state, decision, record.approval)
    record.decision = record.approval.said()
    if not decision.approved:
        call, spec = state.with_specs([decision.call_id])[0]
        state.rejected_actions.append(action_digest(spec, call.arguments))
        batch.writes.remove(decision.call_id)
        message = record.approval.said() + (f": {decision.reason}" if decision.reason else "")
        if record.approval.response:
            message = f"not run: {record.approval.said()}: {record.approval.response}"
        settle(state, batch, results.refusal(call, "rejected_action", message))
        close_if_answered(state)
    return ApprovalVerdict(accepted=True)


TIMEOUT_APPROVER = "approval_timeout"
"""Who rejected a call its approval timeout rejected (`on_approval_timeout="reject"`)."""


def record_approval_timeout(state: LoopState, step: TimeOutApprovals, now: datetime) -> None:
    """The approval timeout of `step`'s calls: each rejected, as an approver's rejection is
    (the model is told; a tool whose `on_reject` is `stop` stops the run); or the batch
    escalated, which gives its calls one more `approval_timeout_seconds`."""
    batch = state.batch
    assert batch is not None
    if step.action == "escalate":
        batch.timeout_escalated = True
        return
    waited = f"no decision within {state.run_input.approval_timeout_seconds:g} s"
    for call_id in step.call_ids:
        rejection = ApprovalDecision(
            call_id=call_id,
            args_digest=state.calls[call_id].args_digest,
            approved=False,
            approver=TIMEOUT_APPROVER,
            reason=waited,
        )
        _apply_decision(state, rejection, now)


def record_message(state: LoopState, message: UserMessage, now: datetime) -> str | None:
    """A user's message answers the pending question (an `ask_user` call's, or what a tool
    asked), or waits for the next model call (while the text waiting for it stays under
    `MAX_WAITING_MESSAGE_CHARS`). Returns why it was refused, if it was."""
    batch = state.batch
    if batch is None or not batch.questions:
        reason = _waiting_problem(state, message)
        if reason:
            record_refused_input(state, "message", message.text[:200], reason, now)
            return reason
        state.outbox.append(UserInput(text=message.text, sender=message.sender))
        return None
    allowed = answer_room(batch.answer_chars, len(batch.questions))
    if len(message.text) > allowed:
        reason = (
            f"an answer may hold {allowed} characters now ({len(batch.questions)} questions"
            f" of this step wait, {MAX_ANSWER_CHARS} for all its answers): the question "
            "still waits, answer it shorter"
        )
        record_refused_input(state, "message", message.text[:200], reason, now)
        return reason
    batch.answer_chars += len(message.text)
    call_id = batch.questions.pop(0)
    asked = batch.asking.pop(call_id, None)
    if asked is not None:
        # The tool asked: the call runs again with the reply (a write under its same key).
        batch.replies[call_id] = InputReply(
            pending_ref=asked.pending_ref, text=message.text, sender=message.sender
        )
        if call_id not in batch.writes:  # a write that asked kept its place
            batch.reads.insert(0, call_id)
        state.calls[call_id].status = "pending"
        return None
    call = state.call(call_id)
    answer = {"answer": message.text, "from": message.sender}
    settle(
        state,
        batch,
        ToolResult(call_id=call_id, tool=call.name, content=json.dumps(answer, ensure_ascii=False)),
    )
    close_if_answered(state)
    return None


def answer_room(held: int, waiting: int) -> int:
    """How long the next answer may be when a step's answers hold `held` characters and
    `waiting` questions wait: an even share of what is left, so the last question can always
    be answered (at least `MIN_ANSWER_ROOM`: a tool may ask again after the room is used)."""
    return max((MAX_ANSWER_CHARS - held) // max(waiting, 1), MIN_ANSWER_ROOM)


def _waiting_problem(state: LoopState, message: UserMessage) -> str | None:
    """Why `message` cannot wait for the next model call with those already waiting."""
    waiting = [e for e in state.outbox if isinstance(e, UserInput)]
    if len(waiting) >= MAX_WAITING_MESSAGES:
        return f"{len(waiting)} messages already wait for the model, the most a run holds"
    chars = sum(len(e.text) for e in waiting)
    if chars + len(message.text) > MAX_WAITING_MESSAGE_CHARS:
        return (
            f"{chars} characters of messages already wait for the model; this one "
            f"would pass the {MAX_WAITING_MESSAGE_CHARS} limit"
        )
    return None


def record_resolution(state: LoopState, request: ResolveRequest, now: datetime) -> str | None:
    """An operator's word on an unresolved write as it arrives: refused with the reason if it
    cannot count, or held for the worker's check, which `record_checked_resolution` then
    applies. Returns why it was refused, if it was."""
    reason = _resolution_problem(state, request)
    if reason is None:
        if _held_for_check(state, request) is not None:
            return None
        reason = TOO_MANY_TO_CHECK
    _refused_resolution(state, request, reason, now)
    return reason


def receive_resolution(
    state: LoopState, request: ResolveRequest, now: datetime
) -> ApprovalVerdict | DecisionToCheck:
    """`record_resolution`, for the `deliver` update: its verdict, or the word held."""
    refused = record_resolution(state, request, now)
    if refused is not None:
        return ApprovalVerdict(accepted=False, reason=refused)
    assert state.batch is not None
    return state.batch.to_check[-1]


def record_checked_resolution(
    state: LoopState, held: DecisionToCheck, problem: str, signing: str | None, now: datetime
) -> str | None:
    """The worker's word on a held `resolve`: it settles the write (if it still can: another
    word may have come first) or is refused with the worker's reason, returned."""
    request = held.decision
    assert isinstance(request, ResolveRequest)
    batch = state.batch
    if batch is not None and held in batch.to_check:
        batch.to_check.remove(held)
    if signing:
        state.approval_signing = signing
    reason = problem or _resolution_problem(state, request)
    if reason:
        _refused_resolution(state, request, reason, now)
        return reason
    _apply_resolution(state, request, now)
    return None


def _resolution_problem(state: LoopState, request: ResolveRequest) -> str | None:
    batch = state.batch
    if batch is None or request.call_id not in batch.reconciling:
        return f"no write {request.call_id!r} is awaiting reconciliation"
    return None


def _refused_resolution(
    state: LoopState, request: ResolveRequest, reason: str, now: datetime
) -> None:
    refused = RefusedResolution(
        call_id=request.call_id,
        outcome=request.outcome,
        operator=request.operator,
        note=request.note,
        refused_because=reason,
        at=now,
    )
    _refuse(state, refused)


def _apply_resolution(state: LoopState, request: ResolveRequest, now: datetime) -> None:
    batch = state.batch
    assert batch is not None
    del batch.reconciling[request.call_id]
    call, spec = state.with_specs([request.call_id])[0]
    # An inherited unknown write is settled by the same word.
    state.inherited_unresolved.pop(action_digest(spec, call.arguments), None)
    resolution = ResolutionRecord(
        outcome=request.outcome, operator=request.operator, at=now, note=request.note
    )
    said = resolution.said()
    record = state.calls[request.call_id]
    record.resolution = resolution
    # The ledger's sentence, for people: what reads the word reads `resolution`.
    record.decision += f"; {resolution.in_ledger()}"
    if request.outcome == "applied":
        result = results.confirmed(call, None, said)
    else:
        result = results.not_applied(call, said)
    settle(state, batch, result)
    close_if_answered(state)


TEMPORAL_CANCEL_REASON = "cancel requested through Temporal"


def record_cancel_request(state: LoopState) -> None:
    """Temporal's own cancel request, taken like the `cancel` signal (the first reason
    given stays)."""
    if state.cancel_reason is None:
        state.cancel_reason = TEMPORAL_CANCEL_REASON


def awaiting_humans(state: LoopState) -> set[str]:
    """Call ids waiting for an approval decision, a user's answer or an operator's word."""
    batch = state.batch
    return set() if batch is None else {*batch.undecided(), *batch.questions, *batch.reconciling}


def record_pause_started(state: LoopState, now: datetime) -> None:
    state.paused_since = now
    state.usage.human_waits += 1
    _recheck_after_wait(state)


def _recheck_after_wait(state: LoopState) -> None:
    """What a call's precondition said before the wait may not hold after it (the last seat
    was taken meanwhile): every call of the batch that is still to run and was checked is
    checked again before it runs. A write already sent is not: its outcome is looked up."""
    batch = state.batch
    if batch is None:
        return
    settled = {*batch.results, *batch.unchecked, *batch.unknown, *batch.reconciling}
    batch.recheck.extend(
        call_id
        for call_id in batch.order
        if call_id not in settled
        and call_id not in batch.recheck
        and state.spec_of(call_id).has_precondition
    )


def record_pause(state: LoopState, seconds: float) -> None:
    """Time spent waiting for humans is not the agent's working time."""
    state.paused_seconds += seconds
    state.paused_since = None
