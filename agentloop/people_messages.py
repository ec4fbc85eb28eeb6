"""What people send a run, each a message that decides something (`approve`, `resolve`,
`message`, `cancel`, the `deliver` update) and what the run answers: part of the public
contract (`agentloop.contract` names each of them), kept in a module of its own."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from agentloop.digests import canonical_json, sha256_hex
from agentloop.input_limits import (
    MAX_MESSAGE_CHARS,
    MAX_NAME_CHARS,
    MAX_NOTE_CHARS,
    MAX_SIGNATURE_CHARS,
    Name,
    StrictInput,
)


class _SignedWord(BaseModel):
    """A message that decides something and may be signed (`agentloop.runtime.signing`):
    with approver keys, the worker takes it only signed."""

    @model_serializer(mode="wrap")
    def _unsigned_as_before(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An unsigned word goes out as it did before signing existed: a worker on older code
        # (which forbids unknown fields) still takes it.
        fields: dict[str, Any] = handler(self)
        if not fields.get("signature") and fields.get("expires_at") is None:
            fields.pop("signature", None)
            fields.pop("expires_at", None)
        if "requested_by" in fields and not fields["requested_by"]:
            del fields["requested_by"]  # a cancel naming no one
        return fields


class CancelRequest(_SignedWord):
    """The `cancel` signal: the run stops at its next step (a write in flight finishes)."""

    reason: str = Field(default="", max_length=MAX_NOTE_CHARS)
    requested_by: str = Field(default="", max_length=MAX_NAME_CHARS)
    """Who asks (a signed cancel counts only when signed by this name's key)."""
    expires_at: AwareDatetime | None = None
    """Until when a signed cancel counts (`agentloop.runtime.signing`)."""
    signature: str = Field(default="", max_length=MAX_SIGNATURE_CHARS)
    """`requested_by`'s Ed25519 signature (base64), for a worker configured with approver
    keys; empty when unsigned."""


class ApprovalDecision(StrictInput):
    """The `approve` signal (and `decide_approval` update): a decision on one pending call,
    bound to the args digest the approver was shown in `status`."""

    call_id: Name
    args_digest: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    approved: bool
    approver: Name
    reason: str = Field(default="", max_length=MAX_NOTE_CHARS)
    expires_at: AwareDatetime | None = None
    """Until when a signed decision counts (`agentloop.runtime.signing`)."""
    signature: str = Field(default="", max_length=MAX_SIGNATURE_CHARS)
    """The approver's Ed25519 signature (base64) of the decision, for a worker configured with
    approver keys; empty for unsigned approvals."""
    edited_arguments: dict[str, Any] | None = None
    """An approval of the call with these arguments instead of the proposed ones (None: as
    proposed). The edited call is validated again like a model's (schema, scope, rejected
    actions, the tool's precondition) and refused with the reason when it fails; signed, the
    signature binds `edited_digest`. Ignored on a rejection."""
    response: str = Field(default="", max_length=MAX_NOTE_CHARS)
    """Respond instead: with `approved` false, the call does not run and the model gets these
    words as its result; the run goes on (whatever the tool's `on_reject`). Empty: a plain
    rejection (or an approval). Signed, the signature binds it."""

    def edited_digest(self) -> str | None:
        """The digest of `edited_arguments` a signed edit is bound to (None: no edit)."""
        if self.edited_arguments is None:
            return None
        return "sha256:" + sha256_hex(canonical_json(self.edited_arguments))


class ResolveRequest(StrictInput, _SignedWord):
    """The `resolve` signal: an operator's word on a write whose outcome stayed unknown."""

    call_id: Name
    outcome: Literal["applied", "not_applied"]
    operator: Name
    note: str = Field(default="", max_length=MAX_NOTE_CHARS)
    expires_at: AwareDatetime | None = None
    """Until when a signed word counts (`agentloop.runtime.signing`)."""
    signature: str = Field(default="", max_length=MAX_SIGNATURE_CHARS)
    """The operator's Ed25519 signature (base64) of the word, for a worker configured with
    approver keys; empty when unsigned."""


class UserMessage(StrictInput, _SignedWord):
    """The `message` signal: answers the question a run is waiting on (`awaiting_input`), or
    is a later message from the user, seen at the next model call."""

    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    sender: Name
    expires_at: AwareDatetime | None = None
    """Until when a signed message counts (`agentloop.runtime.signing`)."""
    signature: str = Field(default="", max_length=MAX_SIGNATURE_CHARS)
    """The sender's Ed25519 signature (base64) of the message, for a worker configured with
    approver keys; empty when unsigned."""


class Delivery(StrictInput):
    """The `deliver` update: one `message`, `resolve` or `cancel`, answered with whether it
    counted (`ApprovalVerdict`) once the run applied or refused it."""

    message: UserMessage | None = None
    resolve: ResolveRequest | None = None
    cancel: CancelRequest | None = None

    @model_validator(mode="after")
    def _one_word(self) -> Delivery:
        if sum(word is not None for word in (self.message, self.resolve, self.cancel)) != 1:
            raise ValueError("a delivery carries exactly one of message, resolve, cancel")
        return self

    @property
    def word(self) -> UserMessage | ResolveRequest | CancelRequest:
        word = self.message or self.resolve or self.cancel
        assert word is not None
        return word


class ApprovalVerdict(BaseModel):
    """What the `decide_approval` update answers: whether the decision counted."""

    accepted: bool
    reason: str = ""
