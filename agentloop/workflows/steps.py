"""The Temporal calls each step of the loop makes, for `AgentRun` (`agent_run.py`).

Workflow code like the rest of `agentloop/workflows`: deterministic, no I/O, no clock but
`workflow.now()`, activities referred to by name. It lives apart from the workflow class
because Temporal's sandbox, when it is on, imports the workflow's own module afresh for every
run it keeps in its cache (about 60 KiB a run for all of this); this module is passed through
and loaded once.
Nothing here keeps state between calls: each function works on the run state it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any, cast, get_args

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

import agentloop.workflows.loop as loop
from agentloop.activities.messages import (
    MODEL_CALL,
    MODEL_CALL_BY_REF,
    CallModelInput,
    CallModelResult,
    DescribeToolsInput,
    PreconditionResult,
    RunToolInput,
    Verdict,
    VerifyInput,
)
from agentloop.adapters.base import ModelSettings
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    CancelRequest,
    Phase,
    PreviousRun,
    describe_validation_error,
)
from agentloop.events import ErrorClass, ToolCall, ToolResult
from agentloop.policies import budgets
from agentloop.reporting import stop_report
from agentloop.search import AGENT_PHASE, AGENT_STATUS, initial
from agentloop.store.transcript import append
from agentloop.tools.contract import Outcome, ToolSpec
from agentloop.workflows.loop import (
    AwaitApproval,
    AwaitInput,
    AwaitReconciliation,
    CallModel,
    CheckPreconditions,
    Finish,
    LookupOutcome,
    LoopState,
    RunTools,
    Verify,
)

DESCRIBE_TOOLS_TIMEOUT = timedelta(seconds=30)
MODEL_START_TO_CLOSE = timedelta(seconds=180)
MODEL_HEARTBEAT = timedelta(seconds=10)
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=5,
)
PRECONDITION_RETRY = RetryPolicy(maximum_attempts=3)
VERIFY_TIMEOUT = timedelta(seconds=60)
LOOKUP_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
TOOL_HEARTBEAT = timedelta(seconds=5)
"""A worker that dies mid-tool is noticed this fast (the activity heartbeats every second)."""


DEADLINE_TIMER_SUMMARY = "run deadline"
"""What the UI shows on the run's deadline timer (feature `run-deadline-timer`)."""


class RunDeadline:
    """The run's deadline, for steps that wait on activities.

    With the feature `run-deadline-timer` a run has one Temporal timer for it, started at the
    first wait and left running: when it fires, `passed` turns True if the deadline has
    passed, and otherwise (waits for humans moved the deadline, and they do not count) the
    timer starts again for what is left. Runs started before the feature recorded a timer
    per wait, started with it and cancelled when the activities came back (two commands and
    two history events a step); they keep doing that on replay."""

    def __init__(self, state: LoopState) -> None:
        self._state = state
        self._timer: asyncio.Task[None] | None = None
        self.passed = False

    def seconds_left(self) -> float | None:
        """None without a deadline. Not during a wait for humans, whose time is not counted
        until it ends."""
        state = self._state
        return budgets.limits_left(
            state.run_input.limits, state.usage, state.active_since(), workflow.now()
        ).seconds

    def start(self) -> None:
        if self._timer is None:
            self._timer = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        state = self._state
        while True:
            await workflow.wait_condition(lambda: state.paused_since is None)
            seconds = self.seconds_left()
            if seconds is None:
                return
            if seconds <= 0:
                self.passed = True
                return
            await workflow.sleep(max(seconds, 0.001), summary=DEADLINE_TIMER_SUMMARY)


