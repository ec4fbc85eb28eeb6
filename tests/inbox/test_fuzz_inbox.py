"""Generated requests at every route of the inbox (issue 45, part 7), behind a proxy and in
local mode, against the real dev server, worker and scripted provider, sent as raw bytes: any
method; paths naming workflow ids with `/`, `..`, `%`, `~`, non-ASCII letters, thousands of
characters, or no id `encode_id` writes; headers the inbox reads (the proxy's user header,
Host, Cookie, Origin, Last-Event-ID, X-Forwarded-*, Content-Length and Transfer-Encoding),
with non-ASCII and control bytes; bodies of any size around the 1 MiB bound, any number of
fields, urlencoded, multipart or neither, well or badly formed. Each request carries no
session, a session without its token, a token of another session, or its session's token
spoiled (from another site, in a body too large or of too many fields, in the wrong field).

Every answer is one the inbox documents (never a 500), no log line or page holds a
traceback, no POST gets past the token check, and the run they all name receives no signal
and no update: it still waits on its call with nothing refused, until one valid decision
from the inbox completes it. A short slice runs in CI, thousands of requests under `make
fuzz`; a failure names the seed that reproduces it (`tests.fuzzing`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_from_bytes, urlencode

import pytest
from starlette.requests import cookie_parser
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from agentloop.inbox import InboxOptions, InboxServer
from agentloop.inbox.guards import MAX_BODY_BYTES, MAX_FORM_FIELDS
from agentloop.runtime.config import Settings
from agentloop.waiting import encode_id
from tests.fuzzing import SEED, case_rng, cases
from tests.inbox.test_inbox_browser import APPROVER, USER_HEADER, waiting_booking
from tests.live import Live
from tests.support import wait_for_phase
from tests.tools.test_fuzz_results import text

pytestmark = [pytest.mark.integration, pytest.mark.fuzz, pytest.mark.usefixtures("clean_fakes")]

ANSWERED = frozenset({200, 301, 302, 303, 307, 308, 400, 401, 403, 404, 405, 413, 503})
"""What the inbox answers: a page, a redirect, a refusal (401: no user from the proxy), or
no live feed to spare."""
ACTIONS = ("decide", "signing-message", "answer", "resolve", "cancel")
GETS = ("/", "/api/inbox", "/runs", "/whoami", "/static/inbox.js", "/static/../app.py")
METHODS = ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "get", "BREW")
SESSION = "agentloop_inbox_session"
USER = "agentloop_inbox_user"
CONCURRENT = 8
ANSWER_SECONDS = 60
INPUTS = ("approve", "resolve", "message", "cancel", "decide_approval")
"""The signals and the update a person's action sends a run."""


@dataclass
class Target:
    """One inbox under fuzz: its port, whether a proxy names its users, and one session
    with its form token (the only pair that would act)."""

    port: int
    proxied: bool
    session: str = ""
    token: str = ""


@dataclass
class Request:
    """One generated request, as bytes, and what it is."""

    head: bytes
    body: bytes
    method: str
    post_to_action: bool
    truncated: bool = False
    """The body is shorter than its framing says: the client leaves before it is whole."""
    shown: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return " ".join(self.shown)


def workflow_segment(rng: random.Random, run_id: str) -> str:
    """The path segment naming a run: the waiting run's (most often), another id written as
    `encode_id` writes it, or a segment it never writes."""
    pick = rng.randrange(10)
    if pick < 5:
        return encode_id(run_id)
    ids = ["ops/refund-7", "..", ".", "a%2Fb", "~", "~2F", "é", "🙂/x", text(rng, 30) or "x"]
    if pick < 7:
        return encode_id(rng.choice([*ids, "r" * rng.choice([300, 5_000])]))
    raw = ["..", "%2e%2e", "~zz", "~2f", "~2F..", "%00", "a%2Fb", "%", "é", "r" * 9_000, ""]
    return quote_from_bytes(rng.choice(raw).encode(), safe="%~/.")


