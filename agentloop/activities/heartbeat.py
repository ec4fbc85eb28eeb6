"""Heartbeats while an activity body runs, so a dead worker is noticed within the heartbeat
timeout instead of the (much longer) start-to-close timeout."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from temporalio import activity

HEARTBEAT_EVERY_SECONDS = 1.0


@asynccontextmanager
async def keep_heartbeating(
    every: float = HEARTBEAT_EVERY_SECONDS,
    details: Callable[[], Sequence[Any]] = tuple,
) -> AsyncIterator[None]:
    """Heartbeat every `every` seconds while the body runs, each beat carrying what
    `details()` says then (the progress a retry of the activity resumes from: Temporal
    hands the last details to the next attempt)."""

    async def beat() -> None:
        # The heartbeat timeout runs from the start: a body that ends within `every` (most
        # do) costs no heartbeat call at all.
        while True:
            await asyncio.sleep(every)
            activity.heartbeat(*details())

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
