"""Signed starts: a front end that starts runs for its users signs what it authorises, so that
a run started by anyone else, or started again with what was signed, is refused.

A start signature (`AgentRunInput.principal_signature`) is the text

    v2.EXPIRES.NONCE.INPUT.SIGNATURE

EXPIRES in unix seconds, the others base64url without padding: INPUT the SHA-256 of the start
input without its signature (`AgentRunInput.start_digest`: task, tools, limits, principal and
every other field), NONCE 16 random bytes, SIGNATURE the starter's Ed25519 signature of
`START_PREFIX` and the canonical JSON of

    {"expires_at", "input", "nonce", "principal", "workflow_id"}

The worker (never the workflow: the verdict is recorded in history) takes a fresh run only
when one of its starter keys signed exactly this input for exactly this workflow id, the run
started (as its history records it) before EXPIRES, and no other run chain used NONCE: the
store the workers share remembers each nonce it saw (`claim_nonce`), so the same signed input
started again under the same workflow id, once the first run ended, is refused too.

A delegated child carries its root run's signature: the principal and the root's workflow id
are checked against it (a child acts for no one else); the root's input, expiry and nonce
were checked as the root started, and a child run exists only when its parent starts it.

The first format (`v1`: a bare base64 signature of the principal and the workflow id only)
is refused, saying so: it let a signed principal be replayed onto another task.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentloop.activity_io import CheckPrincipalInput
from agentloop.contract import AgentRunInput, Principal
from agentloop.runtime.signing import MAX_LIFETIME, ApproverKeys, expiry

START_PREFIX = b"agentloop start v2\n"
VERSION = "v2"
DEFAULT_START_LIFETIME = timedelta(minutes=10)
"""How long a start signature counts: the run must start within it."""
NONCE_RETENTION = timedelta(days=1)
"""How long past its expiry a signature's nonce is remembered. A run whose start is checked
later than that (its first workflow task waited so long) is refused: its nonce may be
forgotten, so a second run of the same signature could no longer be told."""
NONCE_BYTES = 16
PrincipalSigning = Literal["required", "optional"]
"""`AGENTLOOP_PRINCIPAL_SIGNING`: every run must carry a valid `principal_signature`, or only
one that carries a signature is checked (while front ends move to signing)."""
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_SIGN_COMMAND = "`agentloop run --key`, or `agentloop.sign_start`"


@dataclass(frozen=True)
class StartSignature:
    """A start signature, read from its text (`parse`) or made by `sign_start`."""

    expires_at: datetime
    nonce: str
    input_digest: str
    """The signed input's SHA-256, hex."""
    signature: bytes

    def text(self) -> str:
        digest = _b64(bytes.fromhex(self.input_digest))
        parts = [VERSION, str(int(self.expires_at.timestamp())), self.nonce, digest]
        return ".".join([*parts, _b64(self.signature)])

    def message(self, principal: Principal, *, workflow_id: str) -> bytes:
        """What the starter signs: this signature's fields, the principal (its defaults filled
        in: a child's is checked against it) and the workflow id."""
        fields = {
            "expires_at": int(self.expires_at.timestamp()),
            "input": f"sha256:{self.input_digest}",
            "nonce": self.nonce,
            "principal": principal.model_dump(mode="json"),
            "workflow_id": workflow_id,
        }
        return START_PREFIX + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, text: str) -> StartSignature | str:
        """The signature in `text`, or why it is none (a `v1` one said as such)."""
        parts = text.split(".")
        if parts[0] != VERSION:
            if _is_base64(text):
                return (
                    "principal_signature is a v1 signature (of the principal and workflow id"
                    f" only), no longer taken: sign the whole start input ({VERSION}) with"
                    f" {_SIGN_COMMAND}"
                )
            return f"principal_signature is not a {VERSION} start signature"
        shaped = (
            len(parts) == 5 and parts[1].isdigit() and all(map(_BASE64URL.fullmatch, parts[2:]))
        )
        try:
            if not shaped or len(_unb64(parts[2])) != NONCE_BYTES:
                raise ValueError("not the shape")
            return cls(
                expires_at=datetime.fromtimestamp(int(parts[1]), UTC),
                nonce=parts[2],
                input_digest=_unb64(parts[3]).hex(),
                signature=_unb64(parts[4]),
            )
        except (ValueError, OverflowError, OSError, binascii.Error):
            return (
                f"principal_signature is not a {VERSION} start signature"
                f" ({VERSION}.EXPIRES.NONCE.INPUT.SIGNATURE)"
            )


