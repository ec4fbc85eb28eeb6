"""A tool-side activity (precondition, execution, outcome lookup): how it is started, what
it is given, and what its outcome means. Workflow code (deterministic), activities by name."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from agentloop.activity_io import RunToolInput
from agentloop.events import ToolCall, ToolResult
from agentloop.tool_spec import ToolSpec
from agentloop.workflows.failures import describe_failure, tool_failure_class
from agentloop.workflows.loop import ToolFailure, ToolOutcome

TOOL_HEARTBEAT = timedelta(seconds=5)
"""A worker that dies mid-tool is noticed this fast (the activity heartbeats every second)."""


def start_tool(
    call: ToolCall, spec: ToolSpec, idempotency_key: str, local: bool
) -> workflow.ActivityHandle[ToolResult]:
    summary = f"{call.name} · {call.call_id}"
    if local:
        return workflow.start_local_activity(
            "run_tool",
            tool_input(call, idempotency_key),
            result_type=ToolResult,
            start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
            retry_policy=RetryPolicy(maximum_attempts=spec.max_attempts),
            summary=summary,
        )
    is_write = spec.effect == "write"
    return workflow.start_activity(
        "run_tool",
        tool_input(call, idempotency_key),
        result_type=ToolResult,
        start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
        heartbeat_timeout=TOOL_HEARTBEAT,
        # A write is never retried blindly: its outcome must be looked up first.
        retry_policy=RetryPolicy(maximum_attempts=1 if is_write else spec.max_attempts),
        summary=summary,
    )


async def tool_outcome(call: ToolCall, handle: workflow.ActivityHandle[ToolResult]) -> ToolOutcome:
    try:
        return await handle
    except ActivityError as exc:
        return ToolFailure(call.call_id, describe_failure(exc), tool_failure_class(exc))


def tool_input(call: ToolCall, idempotency_key: str = "") -> RunToolInput:
    """What every tool-side activity (precondition, execution, outcome lookup) is given."""
    return RunToolInput(
        workflow_id=workflow.info().workflow_id,
        call_id=call.call_id,
        tool=call.name,
        arguments=call.arguments,
        idempotency_key=idempotency_key,
    )
