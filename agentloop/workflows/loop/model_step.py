"""The model step folded into the run state: a call started (counted, its request built from
what the model has not seen), its output recorded (a batch opened for its tool calls, a final
answer checked), and what the completion check said of the answer.

Like every fold, a step starts with one `start_*` call (which reserves what it uses and says
what to send) and ends with one `record_*` call (which records what came back).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from agentloop.activity_io import CallModelInput, CallModelResult, ModelCallBudget
from agentloop.context import chars_per_token
from agentloop.contract import CallRecord, ModelSettings, ModelSwitch
from agentloop.events import ModelOutput, StateUpdate
from agentloop.policies.fallback import fallback_after
from agentloop.tool_spec import GIVE_UP
from agentloop.transcript import by_reference
from agentloop.workflows.loop.exchange import ModelFailure, ModelTurn
from agentloop.workflows.loop.lifecycle import record_failure
from agentloop.workflows.loop.next_step import CallModel
from agentloop.workflows.loop.plan import OverBudget, ProtocolViolation, plan_batch
from agentloop.workflows.loop.settle import close_if_answered, settle
from agentloop.workflows.loop.state import MAX_OUTPUT_CORRECTIONS, LoopState
from agentloop.workflows.loop.stops import checked_answer, empty_answer, response_named
from agentloop.workflows.loop.views import facts
from agentloop.workflows.loop.watching import streaming


def start_model_call(state: LoopState, step: CallModel) -> ModelTurn:
    """The call is counted the moment it starts; the request carries what the model has not
    seen (stored contents by reference) and the specs inline until a call has stored them."""
    sent = list(state.outbox)
    state.turn = step.turn
    state.phase = "calling_model"
    state.usage.model_calls += 1
    run_input = state.run_input
    provider, model = state.serving_model()
    request = CallModelInput(
        run_id=state.workflow_id,
        turn=step.turn,
        provider=provider,
        model=model,
        head=state.head,
        new_events=[by_reference(event) for event in sent],
        tools=[] if state.tools_ref is not None else list(state.tools.values()),
        tools_ref=state.tools_ref,
        settings=ModelSettings(**run_input.model_settings.model_dump(), stream=run_input.stream),
        context_budget_chars=run_input.context_budget_chars,
        context_budget_tokens=run_input.context_budget_tokens,
        chars_per_token=state.chars_per_token,
        facts=facts(state),
        budget=_budget(state),
        publish_text=streaming(state),
    )
    return ModelTurn(request, sent)


def _budget(state: LoopState) -> ModelCallBudget:
    """What this call may use of the caps: the run's usage and its child runs' slices are
    spoken for (this call is counted already, its tokens not yet)."""
    limits, held = state.run_input.limits, state.reserved()
    return ModelCallBudget(
        tokens_left=None
        if limits.max_total_tokens is None
        else limits.max_total_tokens - held.input_tokens - held.output_tokens,
        cost_left=None if limits.max_cost_usd is None else limits.max_cost_usd - held.cost_usd,
        context_tokens=state.context_tokens,
        elided_before=state.elided_through,
    )


def record_over_budget(state: LoopState, reason: str) -> None:
    """The model call was not started: even its input might not fit what is left of a cap."""
    state.usage.model_calls -= 1
    state.limit = reason


def record_model_output(
    state: LoopState, result: CallModelResult, now: datetime, sent: int | None = None
) -> None:
    """The model's answer to a call that carried the first `sent` events of the outbox
    (None: all of it); what arrived during the call stays for the next one."""
    output = result.output
    state.head = result.head
    state.tools_ref = state.tools_ref or result.tools_ref
    state.chars_per_token = (
        chars_per_token(result.request_chars, output.usage.input_tokens) or state.chars_per_token
    )
    state.outbox = state.outbox[sent:] if sent is not None else []
    state.context_tokens = output.usage.input_tokens + output.usage.output_tokens
    state.elided_through = result.elided_through
    state.usage.model_requests += max(result.attempt, 1)
    state.usage.input_tokens += output.usage.input_tokens
    state.usage.output_tokens += output.usage.output_tokens
    state.usage.cost_usd += result.cost_usd
    state.last_output = output
    state.answer_check = None
    state.phase = "validating"
    if output.stop == "tool_calls":
        _open_batch(state, output, now)
    elif output.stop == "final" and empty_answer(output):
        _send_back_if_empty(state)
    elif output.stop == "final" and state.run_input.output_schema is not None:
        _send_back_if_rejected(state, output, state.run_input.output_schema)
    if state.last_output is output and output.stop == "final" and not empty_answer(output):
        _send_back_if_unverifiable(state)


def _open_batch(state: LoopState, output: ModelOutput, now: datetime) -> None:
    planned = plan_batch(state, output, now)
    if isinstance(planned, OverBudget):
        state.limit = planned.reason
        # Without their arguments: the ledger's own cap may be what they do not fit (the
        # transcript holds them).
        _ledger(state, output, {}, "over_budget", with_arguments=False)
        return
    if isinstance(planned, ProtocolViolation):
        record_failure(state, planned.reason + response_named(output), "protocol")
        return
    state.argument_bytes += planned.argument_bytes  # measured once, by the plan
    _ledger(state, output, planned.decisions, "allowed")
    state.batch = planned.batch
    for result in list(planned.batch.results.values()):
        settle(state, planned.batch, result)
    close_if_answered(state)


def _ledger(
    state: LoopState,
    output: ModelOutput,
    decisions: dict[str, str],
    default: str,
    *,
    with_arguments: bool = True,
) -> None:
    """Each of `output`'s calls in the ledger, `proposed`, decided as `decisions` says."""
    for call in output.tool_calls:
        spec = state.tools.get(call.name)
        state.calls[call.call_id] = CallRecord(
            call_id=call.call_id,
            tool=call.name,
            tool_version=spec.version if spec else "",
            args_digest=call.args_digest,
            arguments=call.arguments if with_arguments else {},
            decision=decisions.get(call.call_id, default),
            status="proposed",
            turn=state.turn,
        )


