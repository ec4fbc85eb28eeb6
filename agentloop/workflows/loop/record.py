"""Folding what an operation returned back into the run state.

A step starts with one `start_*` call (which reserves what it uses and says what to send) and
ends with one `record_*` call (which records what came back, each result under its call id).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from agentloop.activity_io import (
    CallModelInput,
    CallModelResult,
    InputReply,
    ModelCallBudget,
    PreconditionResult,
)
from agentloop.context import chars_per_token
from agentloop.contract import (
    AgentRunResult,
    CallRecord,
    ModelSettings,
    PreviousRun,
    StopCause,
)
from agentloop.events import CONTINUED, Event, ModelOutput, StateUpdate, ToolResult
from agentloop.policies.bounds import MAX_INLINE_ANSWER_CHARS, clipped
from agentloop.policies.completion import check_output
from agentloop.policies.validation import MAX_CHECK_STEPS
from agentloop.reporting import stop_report
from agentloop.tool_spec import GIVE_UP, Outcome, ToolSpec, bounded_record
from agentloop.transcript import by_reference
from agentloop.workflows.loop import results
from agentloop.workflows.loop.delegation import child_result, start_delegations
from agentloop.workflows.loop.exchange import (
    ChildOutcome,
    ModelTurn,
    ToolFailure,
    ToolOutcome,
    ToolsToRun,
)
from agentloop.workflows.loop.features import Feature
from agentloop.workflows.loop.humans import record_pause
from agentloop.workflows.loop.next_step import CallModel, Finish, RunTools
from agentloop.workflows.loop.plan import (
    OverBudget,
    ProtocolViolation,
    pending_approval,
    plan_batch,
)
from agentloop.workflows.loop.settle import close_if_answered, leave_batch, settle
from agentloop.workflows.loop.state import (
    MAX_INPUT_ROUNDS,
    MAX_OUTPUT_CORRECTIONS,
    MAX_RUN_CHAIN_IDS,
    MAX_WRITE_ATTEMPTS,
    SUMMARY_CHARS,
    LoopState,
    Reconciliation,
)
from agentloop.workflows.loop.views import (
    facts,
    pending_at_stop,
    side_effects,
    unresolved_writes,
    unsent_events,
)
from agentloop.workflows.loop.watching import streaming


def start_model_call(state: LoopState, step: CallModel) -> ModelTurn:
    """The call is counted the moment it starts; the request carries what the model has not
    seen (stored contents by reference) and the specs inline until a call has stored them."""
    sent = list(state.outbox)
    state.turn = step.turn
    state.phase = "calling_model"
    state.usage.model_calls += 1
    run_input = state.run_input
    request = CallModelInput(
        run_id=state.workflow_id,
        turn=step.turn,
        provider=run_input.provider,
        model=run_input.model,
        head=state.head,
        new_events=[by_reference(event) for event in sent],
        tools=[] if state.tools_ref is not None else list(state.tools.values()),
        tools_ref=state.tools_ref,
        settings=ModelSettings(**run_input.model_settings.model_dump(), stream=run_input.stream),
        context_budget_chars=run_input.context_budget_chars,
        context_budget_tokens=run_input.context_budget_tokens,
        chars_per_token=state.chars_per_token,
        facts=facts(state),
        budget=_budget(state) if state.has(Feature.STRICT_BUDGETS) else None,
        slim_output=state.has(Feature.MODEL_OUTPUT_SLIM),
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
        elided_before=(
            state.elided_through if state.has(Feature.BOUND_COUNTS_UNSHORTENED) else None
        ),
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
    keep = state.has(Feature.MESSAGES_DURING_MODEL_CALL_KEPT) and sent is not None
    state.outbox = state.outbox[sent:] if keep else []
    state.context_tokens = output.usage.input_tokens + output.usage.output_tokens
    state.elided_through = result.elided_through
    state.usage.model_requests += max(result.attempt, 1)
    state.usage.input_tokens += output.usage.input_tokens
    state.usage.output_tokens += output.usage.output_tokens
    state.usage.cost_usd += result.cost_usd
    state.last_output = output
    state.phase = "validating"
    if output.stop == "tool_calls":
        _open_batch(state, output, now)
    elif (
        output.stop == "final" and state.has(Feature.BLOCKED_NOT_COMPLETED) and empty_answer(output)
    ):
        _send_back_if_empty(state)
    elif output.stop == "final" and state.run_input.output_schema is not None:
        _send_back_if_rejected(state, output, state.run_input.output_schema)


def _open_batch(state: LoopState, output: ModelOutput, now: datetime) -> None:
    planned = plan_batch(state, output, now)
    if isinstance(planned, OverBudget):
        state.limit = planned.reason
        if state.has(Feature.OVER_BUDGET_CALLS_LEDGERED):
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


def response_named(output: ModelOutput) -> str:
    """Names the provider's response a protocol stop is about (its raw items are in the
    transcript store under that output)."""
    ref = output.provider_ref
    return f" (response {ref.response_id})" if ref.response_id else ""


def answer_problems(
    state: LoopState, output: ModelOutput, schema: dict[str, Any]
) -> tuple[Any, list[str]]:
    """A final answer checked against `output_schema`: its JSON value and what is wrong. An
    answer too long to travel inline is not checked here (the workflow holds only its
    start)."""
    if output.text_ref:
        limit = MAX_INLINE_ANSWER_CHARS
        return None, [
            f"the answer is {output.text_chars} characters, over the {limit} that can be"
            " checked against output_schema"
        ]
    steps = MAX_CHECK_STEPS if state.has(Feature.BOUNDED_SCHEMA_WORK) else None
    return check_output(
        schema, output.text, bounded=state.has(Feature.BOUNDED_VALIDATION), steps=steps
    )


def empty_answer(output: ModelOutput) -> bool:
    """A final answer with nothing in it: no text (whitespace aside), nothing by reference."""
    return not output.text.strip() and not output.text_ref


def _send_back_if_empty(state: LoopState) -> None:
    """The first empty final answer goes back to the model with a runner note; the next one
    stops the run `blocked` (`decide`): an empty answer never completes a run."""
    state.empty_answers += 1
    if state.empty_answers > 1:
        return
    how = (
        "call give_up with the reason you cannot finish"
        if GIVE_UP in state.builtin_tools
        else "say why you cannot finish"
    )
    _tell_model(
        state,
        StateUpdate(
            kind="verification",
            text=f"Your final answer was empty. Give your answer to the task, or {how}.",
        ),
    )
    state.last_output = None


def _send_back_if_rejected(state: LoopState, output: ModelOutput, schema: dict[str, Any]) -> None:
    _, problems = answer_problems(state, output, schema)
    if not problems or state.output_corrections >= MAX_OUTPUT_CORRECTIONS:
        return
    # Not done: the verdict goes back to the model as an observation, on the same budget.
    state.output_corrections += 1
    _tell_model(
        state,
        StateUpdate(
            kind="verification",
            text="Your final answer was rejected (" + "; ".join(problems) + "). Answer again with "
            f"only JSON matching this schema: {json.dumps(schema, sort_keys=True)}",
        ),
    )
    state.last_output = None


def _tell_model(state: LoopState, update: StateUpdate) -> None:
    """`update` for the next model call, after what already waits for it (before
    `messages-during-model-call-kept`, it replaced that)."""
    if state.has(Feature.MESSAGES_DURING_MODEL_CALL_KEPT):
        state.outbox.append(update)
    else:
        state.outbox = [update]


def record_preconditions(
    state: LoopState, checked: dict[str, PreconditionResult], now: datetime
) -> None:
    """What each check said: why a call's precondition failed (it is refused), and for a
    write whose tool names an approval rule, whether it waits for a human (a verdict that is
    missing says it does: a rule that could not be asked must not let a call through)."""
    batch = state.open_batch()
    # The checked calls are the batch's unchecked ones, or (feature `recheck-after-wait`)
    # those checked again after a wait.
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
            if again or state.has(Feature.REFUSED_WRITES_LEAVE_BATCH):
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
    state.phase = "executing_tools"
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
    if state.has(Feature.CALLS_COUNTED_ONCE):
        # A call run again (with a person's reply, or a write sent again under its key) is
        # the call already reserved, not another one.
        state.usage.tool_calls += sum(
            1 for c, _ in step.calls if state.calls[c.call_id].attempts == 1
        )
    else:
        state.usage.tool_calls += len(step.calls) - len(replies)
    children = start_delegations(state, step, now)
    return ToolsToRun(
        idempotency_keys={c.call_id: state.calls[c.call_id].idempotency_key for c, _ in step.calls},
        children=children,
        local=not children and runs_locally(state, [spec for _, spec in step.calls]),
        replies=replies,
    )


def idempotency_key(state: LoopState, call_id: str) -> str:
    """What a write is sent (and looked up) under: unique per run chain and call. A workflow
    id may be reused by a later run (Temporal allows it once the first closed), so the chain's
    first run id is part of it (feature `run-chain-keys`)."""
    if state.has(Feature.RUN_CHAIN_KEYS) and state.run_chain:
        return f"{state.workflow_id}/{state.run_chain[0]}/{call_id}"
    return f"{state.workflow_id}/{call_id}"


def runs_locally(state: LoopState, specs: Iterable[ToolSpec]) -> bool:
    """A batch made only of reads their tools declare `local` runs as Temporal local
    activities, inside the workflow task (runs started before that existed keep running every
    tool as an activity). A mixed batch does not: its activities are only scheduled when the
    workflow task ends, which waits for the local ones, so nothing would run side by side."""
    return state.has(Feature.LOCAL_READS) and all(
        spec.local and spec.effect == "read" for spec in specs
    )


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
    """The call waits for a person's answer to what its tool asked (feature `tools-ask`), at
    most `MAX_INPUT_ROUNDS` times; otherwise (False) its result, saying what the tool asked,
    goes to the model. Nothing happened: the tool asked before it acted."""
    asked = result.input_request
    batch = state.open_batch()
    rounds = batch.input_rounds.get(result.call_id, 0)
    if asked is None or not state.has(Feature.TOOLS_ASK) or rounds >= MAX_INPUT_ROUNDS:
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
    error_class = outcome.error_class
    if not state.has(Feature.TOOL_ERROR_CLASSES):
        error_class = "transient"  # runs started before the classes were told apart
    # A write no worker ever took did not happen: told as a failure, never looked up.
    write = state.spec_of(outcome.call_id).effect == "write" and outcome.started
    return results.failure(call, outcome.message, error_class, write=write)


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
    if outcome.state == "applied":
        settle(state, batch, results.confirmed(call, held, "the system of record has it"))
    elif outcome.state == "not_applied" and outcome.record is not None:
        # Refused before commit, and the refusal is on record under the key.
        settle(state, batch, results.refusal(call, "business", json.dumps(held)))
    elif outcome.state == "not_applied" and record.attempts < MAX_WRITE_ATTEMPTS:
        batch.writes.insert(0, call_id)  # definitely absent: send again, same key
    else:
        known = (
            f"still absent after {record.attempts} attempts"
            if outcome.state == "not_applied"
            else f"lookup inconclusive: {clipped(str(held or 'no answer'), MAX_KNOWN_CHARS)}"
        )
        batch.reconciling[call_id] = Reconciliation(
            call_id=call_id,
            tool=spec.name,
            idempotency_key=record.idempotency_key,
            known=known,
            since=now,
        )
        state.phase = "awaiting_reconciliation"
    close_if_answered(state)


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
        record_failure(state, reason, "verification")
        return
    state.output_corrections += 1
    _tell_model(
        state,
        StateUpdate(
            kind="verification",
            text=f"Not done yet: the completion check {check} says: {reason}. Finish the "
            "task (or say why you cannot), then answer again.",
        ),
    )
    state.last_output = None


def record_failure(state: LoopState, reason: str, cause: StopCause) -> None:
    state.failure = reason
    state.failure_cause = cause


def record_model_failure(state: LoopState, reason: str, requests: int) -> None:
    """The model call failed for good after `requests` requests to the provider."""
    state.usage.model_requests += requests
    record_failure(state, reason, "model_error")


def record_run_started(state: LoopState, run_id: str) -> None:
    """The run goes on in Temporal run `run_id` (started, or continued as new): the first id
    and the latest stay in `run_chain`, and what is left out between is counted."""
    state.run_chain.append(run_id)
    over = len(state.run_chain) - MAX_RUN_CHAIN_IDS
    if over > 0 and state.has(Feature.BOUNDED_RUN_CHAIN):
        del state.run_chain[1 : 1 + over]
        state.run_chain_left_out += over


def record_step(state: LoopState) -> None:
    """One more step of the loop carried out (`Usage.steps`)."""
    state.usage.steps += 1


def continue_transcript(state: LoopState, previous: PreviousRun) -> None:
    """This run goes on from `previous`'s transcript: its unsent results first, then a note
    saying where it stopped, then this run's task. What `previous` refused and left unknown
    stays so here, and the artifacts its transcript refers to may be read."""
    state.head = previous.head
    state.rejected_actions = list(
        dict.fromkeys([*previous.rejected_actions, *state.rejected_actions])
    )
    state.inherited_unresolved = {w.action_digest: w for w in previous.unresolved_writes}
    state.artifacts = list(dict.fromkeys([*previous.artifacts, *state.artifacts]))
    if state.has(Feature.CONTINUE_CHAIN_USAGE):
        state.inherited_usage = previous.usage
    note = StateUpdate(
        kind=CONTINUED,
        text=f"This run continues run {previous.workflow_id}, which stopped: "
        f"{previous.status} ({previous.stop_reason}).",
    )
    state.outbox = [*previous.unsent, note, *state.outbox]


def record_finish(state: LoopState, step: Finish) -> AgentRunResult:
    """The run stops: its result, with the stop report."""
    state.phase = "finished"
    state.stop_reason = step.stop_reason
    state.stop_cause = step.cause
    check = state.run_input.completion_check
    verified = (
        step.status == "completed" and check is not None and state.verified_turn == state.turn
    )
    result = AgentRunResult(
        status=step.status,
        stop_reason=step.stop_reason,
        stop_cause=step.cause,
        verified=verified,
        verified_by=check if verified else None,
        verification=state.verification if verified else "",
        output=step.output,
        output_ref=step.output_ref or None,
        usage=state.usage,
        calls=list(state.calls.values()),
        side_effects=side_effects(state),
        pending=pending_at_stop(state),
        transcript_head=state.head,
        unsent=_unsent(state, step.stop_reason),
        paused_seconds=state.paused_seconds,
        rejected_actions=state.rejected_actions,
        unresolved_writes=unresolved_writes(state),
        artifacts=state.artifacts,
        chain_usage=state.chain_usage(),
        task_state=state.task_state,
    )
    result.report = stop_report(result, state.workflow_id)
    return result


def _unsent(state: LoopState, stop_reason: str) -> list[Event]:
    """`unsent_events`, the stored texts and contents by reference (`texts-by-reference`): a
    run continuing this one sends them from the store."""
    unsent = unsent_events(state, stop_reason)
    if not state.has(Feature.TEXTS_BY_REFERENCE):
        return unsent
    return [by_reference(event) for event in unsent]
