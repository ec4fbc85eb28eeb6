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
    `enabled=False` makes every method a no-op (a run that publishes nothing)."""

    def __init__(self, turn: int, *, enabled: bool) -> None:
        self._turn = turn
        self._enabled = enabled
        self._pending: list[str] = []
        self._pending_chars = 0
        self._published_any = False
        self._client: WorkflowStreamClient | None = None
        self._topic: TopicHandle[object] | None = None
        self._ticker: asyncio.Task[None] | None = None

    async def __aenter__(self) -> TextPublisher:
        if not self._enabled:
            return self
        try:
            self._client = WorkflowStreamClient.from_within_activity(
                batch_interval=timedelta(seconds=TEXT_BATCH_SECONDS),
                max_retry_duration=timedelta(seconds=GIVE_UP_SECONDS),
            )
            await self._client.__aenter__()
        except Exception as exc:  # no stream today: the call goes on unwatched
            logger.warning("model text not published: %s", exc)
            self._client = None
            return self
        self._topic = self._client.topic(TOPIC)
        attempt = activity.info().attempt
        if attempt > 1:
            self._send(RunEvent(kind="retry", turn=self._turn, at=_now(), attempt=attempt))
        self._ticker = asyncio.create_task(self._tick())
        return self

    def on_text(self, text: str) -> None:
        """A piece of the model's visible text (the adapter's `TextSink`)."""
        if self._topic is None or not text:
            return
        self._pending.append(text)
        self._pending_chars += len(text)
        if self._pending_chars >= TEXT_BATCH_CHARS:
            self._flush_text()

    def whole(self, text: str) -> None:
        """The call's final text: published as one item when nothing streamed (a call made
        without streaming), so watchers see every turn's words."""
        if not self._published_any and not self._pending:
            self.on_text(text)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is None:
            return
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        self._flush_text()
        try:
            await asyncio.wait_for(self._client.__aexit__(None, None, None), GIVE_UP_SECONDS)
        except Exception as problem:  # the run ended, or Temporal is away: display only
            logger.warning("model text not published: %s", problem)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TEXT_BATCH_SECONDS)
            self._flush_text()

    def _flush_text(self) -> None:
        if not self._pending:
            return
        delta, self._pending, self._pending_chars = "".join(self._pending), [], 0
        self._send(RunEvent(kind="text", turn=self._turn, at=_now(), delta=delta))

    def _send(self, event: RunEvent) -> None:
        assert self._topic is not None
        self._topic.publish(event.published(), force_flush=True)
        self._published_any = True


def _now() -> datetime:
    return datetime.now(UTC)
