"""The HTTP a worker speaks to MCP servers, bounded: a JSON answer is read up to
`MAX_RESPONSE_BYTES` and no further. The SDK reads such an answer whole before it parses it,
so a server answering without end (or a gigabyte) would otherwise take the worker's memory
with it. Answers come uncompressed (compressed ones could expand past any count of what
arrived). An event stream is read event by event, and not counted here: a long-lived one
carries notifications for as long as it lasts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

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
    if response.headers.get("Content-Type", "").lower().startswith("text/event-stream"):
        return
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    response.stream = _Bounded(response.stream)


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > MAX_RESPONSE_BYTES:
                raise ResponseTooLarge(
                    f"the server's answer is over {MAX_RESPONSE_BYTES:,} bytes: not read"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