def path_of(rng: random.Random, run_id: str) -> tuple[str, bool]:
    """A request target, and whether it is one of the run's actions."""
    segment = workflow_segment(rng, run_id)
    kind = rng.randrange(10)
    if kind < 4:
        path, action = f"/runs/{segment}/{rng.choice(ACTIONS)}", True
    elif kind < 6:
        path, action = f"/runs/{segment}", False
    elif kind < 7:
        path, action = f"/api/runs/{segment}/events", False
    else:
        path, action = rng.choice(GETS), False
    if rng.random() < 0.15:
        path = rng.choice(["/", "//", "/./"]) + path.lstrip("/") + rng.choice(["", "/"])
    if rng.random() < 0.2:
        filters = {k: text(rng, 20) for k in rng.sample(["kind", "tool", "tenant", "x"], 2)}
        path += "?" + urlencode(filters)
    return path, action


def header_lines(rng: random.Random, target: Target, cookie: str, clean: bool) -> list[bytes]:
    """Some of the headers the inbox reads, each well formed or not (`clean`: as a browser
    behind the proxy would send them)."""
    host = f"127.0.0.1:{target.port}"
    if clean:
        lines = [f"Host: {host}".encode(), f"Origin: http://{host}".encode()]
        if target.proxied:
            lines.append(f"{USER_HEADER}: {APPROVER}".encode())
        return lines + ([b"Cookie: " + cookie.encode("latin-1", "replace")] if cookie else [])
    lines = [b"Host: " + rng.choice([host, host, host, "localhost", "evil.example", ""]).encode()]
    if target.proxied and rng.random() < 0.9:
        users = [APPROVER, APPROVER, "mallory", "", "a b", "x" * 300, "lead\x7f"]
        user = rng.choice(users).encode("latin-1") if rng.random() < 0.9 else rng.randbytes(6)
        lines.append(USER_HEADER.encode() + b": " + user)
    if cookie:
        lines.append(b"Cookie: " + cookie.encode("latin-1", "replace"))
    others: list[tuple[str, list[bytes]]] = [
        ("Origin", [f"http://{host}".encode(), b"https://evil.example", b"null", b"\xff"]),
        ("Last-Event-ID", [b"0", b"12", b"\xb2", b"-1", b"1e3", b" 5", b"9" * 30]),
        ("X-Forwarded-Proto", [b"https", b"http", b"gopher", b"", b"HTTPS"]),
        ("X-Forwarded-Host", [host.encode(), b"evil.example", b"\xe9"]),
        ("X-Forwarded-For", [b"10.0.0.1", b"1.2.3.4, ::1", b"\x01"]),
        ("Accept", [b"text/event-stream", b"*/*", b"\xff\xfe"]),
        ("Referer", [f"http://{host}/".encode(), b"javascript:alert(1)"]),
        ("X-" + text(rng, 8).replace(":", ""), [rng.randbytes(rng.randint(0, 20))]),
    ]
    for name, values in rng.sample(others, rng.randint(0, 4)):
        lines.append(name.encode("utf-8", "replace") + b": " + rng.choice(values))
    if rng.random() < 0.05:
        lines.append(b"X-Big: " + b"b" * rng.choice([9_000, 70_000]))
    return lines


def cookie_and_token(rng: random.Random, target: Target) -> tuple[str, str | None, bool]:
    """A Cookie header, the form token sent (None: none), and whether they are the one
    valid pair (then the request must be spoiled some other way)."""
    other = secrets.token_urlsafe(32)
    user = f"; {USER}={rng.choice([APPROVER, 'mallory', '', 'a b', 'é'])}"
    cookie = rng.choice(["", f"{SESSION}={target.session}", f"{SESSION}={other}"])
    cookie += user if not target.proxied or rng.random() < 0.3 else ""
    if rng.random() < 0.1:
        cookie = rng.choice([f"{SESSION}=;{SESSION}={target.session}", ";;==", "c=" + "k" * 9_000])
    token = rng.choice([None, target.token, target.token, "0" * 64, target.token.upper(), ""])
    if token == target.token and rng.random() < 0.3:
        token += rng.choice([" ", "\x00", "0"])
    session = cookie_parser(cookie).get(SESSION)
    return cookie, token, token == target.token and session == target.session


