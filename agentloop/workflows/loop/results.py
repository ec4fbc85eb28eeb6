"""The tool results the runner writes itself: refusals, failures and confirmations.

Every call id gets exactly one result. When nothing ran (or what ran cannot answer), the
result is made here, with the error class that tells the model what recovery applies.
"""

from __future__ import annotations

import json
from typing import Any

from agentloop.events import ErrorClass, ToolCall, ToolResult

REFUSAL_CLASSES: dict[str, ErrorClass] = {
    "unknown_tool": "unknown_tool",
    "invalid_arguments": "invalid_arguments",
    "rejected_action": "permission",
    "precondition_failed": "business",
    "permission": "permission",
}
"""Why the runner refused a call -> the error class the model is told (default `business`)."""

REFUSAL_DECISIONS = frozenset(
    {"unknown_tool", "invalid_arguments", "precondition_failed", "rejected_action"}
)
"""The ledger decisions of calls the runner refused before running them (a denied batch is
`permission`, and stops the run instead)."""


def error_content(error_class: str, message: str) -> str:
    return json.dumps({"error": {"class": error_class, "message": message}})


def refusal(call: ToolCall, reason: str, message: str) -> ToolResult:
    """A call that does not run: `reason` is what the ledger records as its decision."""
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="rejected",
        content=error_content(reason, message),
        error_class=REFUSAL_CLASSES.get(reason, "business"),
    )


def gave_up(call: ToolCall, reason: str) -> ToolResult:
    """The model's `give_up`: taken as said (the run stops `blocked`)."""
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        content=json.dumps({"stopped": "blocked", "reason": reason}, ensure_ascii=False),
    )


def denial(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="denied",
        error_class="permission",
        content=error_content("permission", message),
    )


REFUSING_CLASSES = frozenset({"invalid_arguments", "business", "permission"})
"""Failures that say the call was refused: nothing happened, even for a write."""


def failure(call: ToolCall, message: str, error_class: ErrorClass, *, write: bool) -> ToolResult:
    """The result of a call whose activity failed for good: `transient` (timeouts, an outage
    outlasting the retries) may be worth another try; `internal` (the tool itself broke) is
    not. A write's outcome is unknown either way, unless the failure was a refusal (an
    activity tool's `BusinessRefusal`, say: agentloop's own tools return theirs as results)."""
    unknown = write and error_class not in REFUSING_CLASSES
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="unknown" if unknown else "failed",
        content=error_content(error_class, message),
        error_class=error_class,
        retryable=not write and error_class == "transient",
        side_effect=unknown,
    )


def confirmed(call: ToolCall, record: Any, how: str) -> ToolResult:
    """A write whose outcome was unknown, confirmed after the fact."""
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="confirmed_after_query",
        content=json.dumps({"confirmed": how, "record": record}),
        side_effect=True,
    )


def not_applied(call: ToolCall, said: str) -> ToolResult:
    """An operator says a write whose outcome was unknown did not happen."""
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="failed",
        error_class="business",
        content=error_content("not_applied", said),
    )


def not_run(call: ToolCall, unknown: bool, stop_reason: str) -> ToolResult:
    """A call the run stopped before finishing, told to the run that continues it."""
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="unknown" if unknown else "rejected",
        content=error_content(
            "outcome_unknown" if unknown else "not_run",
            f"the run stopped before this call finished ({stop_reason})",
        ),
    )