def sign_start(
    run_input: AgentRunInput,
    key: Ed25519PrivateKey,
    *,
    workflow_id: str,
    now: datetime | None = None,
    lifetime: timedelta = DEFAULT_START_LIFETIME,
) -> str:
    """The `principal_signature` of `run_input` for the run `workflow_id`: it counts for this
    input, started under this id within `lifetime` from `now`, once."""
    unsigned = StartSignature(
        expires_at=expiry(now, lifetime),
        nonce=_b64(os.urandom(NONCE_BYTES)),
        input_digest=run_input.start_digest(),
        signature=b"",
    )
    signed = key.sign(unsigned.message(run_input.principal, workflow_id=workflow_id))
    return replace(unsigned, signature=signed).text()


@dataclass(frozen=True)
class StartVerdict:
    problem: str | None = None
    """Why the run may not start (None: it may, once its nonce is claimed)."""
    signer: str | None = None
    """The starter whose key signed it."""
    signed: StartSignature | None = None
    """The signature taken, whose nonce the run claims (None: none was checked)."""


@dataclass(frozen=True)
class PrincipalSignatures:
    """How a worker takes a run's start: by the starters' keys (`AGENTLOOP_STARTER_KEYS`, the
    shape of approver keys) and whether a signature is required."""

    starters: ApproverKeys = field(default_factory=ApproverKeys)
    required: bool = False

    def verdict(self, request: CheckPrincipalInput) -> StartVerdict:
        """Everything but the nonce: whether `request`'s signature is a starter's, for its
        input and workflow id, and had not expired when the run started."""
        if not request.signature:
            if not self.required:
                return StartVerdict()
            return StartVerdict(
                "unsigned: this worker takes only runs signed by a starter (keys for: "
                f"{', '.join(sorted(self.starters.keys))}); sign with {_SIGN_COMMAND}"
            )
        if not self.starters.signing:
            return StartVerdict()  # nothing to check it with: the principal is taken as given
        parsed = StartSignature.parse(request.signature)
        if isinstance(parsed, str):
            return StartVerdict(parsed)
        problem = None if request.delegated else _start_problem(parsed, request)
        if problem:
            return StartVerdict(problem)
        message = parsed.message(request.principal, workflow_id=request.workflow_id)
        for name, public in sorted(self.starters.keys.items()):
            try:
                public.verify(parsed.signature, message)
            except InvalidSignature:
                continue
            return StartVerdict(signer=name, signed=parsed)
        return StartVerdict(
            "principal_signature is no starter's signature of this principal for this run"
            " (signed for another principal or workflow id, or with another key)"
        )


def _start_problem(signed: StartSignature, request: CheckPrincipalInput) -> str | None:
    """Why a run's own signature does not fit how it was started: another input, or a start
    past its expiry (or a claim to count implausibly long)."""
    if signed.input_digest != request.input_digest:
        return (
            "principal_signature was signed for another start input (its task, tools, limits,"
            " principal or another field differ from what the starter signed)"
        )
    if request.started_at is None:
        return "the worker was not told when the run started"
    started = request.started_at.astimezone(UTC)
    if signed.expires_at <= started:
        return (
            f"the signature expired at {_instant(signed.expires_at)}, before the run started"
            f" ({_instant(started)}): sign the start again"
        )
    if signed.expires_at - started > MAX_LIFETIME:
        return (
            f"the signature claims to count until {_instant(signed.expires_at)}, past"
            f" {MAX_LIFETIME} from the run's start"
        )
    return None


def nonce_problem(signed: StartSignature, now: datetime) -> str | None:
    """Why a nonce can no longer be claimed at `now`: past its retention, a second run with it
    could not be told."""
    if now > signed.expires_at + NONCE_RETENTION:
        return (
            f"the run's start is checked more than {NONCE_RETENTION} after its signature"
            f" expired ({_instant(signed.expires_at)}), when its nonce may be forgotten:"
            " sign the start again"
        )
    return None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _instant(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
