"""A run page live while the run runs: one subscription to the run's stream per watched run,
fanned out to every browser on it by server-sent events.

Every reader of a run's stream costs its worker a query each batch interval, so the inbox
never subscribes per browser: the first browser on a run starts one `agentloop.watch` task
(a `Feed`), every browser on that run is served from it, and the task ends when the run is
done or, shortly
after the last browser leaves (a reload or a form's answer page comes back meanwhile),
when nobody watches. Each browser has a bounded queue: one that falls behind is dropped, never
the subscription; its EventSource comes back with `Last-Event-ID` (the stream offset of the
last item it got) and is served from what the feed kept.

The stream is display only (anyone who may signal a run may publish to it): the page shows
from it the model's text, which calls were proposed and how they ended, and the waits; what a
person decides on comes from `status`, never from here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter, deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send
from temporalio.client import Client

from agentloop.inbox.guards import ascii_number
from agentloop.run_client import watch
from agentloop.run_events import MAX_RETAINED_BYTES, MAX_RETAINED_ITEMS, RunEvent

logger = logging.getLogger(__name__)

Watch = Callable[[Client, str, int], AsyncIterator[RunEvent]]

MAX_WATCHED_RUNS = 100
"""Runs one inbox process follows at once (each is one subscription on its run)."""
MAX_BROWSERS_PER_RUN = 100
MAX_BROWSERS_PER_USER = 8
"""Live pages one user has open at once, over all runs: a new one lets that user's oldest go
(its page says so), so one user never holds a run's places, nor the inbox's runs, alone."""
BROWSER_QUEUE = 256
"""Items a browser may fall behind by before it is dropped (it reconnects and catches up)."""
KEEPALIVE_SECONDS = 15.0
"""A comment line this often keeps proxies from closing a quiet stream, and finds browsers
that left without a word."""
LINGER_SECONDS = 5.0
"""How long a feed outlives its last browser: an answer page or a reload comes back to it
instead of subscribing again."""
RECONNECT_MS = 2_000
CLOSE_SECONDS = 5.0
MAX_LAST_EVENT_ID = 10**15
MEDIA_TYPE = "text/event-stream"
STREAM_HEADERS = {"x-accel-buffering": "no"}  # nginx: pass each item on as it comes


def sse(data: dict[str, object], *, event: str | None = None, offset: int | None = None) -> bytes:
    """One server-sent event: its `id` the stream offset (what `Last-Event-ID` brings back)."""
    lines = [f"id: {offset}"] if offset is not None else []
    if event:
        lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, ensure_ascii=True))  # one line: JSON escapes \n
    return ("\n".join(lines) + "\n\n").encode()


def end_frame(text: str) -> bytes:
    """The last frame of a stream that will not go on: the browser stops reconnecting."""
    return sse({"text": text}, event="end")


def last_event_id(header: str | None) -> int | None:
    """The offset a reconnecting browser got last, or None (a new page: from the start).
    Raises `BadHeader` for anything but ASCII digits up to `MAX_LAST_EVENT_ID`."""
    if not header:
        return None
    return ascii_number("Last-Event-ID", header, MAX_LAST_EVENT_ID)


@dataclass(frozen=True)
class Frame:
    offset: int
    data: bytes


class Browser:
    """One browser's place on a feed: whose it is, what it has not been sent yet, and from
    which offset on it wants items."""

    def __init__(self, user: str, start: int) -> None:
        self.user = user
        self.start = start
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.open = True

    def offer(self, data: bytes) -> bool:
        """False: the browser is too far behind (it is then closed)."""
        if not self.open:
            return True
        if self.queue.qsize() >= BROWSER_QUEUE:
            self.close()
            return False
        self.queue.put_nowait(data)
        return True

    def close(self, last: bytes | None = None) -> None:
        """No more frames; `last` (the end frame) first when given. The queue holds at most
        `BROWSER_QUEUE` frames, this one and the closing mark."""
        if not self.open:
            return
        self.open = False
        if last is not None:
            self.queue.put_nowait(last)
        self.queue.put_nowait(None)


class Feed:
    """One run's subscription, what it read (bounded as the run bounds what it keeps), and
    the browsers it serves."""

    def __init__(self, live: LiveRuns, workflow_id: str) -> None:
        self.live = live
        self.workflow_id = workflow_id
        self.browsers: set[Browser] = set()
        self.kept: deque[Frame] = deque()
        self.kept_bytes = 0
        self.leaving: asyncio.TimerHandle | None = None
        self.task = asyncio.create_task(self._follow(), name=f"inbox-watch-{workflow_id}")

    async def _follow(self) -> None:
        try:
            async for event in self.live.watch(self.live.client, self.workflow_id, 0):
                self._send(event)
            ending = "the run has ended"
        except Exception as exc:  # the run's stream could not be read: the page says so
            logger.warning("watching %s stopped: %r", self.workflow_id, exc)
            ending = f"live updates stopped ({type(exc).__name__}): reload the page"
        self.live.forget(self)
        for browser in self.browsers:
            browser.close(end_frame(ending))

    def _send(self, event: RunEvent) -> None:
        assert event.offset is not None  # set by the reader
        truncated = event.kind == "truncated"
        # A `truncated` notice has the offset of the next item, so it carries no id: a browser
        # reconnecting after it must still get that item.
        data = sse(event.published(), offset=None if truncated else event.offset)
        if not truncated:
            self._keep(Frame(event.offset, data))
        for browser in list(self.browsers):
            if event.offset >= browser.start and not browser.offer(data):
                self.browsers.discard(browser)  # too slow: its EventSource reconnects

    def _keep(self, frame: Frame) -> None:
        self.kept.append(frame)
        self.kept_bytes += len(frame.data)
        while len(self.kept) > MAX_RETAINED_ITEMS or self.kept_bytes > MAX_RETAINED_BYTES:
            self.kept_bytes -= len(self.kept.popleft().data)

    def add(self, user: str, start: int) -> Browser:
        """A browser from offset `start` on: first what the feed kept of it (or a word that
        older items are gone), then each item as it comes."""
        if self.leaving is not None:
            self.leaving.cancel()
            self.leaving = None
        browser = Browser(user, start)
        if self.kept and start < self.kept[0].offset:
            gone = f"items {start} to {self.kept[0].offset - 1} are no longer kept here"
            browser.offer(
                sse({"kind": "truncated", "offset": self.kept[0].offset, "stop_reason": gone})
            )
        for frame in self.kept:
            if frame.offset >= start:
                browser.offer(frame.data)
        self.browsers.add(browser)
        return browser

    def remove(self, browser: Browser) -> None:
        self.browsers.discard(browser)
        if not self.browsers and not self.task.done() and self.leaving is None:
            loop = asyncio.get_running_loop()
            self.leaving = loop.call_later(self.live.linger, self._leave_if_unwatched)

    def _leave_if_unwatched(self) -> None:
        self.leaving = None
        if not self.browsers:
            self.live.forget(self)
            self.task.cancel()


class Busy(Exception):
    """The inbox follows as many runs, or a run has as many browsers, as it allows."""


class LiveRuns:
    """The feeds of one inbox process, by workflow id, and each user's browsers on them."""

    def __init__(self, client: Client, watch: Watch = watch, linger: float = LINGER_SECONDS):
        self.client = client
        self.watch = watch
        self.linger = linger
        self.feeds: dict[str, Feed] = {}
        self.subscriptions: Counter[str] = Counter()
        """Subscriptions started, by workflow id (one per feed)."""
        self.users: dict[str, deque[tuple[Feed, Browser]]] = {}
        """User -> their browsers, oldest first."""
        self.let_go: Counter[str] = Counter()
        """Browsers let go for a newer one of the same user, by user."""
        self.closed = False

    def check(self, workflow_id: str, user: str) -> None:
        """Raises `Busy` when `user`'s browser on `workflow_id` could not be served now."""
        feed = self.feeds.get(workflow_id)
        if feed is None and len(self.feeds) >= MAX_WATCHED_RUNS:
            raise Busy(f"the inbox follows {MAX_WATCHED_RUNS} runs already")
        if (
            feed is not None
            and len(feed.browsers) >= MAX_BROWSERS_PER_RUN
            and not any(b.user == user for b in feed.browsers)
        ):
            raise Busy(f"{MAX_BROWSERS_PER_RUN} browsers watch this run already")

    def join(self, workflow_id: str, user: str, after: int | None) -> tuple[Feed, Browser]:
        """`user`'s browser on `workflow_id`'s feed (started if need be), from the item after
        `after` on (None: from the first). A user at `MAX_BROWSERS_PER_USER`, or on a full
        run, has their oldest browser (on that run, when full) let go. Raises `Busy`."""
        self.check(workflow_id, user)
        mine = self.users.get(user, deque())
        if len(mine) >= MAX_BROWSERS_PER_USER:
            self._let_go(*mine[0])
        feed = self.feeds.get(workflow_id)
        if feed is not None and len(feed.browsers) >= MAX_BROWSERS_PER_RUN:
            self._let_go(feed, next(b for f, b in mine if f is feed and b in feed.browsers))
        if feed is None:
            feed = self.feeds[workflow_id] = Feed(self, workflow_id)
            self.subscriptions[workflow_id] += 1
        browser = feed.add(user, 0 if after is None else after + 1)
        self.users.setdefault(user, deque()).append((feed, browser))  # `mine` may be gone
        return feed, browser

    def leave(self, feed: Feed, browser: Browser) -> None:
        """The browser's stream has ended (or it is let go)."""
        feed.remove(browser)
        mine = self.users.get(browser.user)
        if mine is not None and (feed, browser) in mine:
            mine.remove((feed, browser))
            if not mine:
                del self.users[browser.user]

    def _let_go(self, feed: Feed, browser: Browser) -> None:
        self.let_go[browser.user] += 1
        self.leave(feed, browser)
        said = f"live updates moved to a newer page of {browser.user}'s: reload to follow here"
        browser.close(end_frame(said))

    def forget(self, feed: Feed) -> None:
        if self.feeds.get(feed.workflow_id) is feed:
            del self.feeds[feed.workflow_id]

    def watching(self) -> dict[str, int]:
        """Workflow id -> browsers on it, for each run followed now."""
        return {workflow_id: len(feed.browsers) for workflow_id, feed in self.feeds.items()}

    async def close(self) -> None:
        """Every feed stopped and every browser's stream ended (without an end frame: the
        browsers try again, and find the next inbox)."""
        self.closed = True
        feeds, self.feeds = list(self.feeds.values()), {}
        for feed in feeds:
            feed.task.cancel()
            for browser in feed.browsers:
                browser.close()
        tasks = [feed.task for feed in feeds]
        if tasks:  # bounded: a subscription slow to hear its cancel must not hold the inbox
            await asyncio.wait(tasks, timeout=CLOSE_SECONDS)

    def stream(self, workflow_id: str, user: str, after: int | None) -> EventStream:
        return EventStream(self, workflow_id, user, after)