def form_fields(rng: random.Random, token: str | None, csrf_name: str) -> list[tuple[str, str]]:
    """A decision's fields (for the waiting call, or not), with other fields, any text."""
    fields = [
        ("call_id", rng.choice(["c_res", "c_res", "c_other", "", text(rng, 10)])),
        ("args_digest", rng.choice(["sha256:" + "0" * 64, "", text(rng, 20)])),
        ("verdict", rng.choice(["approve", "reject", "", text(rng, 5)])),
        ("text", text(rng, rng.choice([10, 500]))),
        ("outcome", rng.choice(["applied", "not_applied", text(rng, 5)])),
        ("reason", text(rng, 30)),
        ("name", rng.choice([APPROVER, "", "a b", text(rng, 10)])),
    ]
    chosen = rng.sample(fields, rng.randint(0, len(fields)))
    if token is not None:
        chosen.append((csrf_name, token))
    rng.shuffle(chosen)
    return chosen


def encoded_body(rng: random.Random, fields: list[tuple[str, str]]) -> tuple[bytes, str]:
    """The fields as a body and its Content-Type: urlencoded or multipart, each well or
    badly formed, or bytes that are neither."""
    kind = rng.randrange(8)
    if kind < 4:
        body = urlencode(fields).encode()
        if kind == 3:
            body += rng.choice([b"&%zz=1", b"&\xff\xfe=\xc3", b"&&&=", b"&a"])
        return body, "application/x-www-form-urlencoded"
    if kind < 7:
        boundary = "b0undary"
        parts = b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
            + value.encode()
            + b"\r\n"
            for name, value in fields
        )
        if kind == 5:  # a file, which no form of the inbox takes
            parts += (
                f'--{boundary}\r\nContent-Disposition: form-data; name="f"; filename="a.txt"'
                "\r\nContent-Type: text/plain\r\n\r\nfile\r\n"
            ).encode()
        ending = f"--{boundary}--\r\n".encode() if kind != 6 else b"--garbage"
        kind_header = rng.choice(
            [f"multipart/form-data; boundary={boundary}", "multipart/form-data", "multipart/x"]
        )
        return parts + ending, kind_header
    return rng.randbytes(rng.randint(0, 500)), rng.choice(["application/json", "text/plain", ""])


