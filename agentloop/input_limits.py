"""The bounds of what callers send a run (its input and the messages people send it): every
text, name and list has a size, so nothing from outside is unbounded work."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class StrictInput(BaseModel):
    # Unknown fields in a caller's input are a mistake worth naming, not something to ignore.
    model_config = ConfigDict(extra="forbid")


MAX_TEXT_CHARS = 200_000
"""A run's task and its instructions."""
MAX_MESSAGE_CHARS = 100_000
"""A `message` signal's text."""
MAX_NAME_CHARS = 200
"""Names: a tool, a model, a subject, an approver, a call id..."""
MAX_NOTE_CHARS = 4_000
"""A reason or a note a person gives with a decision."""
MAX_SIGNATURE_CHARS = 200
"""A signed approval's signature, base64 (an Ed25519 signature is 88 characters)."""
MAX_WAIT_SECONDS = 10 * 365 * 86_400.0
"""The longest a run waits for anything (a deadline, an approval, an answer): ten years."""
MAX_LIST_ITEMS = 256
"""Tools, scopes, per-tool limits."""

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
