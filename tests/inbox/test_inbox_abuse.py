"""The inbox under abuse, against the real dev server, worker and scripted provider (browser
cases in Chromium): one user's never-reading live connections do not take a run's feed from
anyone else; a huge form is refused before it is parsed; malformed headers are a 400, never a
traceback; a run whose workflow id holds `/`, `..`, a space or a non-ASCII letter is listed,
opened and approved from the inbox."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio.client import Client, WorkflowHandle

from agentloop.contract import AgentRunResult, ApprovalDecision, ApprovalVerdict
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.inbox.guards import MAX_BODY_BYTES, MAX_FORM_FIELDS
from agentloop.inbox.live import MAX_BROWSERS_PER_USER
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider
from agentloop.waiting import run_path
from tests.inbox.test_inbox import inbox_process
from tests.inbox.test_inbox_browser import (
    APPROVER,
    USER_HEADER,
    Watched,
    approve_on_page,
    browser,  # noqa: F401 (a fixture)
    page,  # noqa: F401 (a fixture)
    playwright_api,
    waiting_booking,
)
from tests.support import INBOX_REFRESH, result_of, wait_for_phase, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

HOG = "hog"
MB = 1024 * 1024


@pytest.fixture(scope="module")
async def inbox(client: Client, worker: Settings) -> AsyncIterator[InboxServer]:
    options = InboxOptions(
        auth_header=USER_HEADER,
        tenants={APPROVER: ["default"], HOG: ["default"]},
        refresh=INBOX_REFRESH,
    )
    async with InboxServer(client, options, "127.0.0.1", 0) as server:
        yield server


Book = Callable[..., Awaitable[WorkflowHandle[Any, AgentRunResult]]]


@pytest.fixture
def book(client: Client, worker: Settings, scripted_provider: ScriptedProvider) -> Book:
    """`await book(workflow_id[, model])`: a booking run waiting for its approval."""
    return functools.partial(waiting_booking, client, worker, scripted_provider)


async def raw_request(port: int, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that has sent `head` (a request line and headers, bytes as given)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + b"\r\n")
    await writer.drain()
    return reader, writer


def request_head(method: str, path: str, port: int, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *headers]
    return "".join(line + "\r\n" for line in lines).encode()


async def answer_of(reader: asyncio.StreamReader) -> tuple[int, str]:
    """The status and the body of a response that is not a stream."""
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode("latin-1")
    status = int(head.split(" ", 2)[1])
    [length] = [
        int(line.split(":", 1)[1])
        for line in head.split("\r\n")
        if line.lower().startswith("content-length:")
    ]
    body = await asyncio.wait_for(reader.readexactly(length), 30)
    return status, body.decode()


async def test_a_user_s_never_reading_live_connections_leave_another_user_s_page_streaming(
    book: Book,
    inbox: InboxServer,
    page: Watched,  # noqa: F811
    run_id: str,
) -> None:
    expect = playwright_api.expect
    handle = await book(run_id)
    events = "/api" + run_path(run_id) + "/events"
    head = request_head(
        "GET", events, inbox.port, f"{USER_HEADER}: {HOG}", "Accept: text/event-stream"
    )
    hogs = [await raw_request(inbox.port, head) for _ in range(100)]  # none is ever read
    try:
        await wait_until(
            lambda: inbox.live.let_go[HOG] == 100 - MAX_BROWSERS_PER_USER,
            "each of the hog's connections past its cap to let its oldest go",
            seconds=120,  # a hundred connections, each asking Temporal about the run
        )
        assert inbox.live.watching()[run_id] == MAX_BROWSERS_PER_USER

        await page.page.goto(inbox.url + run_path(run_id))
        log = page.page.locator("#live-log")
        await expect(page.page.locator("#live-status")).to_have_text("live")
        await expect(log.locator("li.waiting")).to_contain_text("waiting for a person")
        assert inbox.live.watching()[run_id] == MAX_BROWSERS_PER_USER + 1

        # Approved elsewhere (as the CLI does): the open page gets the rest as it happens.
        [pending] = (await wait_for_phase(handle, "awaiting_approval")).pending_approvals
        decision = ApprovalDecision(
            call_id=pending.call_id,
            args_digest=pending.args_digest,
            approved=True,
            approver=APPROVER,
        )
        verdict = await handle.execute_update(
            "decide_approval", decision, result_type=ApprovalVerdict
        )
        assert verdict.accepted, verdict.reason
        await expect(log.locator("li.done")).to_contain_text("ended: completed")
        await expect(page.page.locator("#live-status")).to_have_text("the run has ended")
        assert (await result_of(handle)).status == "completed"
        assert page.errors == [] and page.dialogs == []
    finally:
        for _, writer in hogs:
            writer.close()


async def test_malformed_headers_are_refused_with_400_and_no_traceback(
    book: Book,
    inbox: InboxServer,
    run_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    handle = await book(run_id)
    events = "/api" + run_path(run_id) + "/events"
    user = f"{USER_HEADER}: {APPROVER}"
    caplog.set_level(logging.DEBUG)

    # Byte 0xB2 is '²' read as Latin-1: "²".isdigit() is true, int("²") fails.
    head = request_head("GET", events, inbox.port, user) + b"Last-Event-ID: \xb2\r\n"
    reader, writer = await raw_request(inbox.port, head)
    status, body = await answer_of(reader)
    writer.close()
    assert status == 400 and "Last-Event-ID must be a number of ASCII digits" in body
    for header in ("X-Forwarded-Proto: gopher", "Last-Event-ID: -1", "Last-Event-ID: 1e3"):
        reader, writer = await raw_request(
            inbox.port, request_head("GET", events, inbox.port, user, header)
        )
        status, body = await answer_of(reader)
        writer.close()
        assert status == 400, (header, body)
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert inbox.live.let_go[APPROVER] == 0 and run_id not in inbox.live.watching()
    await handle.cancel()


async def test_a_form_of_too_many_fields_is_refused_and_reaches_no_run(
    book: Book,
    inbox: InboxServer,
    run_id: str,
) -> None:
    handle = await book(run_id)
    headers = {USER_HEADER: APPROVER}
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        async with http.get(inbox.url + run_path(run_id), headers=headers) as response:
            assert response.status == 200  # the session's cookie
        fields = {f"f{i}": "x" for i in range(MAX_FORM_FIELDS + 1)}
        decide = inbox.url + run_path(run_id) + "/decide"
        async with http.post(decide, data=fields, headers=headers) as response:
            assert response.status == 413
            assert "Too many fields" in await response.text()
        async with http.post(
            decide, data={"f": "x" * (MAX_BODY_BYTES + 1)}, headers=headers
        ) as response:
            assert response.status == 413
    view = await wait_for_phase(handle, "awaiting_approval")
    assert view.refused_decisions == [] and len(view.pending_approvals) == 1
    await handle.cancel()


def memory_kb(pid: int, field: str) -> int:
    """`VmRSS` (resident now) or `VmHWM` (its peak) of process `pid`, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


