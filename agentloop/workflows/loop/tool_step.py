"""The tool step folded into the run state: what the precondition checks said, the calls
started (reserved in the budget, a write under its idempotency key, a `delegate` call as a
child run), their results recorded under their call ids, and what the system of record said
of a write whose outcome was unknown.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import assert_never

from agentloop.activity_io import InputReply, PreconditionResult
from agentloop.contract import Reconciliation
from agentloop.events import ToolResult
from agentloop.policies.bounds import clipped
from agentloop.tool_spec import Outcome, bounded_record
from agentloop.workflows.loop import results
from agentloop.workflows.loop.delegation import child_result, start_delegations
from agentloop.workflows.loop.exchange import ChildOutcome, ToolFailure, ToolOutcome, ToolsToRun
from agentloop.workflows.loop.humans import record_pause
from agentloop.workflows.loop.next_step import RunTools
from agentloop.workflows.loop.plan import pending_approval
from agentloop.workflows.loop.settle import close_if_answered, leave_batch, settle
from agentloop.workflows.loop.state import (
    MAX_INPUT_ROUNDS,
    MAX_WRITE_ATTEMPTS,
    SUMMARY_CHARS,
    LoopState,
)


def record_preconditions(
    state: LoopState, checked: dict[str, PreconditionResult], now: datetime
) -> None:
    """What each check said: why a call's precondition failed (it is refused), and for a
    write whose tool names an approval rule, whether it waits for a human (a verdict that is
    missing says it does: a rule that could not be asked must not let a call through)."""
    batch = state.open_batch()
    # The checked calls are the batch's unchecked ones, or those checked again after a wait.
    for call_id, result in checked.items():
        again = call_id in batch.recheck
        if again:
            batch.recheck.remove(call_id)
        if result.problem is not None:
            reason = "permission" if result.error_class == "permission" else "precondition_failed"
            problem = _no_longer(state, call_id, result) if again else result.problem
            refused = results.refusal(state.call(call_id), reason, problem)
            state.calls[call_id].decision = problem if again else "precondition_failed"
            settle(state, batch, refused)
            leave_batch(batch, call_id)
        elif call_id in batch.assessing and result.needs_approval is not False:
            call, spec = state.with_specs([call_id])[0]
            batch.approvals[call_id] = pending_approval(call, spec, now)
    batch.unchecked = []
    batch.assessing = {}
    close_if_answered(state)


def _no_longer(state: LoopState, call_id: str, result: PreconditionResult) -> str:
    """Why a call that passed its check before a wait is refused after it: what it was told
    then (approved by whom), and what the check says now."""
    decision = state.open_batch().decisions.get(call_id)
    then = f"approved by {decision.approver}, then refused" if decision else "refused after a wait"
    problem = clipped(result.problem or "", MAX_KNOWN_CHARS)
    if not result.made:  # the problem says why the check could not be made again
        return f"{then}: {problem}"
    now = "permission" if result.error_class == "permission" else "precondition no longer holds"
    return f"{then}: {now}: {problem}"


def start_tools(state: LoopState, step: RunTools, now: datetime) -> ToolsToRun:
    """The calls are reserved in the budget the moment they start (a write with its
    idempotency key); a `delegate` call gets its child run's input and slice."""
    batch = state.open_batch()
    state.phase = "compensating" if state.compensation is not None else "executing_tools"
    replies: dict[str, InputReply] = {}
    for call, spec in step.calls:
        record = state.calls[call.call_id]
        record.status = "running"
        record.attempts += 1
        if spec.effect == "write":
            record.idempotency_key = idempotency_key(state, call.call_id)
        for queue in (batch.reads, batch.writes):
            if call.call_id in queue:
                queue.remove(call.call_id)
        if call.call_id in batch.replies:
            replies[call.call_id] = batch.replies.pop(call.call_id)
    # A call run again (with a person's reply, or a write sent again under its key) is the
    # call already reserved, not another one.
    state.usage.tool_calls += sum(1 for c, _ in step.calls if state.calls[c.call_id].attempts == 1)
    children = start_delegations(state, step, now)
    return ToolsToRun(
        idempotency_keys={c.call_id: state.calls[c.call_id].idempotency_key for c, _ in step.calls},
        children=children,
        replies=replies,
    )


def idempotency_key(state: LoopState, call_id: str) -> str:
    """What a write is sent (and looked up) under: unique per run chain and call. A workflow
    id may be reused by a later run (Temporal allows it once the first closed), so the chain's
    first run id is part of it."""
    if state.run_chain:
        return f"{state.workflow_id}/{state.run_chain[0]}/{call_id}"
    return f"{state.workflow_id}/{call_id}"


