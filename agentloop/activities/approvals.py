"""`check_approval`, `check_resolution` and `check_word`: whether an approval decision, an
operator's word on an unknown write, or a person's answer or cancel, counts, by the worker's
approver keys.

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
    CHECK_WORD,
    ApprovalCheck,
    CheckApprovalInput,
    CheckResolutionInput,
    CheckWordInput,
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
        return self._checked(
            problem,
            "approval.checked",
            workflow_id=request.workflow_id,
            call_id=decision.call_id,
            approver=decision.approver,
        )

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
        return self._checked(
            problem,
            "resolution.checked",
            workflow_id=request.workflow_id,
            call_id=resolution.call_id,
            operator=resolution.operator,
        )

    @activity.defn(name=CHECK_WORD)
    async def check_word(self, request: CheckWordInput) -> ApprovalCheck:
        word = request.word
        problem = self._keys.word_problem(
            word, workflow_id=request.workflow_id, run=request.run, now=datetime.now(UTC)
        )
        return self._checked(
            problem, f"{word.kind}.checked", workflow_id=request.workflow_id, signer=word.signer
        )

    def _checked(self, problem: str | None, record: str, **fields: str) -> ApprovalCheck:
        """The verdict, with its audit `record`."""
        signing = "signed" if self._keys.signing else "unsigned"
        audit(record, **fields, signing=signing, counts=problem is None)
        return ApprovalCheck(problem=problem or "", signing=signing)
