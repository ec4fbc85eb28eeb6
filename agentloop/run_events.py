"""What a run publishes while it works (docs/concepts/design.md §8): the items of its Workflow
Stream.

One topic, `TOPIC`; each item one `RunEvent` as a JSON object with `kind`, `turn` and `at`, and
`offset` once read back (the item's place in the stream, contiguous across continue-as-new).
The model activity publishes `text` (the model's visible text, one item per batch interval)
and `retry`; the workflow publishes what only it knows. The stream is display: anyone who may
signal a run may publish to it, so nothing decides, and no page shows a call's arguments,
from it (those come from `status` and history).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

TOPIC = "agentloop.events"

EventKind = Literal[
    "text", "call", "result", "waiting", "resumed", "retry", "continued", "done", "truncated"
]
"""`truncated` is never published: a reader says so when the items it asked for are gone."""

WaitReason = Literal["approval", "input", "reconciliation"]

TEXT_BATCH_SECONDS = 0.25
"""The model activity joins the text of this long into one `text` item (never an item per
token): each item is a signal in the run's history, and every subscriber's poll another."""
TEXT_BATCH_CHARS = 4_000
"""A batch is published sooner once it holds this much text."""
MAX_PREVIEW_CHARS = 500
"""How much of a call's arguments or result an item shows (the ledger and the transcript
hold the whole)."""
MAX_RETAINED_ITEMS = 500
MAX_RETAINED_BYTES = 256_000
"""What a run keeps of its stream (the oldest items go first): a subscriber asking for an
older offset starts at the oldest kept and is told (`truncated`). The bound holds whoever
publishes, and is what a run carries across continue-as-new."""


class RunEvent(BaseModel):
    """One item of a run's stream; the fields a kind does not use stay unset (None)."""

    model_config = ConfigDict(extra="ignore")

    kind: EventKind
    turn: int = 0
    at: datetime | None = None
    offset: int | None = None
    """Set by the reader: the item's place in the stream."""
    delta: str | None = None
    """`text`: the next piece of the model's visible text, in order."""
    attempt: int | None = None
    """`retry`: the model call's attempt now running; every `text` of this turn before it is
    superseded."""
    call_id: str | None = None
    tool: str | None = None
    arguments: Any = None
    """`call`: the arguments as they will be validated (cut to `MAX_PREVIEW_CHARS` of JSON,
    then a string saying so)."""
    status: str | None = None
    """`result`: the call's status; `done`: the run's."""
    preview: str | None = None
    """`result`: the start of the result, as the ledger summarises it."""
    reason: WaitReason | None = None
    call_ids: list[str] | None = None
    """`waiting` / `resumed`: the calls the run waits on (or waited on)."""
    stop_reason: str | None = None

    def published(self) -> dict[str, Any]:
        """The item as it travels: only the fields its kind uses."""
        return self.model_dump(mode="json", exclude_none=True)
