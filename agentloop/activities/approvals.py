"""`check_approval` and `check_resolution`: whether an approval decision, or an operator's word
on an unknown write, counts, by the worker's approver keys.

The signature check runs here, in the worker, never in the workflow: the workflow acts on the
verdict recorded in history, so a replay needs neither the keys nor the crypto. The keys are
the worker's current configuration, so keys added to the workers count for running runs too.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity

from agentloop.activity_io import (
    CHECK_APPROVAL,
    CHECK_RESOLUTION,
    ApprovalCheck,
    CheckApprovalInput,
    CheckResolutionInput,
)
from agentloop.runtime.audit import audit
from agentloop.runtime.signing import ApproverKeys


class ApprovalActivities:
    def __init__(self, keys: ApproverKeys) -> None:
        self._keys = keys

    @activity.defn(name=CHECK_APPROVAL)
    async def check_approval(self, request: CheckApprovalInput) -> ApprovalCheck:
        decision = request.decision
        problem = self._keys.problem(
            decision, workflow_id=request.workflow_id, run=request.run, now=datetime.now(UTC)
        )
        signing = "signed" if self._keys.signing else "unsigned"
        audit(
            "approval.checked",
            workflow_id=request.workflow_id,
            call_id=decision.call_id,
            approver=decision.approver,
            signing=signing,
            counts=problem is None,
        )
        return ApprovalCheck(problem=problem or "", signing=signing)

    @activity.defn(name=CHECK_RESOLUTION)
    async def check_resolution(self, request: CheckResolutionInput) -> ApprovalCheck:
        resolution = request.resolution
        problem = self._keys.resolution_problem(
            resolution,
            workflow_id=request.workflow_id,
            run=request.run,
            now=datetime.now(UTC),
            approvers=request.approvers,
        )
        signing = "signed" if self._keys.signing else "unsigned"
        audit(
            "resolution.checked",
            workflow_id=request.workflow_id,
            call_id=resolution.call_id,
            operator=resolution.operator,
            signing=signing,
            counts=problem is None,
        )
        return ApprovalCheck(problem=problem or "", signing=signing)
