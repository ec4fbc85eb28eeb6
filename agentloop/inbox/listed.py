"""The inbox's list of waiting runs, kept by one background task per inbox process: every
view answers from the last complete listing at once, instead of listing visibility itself
(with thousands of runs said to wait, a listing takes longer than a view may)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.service import RPCError

from agentloop.inbox.reading import Listing, Waiting, listing

log = logging.getLogger(__name__)


class WaitingList:
    """The waiting runs of every tenant, listed again `refresh` after each listing ends
    (`reading.listing`); one listing is held, replaced whole. Started by the first view, which
    waits for the first listing at most `wait`; stopped by `close`."""

    def __init__(
        self,
        client: Client,
        key: Callable[[], bytes | None],
        wait: timedelta,
        refresh: timedelta,
    ) -> None:
        self.client = client
        self.key = key
        self.wait = wait
        self.refresh = refresh
        self.latest: Listing | None = None
        self.listings = 0
        """How many listings were complete (each view reads the latest, never lists)."""
        self._listed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def seen_by(self, tenants: Sequence[str] | None) -> Waiting:
        """What a viewer of `tenants` sees of the last listing; before the first one (not
        complete within `wait`), nothing, and `listed_at` None says so."""
        if self._task is None:
            self._task = asyncio.create_task(self._listing())
        if self.latest is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listed.wait(), self.wait.total_seconds())
        if self.latest is None:
            return Waiting(keyless=self.key() is None)
        return self.latest.seen_by(tenants)

    async def _listing(self) -> None:
        while True:
            try:
                self.latest = await listing(self.client, self.key(), None, self.wait)
                self.listings += 1
                self._listed.set()
            except RPCError as exc:  # Temporal away a moment: the last listing stays
                log.warning("the inbox could not list the waiting runs: %s", exc.message)
            except Exception:  # the task lives as long as the inbox: the last listing stays
                log.exception("the inbox could not list the waiting runs")
            await asyncio.sleep(self.refresh.total_seconds())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