def too_many(rng: random.Random, fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return fields + [(f"f{n}", "x") for n in range(MAX_FORM_FIELDS + rng.choice([1, 50]))]


def generated(rng: random.Random, target: Target, run_id: str) -> Request:
    path, action = path_of(rng, run_id)
    method = "POST" if action and rng.random() < 0.8 else rng.choice(METHODS)
    if not action and rng.random() < 0.5:
        method = rng.choice(["GET", "POST"])
    cookie, token, valid = cookie_and_token(rng, target)
    csrf_name = "csrf" if rng.random() < 0.9 else rng.choice(["CSRF", "csrf ", "token"])
    fields = form_fields(rng, token, csrf_name)
    clean = rng.random() < 0.5  # only the token (or the session) is wrong
    lines = header_lines(rng, target, cookie, clean)
    # The one valid pair comes in a request the inbox must refuse all the same: of too many
    # fields or too large (each refused before it is parsed), or from another site.
    spoil = rng.choice(["fields", "size", "origin"]) if valid else ""
    if spoil == "fields":
        fields = too_many(rng, fields)
    if spoil == "origin":
        lines = [line for line in lines if not line.lower().startswith(b"origin:")]
        lines.append(b"Origin: https://another.example")
    body, content_type = b"", ""
    if method not in ("GET", "HEAD") or rng.random() < 0.1 or valid:
        body, content_type = encoded_body(rng, fields)
        if spoil == "size" or rng.random() < 0.05:
            over = rng.choice([1, 5_000]) if spoil else rng.choice([-10, 0, 1, 5_000])
            body += b"&pad=" + b"p" * max(MAX_BODY_BYTES - len(body) - 5 + over, 0)
    if content_type:
        lines.append(b"Content-Type: " + content_type.encode())
    framing = rng.randrange(12) if not clean else 5
    truncated = False
    if framing in (0, 4):  # chunked, and (4) a Content-Length beside it, as in a smuggling
        lines.append(b"Transfer-Encoding: chunked")
        if framing == 4:
            lines.append(b"Content-Length: %d" % len(body))
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    elif framing == 1:  # more than it sends: the client leaves before the body is whole
        lines.append(b"Content-Length: %d" % (len(body) + rng.choice([1, 10_000])))
        truncated = True
    elif framing == 2:
        value = rng.choice([b"-1", b"\xb2", b"1e3", b" 12", b"9" * 25, b"0x10", b""])
        lines.append(b"Content-Length: " + value)
    elif framing == 3:
        lines += [b"Content-Length: %d" % len(body), b"Content-Length: 0"]
    elif body or method == "POST":
        lines.append(b"Content-Length: %d" % len(body))
    rng.shuffle(lines)
    request_line = f"{method} {path} HTTP/1.1".encode()
    if rng.random() < 0.05 and not clean:
        request_line = rng.choice([b"GET /runs/\xe9 HTTP/1.1", b"GET  / HTTP/1.1", b"\x00\x01"])
    head = b"\r\n".join([request_line, *lines, b"Connection: close", b"", b""])
    shown = [method, path[:120], f"spoiled by {spoil}" if spoil else "", f"framing {framing}"]
    shown += ["clean headers"] if clean else []
    return Request(head, body, method, action and method == "POST", truncated, shown)


async def answer_to(port: int, request: Request) -> tuple[int | None, bytes]:
    """The status and the answer (head and body) the inbox gives `request` (None: it closed
    the connection without a word); a stream is not read past its head."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        with contextlib.suppress(ConnectionError):  # it may answer before it read it all
            writer.write(request.head + request.body)
            await writer.drain()
            if request.truncated:
                writer.write_eof()
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_SECONDS)
        except (asyncio.IncompleteReadError, ConnectionResetError) as cut:
            partial = getattr(cut, "partial", b"")
            assert partial == b"", partial[:300]  # a word, then closed: a broken answer
            return None, b""
        status = int(head.split(b" ", 2)[1])
        if b"text/event-stream" in head.lower() or request.method == "HEAD":
            return status, head
        body = b""
        with contextlib.suppress(ConnectionError):
            while chunk := await asyncio.wait_for(reader.read(65_536), ANSWER_SECONDS):
                body += chunk
        return status, head + body
    finally:
        writer.close()


class Collected(logging.Handler):
    """Every record of the loggers it is put on (uvicorn's do not propagate to the root)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        return [
            f"{r.name}: {r.getMessage()[:300]}"
            for r in self.records
            if r.exc_info or "Traceback" in r.getMessage() or r.levelno >= logging.ERROR
        ]


@pytest.fixture
def collected() -> Iterator[Collected]:
    handler = Collected()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


@pytest.fixture
async def targets(client: Client, worker: Settings) -> AsyncIterator[list[Target]]:
    """The inbox behind a proxy, and in local mode."""
    proxied = InboxOptions(auth_header=USER_HEADER, tenants={APPROVER: ["default"]})
    async with (
        InboxServer(client, proxied, "127.0.0.1", 0) as behind,
        InboxServer(client, InboxOptions(), "127.0.0.1", 0) as local,
    ):
        yield [Target(behind.port, proxied=True), Target(local.port, proxied=False)]


async def with_token(target: Target) -> Target:
    """`target` with a session of its own and that session's form token, read from a page."""
    session = secrets.token_urlsafe(32)
    user = f"{USER_HEADER}: {APPROVER}" if target.proxied else f"Cookie: {USER}={APPROVER}"
    cookie = f"; {SESSION}={session}" if not target.proxied else f"\r\nCookie: {SESSION}={session}"
    head = (
        f"GET /runs HTTP/1.1\r\nHost: 127.0.0.1:{target.port}\r\n{user}{cookie}\r\n"
        "Connection: close\r\n"
    )
    status, page = await answer_to(target.port, Request(head.encode() + b"\r\n", b"", "GET", False))
    found = re.search(rb'<meta name="csrf-token" content="([0-9a-f]+)">', page)
    assert status == 200 and found is not None, page[:500]
    return Target(target.port, target.proxied, session, found.group(1).decode())


async def inputs_received(handle: WorkflowHandle[Any, Any]) -> Counter[str]:
    """The signals and updates of a person's actions the run's history holds, by name."""
    got: Counter[str] = Counter()
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            got[event.workflow_execution_signaled_event_attributes.signal_name] += 1
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            name = event.workflow_execution_update_accepted_event_attributes.accepted_request
            got[name.input.name] += 1
    return Counter({name: n for name, n in got.items() if name in INPUTS})


async def test_generated_requests_at_every_route_are_answered_as_documented_and_never_act(
    live: Live, targets: list[Target], collected: Collected, run_id: str
) -> None:
    run_id = f"ops/{run_id}"  # an id with a `/`, as a team's may be
    handle = await waiting_booking(live.client, live.worker, live.provider, run_id)
    [pending] = (await wait_for_phase(handle, "awaiting_approval")).pending_approvals
    armed = [await with_token(target) for target in targets]
    statuses: Counter[int | None] = Counter()
    gate = asyncio.Semaphore(CONCURRENT)

    async def one(n: int) -> None:
        rng = case_rng(f"inbox/{n}")
        target = rng.choice(armed)
        request = generated(rng, target, run_id)
        async with gate:
            status, answer = await answer_to(target.port, request)
        said = (SEED, n, status, request.describe(), answer[:300])
        statuses[status] += 1
        if status is None:
            assert request.truncated, said  # only a client that left gets no answer
            return
        assert status in ANSWERED, said
        assert b"Traceback" not in answer, said
        if request.method == "POST":  # no POST passed the token check
            assert status not in (200, 409), said

    await asyncio.gather(*(one(n) for n in range(cases(short=80, long=3_000))))
    print(f"seed {SEED}: answers by status: {dict(statuses)}")
    assert collected.tracebacks() == [], (SEED, collected.tracebacks()[:5])

    # The run received nothing, and still waits on its call.
    assert await inputs_received(handle) == Counter(), SEED
    view = await wait_for_phase(handle, "awaiting_approval")
    assert view.pending_approvals == [pending] and view.refused_decisions == [], SEED

    # One valid decision from the inbox is the run's one input, and completes it.
    target = armed[0]
    fields = {"csrf": target.token, "call_id": "c_res", "args_digest": pending.args_digest}
    body = urlencode({**fields, "verdict": "approve"}).encode()
    head = (
        f"POST /runs/{encode_id(run_id)}/decide HTTP/1.1\r\nHost: 127.0.0.1:{target.port}\r\n"
        f"{USER_HEADER}: {APPROVER}\r\nCookie: {SESSION}={target.session}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    status, page = await answer_to(target.port, Request(head, body, "POST", True))
    assert status == 200 and b"approved c_res as workshop-lead" in page, page[:500]
    assert (await handle.result()).status == "completed"
    assert await inputs_received(handle) == Counter({"decide_approval": 1})


async def test_a_chunked_body_broken_after_the_headers_is_answered_without_a_traceback(
    targets: list[Target], collected: Collected
) -> None:
    """uvicorn (h11) answers it 400 itself while the inbox's handler already runs: the
    handler's own answer used to fail in h11, logged with a traceback (found by the fuzz)."""
    for target in targets:
        head = (
            f"GET /whoami HTTP/1.1\r\nHost: 127.0.0.1:{target.port}\r\n"
            "Transfer-Encoding: chunked\r\n\r\nzz\r\n"
        )
        status, answer = await answer_to(target.port, Request(head.encode(), b"", "GET", False))
        assert status == 400 and answer.count(b"HTTP/1.1 ") == 1, answer[:300]
    assert collected.tracebacks() == []
