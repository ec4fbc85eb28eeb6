"""The model's text to the run's stream as the provider streams it (`run_events`).

One `text` item per batch interval (`TEXT_BATCH_SECONDS`, sooner past `TEXT_BATCH_CHARS`),
never one per token: each item is a signal in the run's history. A retried call first says
`retry` (the text of its turn so far is superseded). Publishing is display only: it never
fails, nor holds up, the model call (a publish that cannot be sent is given up after
`GIVE_UP_SECONDS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta
from types import TracebackType

from temporalio import activity
from temporalio.contrib.workflow_streams import TopicHandle, WorkflowStreamClient

from agentloop.run_events import TEXT_BATCH_CHARS, TEXT_BATCH_SECONDS, TOPIC, RunEvent

GIVE_UP_SECONDS = 5.0

logger = logging.getLogger(__name__)


class TextPublisher:
    """Collects the text `on_text` is given and publishes it in batches while the call runs.
    `enabled=False` makes every method a no-op (a run that publishes nothing).

    The stream client's own background flusher is not used: it is stopped by cancelling a
    task waiting in `asyncio.wait_for`, which before Python 3.12 can swallow the cancel when
    a flush was asked at that moment, and the call would then wait out `GIVE_UP_SECONDS`.
    A ticker of ours sends each batch (`flush`), and the rest goes when the call ends."""

    def __init__(self, turn: int, *, enabled: bool) -> None:
        self._turn = turn
        self._enabled = enabled
        self._pending: list[str] = []
        self._pending_chars = 0
        self._text_seen = False
        self._client: WorkflowStreamClient | None = None
        self._topic: TopicHandle[object] | None = None
        self._ticker: asyncio.Task[None] | None = None

    async def __aenter__(self) -> TextPublisher:
        if not self._enabled:
            return self
        try:
            self._client = WorkflowStreamClient.from_within_activity(
                max_retry_duration=timedelta(seconds=GIVE_UP_SECONDS)
            )
        except Exception as exc:  # no stream today: the call goes on unwatched
            logger.warning("model text not published: %s", exc)
            return self
        self._topic = self._client.topic(TOPIC)
        attempt = activity.info().attempt
        if attempt > 1:
            self._publish(RunEvent(kind="retry", turn=self._turn, at=_now(), attempt=attempt))
        self._ticker = asyncio.create_task(self._tick())
        return self

    def on_text(self, text: str) -> None:
        """A piece of the model's visible text (the adapter's `TextSink`)."""
        if self._topic is None or not text:
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
        while self._topic is not None:
            await asyncio.sleep(TEXT_BATCH_SECONDS)
            self._batch_text()
            await self._send(None)

    async def _send(self, timeout: float | None) -> None:
        """What is batched, to the run (display only: a failure stops publishing, never the
        model call)."""
        if self._client is None or self._topic is None:
            return
        try:
            if timeout is None:  # the ticker's: no `wait_for`, whose cancel could be lost
                await self._client.flush()
            else:
                await asyncio.wait_for(self._client.flush(), timeout)
        except Exception as problem:  # the run ended, or Temporal is away
            logger.warning("model text not published: %s", problem)
            self._topic = None

    def _batch_text(self) -> None:
        if not self._pending:
            return
        delta, self._pending, self._pending_chars = "".join(self._pending), [], 0
        self._publish(RunEvent(kind="text", turn=self._turn, at=_now(), delta=delta))

    def _publish(self, event: RunEvent) -> None:
        if self._topic is not None:
            self._topic.publish(event.published())


def _now() -> datetime:
    return datetime.now(UTC)
