"""The Temporal calls of the steps that are not tool calls: the model call, verification,
an outcome lookup, the waits for humans, and the finish.

Workflow code like the rest of `agentloop/workflows`: deterministic, no I/O, no clock but
`workflow.now()`, activities referred to by name. It lives apart from the workflow class
because Temporal's sandbox, when it is on, imports the workflow's own module afresh for every
run it keeps in its cache; this module is passed through and loaded once. Nothing here keeps
state between calls: each function works on the run state it is given, and each step's data
goes to the pure loop once and comes back once.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

import agentloop.workflows.loop as loop
from agentloop.activity_io import (
    COUNT_MODEL_INPUT,
    LOOKUP_OUTCOME,
    MODEL_CALL,
    MODEL_CALL_BY_REF,
    OVER_BUDGET,
    READ_TEAM_OUTCOME,
    STORE_TEXTS,
    VERIFY_COMPLETION,
    CallModelInput,
    CallModelResult,
    StoreTextsInput,
    Verdict,
    VerifyInput,
)
from agentloop.contract import AgentRunResult, Phase
from agentloop.tool_spec import Outcome
from agentloop.workflows import notices, visibility
from agentloop.workflows.deadline import RunDeadline
from agentloop.workflows.failures import (
    attempts_made,
    describe_failure,
    model_failure_class,
    run_failed,
)
from agentloop.workflows.inbound import Inflow
from agentloop.workflows.loop import (
    AwaitHumans,
    CallModel,
    Finish,
    LookupOutcome,
    LoopState,
    ModelTurn,
    Verify,
)
from agentloop.workflows.startup import (
    flood_waits_for_min_interval,
    time_to_continue_as_new,
    until_past_min_interval,
)
from agentloop.workflows.tool_activities import (
    TOOL_HEARTBEAT,
    activity_tool_input,
    read_team_answer,
    start_timeout,
    tool_input,
)
from agentloop.workflows.visibility import audit

MODEL_START_TO_CLOSE = timedelta(seconds=180)
MODEL_HEARTBEAT = timedelta(seconds=10)
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
COUNT_TIMEOUT = timedelta(seconds=30)
COUNT_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
"""A count that cannot be had leaves the bound standing: the call is refused, as before."""
STORE_TEXTS_TIMEOUT = timedelta(seconds=30)
VERIFY_TIMEOUT = timedelta(seconds=60)
LOOKUP_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)


async def call_model(state: LoopState, step: CallModel, deadline: RunDeadline) -> None:
    if not await store_long_texts(state):
        return
    turn = loop.start_model_call(state, step)
    visibility.waiting(state)
    answer = await _answer(state, step, turn.request, deadline)
    # A model unavailable after its retries hands the same call to the run's next model
    # (`policies.fallback`), once per fallback at most.
    while isinstance(answer, ActivityError) and not _over_budget(answer):
        moved = _to_next_model(state, turn, answer)
        if moved is None:
            return
        turn = moved
        answer = await _answer(state, step, turn.request, deadline)
    if answer is None:
        return
    if isinstance(answer, ActivityError):  # over the budget: `_over_budget`
        cause = answer.cause
        loop.record_over_budget(state, cause.message if isinstance(cause, ApplicationError) else "")
        return
    result = answer
    diverged = turn.transcript_problem(result)
    if diverged is not None:
        raise ApplicationError(
            f"transcript diverged: {diverged}",
            type="TranscriptDiverged",
            non_retryable=True,
        )
    loop.record_model_output(state, result, workflow.now(), sent=len(turn.sent))
    _audit_model_call(state, step, result)


def _to_next_model(state: LoopState, turn: ModelTurn, failed: ActivityError) -> ModelTurn | None:
    """The failed call addressed to the run's next model; None: the run stops on the failure
    (either is recorded)."""
    failure = loop.ModelFailure(
        model_failure_class(failed),
        describe_failure(failed),
        attempts_made(failed, MODEL_RETRY.maximum_attempts),
    )
    request = loop.record_model_failure(state, turn.request, failure, workflow.now())
    if request is None:
        return None
    switch = state.model_switches[-1]
    audit("model.fallback", **switch.model_dump(mode="json", exclude={"reason"}))
    return ModelTurn(request, turn.sent)


async def _answer(
    state: LoopState, step: CallModel, request: CallModelInput, deadline: RunDeadline
) -> CallModelResult | ActivityError | None:
    """`_model_call`; a call the bound on its input (a token a byte) refused as over the
    budget is asked again with the provider's own count of its input, which may fit (the
    activity then reserves that)."""
    answer = await _model_call(state, step, request, deadline)
    if not _over_budget(answer):
        return answer
    counted = await _input_counted(state, step, request, deadline)
    if counted is None:
        return None
    if counted.budget.input_tokens is None:
        return answer
    return await _model_call(state, step, counted, deadline)


async def _model_call(
    state: LoopState, step: CallModel, request: CallModelInput, deadline: RunDeadline
) -> CallModelResult | ActivityError | None:
    """The model call's result, or how it failed; None when a cancel or the deadline came
    first."""
    # The specs go inline until a call has stored them (the reference comes back in its
    # result).
    handle = workflow.start_activity(
        MODEL_CALL_BY_REF if request.tools_ref is not None else MODEL_CALL,
        request,
        result_type=CallModelResult,
        start_to_close_timeout=MODEL_START_TO_CLOSE,
        heartbeat_timeout=MODEL_HEARTBEAT,
        retry_policy=MODEL_RETRY,
        summary=f"{request.provider} {request.model} · turn {step.turn}",
    )
    if not await deadline.wait_for([handle]):
        return None
    try:
        result: CallModelResult = await handle
    except ActivityError as exc:
        return exc
    return result


def _over_budget(answer: CallModelResult | ActivityError | None) -> bool:
    return (
        isinstance(answer, ActivityError)
        and isinstance(answer.cause, ApplicationError)
        and answer.cause.type == OVER_BUDGET
    )


async def _input_counted(
    state: LoopState, step: CallModel, request: CallModelInput, deadline: RunDeadline
) -> CallModelInput | None:
    """`request` with its input tokens as the provider counted them; unchanged when the count
    could not be had (the bound stands, the call is not made); None when a cancel or the
    deadline came first."""
    handle = workflow.start_activity(
        COUNT_MODEL_INPUT,
        request,
        result_type=int,
        start_to_close_timeout=COUNT_TIMEOUT,
        heartbeat_timeout=MODEL_HEARTBEAT,
        retry_policy=COUNT_RETRY,
        summary=f"count {request.provider} {request.model} · turn {step.turn}",
    )
    if not await deadline.wait_for([handle]):
        return None
    try:
        tokens = await handle
    except ActivityError:
        return request
    budget = request.budget.model_copy(update={"input_tokens": tokens})
    return request.model_copy(update={"budget": budget})


async def store_long_texts(state: LoopState) -> bool:
    """Put the long texts the model has not seen in the store (`loop.texts`), until none is
    left unstored (a message may arrive meanwhile); False when the store could not take them,
    which stops the run (no model call could read them either)."""
    while pending := loop.texts_to_store(state):
        try:
            refs: list[str] = await workflow.execute_activity(
                STORE_TEXTS,
                StoreTextsInput(texts=list(pending.values())),
                result_type=list[str],
                start_to_close_timeout=STORE_TEXTS_TIMEOUT,
                retry_policy=MODEL_RETRY,
                summary=f"store {len(pending)} long texts",
            )
        except ActivityError as exc:
            loop.record_failure(state, f"store_error: {describe_failure(exc)}", "store_error")
            return False
        loop.record_texts_stored(state, dict(zip(pending, refs, strict=True)))
    return True


def _audit_model_call(state: LoopState, step: CallModel, result: CallModelResult) -> None:
    usage = result.output.usage
    audit(
        "budget.settled",
        turn=step.turn,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=result.cost_usd,
        model_calls=state.usage.model_calls,
        tool_calls=state.usage.tool_calls,
        model_requests=state.usage.model_requests,
        tool_attempts=state.usage.tool_attempts,
    )
    for call in result.output.tool_calls:
        record = state.calls.get(call.call_id)
        if record is not None:
            audit(
                "policy.decision",
                turn=step.turn,
                call_id=call.call_id,
                tool=call.name,
                tool_version=record.tool_version,
                args_digest=call.args_digest,
                decision=record.decision,
                status=record.status,
                needs_approval=bool(state.batch and call.call_id in state.batch.approvals),
            )


async def await_humans(state: LoopState, step: AwaitHumans, phase: Phase, inflow: Inflow) -> None:
    """Wait for the decisions (or a cancel, or a decision for the worker to check) until the step's
    deadline; the next `decide` sees what arrived. The wait does not count against the run's
    deadline. It ends early when it is time to continue as new: signals arriving meanwhile grow the
    history, refused ones too (`inflow`), and the next run waits on where this one stopped."""
    state.phase = phase
    visibility.show_phase(state, until=step.deadline)
    visibility.show_waiting(state, step.deadline)
    if state.notify:
        notices.notify_waiting(state, step, phase)
    waiting = set(step.call_ids)
    since = workflow.now()
    loop.record_pause_started(state, since)

    def over() -> bool:
        return (
            not waiting & loop.awaiting_humans(state)
            or state.cancel_reason is not None
            or bool(loop.decisions_to_check(state))
            or time_to_continue_as_new(state, inflow)
        )

    # A change the wait goes on through (one question of several answered) is written to the
    # memo as it happens.
    shown = loop.awaiting_humans(state)

    def over_or_changed() -> bool:
        return over() or loop.awaiting_humans(state) != shown

    def woken(young: bool) -> bool:
        # `young`: the wait already ends when the run is old enough to continue as new.
        return over_or_changed() or (not young and flood_waits_for_min_interval(inflow))

    while True:
        if state.notify:
            notices.send_due(state, step, phase)
        young = flood_waits_for_min_interval(inflow)
        until, summary, for_notice = _wake_up(state, step, young)
        try:
            await workflow.wait_condition(
                functools.partial(woken, young),
                timeout=max((until - workflow.now()).total_seconds(), 0.001),
                timeout_summary=summary,
            )
        except TimeoutError:
            if for_notice:
                continue  # a reminder or an escalation fell due: sent, and the wait goes on
            break
        if over():
            break
        shown = loop.awaiting_humans(state)
        visibility.show_waiting(state, step.deadline)
    loop.record_pause(state, (workflow.now() - since).total_seconds())


def _wake_up(state: LoopState, step: AwaitHumans, young: bool) -> tuple[datetime, str, bool]:
    """When a wait nothing answers wakes up, the summary of its timer, and whether it wakes
    for a reminder or an escalation (and goes on) rather than to end."""
    until = step.deadline
    if young:
        # A flood met while the run was too young to continue as new: the wait ends once it
        # is old enough (its timeout), and the run continues as new then.
        until = min(until, workflow.now() + until_past_min_interval())
    reminder = notices.next_due(state, step) if state.notify else None
    if reminder is not None and reminder[0] < until:
        return reminder[0], reminder[1], True
    return until, loop.wait_summary(state, step.deadline), False


async def verify(state: LoopState, step: Verify) -> None:
    state.phase = "verifying"
    visibility.waiting(state)
    try:
        verdict = await workflow.execute_activity(
            VERIFY_COMPLETION,
            VerifyInput(
                check=step.check,
                workflow_id=workflow.info().workflow_id,
                answer=step.answer,
                answer_ref=step.answer_ref,
                calls=list(state.calls.values()),
                principal=state.run_input.principal,
                task_state=state.task_state,
            ),
            result_type=Verdict,
            start_to_close_timeout=VERIFY_TIMEOUT,
            retry_policy=LOOKUP_RETRY,
            summary=f"verify {step.check} · turn {state.turn}",
        )
    except ActivityError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "InvalidInput":
            loop.record_failure(state, f"invalid AgentRunInput: {cause.message}", "invalid_input")
            return
        verdict = Verdict(passed=False, reason=f"could not verify: {describe_failure(exc)}")
    loop.record_verdict(state, verdict.passed, verdict.reason)


async def lookup_outcome(state: LoopState, step: LookupOutcome) -> None:
    visibility.waiting(state)
    outcome = await _looked_up(state, step)
    loop.record_outcome(state, step.call.call_id, outcome, workflow.now())


async def _looked_up(state: LoopState, step: LookupOutcome) -> Outcome:
    """What the system of record says, through the tool's lookup: agentloop's
    `lookup_outcome` activity, or an activity tool's own lookup activity on its queue."""
    call, spec, principal = step.call, step.spec, state.run_input.principal
    options: dict[str, Any] = {
        "start_to_close_timeout": timedelta(seconds=spec.timeout_seconds),
        "retry_policy": LOOKUP_RETRY,
        "summary": f"lookup {call.name} · {call.call_id}",
    }
    try:
        if spec.activity is None:
            looked_up: Outcome = await workflow.execute_activity(
                LOOKUP_OUTCOME,
                tool_input(call, principal, step.idempotency_key),
                result_type=Outcome,
                heartbeat_timeout=TOOL_HEARTBEAT,
                **options,
            )
            return looked_up
        if spec.lookup_activity is None:
            return Outcome(state="unknown", record=f"{call.name} has no outcome lookup")
        answer = await workflow.execute_activity(
            spec.lookup_activity,
            activity_tool_input(call, principal, step.idempotency_key),
            task_queue=spec.task_queue,
            schedule_to_start_timeout=start_timeout(spec),
            # Undecoded: agentloop's worker reads it, whatever it is.
            result_type=RawValue,
            **options,
        )
    except ActivityError as exc:
        return Outcome(state="unknown", record=f"lookup failed: {describe_failure(exc)}")
    try:
        read: Outcome = await read_team_answer(
            READ_TEAM_OUTCOME, call, answer, Outcome, "read lookup"
        )
    except ActivityError as exc:
        return Outcome(state="unknown", record=f"lookup answer not read: {describe_failure(exc)}")
    return read


def finish(state: LoopState, step: Finish) -> AgentRunResult:
    """The run's result; a run that ends `failed` raises it instead, inside the failure its
    workflow fails with (`run_failed`), unless its worker keeps such runs completed."""
    result = loop.record_finish(state, step)
    visibility.show_finished(state, step.status)
    audit(
        "run.stopped",
        status=step.status,
        stop_reason=step.stop_reason,
        turn=state.turn,
        model_calls=state.usage.model_calls,
        tool_calls=state.usage.tool_calls,
        cost_usd=state.usage.cost_usd,
        side_effects=[e.call_id for e in result.side_effects],
        pending=[p.call_id for p in result.pending],
    )
    if result.status == "failed" and not state.failed_runs_complete:
        raise run_failed(result, state.run_input.task)
    return result
