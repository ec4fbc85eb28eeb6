"""The model's text to the run's stream as the provider streams it (`run_events`).

One `text` item per batch interval (`TEXT_BATCH_SECONDS`, sooner past `TEXT_BATCH_CHARS`),
never one per token, each sent as a publish signal of its own (a signal in the run's history,
within `MAX_PUBLISH_BYTES`). A retried call first says `retry` (the text of its turn so far is
superseded). Each item is sealed with the worker's key (`agentloop.stream_seals`): that is what
makes it the run's own. Publishing is display only: it never fails, nor holds up, the model
call (a publish that cannot be sent is given up after `GIVE_UP_SECONDS`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from temporalio import activity
from temporalio.contrib.workflow_streams import PublishEntry
from temporalio.converter import PayloadConverter

from agentloop import stream_seals
from agentloop.run_client import RunClient
from agentloop.run_events import (
    TEXT_BATCH_CHARS,
    TEXT_BATCH_SECONDS,
    TOPIC,
    RunEvent,
)

GIVE_UP_SECONDS = 5.0

logger = logging.getLogger(__name__)


class TextPublisher:
    """Collects the text `on_text` is given and publishes it in batches while the call runs.
    `enabled=False` makes every method a no-op (a run that publishes nothing).

    Not the Workflow Streams client: it sends everything buffered as one signal, which a
    long answer given whole would take past `MAX_PUBLISH_BYTES`. A ticker
    of ours sends what is batched (its own cancel is never lost in an `asyncio.wait_for`,
    which before Python 3.12 could swallow it), and the rest goes when the call ends."""

    def __init__(self, turn: int, *, enabled: bool) -> None:
        self._turn = turn
        self._enabled = enabled
        self._pending: list[str] = []
        self._pending_chars = 0
        self._text_seen = False
        self._outbox: list[dict[str, Any]] = []
        self._run: RunClient | None = None
        self._converter: PayloadConverter | None = None
        self._publisher = secrets.token_hex(8)
        self._published = 0
        self._ticker: asyncio.Task[None] | None = None

    async def __aenter__(self) -> TextPublisher:
        if not self._enabled:
            return self
        info = activity.info()
        try:
            if not info.workflow_id:
                raise RuntimeError("the activity has no run")
            client = activity.client()
        except RuntimeError as exc:  # no run to publish to: the call goes on unwatched
            logger.warning("model text not published: %s", exc)
            return self
        self._run = RunClient(client, info.workflow_id, run_id=info.workflow_run_id)
        self._converter = client.data_converter.payload_converter
        attempt = info.attempt
        if attempt > 1:
            self._publish(RunEvent(kind="retry", turn=self._turn, at=_now(), attempt=attempt))
        self._ticker = asyncio.create_task(self._tick())
        return self

    def on_text(self, text: str) -> None:
        """A piece of the model's visible text (the adapter's `TextSink`)."""
        if self._run is None or not text:
            return
        self._text_seen = True
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars >= TEXT_BATCH_CHARS:
            self._batch_text()

    def whole(self, text: str) -> None:
        """The call's final text: published as one item when nothing streamed (a call made
        without streaming), so watchers see every turn's words."""
        if not self._text_seen:
            self.on_text(text)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        self._batch_text()
        await self._send(GIVE_UP_SECONDS)

    async def _tick(self) -> None:
        while self._run is not None:
            await asyncio.sleep(TEXT_BATCH_SECONDS)
            self._batch_text()
            await self._send(None)

    async def _send(self, timeout: float | None) -> None:
        """What is batched, to the run, an item a signal (display only: a failure stops
        publishing, never the model call)."""
        try:
            if timeout is None:  # the ticker's: no `wait_for`, whose cancel could be lost
                await self._signal_outbox()
            else:
                await asyncio.wait_for(self._signal_outbox(), timeout)
        except Exception as problem:  # the run ended, or Temporal is away
            logger.warning("model text not published: %s", problem)
            self._run = None

    async def _signal_outbox(self) -> None:
        while self._run is not None and self._converter is not None and self._outbox:
            [payload] = self._converter.to_payloads([self._outbox[0]])
            data = base64.b64encode(payload.SerializeToString()).decode("ascii")
            await self._run.publish([PublishEntry(topic=TOPIC, data=data)])
            self._outbox.pop(0)

    def _batch_text(self) -> None:
        if not self._pending:
            return
        text, self._pending, self._pending_chars = "".join(self._pending), [], 0
        for start in range(0, len(text), TEXT_BATCH_CHARS):  # an item within its signal
            delta = text[start : start + TEXT_BATCH_CHARS]
            self._publish(RunEvent(kind="text", turn=self._turn, at=_now(), delta=delta))

    def _publish(self, event: RunEvent) -> None:
        """`event`, sealed for this run with the worker's key, to the outbox."""
        if self._run is None:
            return
        info, key = activity.info(), stream_seals.worker_key()
        item = event.published()
        if key is not None and info.workflow_id and info.workflow_run_id:
            self._published += 1
            item = stream_seals.sealed(
                key, info.workflow_id, info.workflow_run_id, self._publisher, self._published, item
            )
        self._outbox.append(item)


def _now() -> datetime:
    return datetime.now(UTC)
