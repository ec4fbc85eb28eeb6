"""What the tool activities write to the audit log of each call: its ids, digest and result
code, never a tool's output or arguments (the system of record's copy may hold personal
data)."""

from __future__ import annotations

from typing import Any

from agentloop.activity_io import PreconditionResult, RunToolInput
from agentloop.digests import args_digest
from agentloop.events import ToolResult
from agentloop.runtime.audit import audit
from agentloop.tool_spec import Outcome, ToolSpec


def executed(
    request: RunToolInput, spec: ToolSpec, result: ToolResult, output_chars: int | None = None
) -> ToolResult:
    """Audit one execution by its ids, digest and result code; never the output itself."""
    audit(
        "tool.executed",
        **_tool_fields(request, spec),
        # A tool that asked a person did not act: its result is only what the model is told
        # if no one is asked.
        result_status="asked" if result.input_request else result.status,
        error_class=result.error_class,
        side_effect=result.side_effect,
        result_chars=len(result.content) if output_chars is None else output_chars,
        artifact_ref=result.artifact_ref,
    )
    return result


def attempt_failed(request: RunToolInput, spec: ToolSpec, error_class: str) -> None:
    """An attempt that raised (Temporal decides whether another one comes)."""
    audit(
        "tool.executed",
        **_tool_fields(request, spec),
        result_status="attempt_failed",
        error_class=error_class,
        side_effect=spec.effect == "write",
        result_chars=0,
        artifact_ref=None,
    )


def _tool_fields(request: RunToolInput, spec: ToolSpec) -> dict[str, Any]:
    return {
        "tool": request.tool,
        "tool_version": spec.version,
        "call_id": request.call_id,
        "args_digest": args_digest(request.tool, request.arguments),
        "effect": spec.effect,
        "idempotency_key": request.idempotency_key or None,
    }


def precondition_checked(request: RunToolInput, result: PreconditionResult) -> PreconditionResult:
    audit_precondition(request, ok=result.problem is None, problem=result.problem)
    return result


def audit_precondition(
    request: RunToolInput,
    ok: bool | None,
    problem: str | None = None,
    error_class: str | None = None,
) -> None:
    """`ok=None`: the check could not be made this attempt (raised, retried by Temporal)."""
    fields: dict[str, Any] = {
        "tool": request.tool,
        "call_id": request.call_id,
        "ok": ok,
        "problem": problem,
    }
    if error_class is not None:
        fields["error_class"] = error_class
    audit("tool.precondition", **fields)


def outcome_looked_up(request: RunToolInput, outcome: Outcome) -> Outcome:
    audit_lookup(request, outcome=outcome.state)
    return outcome


def audit_lookup(
    request: RunToolInput, outcome: str | None, error_class: str | None = None
) -> None:
    """The state only: the system of record's copy of the write may hold personal data."""
    fields: dict[str, Any] = {
        "tool": request.tool,
        "call_id": request.call_id,
        "idempotency_key": request.idempotency_key or None,
        "outcome": outcome,
    }
    if error_class is not None:
        fields["error_class"] = error_class
    audit("tool.outcome_lookup", **fields)


def state_refused(request: RunToolInput, problem: str) -> None:
    audit(
        "tool.state_refused",
        workflow_id=request.workflow_id,
        call_id=request.call_id,
        tool=request.tool,
        problem=problem,
    )


def redacted(request: RunToolInput, counts: dict[str, int], *, kept: bool) -> None:
    """Values a tool's output carried that neither the model nor the transcript will see:
    how many of each kind, and whether the original is kept for the tool's approvers."""
    audit(
        "tool.redacted",
        workflow_id=request.workflow_id,
        call_id=request.call_id,
        tool=request.tool,
        counts=counts,
        original_kept=kept,
    )