class EventStream(StreamingResponse):
    """A browser's server-sent events on one run: joined when the response starts, left
    when it ends, however it ends (the browser gone, the run done, the inbox stopping)."""

    def __init__(self, live: LiveRuns, workflow_id: str, user: str, after: int | None) -> None:
        super().__init__(iter(()), media_type=MEDIA_TYPE, headers=STREAM_HEADERS)
        self.live = live
        self.workflow_id = workflow_id
        self.user = user
        self.after = after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.live.closed:
            self.body_iterator = one(end_frame("the inbox is stopping: reload the page"))
            await super().__call__(scope, receive, send)
            return
        try:
            feed, browser = self.live.join(self.workflow_id, self.user, self.after)
        except Busy as busy:
            self.body_iterator = one(end_frame(f"no live updates: {busy}"))
            await super().__call__(scope, receive, send)
            return
        frames = self._frames(browser)
        self.body_iterator = frames
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.live.leave(feed, browser)
            await frames.aclose()

    async def _frames(self, browser: Browser) -> AsyncGenerator[bytes, None]:
        yield f"retry: {RECONNECT_MS}\n\n".encode()
        while True:
            try:
                data = await asyncio.wait_for(browser.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            if data is None:
                return
            yield data


async def one(data: bytes) -> AsyncIterator[bytes]:
    yield data