async def send_form(port: int, fields: int, chunked: bool) -> int:
    """POSTs a form of `fields` fields of 1 MB each (whatever the answer, until it comes),
    as the answer's status; by its Content-Length, or chunked without one."""
    field = b"=" + b"x" * MB + b"&"
    framing = (
        "Transfer-Encoding: chunked" if chunked else f"Content-Length: {fields * (len(field) + 4)}"
    )
    head = request_head(
        "POST",
        "/runs/r/decide",
        port,
        # A user and a session of the right shape: all the inbox can check before the form
        f"Cookie: agentloop_inbox_user=mallory; agentloop_inbox_session={'s' * 43}",
        "Content-Type: application/x-www-form-urlencoded",
        framing,
    )
    reader, writer = await raw_request(port, head)
    answered = asyncio.create_task(answer_of(reader))
    with contextlib.suppress(ConnectionError):  # the inbox may close before all was sent
        for i in range(fields):
            if answered.done():
                break
            data = b"f%03d" % i + field
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
            await writer.drain()
    status, _ = await answered
    writer.close()
    return status


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux /proc needed")
async def test_a_500_field_1_mb_form_is_refused_before_it_is_parsed(client: Client) -> None:
    """The inbox in its own process (`agentloop inbox`), its peak resident memory read from
    /proc: a 500 x 1 MB form grows it by less than 10 MB, answered 413."""
    async with inbox_process(client) as (process, port, _):
        assert await send_form(port, 2, chunked=False) == 413  # what it loads to answer
        for chunked in (False, True):
            Path(f"/proc/{process.pid}/clear_refs").write_text("5")  # the peak := now
            before = memory_kb(process.pid, "VmRSS")
            assert await send_form(port, 500, chunked) == 413
            grown = memory_kb(process.pid, "VmHWM") - before
            assert grown < 10 * 1024, f"the inbox grew {grown} kB (chunked: {chunked})"
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 20) == 0


WORKFLOW_IDS = ["ops/refund-7", "..", "a b", "ü"]


async def test_runs_with_any_workflow_id_are_listed_opened_and_approved_from_the_inbox(
    inbox: InboxServer,
    page: Watched,  # noqa: F811
    book: Book,
    run_id: str,
) -> None:
    expect = playwright_api.expect
    handles = [
        await book(workflow_id, f"{run_id}-{i}") for i, workflow_id in enumerate(WORKFLOW_IDS)
    ]

    for workflow_id, handle in zip(WORKFLOW_IDS, handles, strict=True):
        await page.page.goto(inbox.url + "/")
        link = page.page.locator("#items").get_by_role("link", name=workflow_id, exact=True)
        await expect(link).to_have_count(1)
        await link.click()
        await expect(page.page.locator("h1")).to_have_text(f"Run {workflow_id}")
        assert page.page.url == inbox.url + run_path(workflow_id)
        await expect(page.page.locator("#live-status")).to_have_text("live")
        await approve_on_page(page)
        result = await result_of(handle)
        assert result.status == "completed", (workflow_id, result.stop_reason)
    assert page.errors == [] and page.dialogs == []
