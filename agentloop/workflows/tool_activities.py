"""A tool-side activity (precondition, execution, outcome lookup): how it is started, what
it is given, and what its outcome means. Workflow code (deterministic), activities by name."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError

from agentloop.activity_io import (
    FRAME_TEAM_ANSWER,
    RUN_TOOL,
    ActivityToolInput,
    InputReply,
    RunToolInput,
    ToolOutput,
)
from agentloop.contract import Principal
from agentloop.events import ToolCall, ToolResult
from agentloop.tool_spec import ToolSpec
from agentloop.workflows.failures import (
    attempts_made,
    describe_failure,
    never_started,
    tool_failure_class,
)
from agentloop.workflows.loop import ToolFailure, ToolOutcome

TOOL_HEARTBEAT = timedelta(seconds=5)
"""A worker that dies mid-tool (or mid-check, mid-lookup: agentloop's precondition check and
outcome lookup heartbeat like a tool) is noticed this fast (the activity heartbeats every
second)."""


FRAME_TIMEOUT = timedelta(seconds=10)
READ_ANSWER_RETRY = RetryPolicy(maximum_attempts=3)
"""Reading a team's answer fails only with the store away: not for ever."""
DEFINITIVE_REMOTE_ERRORS = ["InvalidArguments", "BusinessRefusal", "PermissionDenied"]
"""An activity tool's refusals: retrying them cannot help."""


def start_tool(
    call: ToolCall,
    spec: ToolSpec,
    principal: Principal,
    idempotency_key: str,
    reply: InputReply | None = None,
) -> workflow.ActivityHandle[Any]:
    """`reply`: a person's answer to what the call's tool asked when it last ran (agentloop's
    own `run_tool` only: an activity tool never asks). An activity tool's call waits for a
    worker at most its `start_timeout_seconds` (`start_timeout`), and its answer comes as the
    payload it is (`RawValue`), for agentloop's worker to read (`tool_outcome`)."""
    summary = f"{call.name} · {call.call_id}"
    is_write = spec.effect == "write"
    if spec.activity is not None:
        return workflow.start_activity(
            spec.activity,
            activity_tool_input(call, principal, idempotency_key),
            task_queue=spec.task_queue,
            result_type=RawValue,
            schedule_to_start_timeout=start_timeout(spec),
            start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
            heartbeat_timeout=(
                timedelta(seconds=spec.heartbeat_seconds) if spec.heartbeat_seconds else None
            ),
            retry_policy=RetryPolicy(
                maximum_attempts=1 if is_write else spec.max_attempts,
                non_retryable_error_types=DEFINITIVE_REMOTE_ERRORS,
            ),
            summary=summary,
        )
    return workflow.start_activity(
        RUN_TOOL,
        tool_input(call, principal, idempotency_key, reply=reply),
        result_type=ToolResult,
        start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
        heartbeat_timeout=TOOL_HEARTBEAT,
        # A write is never retried blindly: its outcome must be looked up first.
        retry_policy=RetryPolicy(maximum_attempts=1 if is_write else spec.max_attempts),
        summary=summary,
    )


def start_timeout(spec: ToolSpec) -> timedelta:
    """How long an activity tool's call, or its lookup, waits on the team's task queue for a
    worker to take it (Temporal does not retry this timeout: no worker may ever come)."""
    return timedelta(seconds=spec.start_timeout_seconds)


async def tool_outcome(
    call: ToolCall, spec: ToolSpec, handle: workflow.ActivityHandle[Any]
) -> ToolOutcome:
    """What a tool activity came back with; an activity tool's output is then bounded (and
    kept as an artifact when large) by agentloop's own worker, like any tool's."""
    remote = spec.activity is not None
    try:
        value = await handle
        if not remote:
            result: ToolResult = value
            return result
        # Read (whatever it is) and bounded by agentloop's worker: a write then always ends
        # succeeded, even when no one can read what it said it did.
        read: ToolResult = await read_team_answer(
            FRAME_TEAM_ANSWER, call, value, ToolResult, "frame"
        )
        return read
    except ActivityError as exc:
        if never_started(exc):
            return ToolFailure(
                call.call_id,
                f"no worker on task queue {spec.task_queue!r} took the call within "
                f"{spec.start_timeout_seconds:g} s: it never started, nothing was done",
                "transient",
                attempts=0,
                started=False,
            )
        allowed = 1 if spec.effect == "write" else spec.max_attempts
        return ToolFailure(
            call.call_id,
            describe_failure(exc),
            tool_failure_class(exc, remote=remote),
            attempts_made(exc, allowed),
        )


async def read_team_answer(
    activity: str, call: ToolCall, answer: RawValue, result_type: type[Any], what: str
) -> Any:
    """What a team's activity answered (`answer`, undecoded), read by agentloop's worker with
    `activity` (`frame_team_answer`, `read_team_outcome`); `what` the UI says it does."""
    return await workflow.execute_activity(
        activity,
        args=[team_answer_of(call), answer],
        result_type=result_type,
        start_to_close_timeout=FRAME_TIMEOUT,
        retry_policy=READ_ANSWER_RETRY,
        summary=f"{what} {call.name} · {call.call_id}",
    )


def team_answer_of(call: ToolCall) -> ToolOutput:
    """The call a team activity's answer is read for (its `output` not yet set)."""
    return ToolOutput(workflow_id=workflow.info().workflow_id, call_id=call.call_id, tool=call.name)


def tool_input(
    call: ToolCall,
    principal: Principal,
    idempotency_key: str = "",
    approval_rule: str | None = None,
    reply: InputReply | None = None,
) -> RunToolInput:
    """What every tool-side activity of agentloop's (precondition, execution, outcome
    lookup) is given."""
    return RunToolInput(
        workflow_id=workflow.info().workflow_id,
        call_id=call.call_id,
        tool=call.name,
        arguments=call.arguments,
        idempotency_key=idempotency_key,
        principal=principal,
        approval_rule=approval_rule,
        reply=reply,
    )


def activity_tool_input(
    call: ToolCall, principal: Principal, idempotency_key: str
) -> ActivityToolInput:
    """What an activity tool and its lookup activity are given."""
    return ActivityToolInput(
        tool=call.name,
        arguments=call.arguments,
        call_id=call.call_id,
        idempotency_key=idempotency_key,
        principal=principal,
        workflow_id=workflow.info().workflow_id,
    )