def _send_back_if_empty(state: LoopState) -> None:
    """The first empty final answer goes back to the model with a runner note; the next one
    stops the run `blocked` (`decide`): an empty answer never completes a run."""
    state.empty_answers += 1
    if state.empty_answers > 1:
        return
    how = _give_up_or_say_why(state)
    _send_back(state, f"Your final answer was empty. Give your answer to the task, or {how}.")


def _give_up_or_say_why(state: LoopState) -> str:
    return (
        "call give_up with the reason you cannot finish"
        if GIVE_UP in state.builtin_tools
        else "say why you cannot finish"
    )


def _send_back_if_unverifiable(state: LoopState) -> None:
    """A run that requires verification but names no completion check: nothing can accept
    its answer. The first final answer goes back to the model saying so; the next ends the
    run `unverified` (`decide`), never `completed`."""
    if not state.require_verification or state.run_input.completion_check is not None:
        return
    if state.answer_check is not None and state.answer_check.problems:
        return  # an answer breaking `output_schema` goes its own way
    state.unverified_answers += 1
    if state.unverified_answers > 1:
        return
    _send_back(
        state,
        "Your final answer was not accepted: this run requires a verified answer, and no "
        "completion check accepted it. If you did the task, answer again with what you did; "
        f"if you cannot, {_give_up_or_say_why(state)}.",
    )


def _send_back_if_rejected(state: LoopState, output: ModelOutput, schema: dict[str, Any]) -> None:
    """The answer is checked against `output_schema` once, here: `decide` reads the verdict
    kept in `answer_check`."""
    state.answer_check = checked_answer(state, output, schema)
    problems = state.answer_check.problems
    if not problems or state.output_corrections >= MAX_OUTPUT_CORRECTIONS:
        return
    # Not done: the verdict goes back to the model as an observation, on the same budget.
    state.output_corrections += 1
    _send_back(
        state,
        "Your final answer was rejected (" + "; ".join(problems) + "). Answer again with "
        f"only JSON matching this schema: {json.dumps(schema, sort_keys=True)}",
    )


def _send_back(state: LoopState, note: str) -> None:
    """The answer is not taken: `note` goes to the model's next call as a runner note, after
    what already waits for it."""
    state.outbox.append(StateUpdate(kind="verification", text=note))
    state.last_output = None
    state.answer_check = None


def record_verdict(state: LoopState, passed: bool, reason: str) -> None:
    """A passed check accepts this turn's answer; a failed one goes back to the model with
    the reason, on the same budget, a bounded number of times."""
    if passed:
        state.verified_turn = state.turn
        state.verification = reason
        return
    check = state.run_input.completion_check
    if state.output_corrections >= MAX_OUTPUT_CORRECTIONS:
        reason = f"verification: completion_check {check} failed: {reason}"
        if state.require_verification:
            state.unverified = f"unverified: {reason}"
        else:
            record_failure(state, reason, "verification")
        return
    state.output_corrections += 1
    _send_back(
        state,
        f"Not done yet: the completion check {check} says: {reason}. Finish the task (or say "
        "why you cannot), then answer again.",
    )


MAX_SWITCH_REASON_CHARS = 500


def record_model_failure(
    state: LoopState,
    request: CallModelInput,
    failure: ModelFailure,
    now: datetime,
) -> CallModelInput | None:
    """The model call `request` failed for good after its requests to the provider: it goes
    to the run's next model when `policies.fallback` says so (the switch recorded, the same
    call addressed to that model returned, counted as the same model call); else the run
    stops on the failure."""
    state.usage.model_requests += failure.requests
    to = fallback_after(failure.error_class, state.serving, len(state.run_input.fallbacks))
    if to is None:
        record_failure(state, f"model_error: {failure.reason}", "model_error")
        return None
    state.serving = to
    provider, model = state.serving_model()
    state.model_switches.append(
        ModelSwitch(
            turn=request.turn,
            from_provider=request.provider,
            from_model=request.model,
            to_provider=provider,
            to_model=model,
            error_class=failure.error_class,
            reason=failure.reason[:MAX_SWITCH_REASON_CHARS],
            requests=failure.requests,
            at=now,
        )
    )
    return request.model_copy(update={"provider": provider, "model": model})
