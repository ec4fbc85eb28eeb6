"""Signed approvals: an approver's decision signed with their Ed25519 key, checked by the
worker against the public keys it is configured with (`AGENTLOOP_APPROVER_KEYS`).

Without keys, anyone who can signal a run can name any approver: the dev stack's default,
which `status` says (`approval_signing`). With keys, a decision counts only when it is signed
by the key of the approver it names, for exactly this run chain, call, arguments digest,
verdict and reason, and has not expired; anything else is refused and recorded.

What is signed (`signed_bytes`) is a fixed prefix and the canonical JSON of

    {"approved", "approver", "args_digest", "call_id", "expires_at", "reason", "run",
     "workflow_id"}

where `run` is the first run id of the run chain (`status.run_chain[0]`): a decision signed
for one run never counts for another run reusing its workflow id.
An approval that edits the call's arguments (`edited_arguments`) adds `"edited_digest"`
(`ApprovalDecision.edited_digest`): the signature binds the arguments the call will run with.

An operator's `resolve` (their word on a write whose outcome stayed unknown) decides as much
as an approval: when the tool names approvers, only one of them may settle its write (keys or
not); with keys, it counts only when signed by the key of the operator it names, for exactly
this run chain, call, outcome and note. What is signed (`resolution_bytes`) is another prefix
(an approval's signature never passes for a resolution) and the canonical JSON of

    {"call_id", "expires_at", "note", "operator", "outcome", "run", "workflow_id"}

A person's answer (`message`) and a `cancel` decide as much: with keys, each counts only when
signed by the key of the name it gives (`sender`, `requested_by`: any name with a key), for
exactly this run chain and content. What is signed (`word_bytes`) is the kind's own prefix and
the canonical JSON of

    message: {"expires_at", "run", "sender", "text_sha256", "workflow_id"}
    cancel:  {"expires_at", "reason", "requested_by", "run", "workflow_id"}

(a message binds its text by its SHA-256, hex, so the worker is asked with the digest only:
the text is in history once, where it came in).

Keys as text: `ed25519:BASE64` (the 32 raw bytes of the public key); a private key is a PEM
file (`agentloop keys new NAME`). Used by the worker (checking), the CLI and `sign_decision`
(signing).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentloop.contract import ApprovalDecision, CancelRequest, ResolveRequest, UserMessage
from agentloop.signed_words import SignedWord, word_of

SIGNED_PREFIX = b"agentloop approval v1\n"
RESOLUTION_PREFIX = b"agentloop resolution v1\n"
WORD_PREFIXES = {"message": b"agentloop message v1\n", "cancel": b"agentloop cancel v1\n"}
KEY_PREFIX = "ed25519:"
DEFAULT_LIFETIME = timedelta(minutes=15)
"""How long a signature made by the CLI counts."""
MAX_LIFETIME = timedelta(hours=24)
"""A signature that claims to count for longer is refused (a leaked one must expire)."""
APPROVER_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,200}")
Word = TypeVar("Word", UserMessage, CancelRequest)
_KEYS_SHAPE = "expected NAME=ed25519:BASE64[,NAME=ed25519:BASE64...] (agentloop keys new NAME)"


def parse_names(text: str | None) -> list[str]:
    """`NAME,NAME,...` (None or blank: none): the operators who may settle any unknown write
    (`AGENTLOOP_OPERATORS`). Raises `SigningError` naming the first that is not a name."""
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    for name in names:
        if not APPROVER_NAME.fullmatch(name):
            raise SigningError(f"{name[:40]!r} is not a name (letters, digits, _ . @ -)")
    return list(dict.fromkeys(names))


class SigningError(ValueError):
    """Approver keys or a private key that cannot be used; the message says which and why."""


def signed_bytes(decision: ApprovalDecision, *, workflow_id: str, run: str) -> bytes:
    """What the approver signs for `decision` on run chain `workflow_id`/`run`."""
    fields = {
        "approved": decision.approved,
        "approver": decision.approver,
        "args_digest": decision.args_digest,
        "call_id": decision.call_id,
        "expires_at": _instant(decision.expires_at),
        "reason": decision.reason,
        "run": run,
        "workflow_id": workflow_id,
    }
    edited = decision.edited_digest()
    if edited is not None:
        # An approval with edited arguments binds them; one without signs the bytes it always did.
        fields["edited_digest"] = edited
    if decision.response:
        fields["response"] = decision.response
    return SIGNED_PREFIX + _canonical(fields)


def resolution_bytes(request: ResolveRequest, *, workflow_id: str, run: str) -> bytes:
    """What the operator signs for `request` on run chain `workflow_id`/`run`."""
    fields = {
        "call_id": request.call_id,
        "expires_at": _instant(request.expires_at),
        "note": request.note,
        "operator": request.operator,
        "outcome": request.outcome,
        "run": run,
        "workflow_id": workflow_id,
    }
    return RESOLUTION_PREFIX + _canonical(fields)


def word_bytes(word: SignedWord, *, workflow_id: str, run: str) -> bytes:
    """What the sender signs for a `message` or `cancel` on run chain `workflow_id`/`run`."""
    fields = {
        **word.fields,
        "expires_at": _instant(word.expires_at),
        "run": run,
        "workflow_id": workflow_id,
    }
    return WORD_PREFIXES[word.kind] + _canonical(fields)


def _canonical(fields: Mapping[str, object]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def sign_decision(
    decision: ApprovalDecision,
    key: Ed25519PrivateKey,
    *,
    workflow_id: str,
    run: str,
    now: datetime | None = None,
    lifetime: timedelta = DEFAULT_LIFETIME,
) -> ApprovalDecision:
    """`decision` with `expires_at` (now + `lifetime`) and its signature, for run chain
    `workflow_id`/`run` (the run's first run id: `status.run_chain[0]`)."""
    return _signed(
        decision, key, lambda d: signed_bytes(d, workflow_id=workflow_id, run=run), now, lifetime
    )


def sign_resolution(
    request: ResolveRequest,
    key: Ed25519PrivateKey,
    *,
    workflow_id: str,
    run: str,
    now: datetime | None = None,
    lifetime: timedelta = DEFAULT_LIFETIME,
) -> ResolveRequest:
    """`request` with `expires_at` and its signature, like `sign_decision`."""
    return _signed(
        request, key, lambda r: resolution_bytes(r, workflow_id=workflow_id, run=run), now, lifetime
    )


def sign_word(
    word: Word,
    key: Ed25519PrivateKey,
    *,
    workflow_id: str,
    run: str,
    now: datetime | None = None,
    lifetime: timedelta = DEFAULT_LIFETIME,
) -> Word:
    """A `message` or `cancel` with `expires_at` and its signature, like `sign_decision`
    (a cancel's `requested_by` names the signer)."""
    return _signed(
        word, key, lambda w: word_bytes(word_of(w), workflow_id=workflow_id, run=run), now, lifetime
    )


Signable = TypeVar("Signable", ApprovalDecision, ResolveRequest, UserMessage, CancelRequest)


def _signed(
    said: Signable,
    key: Ed25519PrivateKey,
    message: Callable[[Signable], bytes],
    now: datetime | None,
    lifetime: timedelta,
) -> Signable:
    """`said` with `expires_at` and the signature of its `message` bytes."""
    unsigned = said.model_copy(update={"expires_at": expiry(now, lifetime), "signature": ""})
    signature = key.sign(message(unsigned))
    return unsigned.model_copy(update={"signature": base64.b64encode(signature).decode()})


def expiry(now: datetime | None, lifetime: timedelta) -> datetime:
    """`lifetime` from `now` (default: the clock's now); `SigningError` past `MAX_LIFETIME`."""
    if lifetime > MAX_LIFETIME:
        raise SigningError(f"a signature counts for at most {MAX_LIFETIME}, not {lifetime}")
    return (now or datetime.now(UTC)) + lifetime


@dataclass(frozen=True)
class ApproverKeys:
    """Approver name -> public key: whose decisions count, and how to tell."""

    keys: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> ApproverKeys:
        """`NAME=ed25519:BASE64,...` (None or blank: no keys, unsigned approvals). Raises
        `SigningError` naming the first entry that is wrong."""
        keys: dict[str, Ed25519PublicKey] = {}
        for number, entry in enumerate((e.strip() for e in (text or "").split(",")), start=1):
            if not entry:
                continue
            name, sep, encoded = (part.strip() for part in entry.partition("="))
            if not sep or not APPROVER_NAME.fullmatch(name):
                raise SigningError(
                    f"entry {number} does not start with an approver name: {_KEYS_SHAPE}"
                )
            if name in keys:
                raise SigningError(f"approver {name!r} has two keys: {_KEYS_SHAPE}")
            keys[name] = parse_public_key(encoded, f"approver {name!r}")
        return cls(keys)

    @property
    def signing(self) -> bool:
        return bool(self.keys)

    def problem(
        self, decision: ApprovalDecision, *, workflow_id: str, run: str, now: datetime
    ) -> str | None:
        """Why `decision` does not count under these keys, or None when it does."""
        if not self.keys:
            return None
        return self._signature_problem(
            decision.approver,
            decision.signature,
            decision.expires_at,
            signed_bytes(decision, workflow_id=workflow_id, run=run),
            now,
            what=("decision", "approvals", "call, arguments, edit, verdict or reason"),
            command="agentloop approve --key",
        )

    def word_problem(
        self, word: SignedWord, *, workflow_id: str, run: str, now: datetime
    ) -> str | None:
        """Why a `message` or `cancel` does not count under these keys, or None when it does:
        signed by the key of the name it gives."""
        if not self.keys:
            return None
        if word.signature and not word.signer:
            return f"a signed {word.kind} names who signed it"
        return self._signature_problem(
            word.signer,
            word.signature,
            word.expires_at,
            word_bytes(word, workflow_id=workflow_id, run=run),
            now,
            what=(word.kind, f"{word.kind}s", "text" if word.kind == "message" else "reason"),
            command=f"agentloop {word.kind} --key",
        )

    def resolution_problem(
        self,
        request: ResolveRequest,
        *,
        workflow_id: str,
        run: str,
        now: datetime,
        approvers: Sequence[str] = (),
    ) -> str | None:
        """Why an operator's `request` does not count, or None when it does: by one of the
        tool's `approvers` when it names some (signed or not), and signed by a key holder
        under keys."""
        if approvers and request.operator not in approvers:
            return f"{request.operator!r} may not settle this write; approvers: " + ", ".join(
                approvers
            )
        if not self.keys:
            return None
        return self._signature_problem(
            request.operator,
            request.signature,
            request.expires_at,
            resolution_bytes(request, workflow_id=workflow_id, run=run),
            now,
            what=("word", "resolutions", "call, outcome or note"),
            command="agentloop resolve --key",
        )

    def _signature_problem(
        self,
        signer: str,
        signature_text: str,
        expires_at: datetime | None,
        message: bytes,
        now: datetime,
        *,
        what: tuple[str, str, str],
        command: str,
    ) -> str | None:
        """`what`: the thing signed, its plural as the worker takes it, what it binds."""
        thing, plural, bound = what
        if not signature_text:
            names = ", ".join(sorted(self.keys))
            return (
                f"unsigned: this worker takes only signed {plural} (keys for: {names}); sign "
                f"with `{command}`"
            )
        public = self.keys.get(signer)
        if public is None:
            return f"no approver key is configured for {signer!r}"
        if expires_at is None:
            return f"a signed {thing} needs expires_at"
        expires = expires_at.astimezone(UTC)
        if expires <= now:
            return f"the signature expired at {_instant(expires)}"
        if expires - now > MAX_LIFETIME:
            return f"the signature claims to count until {_instant(expires)}, past {MAX_LIFETIME}"
        try:
            signature = base64.b64decode(signature_text, validate=True)
        except (binascii.Error, ValueError):
            return "the signature is not base64"
        try:
            public.verify(signature, message)
        except InvalidSignature:
            return (
                f"the signature is not {signer}'s for this {thing} (signed for another run, "
                f"{bound}, or with another key)"
            )
        return None


def parse_public_key(text: str, what: str = "the key") -> Ed25519PublicKey:
    encoded = text.strip()
    if not encoded.startswith(KEY_PREFIX):
        raise SigningError(f"{what}: expected {KEY_PREFIX}BASE64, not {encoded[:12]!r}…")
    try:
        raw = base64.b64decode(encoded[len(KEY_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise SigningError(f"{what}: the key is not base64") from None
    if len(raw) != 32:
        raise SigningError(f"{what}: an Ed25519 public key is 32 bytes, this is {len(raw)}")
    return Ed25519PublicKey.from_public_bytes(raw)


def public_key_text(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """`ed25519:BASE64` of the (public half of the) key, as `AGENTLOOP_APPROVER_KEYS` takes it."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KEY_PREFIX + base64.b64encode(raw).decode()


def new_private_key_pem() -> tuple[bytes, str]:
    """A fresh key: its PEM (PKCS#8, unencrypted: keep the file private) and public text."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem, public_key_text(key)


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in the PEM file at `path`; raises `SigningError` saying why not."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SigningError(f"cannot read the key file {path}: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise SigningError(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    return key


def _instant(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
