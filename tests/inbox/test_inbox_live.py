"""The inbox's fan-out of a run's stream (`agentloop.inbox.live`), driven by an upstream the
test feeds item by item (the browser test drives it with a real run): one subscription
however many browsers, a browser resuming after the last offset it got, a slow browser
dropped while the others and the subscription go on, the end told, the subscription ended
when nobody watches; one user's browsers capped, their oldest let go first."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from temporalio.client import Client

from agentloop.inbox import live as live_module
from agentloop.inbox.guards import BadHeader
from agentloop.inbox.live import (
    BROWSER_QUEUE,
    MAX_BROWSERS_PER_RUN,
    MAX_BROWSERS_PER_USER,
    Browser,
    Busy,
    LiveRuns,
    last_event_id,
)
from agentloop.run_events import RunEvent
from tests.support import waited_for

RUN = "run-live"


class Upstream:
    """Stands in for `agentloop.watch`: yields what the test puts, counts subscriptions."""

    def __init__(self) -> None:
        self.items: asyncio.Queue[RunEvent | Exception] = asyncio.Queue()
        self.subscribed: list[tuple[str, int]] = []
        self.closed = asyncio.Event()
        self.offset = 0

    def put(self, kind: str = "text", **fields: Any) -> None:
        event = RunEvent.model_validate({"kind": kind, "offset": self.offset, "turn": 1, **fields})
        self.items.put_nowait(event)
        self.offset += 1

    async def watch(
        self, client: Any, workflow_id: str, from_offset: int
    ) -> AsyncIterator[RunEvent]:
        self.subscribed.append((workflow_id, from_offset))
        try:
            while True:
                item = await self.items.get()
                if isinstance(item, Exception):
                    raise item
                yield item
                if item.kind == "done":
                    return
        finally:
            self.closed.set()


def frame(data: bytes | None) -> tuple[int | None, str | None, dict[str, Any]]:
    """An SSE frame's id, event name and data."""
    assert data is not None, "the stream ended"
    fields = dict(line.split(": ", 1) for line in data.decode().strip().split("\n"))
    offset = int(fields["id"]) if "id" in fields else None
    return offset, fields.get("event"), json.loads(fields["data"])


async def next_frame(browser: Browser) -> tuple[int | None, str | None, dict[str, Any]]:
    return frame(await waited_for(browser.queue.get(), "the next frame to the browser"))


async def offsets(browser: Browser, count: int) -> list[int | None]:
    return [(await next_frame(browser))[0] for _ in range(count)]


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


@pytest.fixture
async def live(upstream: Upstream) -> AsyncIterator[LiveRuns]:
    runs = LiveRuns(client=cast(Client, None), watch=upstream.watch, linger=0)  # never called
    yield runs
    await runs.close()


async def test_browsers_on_one_run_share_one_subscription_and_a_late_one_gets_what_it_missed(
    upstream: Upstream, live: LiveRuns
) -> None:
    first_feed, first = live.join(RUN, "ann", None)
    upstream.put(delta="Hello")
    upstream.put(delta=" world")
    assert await offsets(first, 2) == [0, 1]
    second_feed, second = live.join(RUN, "ann", None)
    assert second_feed is first_feed
    assert await offsets(second, 2) == [0, 1]  # what the feed kept, from the start
    upstream.put("call", call_id="c1", tool="get_weather")
    assert await offsets(first, 1) == await offsets(second, 1) == [2]
    assert upstream.subscribed == [(RUN, 0)]
    assert live.subscriptions[RUN] == 1 and live.watching() == {RUN: 2}

    # Reconnecting with Last-Event-ID 1: from offset 2 on, nothing twice.
    _, again = live.join(RUN, "ann", last_event_id("1"))
    assert await offsets(again, 1) == [2]
    assert again.queue.empty()


async def test_a_slow_browser_is_dropped_not_the_subscription(
    upstream: Upstream, live: LiveRuns
) -> None:
    feed, slow = live.join(RUN, "ann", None)
    _, reading = live.join(RUN, "ann", None)
    for offset in range(BROWSER_QUEUE + 1):  # one browser reads each item, one never does
        upstream.put(delta="x")
        assert await offsets(reading, 1) == [offset]
    assert slow not in feed.browsers and not slow.open
    assert slow.queue.qsize() == BROWSER_QUEUE + 1  # what it had, then the closing mark
    upstream.put(delta="y")
    assert await offsets(reading, 1) == [BROWSER_QUEUE + 1]
    assert live.subscriptions[RUN] == 1 and not feed.task.done()


async def test_the_end_is_told_and_the_subscription_ends_with_the_run(
    upstream: Upstream, live: LiveRuns
) -> None:
    feed, browser = live.join(RUN, "ann", None)
    upstream.put("done", status="completed", stop_reason="final_answer")
    offset, _, done = await next_frame(browser)
    assert (offset, done["kind"], done["status"]) == (0, "done", "completed")
    assert await next_frame(browser) == (None, "end", {"text": "the run has ended"})
    assert await browser.queue.get() is None
    await feed.task
    assert live.watching() == {}


