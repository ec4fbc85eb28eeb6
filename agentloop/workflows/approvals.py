"""The Temporal side of approval decisions, operators' `resolve` and (in signed mode) people's
answers and cancels: the worker's check of each one (`check_approval`, `check_resolution`,
`check_word`: the signature against the worker's approver keys), and its audit record.

Workflow code (deterministic). The workflow never verifies a signature: it acts on the
verdict the activity recorded, so replay needs neither keys nor crypto.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

import agentloop.workflows.loop as loop
from agentloop.activity_io import (
    CHECK_APPROVAL,
    CHECK_PRECONDITION,
    CHECK_RESOLUTION,
    CHECK_WORD,
    ApprovalCheck,
    CheckApprovalInput,
    CheckResolutionInput,
    CheckWordInput,
    PreconditionResult,
)
from agentloop.contract import (
    ApprovalDecision,
    ApprovalVerdict,
    CancelRequest,
    ResolveRequest,
    UserMessage,
)
from agentloop.signed_words import word_of
from agentloop.workflows.failures import describe_failure
from agentloop.workflows.loop import CheckApprovals, DecisionToCheck, LoopState
from agentloop.workflows.loop.edits import edited_call
from agentloop.workflows.tool_activities import TOOL_HEARTBEAT, tool_input
from agentloop.workflows.visibility import audit

CHECK_TIMEOUT = timedelta(seconds=10)
CHECK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)


async def check_approvals(state: LoopState, step: CheckApprovals) -> dict[int, ApprovalVerdict]:
    """Each held decision (and operator's `resolve`, answer or cancel) checked by the worker,
    in parallel, then applied in the order they arrived (the first that counts decides its
    call); the verdicts by ticket."""
    checks = await asyncio.gather(*(_check(state, held) for held in step.decisions))
    verdicts: dict[int, ApprovalVerdict] = {}
    for held, check in zip(step.decisions, checks, strict=True):
        now = workflow.now()
        asked = held.decision
        if isinstance(asked, ResolveRequest):
            refused = loop.record_checked_resolution(state, held, check.problem, check.signing, now)
            _audit_resolution(asked, refused, check.signing)
            verdict = ApprovalVerdict(accepted=refused is None, reason=refused or "")
        elif isinstance(asked, UserMessage | CancelRequest):
            verdict = loop.record_checked_word(state, held, check.problem, check.signing, now)
            word = word_of(asked)
            audit(
                f"{word.kind}.decided",
                signer=word.signer,
                accepted=verdict.accepted,
                refused_because=verdict.reason,
                signing=check.signing,
            )
        else:
            verdict = loop.record_checked_decision(state, held, check.problem, check.signing, now)
            audit_decision(asked, verdict, signing=check.signing)
        verdicts[held.ticket] = verdict
    return verdicts


def _requested_at(state: LoopState, call_id: str) -> datetime | None:
    """When the call's approval was asked for (none: not one the batch asks about)."""
    pending = state.batch.approvals.get(call_id) if state.batch else None
    return pending.requested_at if pending else None


async def _check(state: LoopState, held: DecisionToCheck) -> ApprovalCheck:
    info = workflow.info()
    run = state.run_chain[0] if state.run_chain else info.run_id
    asked = held.decision
    asking: CheckApprovalInput | CheckResolutionInput | CheckWordInput
    if isinstance(asked, ResolveRequest):
        approvers = state.settlers(asked.call_id)
        activity, summary = (
            CHECK_RESOLUTION,
            f"check resolve of {asked.call_id} by {asked.operator}",
        )
        asking = CheckResolutionInput(
            resolution=asked, workflow_id=info.workflow_id, run=run, approvers=approvers
        )
    elif isinstance(asked, UserMessage | CancelRequest):
        word = word_of(asked)
        activity, summary = CHECK_WORD, f"check {word.kind} by {word.signer or 'no one named'}"
        asking = CheckWordInput(word=word, workflow_id=info.workflow_id, run=run)
    else:
        activity, summary = CHECK_APPROVAL, f"check approval of {asked.call_id} by {asked.approver}"
        asking = CheckApprovalInput(
            decision=asked,
            workflow_id=info.workflow_id,
            run=run,
            waited_since=_requested_at(state, asked.call_id),
        )
    try:
        check: ApprovalCheck = await workflow.execute_activity(
            activity,
            asking,
            result_type=ApprovalCheck,
            start_to_close_timeout=CHECK_TIMEOUT,
            retry_policy=CHECK_RETRY,
            summary=summary,
        )
        if not check.problem and isinstance(asked, ApprovalDecision):
            check.problem = await _edit_precondition_problem(state, asked) or ""
    except ActivityError as exc:
        # A decision nobody could check does not count; the approver may send it again.
        return ApprovalCheck(problem=f"the worker could not check it: {describe_failure(exc)}")
    return check


async def _edit_precondition_problem(state: LoopState, decision: ApprovalDecision) -> str | None:
    """An approval with edited arguments: the tool's precondition (team code, so the worker's)
    checked on them before the decision counts; why it fails, or None."""
    call = edited_call(state, decision)
    if call is None or call.name not in state.tools:
        return None
    spec = state.tools[call.name]
    if not spec.has_precondition:
        return None
    result = await workflow.execute_activity(
        CHECK_PRECONDITION,
        tool_input(call, state.run_input.principal),
        result_type=PreconditionResult,
        start_to_close_timeout=timedelta(seconds=spec.timeout_seconds),
        heartbeat_timeout=TOOL_HEARTBEAT,
        retry_policy=CHECK_RETRY,
        summary=f"precondition of the edited {call.name} · {call.call_id}",
    )
    if result.problem is None:
        return None
    return f"the edited call is refused: precondition failed: {result.problem}"


def audit_decision(
    decision: ApprovalDecision, verdict: ApprovalVerdict, signing: str | None = None
) -> None:
    audit(
        "approval.decided",
        call_id=decision.call_id,
        args_digest=decision.args_digest,
        approved=decision.approved,
        approver=decision.approver,
        accepted=verdict.accepted,
        refused_because=verdict.reason,
        **({"signing": signing} if signing else {}),
    )


def _audit_resolution(request: ResolveRequest, refused: str | None, signing: str | None) -> None:
    audit(
        "resolution.decided",
        call_id=request.call_id,
        outcome=request.outcome,
        operator=request.operator,
        accepted=refused is None,
        refused_because=refused or "",
        **({"signing": signing} if signing else {}),
    )
