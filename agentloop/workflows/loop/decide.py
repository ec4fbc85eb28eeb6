"""`decide(state, now) -> NextStep`: docs/concepts/design.md §3 "The loop, one turn", as a
state table (docs/concepts/loop.md shows it as one).

Pure and without Temporal, so every rule is unit-tested without a server; the workflow shell
only carries out what is decided here. Guards first (a failure, a limit, a stall, too many
refusals, a cancel, the deadline), then the open batch, then the model's last output.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import assert_never

from agentloop.contract import RunStatus
from agentloop.events import ModelOutput
from agentloop.policies import authorization, budgets
from agentloop.policies.compensation import Offered
from agentloop.workflows.loop.next_step import (
    AwaitApproval,
    AwaitInput,
    AwaitReconciliation,
    CallModel,
    CheckApprovals,
    CheckPreconditions,
    Compensate,
    Finish,
    LookupOutcome,
    NextStep,
    RunTools,
    TimeOutApprovals,
    Verify,
)
from agentloop.workflows.loop.state import (
    MAX_REFUSED_CALLS,
    Batch,
    Compensation,
    LoopState,
    decisions_to_check,
)
from agentloop.workflows.loop.stops import (
    empty_answer,
    response_named,
    stopping_rejection,
)
from agentloop.workflows.loop.views import (
    approval_deadline,
    input_deadline,
    planned_compensation,
    reconciliation_deadline,
    refused_calls,
)


def decide(state: LoopState, now: datetime) -> NextStep:
    """A run that ends without delivering first offers its writes' undos (`Compensate`,
    decided by `policies.compensation`); while they run, only they are decided."""
    if state.compensation is not None:
        return _compensating(state, state.compensation, now)
    step = _next(state, now)
    if isinstance(step, Finish):
        decided = planned_compensation(state, step.status)
        if any(isinstance(d, Offered) for d in decided):
            return Compensate(step, decided)
    return step


def _compensating(state: LoopState, compensation: Compensation, now: datetime) -> NextStep:
    """The undos' batch, through the same pipeline as any write (approval, key, lookup,
    reconciliation); then the stop the run was going to make. A cancel, or a wait for a
    person that times out, stops the undos not run yet (they are reported not undone)."""
    if compensation.status is None:  # a roll back the model asked for: the run goes on
        return _next(state, now)
    stop = Finish(compensation.status, compensation.stop_reason, cause=compensation.cause)
    if compensation.closed:
        return stop
    if state.cancel_reason is not None:
        why = state.cancel_reason or "no reason given"
        return replace(stop, stop_reason=f"{stop.stop_reason}; undos cancelled: {why}")
    step = _next_in_batch(state, state.open_batch(), now)
    if isinstance(step, Finish):
        return replace(stop, stop_reason=f"{stop.stop_reason}; undos stopped: {step.stop_reason}")
    return step


def _next(state: LoopState, now: datetime) -> NextStep:
    limits = state.run_input.limits
    if state.failure is not None:
        return _failed(state, state.failure)
    if state.unverified is not None:
        answer = state.last_output.text if state.last_output is not None else None
        return Finish("unverified", state.unverified, answer, cause="verification")
    if state.limit is not None:
        return Finish("limit_reached", state.limit, cause="budget")
    if state.stalled is not None:
        return Finish("stalled", f"stalled: {state.stalled}", cause="stalled")
    refused = refused_calls(state)
    if refused > MAX_REFUSED_CALLS:
        return Finish(
            "failed",
            f"invalid_calls: {refused} tool calls refused before running",
            cause="invalid_calls",
        )
    if state.words_to_check:
        # An answer or cancel held for the worker's check (signed mode): checked before
        # anything else, whatever the run was doing when it came.
        return CheckApprovals(decisions_to_check(state))
    if state.cancel_reason is not None:
        reason = f"cancelled: {state.cancel_reason or 'no reason given'}"
        return Finish("cancelled", reason, cause="cancelled")
    if budgets.deadline_passed(limits, state.active_since(), now):
        return Finish(
            "limit_reached", f"deadline: {limits.deadline_seconds} s passed", cause="deadline"
        )
    if state.batch is not None:
        return _next_in_batch(state, state.batch, now)
    output = state.last_output
    if output is None:
        blocked = budgets.model_call_blocked(limits, state.usage)
        if blocked is not None:
            return Finish("limit_reached", blocked.sentence, cause="budget")
        return CallModel(turn=state.turn + 1)
    match output.stop:
        case "final":
            return _checked_candidate(state, output)
        case "tool_calls":
            raise AssertionError("a tool-call output always has a batch")  # record_model_output
        case "refused":
            reason = f"refused: {output.stop_detail or output.text}"[:500]
            return Finish("refused", reason, cause="refused")
        case "content_filtered":
            reason = f"content_filtered: {output.stop_detail}"
            return Finish("refused", reason, cause="content_filtered")
        case "truncated":
            reason = f"truncated: {output.stop_detail}{response_named(output)}"
            return Finish("incomplete", reason, cause="truncated")
        case _:
            assert_never(output.stop)


def _failed(state: LoopState, failure: str) -> Finish:
    unknown = [r.call_id for r in state.calls.values() if r.status == "unknown"]
    if unknown:
        reason = f"{failure}; outcome unknown for {', '.join(unknown)}"
        return Finish("unresolved", reason, cause="unresolved")
    return Finish("failed", failure, cause=state.failure_cause)


def _checked_candidate(state: LoopState, output: ModelOutput) -> NextStep:
    """An empty answer is no answer; then the output schema, then the completion check: only
    then is a final answer done."""
    if empty_answer(output):
        # Only reached once the model was told (see `record_model_output`).
        reason = "empty_answer: the model's final answer was empty again after it was told"
        return Finish("blocked", reason, cause="empty_answer")
    finish = _final_candidate(state, output)
    check = state.run_input.completion_check
    if finish.status == "completed" and check is None and state.require_verification:
        # Only reached once the model was told (see `record_model_output`).
        return Finish(
            "unverified",
            "unverified: no completion check accepted the final answer (the run requires"
            " verification and names no completion_check)",
            finish.output,
            finish.output_ref,
            cause="verification",
        )
    if finish.status != "completed" or check is None:
        return finish
    if state.verified_turn != state.turn:
        return Verify(check, output.text, output.text_ref)
    return Finish(
        finish.status,
        f"{finish.stop_reason}; completion_check {check} passed",
        finish.output,
        finish.output_ref,
        cause="final_answer",
    )


def _final_candidate(state: LoopState, output: ModelOutput) -> Finish:
    if state.run_input.output_schema is None:
        if output.text_ref:
            reason = f"final answer ({output.text_chars} characters: the whole by output_ref)"
            return Finish("completed", reason, output.text, output.text_ref, cause="final_answer")
        return Finish("completed", "final answer", output.text, cause="final_answer")
    checked = state.answer_check
    if checked is None:
        raise AssertionError("a final answer is checked as it is recorded")  # model_step
    if checked.problems:
        # Only reached once the corrections are used up (see `record_model_output`).
        return Finish(
            "failed",
            "verification: final answer breaks output_schema: " + "; ".join(checked.problems),
            cause="verification",
        )
    return Finish(
        "completed", "final answer matches output_schema", checked.value, cause="final_answer"
    )


def _approval_timed_out(state: LoopState, batch: Batch, undecided: list[str]) -> NextStep:
    """What the approval timeout does with the calls nobody decided (`on_approval_timeout`)."""
    action = state.run_input.on_approval_timeout
    if action == "reject" or (action == "escalate" and not batch.timeout_escalated):
        return TimeOutApprovals(undecided, action)
    reason = f"approval_timeout: no decision on {undecided}"
    status: RunStatus = "blocked" if action == "blocked" else "approval_timeout"
    return Finish(status, reason, cause="approval_timeout")


def _next_in_batch(state: LoopState, batch: Batch, now: datetime) -> NextStep:
    """The batch's pipeline: preconditions, reads, questions, approvals, lookups, writes (and
    after each write, the reads it comes before).
    A decision that arrived is checked by the worker first, whatever the batch waits on."""
    if batch.denied is not None:
        return Finish("denied", f"denied: {batch.denied}", cause="denied")
    if batch.gave_up is not None:
        return Finish("blocked", f"give_up: {batch.gave_up}", cause="give_up")
    if batch.roll_back is not None and state.compensation is None:
        return Compensate(None, planned_compensation(state, None))
    if batch.to_check:
        return CheckApprovals(list(batch.to_check))
    if batch.unchecked:
        return CheckPreconditions(state.with_specs(batch.unchecked), dict(batch.assessing))
    reads = batch.reads_ready()
    if reads:
        return _rechecked_first(state, batch, reads) or RunTools(state.with_specs(reads))
    if batch.questions:
        deadline = input_deadline(state, batch)
        if now >= deadline:
            reason = f"input_timeout: no answer to {batch.questions}"
            return Finish("input_timeout", reason, cause="input_timeout")
        return AwaitInput(list(batch.questions), deadline)
    undecided = batch.undecided()
    if undecided:
        deadline = approval_deadline(state, batch)
        if now >= deadline:
            return _approval_timed_out(state, batch, undecided)
        return AwaitApproval(undecided, deadline)
    rejection = stopping_rejection(state, batch)
    if rejection is not None:
        call_id, decision = rejection
        return Finish(
            "rejected",
            f"rejected: {call_id} by {decision.approver}"
            + (f": {decision.reason}" if decision.reason else ""),
            cause="rejected",
        )
    if batch.unknown:
        call, spec = state.with_specs(batch.unknown[:1])[0]
        return LookupOutcome(call, spec, state.calls[call.call_id].idempotency_key)
    if batch.reconciling:
        waiting = list(batch.reconciling)
        deadline = reconciliation_deadline(state, batch)
        if now >= deadline:
            reason = f"unresolved: outcome of {', '.join(waiting)} unknown"
            return Finish("unresolved", reason, cause="unresolved")
        return AwaitReconciliation(waiting, deadline)
    if batch.writes:
        # After a human decided, authorization and budget are checked again before anything runs.
        call_id = batch.writes[0]
        denied = authorization.denial(state.spec_of(call_id), state.run_input.principal)
        if denied:
            return Finish("denied", f"denied: {denied}", cause="denied")
        return _rechecked_first(state, batch, [call_id]) or RunTools(state.with_specs([call_id]))
    raise AssertionError(f"batch without a next step: {batch}")  # closed by record_results


def _rechecked_first(state: LoopState, batch: Batch, call_ids: list[str]) -> NextStep | None:
    """The calls about to run that waited for people since their check (`Batch.recheck`):
    checked again first."""
    stale = [call_id for call_id in call_ids if call_id in batch.recheck]
    return CheckPreconditions(state.with_specs(stale)) if stale else None