def record_tool_results(
    state: LoopState,
    outcomes: list[ToolOutcome],
    paused_seconds: float = 0.0,
    now: datetime | None = None,
) -> None:
    """Record each outcome under its call id; an answered batch goes to the model.
    `paused_seconds`: the longest a child run of the step waited for humans, which is not this
    run's working time either. `now`: when the outcomes came (without it, as for a child
    run's step, no call waits for a person its tool asks)."""
    if paused_seconds:
        record_pause(state, paused_seconds)
    batch = state.open_batch()
    for outcome in outcomes:
        result = _as_result(state, outcome)
        if result.call_id not in batch.order or result.call_id in batch.results:
            raise ValueError(f"result for {result.call_id!r} does not answer an open call")
        _count_attempts(state, result.call_id, outcome)
        if result.status == "unknown":
            # Never retried blindly: the system of record is asked first
            # (docs/concepts/design.md §3 step 7).
            state.calls[result.call_id].status = "unknown"
            state.calls[result.call_id].result_summary = result.content[:SUMMARY_CHARS]
            batch.unknown.append(result.call_id)
        elif result.input_request is not None and now is not None and _asks(state, result, now):
            continue
        else:
            if result.input_request is not None:  # not asked: the model is told instead
                result = result.model_copy(update={"input_request": None})
            settle(state, batch, result)
    close_if_answered(state)


def _asks(state: LoopState, result: ToolResult, now: datetime) -> bool:
    """The call waits for a person's answer to what its tool asked, at
    most `MAX_INPUT_ROUNDS` times; otherwise (False) its result, saying what the tool asked,
    goes to the model. Nothing happened: the tool asked before it acted."""
    asked = result.input_request
    batch = state.open_batch()
    rounds = batch.input_rounds.get(result.call_id, 0)
    if asked is None or rounds >= MAX_INPUT_ROUNDS:
        return False
    batch.input_rounds[result.call_id] = rounds + 1
    batch.asking[result.call_id] = asked
    if not batch.questions:
        batch.asked_at = now
    batch.questions.append(result.call_id)
    if state.spec_of(result.call_id).effect == "write":
        batch.writes.insert(0, result.call_id)
    record = state.calls[result.call_id]
    record.status = "awaiting_input"
    record.result_summary = asked.question[:SUMMARY_CHARS]
    return True


def _count_attempts(state: LoopState, call_id: str, outcome: ToolOutcome) -> None:
    """The executions of the call's activity, Temporal's retries included (a result that does
    not say, an activity tool's or a child run's, counts as one)."""
    match outcome:
        case ToolResult():
            attempts = max(outcome.attempts, 1)
        case ToolFailure():
            attempts = outcome.attempts
        case _:
            attempts = 1
    state.calls[call_id].activity_attempts += attempts
    state.usage.tool_attempts += attempts


def _as_result(state: LoopState, outcome: ToolOutcome) -> ToolResult:
    if isinstance(outcome, ToolResult):
        return outcome
    call = state.call(outcome.call_id)
    if isinstance(outcome, ChildOutcome):
        return child_result(state, call, outcome.result, outcome.not_started)
    # A read that kept failing is reported to the model; a write whose attempt failed may
    # or may not have happened, so it is `unknown`.
    # A write no worker ever took did not happen: told as a failure, never looked up.
    write = state.spec_of(outcome.call_id).effect == "write" and outcome.started
    return results.failure(call, outcome.message, outcome.error_class, write=write)


MAX_KNOWN_CHARS = 1_000
"""What an inconclusive lookup said, as the reconciliation shows it to an operator."""


def record_outcome(state: LoopState, call_id: str, outcome: Outcome, now: datetime) -> None:
    """What the system of record said about an unknown write."""
    batch = state.open_batch()
    batch.unknown.remove(call_id)
    call, spec = state.with_specs([call_id])[0]
    record = state.calls[call_id]
    # What the system of record holds comes from outside: kept to the tool's result cap.
    held = bounded_record(outcome.record, spec.max_result_chars)
    match outcome.state:
        case "applied":
            settle(state, batch, results.confirmed(call, held, "the system of record has it"))
        case "not_applied" if outcome.record is not None:
            # Refused before commit, and the refusal is on record under the key.
            settle(state, batch, results.refusal(call, "business", json.dumps(held)))
        case "not_applied" if record.attempts < MAX_WRITE_ATTEMPTS:
            batch.writes.insert(0, call_id)  # definitely absent: send again, same key
        case "not_applied":
            absent = f"still absent after {record.attempts} attempts"
            _await_reconciliation(state, call_id, spec.name, absent, now)
        case "unknown":
            inconclusive = clipped(str(held or "no answer"), MAX_KNOWN_CHARS)
            _await_reconciliation(
                state, call_id, spec.name, f"lookup inconclusive: {inconclusive}", now
            )
        case _:
            assert_never(outcome.state)
    close_if_answered(state)


def _await_reconciliation(
    state: LoopState, call_id: str, tool: str, known: str, now: datetime
) -> None:
    """A write whose outcome the lookup could not settle: a person says (`resolve`)."""
    state.open_batch().reconciling[call_id] = Reconciliation(
        call_id=call_id,
        tool=tool,
        idempotency_key=state.calls[call_id].idempotency_key,
        known=known,
        since=now,
    )
    state.phase = "awaiting_reconciliation"
