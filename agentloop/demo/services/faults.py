"""Fault injection: make the next N requests to one endpoint fail in a chosen way.

The point is to reproduce, on demand, the failures that make a write's outcome unknown to its
caller, so the runner's reconciliation can be tested against a real system of record:

- `fail_before_commit`: answer 503 `unavailable` without running the handler (nothing written).
- `unavailable`: the same answer, meant for any endpoint (reads, operation lookups).
- `commit_then_drop`: run the handler (the write commits), then close the connection without
  answering: the client sees a dropped connection after it sent the request.
- `commit_then_hang`: run the handler, then hold the response for `hang_ms` so the client times
  out; if the client is still there afterwards it gets the response.

This module only keeps the schedule and performs the after-commit part; `control`'s request-log
middleware consults it for every business request, so faulted requests are logged like others.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from aiohttp import web


class FaultMode(StrEnum):
    COMMIT_THEN_DROP = "commit_then_drop"
    COMMIT_THEN_HANG = "commit_then_hang"
    FAIL_BEFORE_COMMIT = "fail_before_commit"
    UNAVAILABLE = "unavailable"

    @property
    def before_commit(self) -> bool:
        """The handler never runs: the fault answers in its place."""
        return self in (FaultMode.FAIL_BEFORE_COMMIT, FaultMode.UNAVAILABLE)


DEFAULT_HANG_MS = 60_000
MAX_HANG_MS = 600_000
MAX_COUNT = 1_000


@dataclass
class Fault:
    mode: FaultMode
    remaining: int
    hang_ms: int

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"mode": self.mode.value, "remaining": self.remaining}
        if self.mode is FaultMode.COMMIT_THEN_HANG:
            described["hang_ms"] = self.hang_ms
        return described


class Faults:
    """The pending faults of one app, per endpoint, consumed first-in first-out."""

    def __init__(self, endpoints: Iterable[str]) -> None:
        self.endpoints = frozenset(endpoints)
        self._pending: dict[str, deque[Fault]] = {}

    def inject(self, endpoint: str, mode: str, count: int = 1, hang_ms: int | None = None) -> Fault:
        """Apply `mode` to the next `count` requests to `endpoint` (after any already pending).

        Raises:
            ValueError: unknown endpoint or mode, or a count / hang outside its range.
        """
        fault = Fault(
            mode=_parse_mode(mode),
            remaining=_bounded_int("count", count, 1, MAX_COUNT),
            hang_ms=DEFAULT_HANG_MS if hang_ms is None else _bounded_int("hang_ms", hang_ms),
        )
        if hang_ms is not None and fault.mode is not FaultMode.COMMIT_THEN_HANG:
            raise ValueError("hang_ms applies only to commit_then_hang")
        if endpoint not in self.endpoints:
            known = ", ".join(sorted(self.endpoints))
            raise ValueError(f"unknown endpoint {endpoint!r}; known: {known}")
        self._pending.setdefault(endpoint, deque()).append(fault)
        return fault

    def take(self, endpoint: str) -> Fault | None:
        """The fault for the request that just arrived at `endpoint`, if any; consumes one."""
        queue = self._pending.get(endpoint)
        if not queue:
            return None
        head = queue[0]
        head.remaining -= 1
        if head.remaining == 0:
            queue.popleft()
            if not queue:
                del self._pending[endpoint]
        return Fault(head.mode, 1, head.hang_ms)

    def clear(self) -> None:
        self._pending.clear()

    def pending(self) -> dict[str, list[dict[str, Any]]]:
        return {
            name: [f.describe() for f in queue] for name, queue in sorted(self._pending.items())
        }


def _parse_mode(mode: str) -> FaultMode:
    try:
        return FaultMode(mode)
    except ValueError:
        known = ", ".join(m.value for m in FaultMode)
        raise ValueError(f"unknown fault mode {mode!r}; known: {known}") from None


def _bounded_int(name: str, value: Any, low: int = 0, high: int = MAX_HANG_MS) -> int:
    # bool is an int subclass; `true` in a JSON body is a mistake, not a count of 1.
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer between {low} and {high}")
    return value


async def after_commit(request: web.Request, fault: Fault) -> bool:
    """Apply an after-commit fault; returns whether the response may still be delivered.

    A hang ends early when the client goes away: the service runs with handler cancellation,
    so the `CancelledError` raised here tells the request log that nothing was delivered."""
    if fault.mode is FaultMode.COMMIT_THEN_HANG:
        await asyncio.sleep(fault.hang_ms / 1000)
        return True
    if fault.mode is FaultMode.COMMIT_THEN_DROP:
        # Closing before the response is written: aiohttp then refuses to write to the closing
        # transport, so the client reads EOF where the status line should be.
        if request.transport is not None:
            request.transport.close()
        return False
    return True