async def test_an_unreadable_stream_ends_each_browser_saying_so(
    upstream: Upstream, live: LiveRuns
) -> None:
    feed, browser = live.join(RUN, "ann", None)
    upstream.items.put_nowait(RuntimeError("query failed"))
    _, event, data = await next_frame(browser)
    assert event == "end" and "live updates stopped (RuntimeError)" in data["text"]
    await feed.task
    assert live.watching() == {}


async def test_the_subscription_ends_when_the_last_browser_leaves(
    upstream: Upstream, live: LiveRuns
) -> None:
    feed, first = live.join(RUN, "ann", None)
    _, second = live.join(RUN, "ann", None)
    feed.remove(first)
    assert not feed.task.done() and live.watching() == {RUN: 1}
    feed.remove(second)
    await waited_for(upstream.closed.wait(), "the upstream feed to close")
    assert feed.task.cancelled() and live.watching() == {}
    live.join(RUN, "ann", None)  # a browser coming back subscribes again
    assert live.subscriptions[RUN] == 2


async def test_a_browser_asking_for_what_the_feed_no_longer_keeps_is_told(
    upstream: Upstream, live: LiveRuns, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_module, "MAX_RETAINED_ITEMS", 2)
    _, reading = live.join(RUN, "ann", None)
    for _ in range(4):
        upstream.put(delta="x")
    assert await offsets(reading, 4) == [0, 1, 2, 3]
    _, late = live.join(RUN, "ann", None)
    _, _, told = await next_frame(late)
    assert told == {"kind": "truncated", "offset": 2, "stop_reason": told["stop_reason"]}
    assert "items 0 to 1" in told["stop_reason"]
    assert await offsets(late, 2) == [2, 3]


def test_last_event_id_is_ascii_digits_or_absent() -> None:
    assert last_event_id("41") == 41
    assert last_event_id(None) is None and last_event_id("") is None  # a new page
    # "²".isdigit() is true and int("²") fails: the old reading answered 500 with a traceback.
    for header in ("²", "١٢", "-1", "1e3", "x", " 4", "9" * 40):
        with pytest.raises(BadHeader, match="ASCII digits"):
            last_event_id(header)


async def ended_saying(browser: Browser) -> str:
    """What the end frame a browser was closed with says (the queue holds nothing else)."""
    _, event, data = await next_frame(browser)
    assert event == "end" and await asyncio.wait_for(browser.queue.get(), 5) is None
    return str(data["text"])


async def test_one_user_s_browsers_are_capped_their_oldest_let_go_first(live: LiveRuns) -> None:
    hog = [live.join(RUN, "hog", None)[1] for _ in range(100)]
    _, other = live.join(RUN, "bea", None)
    let_go = hog[: 100 - MAX_BROWSERS_PER_USER]
    assert [b.open for b in hog] == [False] * len(let_go) + [True] * MAX_BROWSERS_PER_USER
    assert "newer page of hog's" in await ended_saying(let_go[0])
    assert live.let_go == {"hog": len(let_go)} and other.open
    assert live.watching() == {RUN: MAX_BROWSERS_PER_USER + 1}
    # Over runs too: the oldest of hog's on any run goes.
    _, elsewhere = live.join("run-other", "hog", None)
    assert not hog[len(let_go)].open and elsewhere.open


async def test_a_full_run_lets_go_its_users_own_oldest_and_refuses_a_newcomer(
    live: LiveRuns,
) -> None:
    joined: dict[str, list[Browser]] = {}
    for place in range(MAX_BROWSERS_PER_RUN):  # each user with as many as they may have
        user = f"user-{place // MAX_BROWSERS_PER_USER}"
        joined.setdefault(user, []).append(live.join(RUN, user, None)[1])
    assert live.watching() == {RUN: MAX_BROWSERS_PER_RUN}
    with pytest.raises(Busy, match="browsers watch this run already"):
        live.join(RUN, "newcomer", None)
    first_user = "user-0"
    _, again = live.join(RUN, first_user, None)
    assert again.open and not joined[first_user][0].open  # their own oldest, nobody else's
    assert live.watching() == {RUN: MAX_BROWSERS_PER_RUN}
    assert live.let_go == {first_user: 1}


async def test_a_browser_taking_the_place_of_a_user_s_only_one_still_counts(
    live: LiveRuns,
) -> None:
    for place in range(MAX_BROWSERS_PER_RUN - 1):
        live.join(RUN, f"user-{place // MAX_BROWSERS_PER_USER}", None)
    _, only = live.join(RUN, "cy", None)
    _, again = live.join(RUN, "cy", None)  # the run is full: cy's only one goes
    assert not only.open and [b for _, b in live.users["cy"]] == [again]
    others = [live.join(f"run-{i}", "cy", None)[1] for i in range(MAX_BROWSERS_PER_USER)]
    assert not again.open and all(b.open for b in others)  # it was counted, and oldest
