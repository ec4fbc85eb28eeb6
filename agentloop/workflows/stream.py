"""The run's Workflow Stream (`temporalio.contrib.workflow_streams`): what watchers read, and
who wrote each item of it.

The run's own items are on `TOPIC`: what the workflow publishes itself (`loop.watching`: calls,
results, waits, the end, continue-as-new) goes straight into the log, never by a signal; what
comes by the stream's publish signal is the run's own only when its worker's model activity
sealed it (`agentloop.stream_seals`) for this run, said `text` or `retry`, and was not taken
before. Everything else anyone sends by the signal (a `done`, a `call`, text not sealed, a
seal copied from history) goes on `FOREIGN_TOPIC` as sent, within `MAX_FOREIGN_ITEMS` and
`MAX_FOREIGN_BYTES` of its own: once they are full the newest foreign item is dropped, so a
foreign flood never evicts one of the run's items, and the run's own bounds
(`MAX_RETAINED_ITEMS`, `MAX_RETAINED_BYTES`) count its own items only.

Why the seal is checked here and not by the readers: they do not hold the worker's key. The
check issues no command (nor does anything else here), so replay compares nothing it decides:
a replayer without the key (or with another) files sealed items as foreign, and its stream
differs, its commands do not. A publish is bounded before it is read (`MAX_PUBLISH_BYTES` by its
payload's size, `MAX_ITEMS_PER_PUBLISH`), and one the stream cannot read is dropped, never a
failed workflow task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.contrib.workflow_streams import (
    PublishEntry,
    PublishInput,
    WorkflowStream,
    WorkflowStreamState,
)

from agentloop import stream_seals
from agentloop.run_events import (
    ACTIVITY_KINDS,
    FOREIGN_TOPIC,
    MAX_FOREIGN_BYTES,
    MAX_FOREIGN_ITEMS,
    MAX_ITEMS_PER_PUBLISH,
    MAX_PUBLISH_BYTES,
    MAX_RETAINED_BYTES,
    MAX_RETAINED_ITEMS,
    PUBLISH_SIGNAL,
    TOPIC,
    RunEvent,
    wire_payload,
)

__all__ = ["PUBLISH_SIGNAL", "RunStream", "carried_state"]

MAX_PUBLISHERS = 64
"""Sealed publishers (model call attempts) whose last item number a run keeps, so that a sealed
item is taken once; the oldest go first (only a sealed item adds one, so nobody else can
grow this)."""

_STATE = TypeAdapter(WorkflowStreamState)


class RunStream(WorkflowStream):
    """`WorkflowStream` with its retention bounded, its publish signal made safe, and what
    others publish kept apart from the run's own."""

    def __init__(self, carried: Any = None) -> None:
        # Built from `AgentRun.__init__` (the stream checks its caller is an `__init__`). The
        # carried stream is workflow input: items that do not decode start it empty (the
        # stream decodes them before it registers anything, so it can be built again).
        try:
            super().__init__(prior_state=carried_state(carried))
        except Exception as exc:
            workflow.logger.warning("carried stream dropped: %s", type(exc).__name__)
            super().__init__(prior_state=None)
        # The publish signal goes through the run's dynamic signal handler (`receive`), never
        # a handler of its own: one that came with the start (signal-with-start, or sent
        # before the first task) was taken by the SDK as a dynamic signal, (name, args), and
        # then handed to the named handler registered meanwhile, which failed every workflow
        # task of the run (TypeError) for ever.
        workflow.set_signal_handler(PUBLISH_SIGNAL, None)
        self._publishers = {}  # the SDK's deduplication: unused (sealed items carry their own)
        self._sealed: dict[str, int] = {}
        """Sealed publisher -> the number of the last item taken from it."""
        self._bound()

    def publish(self, event: RunEvent) -> None:
        """One of the run's own items (the workflow's, or a sealed one)."""
        self.topic(TOPIC).publish(event.published())
        self._bound()

    def receive(self, args: Sequence[RawValue]) -> None:
        """The publish signal, from an activity or anyone who may signal the run, as the
        run's dynamic handler took it: anything but one `PublishInput` within
        `MAX_PUBLISH_BYTES` is dropped (by its size first, unread), and an item that is not a
        payload ends the batch (display only, so nothing else is lost)."""
        try:
            [raw] = args
            if raw.payload.ByteSize() > MAX_PUBLISH_BYTES:
                workflow.logger.warning("stream publish dropped: over %d bytes", MAX_PUBLISH_BYTES)
                return
            publish = workflow.payload_converter().from_payload(raw.payload, PublishInput)
            for entry in publish.items[:MAX_ITEMS_PER_PUBLISH]:
                self._take(entry)
        except Exception as exc:  # a hostile publish must not fail the workflow task
            workflow.logger.warning("stream publish dropped: %s", type(exc).__name__)
        self._bound()

    def _take(self, entry: PublishEntry) -> None:
        """One published item: the run's own if sealed for it, else foreign (or dropped)."""
        payload = wire_payload(entry.data)
        if entry.topic == TOPIC:
            info = workflow.info()
            opened = stream_seals.opened(
                stream_seals.worker_key(),
                info.workflow_id,
                info.run_id,
                workflow.payload_converter().from_payload(payload),
            )
            if opened is not None and opened.seq <= self._sealed.get(opened.publisher, 0):
                # The run's own item again: a flush the activity retried after it had arrived
                # (or a copy out of history). Taken once; not shown as anyone else's either.
                return
            own = self._own_event(opened)
            if own is not None:
                self.publish(own)
                return
        foreign, foreign_bytes = self._foreign_kept()
        size = _item_size(payload, FOREIGN_TOPIC)
        if foreign < MAX_FOREIGN_ITEMS and foreign_bytes + size <= MAX_FOREIGN_BYTES:
            self.topic(FOREIGN_TOPIC).publish(payload)

    def _own_event(self, opened: stream_seals.Opened | None) -> RunEvent | None:
        """A sealed item, newer than the last its publisher got taken, as the run's own: a
        kind an activity may say, shaped as a `RunEvent`."""
        if opened is None or opened.item.get("kind") not in ACTIVITY_KINDS:
            return None
        try:
            event = RunEvent.model_validate(opened.item)
        except ValidationError:
            return None
        self._sealed.pop(opened.publisher, None)  # the newest last: the oldest go first
        self._sealed[opened.publisher] = opened.seq
        while len(self._sealed) > MAX_PUBLISHERS:
            del self._sealed[next(iter(self._sealed))]
        return event

    def _foreign_kept(self) -> tuple[int, int]:
        sizes = [_item_size(item.data, item.topic) for item in self._log if item.topic != TOPIC]
        return len(sizes), sum(sizes)

    def _bound(self) -> None:
        """Drop the oldest items while the run's own pass their bounds (or, from a carried
        stream, the foreign theirs)."""
        kept = [(item.topic == TOPIC, _item_size(item.data, item.topic)) for item in self._log]
        own = [size for is_own, size in kept if is_own]
        foreign = [size for is_own, size in kept if not is_own]
        own_items, own_bytes = len(own), sum(own)
        foreign_items, foreign_bytes = len(foreign), sum(foreign)
        keep_from = 0
        while keep_from < len(kept) and (
            own_items > MAX_RETAINED_ITEMS
            or own_bytes > MAX_RETAINED_BYTES
            or foreign_items > MAX_FOREIGN_ITEMS
            or foreign_bytes > MAX_FOREIGN_BYTES
        ):
            is_own, size = kept[keep_from]
            if is_own:
                own_items, own_bytes = own_items - 1, own_bytes - size
            else:
                foreign_items, foreign_bytes = foreign_items - 1, foreign_bytes - size
            keep_from += 1
        if keep_from:
            self.truncate(self._base_offset + keep_from)

    def carried(self) -> dict[str, Any]:
        """What the next run starts its stream from (pollers detached first)."""
        state: dict[str, Any] = _STATE.dump_python(self.get_state(), mode="json")
        return state


def _item_size(data: Payload, topic: str) -> int:
    return data.ByteSize() + len(topic)


def carried_state(raw: Any) -> WorkflowStreamState | None:
    """The stream a run continued as new carried, or None (a fresh start, or anything not
    shaped like one: the stream then starts empty rather than failing the run)."""
    if raw is None:
        return None
    try:
        return _STATE.validate_python(raw)
    except (ValidationError, TypeError, ValueError):
        return None
