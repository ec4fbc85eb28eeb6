"""The HTTP a worker speaks to MCP servers, bounded: a JSON answer is read up to
`MAX_RESPONSE_BYTES` and no further. The SDK reads such an answer whole before it parses it,
so a server answering without end (or a gigabyte) would otherwise take the worker's memory
with it. Answers come uncompressed (compressed ones could expand past any count of what
arrived). An event stream is read event by event, and not counted here: a long-lived one
carries notifications for as long as it lasts.

An answer to tools/list nested deeper than the SDK's JSON parser reads comes to it with what
lies too deep cut (`listing.readable`): one tool with a hostile schema is left out, and the
rest of the listing stands."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from agentloop.mcp.listing import readable

MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""Larger than any tool result a run keeps inline (images and blobs become artifacts, text
past a tool's `max_result_chars` too), with room for base64."""

REQUEST_HEADERS = {"Accept-Encoding": "identity"}


class ResponseTooLarge(httpx2.StreamError):
    """An answer past the bound: the SDK takes it as one it could not read."""


async def bound_response(response: httpx2.Response) -> None:
    """An httpx response hook (it runs before the body is read): what the SDK reads of a JSON
    answer stops at the bound. A hook, not a transport of our own: the client keeps the
    proxies it takes from the environment."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        await response.aclose()
        raise ResponseTooLarge(f"the server answered {encoding}-compressed, asked not to")
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    listing = _asks_listing(response.request)
    if response.headers.get("Content-Type", "").lower().startswith("text/event-stream"):
        if listing:
            response.stream = _ListingEvents(response.stream)
        return
    response.stream = _Bounded(response.stream, listing=listing)


def _asks_listing(request: httpx2.Request) -> bool:
    try:
        return b'"method":"tools/list"' in request.content
    except httpx2.RequestNotRead:  # a streamed request: none the SDK sends for a listing
        return False


def _cut(data: bytes) -> bytes | None:
    """`data`, a tools/list answer, cut to what a parser reads (None: it reads as it is)."""
    try:
        shortened = readable(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None
    return shortened.encode("utf-8") if shortened is not None else None


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, *, listing: bool) -> None:
        self._inner = inner
        self._listing = listing

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        held: list[bytes] = []
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > MAX_RESPONSE_BYTES:
                raise ResponseTooLarge(
                    f"the server's answer is over {MAX_RESPONSE_BYTES:,} bytes: not read"
                )
            if self._listing:  # the SDK reads it whole anyway before it parses it
                held.append(chunk)
            else:
                yield chunk
        if held:
            body = b"".join(held)
            yield _cut(body) or body

    async def aclose(self) -> None:
        await self._inner.aclose()


class _ListingEvents(httpx2.AsyncByteStream):
    """An event stream answering tools/list, passed on line by line, a `data:` line cut
    when it is too deep to read."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        partial: list[bytes] = []
        async for chunk in self._inner:
            head, newline, rest = chunk.rpartition(b"\n")
            if not newline:
                partial.append(chunk)
                continue
            lines = b"".join([*partial, head]).split(b"\n")
            partial = [rest] if rest else []
            yield b"".join(_event_line(line) + b"\n" for line in lines)
        if partial:
            yield _event_line(b"".join(partial))

    async def aclose(self) -> None:
        await self._inner.aclose()


def _event_line(line: bytes) -> bytes:
    if not line.startswith(b"data:"):
        return line
    end = b"\r" if line.endswith(b"\r") else b""
    data = line[5:].removeprefix(b" ").removesuffix(b"\r")
    cut = _cut(data)
    return line if cut is None else b"data: " + cut + end
