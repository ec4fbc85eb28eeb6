"""The tool steps: business preconditions, and the calls themselves (reads in parallel, a
write alone), each outcome recorded under its call id.

Workflow code (deterministic), activities referred to by name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

import agentloop.workflows.loop as loop
from agentloop.activity_io import APPROVAL_RULE_FAILED, CHECK_PRECONDITION, PreconditionResult
from agentloop.events import ToolCall
from agentloop.tool_spec import ToolSpec
from agentloop.workflows import visibility
from agentloop.workflows.children import run_with_children
from agentloop.workflows.deadline import RunDeadline
from agentloop.workflows.failures import describe_failure
from agentloop.workflows.loop import (
    CheckPreconditions,
    LoopState,
    RunTools,
    ToolFailure,
    ToolOutcome,
)
from agentloop.workflows.tool_activities import (
    TOOL_HEARTBEAT,
    start_tool,
    tool_input,
    tool_outcome,
)

PRECONDITION_RETRY = RetryPolicy(maximum_attempts=3)
HISTORY_BUDGET_BYTES = 40_000_000
"""What a run's history may hold with the team's answers in flight counted at their largest:
Temporal terminates a run whose history passes 50 MB, with no result."""
MAX_ANSWER_BYTES = 2 * 1024 * 1024
"""The largest answer an activity can give: Temporal refuses a larger payload."""


async def check_preconditions(
    state: LoopState, step: CheckPreconditions, deadline: RunDeadline
) -> None:
    # Checked again after a wait for people: the run no longer waits for them.
    state.phase = "validating"
    visibility.waiting(state)
    principal = state.run_input.principal
    handles = [
        workflow.start_activity(
            CHECK_PRECONDITION,
            tool_input(call, principal, approval_rule=step.rules.get(call.call_id)),
            result_type=PreconditionResult,
            start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
            heartbeat_timeout=TOOL_HEARTBEAT,
            retry_policy=PRECONDITION_RETRY,
            summary=f"precondition {call.name} · {call.call_id}",
        )
        for call, spec in step.calls
    ]
    if not await deadline.wait_for(handles):
        return
    checked: dict[str, PreconditionResult] = {}
    for (call, _), handle in zip(step.calls, handles, strict=True):
        try:
            checked[call.call_id] = await handle
        except ActivityError as exc:
            # A check that cannot be made does not let the call through.
            checked[call.call_id] = PreconditionResult(problem=_not_checked(exc), made=False)
    loop.record_preconditions(state, checked, workflow.now())


def _not_checked(exc: ActivityError) -> str:
    """Why a call's check could not be made: its approval rule broke, or its precondition
    could not be checked."""
    cause = exc.cause
    if isinstance(cause, ApplicationError) and cause.type == APPROVAL_RULE_FAILED:
        return f"approval not assessed: {cause.message}"
    return f"precondition not checked: {describe_failure(exc)}"


async def run_tools(state: LoopState, step: RunTools, deadline: RunDeadline) -> None:
    run = loop.start_tools(state, step, workflow.now())
    visibility.waiting(state)
    if run.children:
        await run_with_children(state, step, run.children)
        return

    def start(call: ToolCall, spec: ToolSpec) -> workflow.ActivityHandle[Any]:
        return start_tool(
            call,
            spec,
            state.run_input.principal,
            run.idempotency_keys[call.call_id],
            run.replies.get(call.call_id),
        )

    # Reads stop for a cancel or the deadline; a write, once started, is never cut short.
    reads = all(spec.effect == "read" for _, spec in step.calls)

    async def wait(handles: list[workflow.ActivityHandle[Any]]) -> bool:
        return not reads or await deadline.wait_for(handles)

    started = await _started_within_history(step, start, wait)
    if started is None or not await wait(list(started.values())):
        return
    outcomes = [
        _not_run(call)
        if call.call_id not in started
        else await _finished(state, tool_outcome(call, spec, started[call.call_id]))
        if spec.effect == "write"
        else await tool_outcome(call, spec, started[call.call_id])
        for call, spec in step.calls
    ]
    loop.record_tool_results(state, outcomes, now=workflow.now())


Start = Callable[[ToolCall, ToolSpec], workflow.ActivityHandle[Any]]
Wait = Callable[[list[workflow.ActivityHandle[Any]]], Awaitable[bool]]


async def _started_within_history(
    step: RunTools, start: Start, wait: Wait
) -> dict[str, workflow.ActivityHandle[Any]] | None:
    """The batch's calls, started so that the answers of the team's activities in flight, at their
    largest, never take the run's history past `HISTORY_BUDGET_BYTES`: in waves, each as large as
    the history has room for. Each answer is in history twice: as the team activity's result, and
    as the input of the `frame_team_answer` that reads it once the batch is in (counted at its
    largest while in flight, at its real size once in). A call left when there is no room is not
    started (`_not_run`). None: a cancel or the deadline came first. The last wave is still
    running."""
    started: dict[str, workflow.ActivityHandle[Any]] = {}
    waiting: list[tuple[ToolCall, ToolSpec]] = []
    for call, spec in step.calls:
        if spec.activity is None:
            started[call.call_id] = start(call, spec)  # agentloop's own: bounded by its worker
        else:
            waiting.append((call, spec))
    to_read = 0  # bytes of the answers in, which their reading will take into history again
    while True:
        left = HISTORY_BUDGET_BYTES - workflow.info().get_current_history_size() - to_read
        room = max(left // (2 * MAX_ANSWER_BYTES), 0)
        wave, waiting = waiting[:room], waiting[room:]
        for call, spec in wave:
            started[call.call_id] = start(call, spec)
        if not wave or not waiting:
            return started
        # A batch of reads (a write is a batch alone): the next wave once this one is in,
        # its answers counted at their real size.
        if not await wait(list(started.values())):
            return None
        to_read += sum(_answer_bytes(started[call.call_id]) for call, _ in wave)


def _answer_bytes(handle: workflow.ActivityHandle[Any]) -> int:
    """How large a team's answer that came in is (a failure has none to read)."""
    if not handle.done() or handle.cancelled() or handle.exception() is not None:
        return 0
    answer = handle.result()
    return len(answer.payload.data) if isinstance(answer, RawValue) else MAX_ANSWER_BYTES


def _not_run(call: ToolCall) -> ToolFailure:
    size = workflow.info().get_current_history_size()
    return ToolFailure(
        call.call_id,
        f"not run: this run's history holds {size / 1e6:.0f} MB, and the answers of the "
        "calls before it left no room for another; call it again (the run then continues in "
        "a fresh history)",
        "transient",
        attempts=0,
        started=False,
    )


async def _finished(state: LoopState, outcome: Coroutine[Any, Any, ToolOutcome]) -> ToolOutcome:
    """A write, once started, is never cut short: Temporal's cancel request does not reach
    it; the run stops once its outcome is in."""
    writing = asyncio.ensure_future(outcome)
    try:
        return await asyncio.shield(writing)
    except asyncio.CancelledError:
        loop.record_cancel_request(state)
        return await writing
