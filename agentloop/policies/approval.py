"""Approvals: when a human must decide, and whether a decision counts.

An approval is bound to one pending call id and to the digest of the exact arguments the
approver was shown; a decision for anything else changes nothing (and is recorded as refused).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentloop.contract import ApprovalDecision, PendingApproval, Principal
from agentloop.tool_spec import ToolSpec

ApprovalRule = Callable[[Mapping[str, Any], Principal], bool]


def _for_someone_else(arguments: Mapping[str, Any], principal: Principal) -> bool:
    """Acting on one's own behalf needs no approval; on someone else's it does."""
    return arguments.get("participant_id") != principal.subject


APPROVAL_RULES: dict[str, ApprovalRule] = {
    "always": lambda arguments, principal: True,
    "for_someone_else": _for_someone_else,
}
"""Named predicates a tool's `needs_approval` may refer to. Pure: they run in the workflow."""


def needs_approval(spec: ToolSpec, arguments: Mapping[str, Any], principal: Principal) -> bool:
    rule = spec.needs_approval
    if isinstance(rule, bool):
        return rule
    predicate = APPROVAL_RULES.get(rule)
    # A rule this code does not know must not silently let a call through.
    return True if predicate is None else predicate(arguments, principal)


def judge(
    decision: ApprovalDecision,
    pending: Mapping[str, PendingApproval],
    decided: Mapping[str, ApprovalDecision],
) -> str | None:
    """Why `decision` is refused, or None when it counts."""
    if decision.call_id in decided:
        return f"call {decision.call_id} was already decided"
    waiting = pending.get(decision.call_id)
    if waiting is None:
        return f"no call {decision.call_id!r} is waiting for approval"
    if decision.args_digest != waiting.args_digest:
        return (
            f"stale decision: it was made for arguments {decision.args_digest}, the pending "
            f"call has {waiting.args_digest}"
        )
    if waiting.approvers and decision.approver not in waiting.approvers:
        return (
            f"{decision.approver!r} may not decide {waiting.tool}; "
            f"approvers: {', '.join(waiting.approvers)}"
        )
    return None
