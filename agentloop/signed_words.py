"""What a signature of a `message` or `cancel` covers (`SignedWord`), pure: the workflow
builds it to ask the worker (`check_word`), the signer to sign (`agentloop.runtime.signing`).

A message binds its text by its SHA-256, so the worker is asked with the digest only: the text
stays in history once, where it came in."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

from agentloop.contract import CancelRequest, UserMessage
from agentloop.digests import sha256_hex


class SignedWord(BaseModel):
    """Who signs (`signer`) and the fields signed beside the run chain and the expiry."""

    kind: Literal["message", "cancel"]
    signer: str
    fields: dict[str, str]
    expires_at: datetime | None = None
    signature: str = ""


def word_of(word: UserMessage | CancelRequest) -> SignedWord:
    """What a signature of `word` covers."""
    if isinstance(word, UserMessage):
        fields = {"sender": word.sender, "text_sha256": sha256_hex(word.text)}
        return SignedWord(
            kind="message",
            signer=word.sender,
            fields=fields,
            expires_at=word.expires_at,
            signature=word.signature,
        )
    return SignedWord(
        kind="cancel",
        signer=word.requested_by,
        fields={"reason": word.reason, "requested_by": word.requested_by},
        expires_at=word.expires_at,
        signature=word.signature,
    )
