"""What every request must be before any handler sees it: its headers the inbox reads well
formed (else 400), and its body small enough for the inbox's forms (else 413), read whole
before it is parsed and never past that bound.

Starlette reads headers as Latin-1 and Python's `str.isdigit` takes `²` for a digit, so every
number the inbox reads from a header is ASCII digits, matched as such."""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentloop.inbox.pages import error_page

MAX_BODY_BYTES = 1024 * 1024
"""The largest form the inbox takes: an answer of 100,000 characters, percent-encoded."""
MAX_FORM_FIELDS = 32
"""More than any of the inbox's forms holds."""
ASCII_DIGITS = re.compile(r"[0-9]{1,19}")
PROTOCOLS = ("http", "https")


class BadHeader(ValueError):
    """A header the inbox reads, not as it must be."""


def ascii_number(name: str, value: str, most: int) -> int:
    """`value` of header `name` as a number of ASCII digits at most `most`; raises BadHeader."""
    if not ASCII_DIGITS.fullmatch(value) or int(value) > most:
        raise BadHeader(f"{name} must be a number of ASCII digits, at most {most}")
    return int(value)


def header_problem(request: Request) -> str | None:
    """Why the headers of `request` the inbox reads are not as they must be (None: they are).
    `Last-Event-ID` is read where the stream is served (`live.last_event_id`)."""
    proto = request.headers.get("x-forwarded-proto")
    if proto is not None and proto not in PROTOCOLS:
        return "X-Forwarded-Proto must be http or https"
    length = request.headers.get("content-length")
    if length is not None:
        try:
            ascii_number("Content-Length", length, 2**63)
        except BadHeader as exc:
            return str(exc)
    return None


class RequestGuard:
    """Refuses a request whose headers are malformed (400) or whose body is larger than
    `MAX_BODY_BYTES` (413: by its Content-Length at once, else as soon as more came), and
    hands the app a body it has read whole, so a form is parsed only once it is known small."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        problem = header_problem(request)
        if problem is not None:
            await error_page(request, None, "Bad request", problem, 400)(scope, receive, send)
            return
        too_large = f"a request body is at most {self.max_body_bytes} bytes"
        length = request.headers.get("content-length")
        if length is not None and int(length) > self.max_body_bytes:
            await error_page(request, None, "Refused", too_large, 413)(scope, receive, send)
            return
        if scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body was whole: nobody to answer
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                await error_page(request, None, "Refused", too_large, 413)(scope, receive, send)
                return
            more = message.get("more_body", False)
        await self.app(scope, replaying(bytes(body), receive), send)


def replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app: the body read, then what the client sends next (its leaving)."""
    sent = False

    async def receiving() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receiving
