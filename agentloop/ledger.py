"""The call ledger: what a run records of each call it was proposed (`CallRecord`), who
decided on it and how a write of unknown outcome was settled (`ApprovalRecord`,
`ResolutionRecord`), and what its status and result list of calls still waiting, writes made
and decisions refused. Part of the public contract (`agentloop.contract` hands every name
on): fields are only ever added, with defaults.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)


class ApprovalRecord(BaseModel):
    """A person's decision on a call that waited for approval, as it counted."""

    approved: bool
    approver: str
    at: AwareDatetime
    reason: str = ""
    signed: bool = False
    """Signed, and the signature checked by the worker against its approver keys."""
    proposed_arguments: dict[str, Any] | None = None
    """The arguments the model proposed, when the approver approved the call with edited ones
    (the call's `arguments` and `args_digest` are then the edited ones); None: as proposed."""
    proposed_digest: str = ""
    """The args digest of `proposed_arguments` (empty: not edited)."""
    response: str = ""
    """What the approver answered the model instead of letting the call run (empty: none)."""

    def said(self) -> str:
        """The decision in words (what the ledger's `decision` reads)."""
        if self.proposed_arguments is not None:
            return f"approved with edited arguments by {self.approver}"
        if self.response:
            return f"answered instead by {self.approver}"
        return f"{'approved' if self.approved else 'rejected'} by {self.approver}"

    def described(self) -> str:
        """The decision with everything known of it, for a person."""
        signed = "signed" if self.signed else "unsigned"
        why = f": {self.reason}" if self.reason else ""
        return f"{self.said()} at {self.at.isoformat()} ({signed}){why}"


class ResolutionRecord(BaseModel):
    """An operator's word on a write whose outcome stayed unknown (`resolve`)."""

    outcome: Literal["applied", "not_applied"]
    operator: str
    at: AwareDatetime
    note: str = ""

    def said(self) -> str:
        """The operator's word as the model and the ledger are told it."""
        return f"{self.operator} says {self.outcome}" + (f": {self.note}" if self.note else "")

    def in_ledger(self) -> str:
        """What the ledger's `decision` gains when the operator's word counts."""
        return f"resolved: {self.said()}"

    def described(self) -> str:
        return f"resolved by {self.operator} at {self.at.isoformat()}: {self.outcome}" + (
            f" ({self.note})" if self.note else ""
        )


