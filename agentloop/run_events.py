"""What a run publishes while it works (docs/concepts/design.md §8): the items of its Workflow
Stream.

The run's own items are on `TOPIC`; each one `RunEvent` as a JSON object with `kind`, `turn`
and `at`, and `offset` once read back (the item's place in the stream, contiguous across
continue-as-new). The model activity publishes `text` (the model's visible text, one item per
batch interval) and `retry`, sealed by its worker (`agentloop.stream_seals`); the workflow
publishes what only it knows, itself. Anyone else who may signal a run may publish to it too:
what they send is kept apart, on `FOREIGN_TOPIC`, within bounds of its own, and agentloop's
readers never show it. The stream is display all the same: nothing decides, and no page shows
a call's arguments, from it (those come from `status` and history).
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from temporalio.api.common.v1 import Payload

TOPIC = "agentloop.events"
"""The run's own items: what its workflow publishes and what its worker's activities seal."""
PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
"""The stream's publish signal (its name in `temporalio.contrib.workflow_streams`)."""
FOREIGN_TOPIC = "agentloop.foreign"
"""What anyone else published to the run's stream, as they sent it (never read as the run's)."""

EventKind = Literal[
    "text",
    "call",
    "result",
    "waiting",
    "resumed",
    "retry",
    "fallback",
    "continued",
    "done",
    "truncated",
]
"""`truncated` is never published: a reader says so when the items it asked for are gone."""
ACTIVITY_KINDS = frozenset({"text", "retry"})
"""What a sealed publish may say; every other kind is the workflow's own, and never comes by
the publish signal."""

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
"""What a run keeps of its own items (the oldest go first): a subscriber asking for an older
offset starts at the oldest kept and is told (`truncated`). What others publish counts
against bounds of its own (`MAX_FOREIGN_ITEMS`), never against these; both are what a run
carries across continue-as-new."""
MAX_PUBLISH_BYTES = 128_000
"""A publish signal larger than this is dropped whole, by its size, before it is read (a
model call sends one text batch per signal: `TEXT_BATCH_CHARS` of text, under 70 KB however
it is escaped)."""
MAX_ITEMS_PER_PUBLISH = 64
"""Items read of one publish signal (the rest are dropped)."""
MAX_FOREIGN_ITEMS = 50
MAX_FOREIGN_BYTES = 16_000
"""What the stream keeps of what others published, apart from the run's own bounds: a foreign
item that would pass either is dropped (the newest go, so no flood ever evicts anything),
until the run's own items push the oldest out."""


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
    provider: str | None = None
    model: str | None = None
    """`fallback`: the model the run goes on with (the turn's call went to it), after the one
    serving it was unavailable for the reason `stop_reason` says (`ModelSwitch`)."""

    def published(self) -> dict[str, Any]:
        """The item as it travels: only the fields its kind uses."""
        return self.model_dump(mode="json", exclude_none=True)


def wire_payload(wire: str) -> Payload:
    """A stream item as it travels (a publish, a poll's answer, a carried stream): base64 of
    the serialized payload (the Workflow Streams wire format). Raises on anything else."""
    payload = Payload()
    payload.ParseFromString(base64.b64decode(wire, validate=True))
    return payload
