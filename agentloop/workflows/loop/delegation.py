"""Delegation: a `delegate` call hands a sub-task to a child run, with a slice of what this run
has left; when the child ends, its usage is charged here and its answer becomes the call's
result."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import datetime
from typing import Any

from agentloop.contract import BUDGETED, AgentRunInput, AgentRunResult
from agentloop.events import ErrorClass, ToolCall, ToolResult
from agentloop.policies import budgets
from agentloop.tool_spec import DELEGATE, ToolSpec, bounded
from agentloop.workflows.loop.next_step import RunTools
from agentloop.workflows.loop.state import (
    Batch,
    Delegation,
    LoopState,
    add_usage,
    started_per_tool,
)

_CHILD_ERROR_CLASSES: dict[str, ErrorClass] = {
    "denied": "permission",
    "rejected": "permission",
    "failed": "internal",
    "unresolved": "internal",
}


MAX_WORKFLOW_ID_BYTES = 1_000
"""Temporal's longest workflow id (`limit.maxIDLength`): a longer one fails the command."""


def child_run_id(workflow_id: str, call_id: str) -> str:
    """`PARENT/delegate/CALL_ID`; past Temporal's limit (a long parent id), the parent id's
    start and a digest of both, still one id per call."""
    readable = f"{workflow_id}/delegate/{call_id}"
    encoded = readable.encode("utf-8")
    if len(encoded) <= MAX_WORKFLOW_ID_BYTES:
        return readable
    start = workflow_id.encode("utf-8")[: MAX_WORKFLOW_ID_BYTES - 100].decode("utf-8", "ignore")
    return f"{start}/delegate/{hashlib.sha256(encoded).hexdigest()}"


def start_delegations(state: LoopState, step: RunTools, now: datetime) -> dict[str, AgentRunInput]:
    """The child runs this step starts, by call id, each with its slice of the budget.

    Called once the step's calls are reserved: the slices share what is left after them and
    after the batch's calls still to come, with the batch's delegates still to come."""
    calls = [call for call, _ in step.calls if call.name == DELEGATE]
    if not calls:
        return {}
    coming = _coming(state, state.open_batch())
    sharing = len(calls) + sum(1 for call_id in coming if state.calls[call_id].tool == DELEGATE)
    parent = state.run_input
    left = budgets.limits_left(parent.limits, state.usage, state.active_since(), now)
    children: dict[str, AgentRunInput] = {}
    for call in calls:
        tools = list(dict.fromkeys(call.arguments.get("tools", [])))
        limits = budgets.child_limits(
            left,
            children=sharing,
            unstarted_calls=len(coming),
            tools_left=_tools_left(state, tools, coming),
            requested_model_calls=call.arguments.get("max_model_calls"),
            requested_tool_calls=call.arguments.get("max_tool_calls"),
        )
        children[call.call_id] = parent.model_copy(
            update={
                "task": call.arguments["task"],
                "instructions": call.arguments.get("instructions", ""),
                "model": parent.delegate_model or parent.model,
                "tools": tools,
                "limits": limits,
                "output_schema": None,
                "completion_check": None,
                "continue_from": None,
                "delegate_model": None,
            }
        )
        state.delegations[call.call_id] = Delegation(
            child_workflow_id=child_run_id(state.workflow_id, call.call_id), limits=limits
        )
        state.calls[call.call_id].child_run = state.delegations[call.call_id].child_workflow_id
    return children


def _coming(state: LoopState, batch: Batch) -> list[str]:
    """The batch's calls reserved but not started yet, which a child's slice must leave to
    them: every one (the reads the model put after a write too), but not a write sent again
    (already counted)."""
    return [c for c in [*batch.reads, *batch.writes] if state.calls[c].attempts == 0]


def _tools_left(state: LoopState, tools: list[str], coming: list[str]) -> dict[str, int]:
    """How many more calls each capped tool may take, the batch's calls still to start
    aside."""
    used = state.used_per_tool()
    coming_per_tool = Counter(state.calls[c].tool for c in coming)
    left: dict[str, int] = {}
    for tool in tools:
        cap = budgets.tool_cap(state.run_input.limits, tool, state.tools[tool].max_calls_per_run)
        if cap is not None:
            left[tool] = cap - used[tool] - coming_per_tool[tool]
    return left


def child_result(
    state: LoopState, call: ToolCall, result: AgentRunResult | None, not_started: str = ""
) -> ToolResult:
    """Charge a child run's usage to this run and turn its result into the delegate call's
    result. `None`: the child ended without a result (terminated, failed): its whole slice is
    charged, and what it did is unknown; or it never started (`not_started` says why):
    nothing is charged, and it did nothing."""
    delegation = state.delegations[call.call_id]
    if not_started:
        delegation.status = "failed"
        delegation.stop_reason = f"the child run did not start: {not_started}"
    elif result is None:
        delegation.status = "failed"
        delegation.stop_reason = "the child run ended without a result"
        delegation.usage = delegation.whole_slice()
    else:
        delegation.status = result.status
        delegation.stop_reason = result.stop_reason
        delegation.usage = result.usage
        delegation.tools_used = dict(started_per_tool(result.calls))
        delegation.side_effects = result.side_effects
    add_usage(state.usage, delegation.usage)
    report = {
        "child_run": delegation.child_workflow_id,
        "status": delegation.status,
        "stop_reason": delegation.stop_reason,
        "output": _bounded(result.output if result else None, state.tools[DELEGATE]),
        # In the order the model was always told them (the text is hashed into the transcript).
        "side_effects": [
            {
                "tool": e.tool,
                "call_id": e.call_id,
                "status": e.status,
                "confirmed_by": e.confirmed_by,
            }
            for e in delegation.side_effects
        ],
        # What the budget counts, as it always read: the model-facing text is hashed into the
        # transcript, so a count added later must not change it for runs in flight.
        "usage": delegation.usage.model_dump(include=set(BUDGETED)),
    }
    completed = delegation.status == "completed"
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="succeeded" if completed else "failed",
        content=json.dumps(report, ensure_ascii=False),
        error_class=None if completed else _CHILD_ERROR_CLASSES.get(delegation.status, "business"),
        side_effect=bool(delegation.side_effects) or (result is None and not not_started),
    )


def _bounded(output: Any, spec: ToolSpec) -> Any:
    """A child's answer, cut to what this run's model may be sent of a tool result (the rest
    of the report takes the other 1,000 characters)."""
    text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    limit = spec.max_result_chars - 1_000
    return output if output is None or len(text) <= limit else bounded(text, limit)