class CallRecord(BaseModel):
    """One line of the call ledger, keyed by the provider's call id."""

    call_id: str
    tool: str
    tool_version: str = ""
    args_digest: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    decision: str = ""
    """`allowed`, or why the runner refused it (`unknown_tool`, `invalid_arguments`, ...)."""
    status: str = "pending"
    """`pending`, `running`, or the `ToolResult` status."""
    attempts: int = 0
    activity_attempts: int = 0
    """Executions of the call's activity, Temporal's retries included (`attempts` counts the
    times the runner started it)."""
    idempotency_key: str = ""
    result_summary: str = ""
    turn: int = 0
    child_run: str = ""
    """For a `delegate` call: the workflow id of the child run doing the sub-task."""
    approval: ApprovalRecord | None = None
    """Who approved or rejected the call, when, why, and whether signed (None: nobody
    decided, or a decision from before it was recorded so)."""
    resolution: ResolutionRecord | None = None
    """Who said whether the write happened after its outcome stayed unknown, and what."""
    undoes: str = ""
    """For an undo the runner offered when the run ended without delivering: the call id of
    the write it undoes (docs/concepts/compensation.md)."""
    redacted: dict[str, int] = Field(default_factory=dict)
    """How many values of each kind were hidden from the model and the transcript in the
    call's result (`agentloop.redaction`); absent from the JSON when none were."""
    redacted_original: str = ""
    """The artifact keeping the result as it was, readable only by the tool's approvers
    (`agentloop.store.originals.read_original`); absent from the JSON when none is kept."""

    @model_serializer(mode="wrap")
    def _redaction_when_any(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A call whose result hid nothing never carried these: its JSON stays as it was.
        fields: dict[str, Any] = handler(self)
        for name in ("redacted", "redacted_original"):
            if not fields.get(name):
                fields.pop(name, None)
        return fields

    def people_said(self) -> str:
        """What people decided on the call, in words from the typed fields: the approver's
        decision, then the operator's word on its unknown outcome (for a call that waited
        for approval, what `decision` reads; empty when nobody decided)."""
        said = [self.approval.said()] if self.approval is not None else []
        if self.resolution is not None:
            said.append(self.resolution.in_ledger())
        return "; ".join(said)


class SideEffect(BaseModel):
    """A write that happened (or may have), and how we know (`AgentRunResult.side_effects`)."""

    call_id: str
    tool: str
    idempotency_key: str
    status: str
    """`succeeded`, `confirmed_after_query` or `unknown`."""
    confirmed_by: str
    """How the outcome is known: the system's response, a lookup by idempotency key, an
    operator's word (`operator (...)`), or not at all."""
    via: str | None = None
    """For a write a delegated run made: `CHILD_WORKFLOW_ID (delegate CALL_ID)`; absent from
    the JSON for this run's own."""

    @model_serializer(mode="wrap")
    def _own_without_via(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # This run's own writes never carried the field: their JSON stays as it was.
        fields: dict[str, Any] = handler(self)
        if self.via is None:
            fields.pop("via", None)
        return fields


CompensationOutcome = Literal["undone", "not_undone", "left_as_is"]


class CompensationLine(BaseModel):
    """A write of a run that ended without delivering, and what became of it."""

    call_id: str
    tool: str
    outcome: CompensationOutcome
    """`undone` (its undo succeeded), `not_undone` (its undo was offered and rejected,
    failed, or its outcome is not known) or `left_as_is` (no undo was run)."""
    undo_call_id: str = ""
    undo_tool: str = ""
    undo_status: str = ""
    """The undo's ledger status (`succeeded`, `confirmed_after_query`, `rejected`, ...)."""
    why: str = ""
    """What decided it: who approved or rejected the undo, the policy, or why none exists."""


class PendingCall(BaseModel):
    """A call left undone when the run stopped (`AgentRunResult.pending`)."""

    call_id: str
    tool: str
    status: str
    """`awaiting_approval`, or the call's ledger status (`proposed`, `running`, `unknown`,
    `awaiting_input`, `pending`)."""


class PendingApproval(BaseModel):
    """A call waiting for a human, with exactly what the approver is shown
    (`RunStatusView.pending_approvals`)."""

    call_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    args_digest: str
    approvers: list[str] = Field(default_factory=list)
    requested_at: datetime


class Reconciliation(BaseModel):
    """A write whose outcome the lookup could not settle: it waits for an operator."""

    call_id: str
    tool: str
    idempotency_key: str
    known: str
    """What the runner knows: why the outcome is still unknown."""
    since: datetime


class WriteAwaitingOperator(Reconciliation):
    """A write waiting for an operator's `resolve` (`RunStatusView.unresolved`), with the
    arguments it was sent with."""

    arguments: dict[str, Any] = Field(default_factory=dict)
    approvers: list[str] = Field(default_factory=list)
    """Who may settle it: the tool's approvers and the workers' operators (`AGENTLOOP_OPERATORS`;
    empty: anyone who may act on the run)."""


class _Refused(BaseModel):
    # Fields a line recorded by older code held beyond these are dropped, not a failure: run
    # state carried over (continue-as-new) must read back.
    @field_serializer("at", check_fields=False)
    def _as_recorded(self, at: datetime) -> str:
        # Recorded with `isoformat()` from the start (`+00:00`, not pydantic's `Z`).
        return at.isoformat()


class RefusedApproval(_Refused):
    """An `approve` (or `decide_approval`) that did not count: the decision as signalled,
    without its signature."""

    signal: Literal["approve"] = "approve"
    call_id: str
    args_digest: str
    approved: bool
    approver: str
    reason: str = ""
    refused_because: str
    at: AwareDatetime


class RefusedResolution(_Refused):
    """A `resolve` that did not count: the operator's word as signalled, without its
    signature."""

    signal: Literal["resolve"] = "resolve"
    call_id: str
    outcome: Literal["applied", "not_applied"]
    operator: str
    note: str = ""
    refused_because: str
    at: AwareDatetime


class RefusedSignal(_Refused):
    """A signal refused before anything could act on it (a payload that does not parse, a
    message that does not fit): `payload` is the start of what was sent."""

    signal: str
    payload: str
    refused_because: str
    at: AwareDatetime


RefusedDecision = RefusedApproval | RefusedResolution | RefusedSignal
"""One line of `RunStatusView.refused_decisions`: what was refused, why (`refused_because`)
and when (`at`). Each shape requires fields the others lack, so a recorded line reads back as
the one it was (a line from before lines named their signal, as its approval or resolution)."""


class NoticeSent(BaseModel):
    """A reminder or an escalation a run waiting for people sent (`agentloop.policies.
    reminders`): started when it fell due, delivered like every notice."""

    stage: Literal["reminder", "escalation"]
    route: str
    """The notice route whose timer it was."""
    to: str
    """The route told: `route` itself for a reminder, its `escalate_to` for an escalation."""
    call_ids: list[str] = Field(default_factory=list)
    at: AwareDatetime


class UnresolvedWrite(BaseModel):
    """A write whose outcome stayed unknown when its run stopped: a run that continues that
    one holds the same action for an operator's word instead of sending it again."""

    action_digest: str
    tool: str
    call_id: str
    idempotency_key: str
    workflow_id: str
    """The run that sent it."""


class ModelSwitch(BaseModel):
    """A model call that went to the run's next model (`AgentRunInput.fallbacks`) because the
    one serving it was unavailable after its own retries: from then on the run is served by
    the new one (its tokens, cost and budget are that model's)."""

    turn: int
    from_provider: str
    from_model: str
    to_provider: str
    to_model: str
    error_class: str
    """Why: the class of the failure (`transient`, `timeout`; `policies.fallback`)."""
    reason: str = ""
    """The failure as the last attempt said it (masked like any model failure)."""
    requests: int = 0
    """Requests the unavailable model was sent for this call, its retries included."""
    at: AwareDatetime

    def said(self) -> str:
        """The switch in words (the stream's item and the stop report say it so)."""
        return (
            f"turn {self.turn}: {self.from_provider} {self.from_model} unavailable "
            f"({self.error_class}), now {self.to_provider} {self.to_model}"
        )