async def call_model(state: LoopState, step: CallModel, deadline: RunDeadline) -> None:
    run_input = state.run_input
    new_events = list(state.outbox)
    loop.record_model_call_started(state, step)
    _waiting(state)
    # The specs go inline until a call has stored them: a run from before that keeps them
    # inline, as its history says (the reference comes back in a recorded result).
    by_ref = state.tools_ref is not None
    handle = workflow.start_activity(
        MODEL_CALL_BY_REF if by_ref else MODEL_CALL,
        CallModelInput(
            run_id=workflow.info().workflow_id,
            turn=step.turn,
            provider=run_input.provider,
            model=run_input.model,
            head=state.head,
            new_events=loop.by_reference(new_events),
            tools=[] if by_ref else list(state.tools.values()),
            tools_ref=state.tools_ref,
            settings=ModelSettings(stream=run_input.stream),
            context_budget_chars=run_input.context_budget_chars,
            context_budget_tokens=run_input.context_budget_tokens,
            chars_per_token=state.chars_per_token,
            facts=loop.facts(state),
        ),
        result_type=CallModelResult,
        start_to_close_timeout=MODEL_START_TO_CLOSE,
        heartbeat_timeout=MODEL_HEARTBEAT,
        retry_policy=MODEL_RETRY,
        summary=f"{run_input.provider} {run_input.model} · turn {step.turn}",
    )
    if not await _until_done_or_stopped(state, [handle], deadline):
        return
    try:
        result = await handle
    except ActivityError as exc:
        loop.record_failure(state, f"model_error: {_describe_failure(exc)}")
        return
    expected, _ = append(state.head, [*new_events, result.output])
    if expected != result.head:
        raise ApplicationError(
            f"transcript diverged: the store's head {result.head} is not {expected}",
            type="TranscriptDiverged",
            non_retryable=True,
        )
    loop.record_model_output(
        state, result.output, result.head, workflow.now(), result.cost_usd, result.request_chars
    )
    state.tools_ref = state.tools_ref or result.tools_ref
    usage = result.output.usage
    audit(
        "budget.settled",
        turn=step.turn,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cost_usd=result.cost_usd,
        model_calls=state.usage.model_calls,
        tool_calls=state.usage.tool_calls,
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


async def check_preconditions(
    state: LoopState, step: CheckPreconditions, deadline: RunDeadline
) -> None:
    _waiting(state)
    handles = [
        workflow.start_activity(
            "check_precondition",
            _tool_input(call),
            result_type=PreconditionResult,
            start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
            retry_policy=PRECONDITION_RETRY,
            summary=f"precondition {call.name} · {call.call_id}",
        )
        for call, spec in step.calls
    ]
    if not await _until_done_or_stopped(state, handles, deadline):
        return
    failures: dict[str, str | None] = {}
    for (call, _), handle in zip(step.calls, handles, strict=True):
        try:
            failures[call.call_id] = (await handle).problem
        except ActivityError as exc:
            # A check that cannot be made does not let the call through.
            failures[call.call_id] = f"precondition not checked: {_describe_failure(exc)}"
    loop.record_preconditions(state, failures)


async def run_tools(state: LoopState, step: RunTools, deadline: RunDeadline) -> None:
    loop.record_calls_started(state, step)
    children = loop.record_delegations_started(state, step, workflow.now())
    local = not children and loop.runs_locally(state, [spec for _, spec in step.calls])
    if not local:
        _waiting(state)
    if children:
        await _run_with_children(state, step, children)
        return
    handles = [
        _start_tool(call, spec, state.calls[call.call_id].idempotency_key, local)
        for call, spec in step.calls
    ]
    # Reads stop for a cancel or the deadline; a write, once started, is never cut short.
    # Local reads are bounded by their own short timeout, not raced against a deadline
    # timer: a timer started beside them and cancelled by their result may or may not reach
    # history, depending on whether Temporal hands the result back in the same workflow task,
    # and a replay that decides otherwise diverges (seen under load: TimerStarted in history,
    # none on replay).
    if all(spec.effect == "read" for _, spec in step.calls) and not (
        await _until_done_or_stopped(state, handles, None if local else deadline)
    ):
        return
    results = [
        await _tool_outcome(state, call, spec, handle)
        for (call, spec), handle in zip(step.calls, handles, strict=True)
    ]
    loop.record_tool_results(state, results)


async def _run_with_children(
    state: LoopState, step: RunTools, children: dict[str, AgentRunInput]
) -> None:
    """Reads and child runs side by side. A child keeps its own slice of the deadline (its
    waits for humans excluded), so no timer here; a cancel reaches the children as their
    own `cancel`, and what they did is recorded before this run stops."""
    tools: dict[str, workflow.ActivityHandle[ToolResult]] = {}
    runs: dict[str, workflow.ChildWorkflowHandle[Any, AgentRunResult]] = {}
    for call, spec in step.calls:
        child_input = children.get(call.call_id)
        if child_input is None:
            tools[call.call_id] = _start_tool(call, spec, "", local=False)
        else:
            runs[call.call_id] = await _start_child(state, call, child_input)
            audit(
                "delegation.started",
                turn=state.turn,
                call_id=call.call_id,
                child_workflow_id=runs[call.call_id].id,
                limits=child_input.limits.model_dump(mode="json"),
            )
    # Details only (no search attribute upsert here: that would be a new command).
    workflow.set_current_details(loop.details(state, workflow.now()))
    handles: list[asyncio.Future[Any]] = [*tools.values(), *runs.values()]
    await workflow.wait_condition(
        lambda: all(h.done() for h in handles) or state.cancel_reason is not None
    )
    stopped = not all(h.done() for h in handles)
    if stopped:
        for handle in tools.values():
            handle.cancel()
        for child in runs.values():
            if not child.done():
                await child.signal(
                    "cancel",
                    CancelRequest(
                        reason=f"the parent run was cancelled: "
                        f"{state.cancel_reason or 'no reason given'}"
                    ),
                )
    results: list[ToolResult] = []
    paused = 0.0
    for call, spec in step.calls:
        if call.call_id in runs:
            report = await _child_outcome(runs[call.call_id])
            paused = max(paused, report.paused_seconds if report else 0.0)
            results.append(loop.record_child_run(state, call, report))
            delegation = state.delegations[call.call_id]
            audit(
                "delegation.settled",
                turn=state.turn,
                call_id=call.call_id,
                child_workflow_id=delegation.child_workflow_id,
                status=delegation.status,
                charged=delegation.usage.model_dump(mode="json"),
                side_effects=[e["call_id"] for e in delegation.side_effects],
            )
        elif not stopped:
            results.append(await _tool_outcome(state, call, spec, tools[call.call_id]))
    # The parent waited as long as its children waited for humans: not its working time.
    loop.record_pause(state, paused)
    loop.record_tool_results(state, results)


async def _start_child(
    state: LoopState, call: ToolCall, child_input: AgentRunInput
) -> workflow.ChildWorkflowHandle[Any, AgentRunResult]:
    indexed = workflow.info().typed_search_attributes.get(AGENT_PHASE) is not None
    return await workflow.start_child_workflow(
        WORKFLOW_NAME,
        child_input,
        id=state.delegations[call.call_id].child_workflow_id,
        result_type=AgentRunResult,
        static_summary=child_input.summary(),
        search_attributes=initial(child_input) if indexed else None,
    )


async def _child_outcome(
    handle: workflow.ChildWorkflowHandle[Any, AgentRunResult],
) -> AgentRunResult | None:
    try:
        return await handle
    except ChildWorkflowError as exc:
        workflow.logger.warning("child run %s ended without a result: %s", handle.id, exc)
        return None


async def await_humans(
    state: LoopState,
    step: AwaitApproval | AwaitInput | AwaitReconciliation,
    phase: Phase,
) -> None:
    """Wait for the decisions (or a cancel) until the step's deadline; the next `decide`
    sees what arrived. The wait does not count against the run's deadline."""
    state.phase = phase
    _show_phase(state)
    waiting = set(step.call_ids)
    since = workflow.now()
    loop.record_pause_started(state, since)
    with contextlib.suppress(TimeoutError):
        await workflow.wait_condition(
            lambda: not waiting & loop.awaiting_humans(state) or state.cancel_reason is not None,
            timeout=max((step.deadline - since).total_seconds(), 0.001),
        )
    loop.record_pause(state, (workflow.now() - since).total_seconds())


async def verify(state: LoopState, step: Verify) -> None:
    state.phase = "verifying"
    _waiting(state)
    try:
        verdict = await workflow.execute_activity(
            "verify_completion",
            VerifyInput(
                check=step.check,
                workflow_id=workflow.info().workflow_id,
                answer=step.answer,
                calls=list(state.calls.values()),
            ),
            result_type=Verdict,
            start_to_close_timeout=VERIFY_TIMEOUT,
            retry_policy=LOOKUP_RETRY,
            summary=f"verify {step.check} · turn {state.turn}",
        )
    except ActivityError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "InvalidInput":
            loop.record_failure(state, f"invalid AgentRunInput: {cause.message}")
            return
        verdict = Verdict(passed=False, reason=f"could not verify: {_describe_failure(exc)}")
    loop.record_verdict(state, verdict.passed, verdict.reason)


async def lookup_outcome(state: LoopState, step: LookupOutcome) -> None:
    _waiting(state)
    try:
        outcome = await workflow.execute_activity(
            "lookup_outcome",
            _tool_input(step.call, step.idempotency_key),
            result_type=Outcome,
            start_to_close_timeout=timedelta(seconds=step.spec.timeout_seconds),
            retry_policy=LOOKUP_RETRY,
            summary=f"lookup {step.call.name} · {step.call.call_id}",
        )
    except ActivityError as exc:
        outcome = Outcome(state="unknown", record=f"lookup failed: {_describe_failure(exc)}")
    loop.record_outcome(state, step.call.call_id, outcome, workflow.now())


def _start_tool(
    call: ToolCall, spec: ToolSpec, idempotency_key: str, local: bool
) -> workflow.ActivityHandle[ToolResult]:
    summary = f"{call.name} · {call.call_id}"
    if local:
        return workflow.start_local_activity(
            "run_tool",
            _tool_input(call, idempotency_key),
            result_type=ToolResult,
            start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
            retry_policy=RetryPolicy(maximum_attempts=spec.max_attempts),
            summary=summary,
        )
    is_write = spec.effect == "write"
    return workflow.start_activity(
        "run_tool",
        _tool_input(call, idempotency_key),
        result_type=ToolResult,
        start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
        heartbeat_timeout=TOOL_HEARTBEAT,
        # A write is never retried blindly: its outcome must be looked up first.
        retry_policy=RetryPolicy(maximum_attempts=1 if is_write else spec.max_attempts),
        summary=summary,
    )


async def _tool_outcome(
    state: LoopState,
    call: ToolCall,
    spec: ToolSpec,
    handle: workflow.ActivityHandle[ToolResult],
) -> ToolResult:
    try:
        return await handle
    except ActivityError as exc:
        # A read that kept failing is reported to the model; a write whose attempt failed
        # may or may not have happened, so it is `unknown` and stops the run.
        return loop.failed_result(state, call, spec, _describe_failure(exc), _failure_class(exc))


async def _until_done_or_stopped(
    state: LoopState,
    handles: list[workflow.ActivityHandle[Any]],
    deadline: RunDeadline | None,
) -> bool:
    """Wait for the activities, unless a cancel or (given `deadline`) the deadline comes
    first: then cancel them and return False (the next `decide` turns that into the stop)."""

    def done_or_cancelled() -> bool:
        return all(h.done() for h in handles) or state.cancel_reason is not None

    if deadline is None:
        await workflow.wait_condition(done_or_cancelled)
    elif "run-deadline-timer" in state.features:
        deadline.start()
        await workflow.wait_condition(lambda: done_or_cancelled() or deadline.passed)
    else:
        seconds = deadline.seconds_left()
        with contextlib.suppress(TimeoutError):
            await workflow.wait_condition(
                done_or_cancelled, timeout=None if seconds is None else max(seconds, 0.001)
            )
    if all(h.done() for h in handles):
        return True
    for handle in handles:
        handle.cancel()
    return False


def show(state: LoopState) -> None:
    """At the top of each step: the UI's current details and, for runs from before the
    feature `phase-when-waiting`, the run's phase attribute (then the phase the previous
    step left)."""
    workflow.set_current_details(loop.details(state, workflow.now()))
    if "phase-when-waiting" not in state.features:
        _index_phase(state)


def _waiting(state: LoopState) -> None:
    """The run is about to wait on Temporal in `state.phase`: that is the phase a list query
    finds it in meanwhile (feature `phase-when-waiting`). A batch of local reads is no such
    wait: it starts and ends inside the workflow task, and an upsert there, and the one back,
    would be two events a turn no list query could see."""
    if "phase-when-waiting" in state.features:
        _show_phase(state)


def _show_phase(state: LoopState) -> None:
    workflow.set_current_details(loop.details(state, workflow.now()))
    _index_phase(state)


def _index_phase(state: LoopState) -> None:
    indexed = workflow.info().typed_search_attributes.get(AGENT_PHASE)
    # Only runs started with the attributes are indexed: the namespace has them then.
    if indexed is not None and indexed != state.phase:
        workflow.upsert_search_attributes([AGENT_PHASE.value_set(state.phase)])


def finish(state: LoopState, step: Finish) -> AgentRunResult:
    state.phase = "finished"
    state.stop_reason = step.stop_reason
    if workflow.info().typed_search_attributes.get(AGENT_STATUS) is not None:
        workflow.upsert_search_attributes(
            [AGENT_PHASE.value_set("finished"), AGENT_STATUS.value_set(step.status)]
        )
    result = AgentRunResult(
        status=step.status,
        stop_reason=step.stop_reason,
        output=step.output,
        usage=state.usage,
        calls=list(state.calls.values()),
        side_effects=loop.side_effects(state),
        pending=loop.pending_at_stop(state),
        transcript_head=state.head,
        unsent=loop.unsent_events(state, step.stop_reason),
        paused_seconds=state.paused_seconds,
    )
    result.report = stop_report(result, workflow.info().workflow_id)
    audit(
        "run.stopped",
        status=step.status,
        stop_reason=step.stop_reason,
        turn=state.turn,
        model_calls=state.usage.model_calls,
        tool_calls=state.usage.tool_calls,
        cost_usd=state.usage.cost_usd,
        side_effects=[e["call_id"] for e in result.side_effects],
        pending=[p["call_id"] for p in result.pending],
    )
    return result


def _tool_input(call: ToolCall, idempotency_key: str = "") -> RunToolInput:
    """What every tool-side activity (precondition, execution, outcome lookup) is given."""
    return RunToolInput(
        workflow_id=workflow.info().workflow_id,
        call_id=call.call_id,
        tool=call.name,
        arguments=call.arguments,
        idempotency_key=idempotency_key,
    )


def audit(event: str, **fields: Any) -> None:
    """One audit record through `workflow.logger` (silent during replay; ids, digests and
    statuses only, never model text or tool output)."""
    workflow.logger.info(event, extra={"audit": {"event": event, **fields}})


def time_to_continue_as_new(state: LoopState) -> bool:
    """When Temporal suggests it, or past the run's own event count: history stays small."""
    info = workflow.info()
    every = state.run_input.continue_as_new_after_events
    return info.is_continue_as_new_suggested() or (
        every is not None and info.get_current_history_length() >= every
    )


def parse_input(raw_input: Any) -> AgentRunInput:
    """Bad input fails the run at once, naming the field, instead of failing a workflow task
    (which Temporal would retry for ever)."""
    try:
        run_input = AgentRunInput.model_validate(raw_input)
    except ValidationError as exc:
        raise _invalid_input(describe_validation_error(exc)) from None
    return run_input


def _invalid_input(problem: str) -> ApplicationError:
    """Bad input ends the run at once, as its own failure, never a retried workflow task."""
    return ApplicationError(
        f"invalid AgentRunInput: {problem}", type="InvalidInput", non_retryable=True
    )


async def continue_from(state: LoopState, workflow_id: str) -> None:
    """Start from a finished run's transcript: what its model had not seen goes first."""
    try:
        previous: PreviousRun = await workflow.execute_activity(
            "load_previous_run",
            workflow_id,
            result_type=PreviousRun,
            start_to_close_timeout=DESCRIBE_TOOLS_TIMEOUT,
            summary=f"continue from {workflow_id}",
        )
    except ActivityError as exc:
        raise _invalid_input(f"continue_from: {_describe_failure(exc)}") from None
    loop.continue_transcript(state, previous)


async def describe_tools(names: list[str], *, local: bool) -> list[ToolSpec]:
    """The specs of `names` from the worker's registry. `local`: as a local activity, inside
    the workflow task (an in-memory lookup needs no activity task round trip); runs started
    before that replay with an ordinary one."""
    execute = workflow.execute_local_activity if local else workflow.execute_activity
    try:
        specs: list[ToolSpec] = await execute(
            "describe_tools",
            DescribeToolsInput(names=names),
            result_type=list[ToolSpec],
            start_to_close_timeout=DESCRIBE_TOOLS_TIMEOUT,
            summary=f"tools: {', '.join(names) or 'none'}",
        )
    except ActivityError as exc:
        # An unknown tool name is bad input: say so as the run's own failure.
        raise _invalid_input(_describe_failure(exc)) from None
    return specs


def _failure_class(exc: ActivityError) -> ErrorClass:
    """A tool's own `ToolError` keeps its class (`Tool:<class>`); any other exception the
    handler raised is a bug in the tool (`internal`); a timeout or a lost worker is
    `transient`."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError):
        return "transient"
    named = (cause.type or "").removeprefix("Tool:")
    if cause.type and cause.type.startswith("Tool:") and named in get_args(ErrorClass):
        return cast(ErrorClass, named)
    return "internal"


def _describe_failure(exc: ActivityError) -> str:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or exc)
