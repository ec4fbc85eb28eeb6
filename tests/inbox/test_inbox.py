"""The inbox's rules over plain HTTP (no browser): who sees which tenant's runs, who may
decide, the CSRF token every state-changing request needs, the headers every page carries,
and local mode (127.0.0.1 only, a name given once per browser). Against the real dev server,
worker and scripted provider; each refused request is checked to have changed nothing."""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
import signal
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from temporalio.client import Client, WorkflowHandle

from agentloop.cli.output import ExitCode
from agentloop.cli.parser import build_parser
from agentloop.contract import AgentRunResult, Principal
from agentloop.inbox import InboxOptions, InboxServer, InboxUnsafe
from agentloop.run_client import RunClient
from agentloop.runtime.config import Settings
from agentloop.testing.turns import call as scripted_call
from tests.cli.test_cli import AGENTLOOP, process_env
from tests.live import Live, agent_input, scripted
from tests.loop.test_continue_as_new import booking_input, booking_script
from tests.support import (
    INBOX_REFRESH,
    banner_process,
    eventually,
    result_of,
    start_run,
    wait_for_phase,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

USER_HEADER = "X-Inbox-User"
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
TENANTS = {
    "workshop-lead": ["tenant-b"],
    "ann": ["tenant-a"],
    "bea": ["tenant-b"],
    "dan": ["default"],
}


@pytest.fixture(scope="module")
async def inbox(client: Client, worker: Settings) -> AsyncIterator[InboxServer]:
    options = InboxOptions(auth_header=USER_HEADER, tenants=TENANTS, refresh=INBOX_REFRESH)
    async with InboxServer(client, options, "127.0.0.1", 0) as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    # unsafe: keep the cookies 127.0.0.1 sets (aiohttp drops those of IP addresses otherwise)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        yield session


async def waiting_booking(live: Live, run_id: str) -> WorkflowHandle[Any, AgentRunResult]:
    """A run of tenant-b waiting for the workshop lead's approval of a reservation."""
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("reserve_seat", "c_res", **RESERVE)],
            "Booked.",
        )
    )
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Book p-carol into ws-101.",
        ["reserve_seat"],
        principal=Principal(
            subject="p-alice", tenant="tenant-b", scopes=["workshops:read", "workshops:write"]
        ),
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    await wait_for_phase(handle, "awaiting_approval")
    return handle


def as_user(user: str) -> dict[str, str]:
    return {USER_HEADER: user}


async def csrf_token(http: aiohttp.ClientSession, url: str, user: str) -> str:
    """The token of this client's session, from a page that carries forms."""
    async with http.get(url, headers=as_user(user)) as response:
        page = await response.text()
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page)
    assert found is not None, page
    return found.group(1)


async def decide(
    http: aiohttp.ClientSession, inbox: InboxServer, run_id: str, user: str, **form: str
) -> tuple[int, str]:
    fields = {"call_id": "c_res", "args_digest": "x", "verdict": "approve", **form}
    async with http.post(
        f"{inbox.url}/runs/{run_id}/decide", data=fields, headers=as_user(user)
    ) as response:
        return response.status, await response.text()


async def inbox_items(http: aiohttp.ClientSession, inbox: InboxServer, user: str) -> list[str]:
    """The runs the inbox's rows (as its page's script polls them) link to."""
    async with http.get(f"{inbox.url}/api/inbox", headers=as_user(user)) as response:
        assert response.status == 200
        rows = await response.text()
    return [html.unescape(run) for run in re.findall(r'<a href="/runs/[^"]*">([^<]*)</a>', rows)]


async def test_a_user_sees_and_acts_on_their_tenants_runs_only(
    live: Live, inbox: InboxServer, http: aiohttp.ClientSession, run_id: str
) -> None:
    handle = await waiting_booking(live, run_id)

    async def listed() -> bool:  # once the inbox's next listing is complete
        return run_id in await inbox_items(http, inbox, "bea")

    await eventually(listed, "the run in bea's inbox")
    assert run_id not in await inbox_items(http, inbox, "ann")
    assert run_id not in await inbox_items(http, inbox, "zoe")  # unmapped behind a proxy: none

    async with http.get(f"{inbox.url}/runs/{run_id}", headers=as_user("ann")) as response:
        assert response.status == 403
        assert "tenant-b" in await response.text()
    # A direct POST with a good token of ann's own session is refused all the same.
    token = await csrf_token(http, f"{inbox.url}/runs", "ann")
    digest = (await wait_for_phase(handle, "awaiting_approval")).pending_approvals[0].args_digest
    status, _ = await decide(http, inbox, run_id, "ann", csrf=token, args_digest=digest)
    assert status == 403
    # bea sees the run, but the tool names its approvers and she is not one of them.
    token = await csrf_token(http, f"{inbox.url}/runs/{run_id}", "bea")
    status, page = await decide(http, inbox, run_id, "bea", csrf=token, args_digest=digest)
    assert status == 403 and "only workshop-lead may decide c_res" in page

    view = await wait_for_phase(handle, "awaiting_approval")
    assert [p.call_id for p in view.pending_approvals] == ["c_res"]
    assert view.refused_decisions == []  # nothing reached the run

    token = await csrf_token(http, f"{inbox.url}/runs/{run_id}", "workshop-lead")
    status, page = await decide(
        http, inbox, run_id, "workshop-lead", csrf=token, args_digest=digest, verdict="reject"
    )
    assert status == 200 and "rejected c_res as workshop-lead" in page
    result = await result_of(handle)
    assert result.status == "rejected"
    async with http.get(f"{inbox.url}/runs", headers=as_user("bea")) as response:
        runs = await response.text()
    assert re.search(rf"{re.escape(run_id)}</a></td><td class=\"status rejected\">", runs)


async def test_a_run_that_continued_as_new_is_its_first_runs_tenant_on_page_actions_and_feed(
    live: Live, inbox: InboxServer, http: aiohttp.ClientSession, run_id: str
) -> None:
    """A run continued as new is started without its input (its state carries it): the
    inbox reads the tenant from the chain's first run. Before, it read none and took the
    run for `default`'s: dan (of `default`) saw and could act on tenant-b's run, and
    tenant-b's own users were refused."""
    live.provider.register(booking_script(run_id))
    started_with = booking_input(run_id, tenant="tenant-b")
    run = await RunClient.start(
        live.client, started_with, id=run_id, task_queue=live.worker.task_queue
    )
    waiting = await wait_for_phase(run.handle, "awaiting_approval")
    assert len(waiting.run_chain) >= 2, "no continue-as-new before the approval"
    [pending] = waiting.pending_approvals

    page = f"{inbox.url}/runs/{run_id}"
    async with http.get(page, headers=as_user("bea")) as response:
        assert response.status == 200
        shown = html.unescape(await response.text())
    assert "<dt>tenant</dt><dd>tenant-b</dd>" in shown and started_with.task in shown
    for user in ("dan", "ann"):
        async with http.get(page, headers=as_user(user)) as response:
            assert response.status == 403
            assert "tenant-b" in await response.text()
    events = f"{inbox.url}/api/runs/{run_id}/events"
    async with http.get(events, headers=as_user("dan")) as response:
        assert response.status == 403
    async with http.get(events, headers=as_user("bea")) as response:
        assert response.status == 200
        await frames_until(response, "waiting")  # its stream, across continue-as-new

    token = await csrf_token(http, f"{inbox.url}/runs", "dan")
    digest = pending.args_digest
    status, _ = await decide(
        http, inbox, run_id, "dan", csrf=token, call_id="c4", args_digest=digest
    )
    assert status == 403
    assert (await run.status()).refused_decisions == []  # nothing reached the run
    token = await csrf_token(http, page, "workshop-lead")
    status, shown = await decide(
        http, inbox, run_id, "workshop-lead", csrf=token, call_id="c4", args_digest=digest
    )
    assert status == 200 and "approved c4 as workshop-lead" in shown
    assert (await run.result()).status == "completed"


async def sse_frames(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, str]]:
    """Each server-sent event of `response` as its fields (`id`, `event`, `data`); comments
    and the `retry` line skipped."""
    while True:
        block = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 30)
        if not block:
            return
        fields = dict(
            line.split(": ", 1)
            for line in block.decode().strip().split("\n")
            if ": " in line and not line.startswith(":")
        )
        if "data" in fields:
            yield fields


async def frames_until(response: aiohttp.ClientResponse, kind: str) -> list[dict[str, str]]:
    seen = []
    async for frame in sse_frames(response):
        seen.append(frame)
        if json.loads(frame["data"]).get("kind") == kind:
            return seen
    raise AssertionError(f"the stream ended before a {kind!r} item: {seen}")


async def test_a_run_s_live_events_are_one_subscription_resumed_from_the_last_offset(
    live: Live, inbox: InboxServer, http: aiohttp.ClientSession, run_id: str
) -> None:
    """The run page's server-sent events over plain HTTP: only for a user of the run's
    tenant; a second connection resuming after an offset gets the items after it only, from
    the same subscription; the run's end ends both streams; an ended run's is only its end."""
    handle = await waiting_booking(live, run_id)
    events = f"{inbox.url}/api/runs/{run_id}/events"
    async with http.get(events, headers=as_user("ann")) as response:
        assert response.status == 403  # tenant-b's run
    async with http.get(
        f"{inbox.url}/api/runs/no-such-run/events", headers=as_user("bea")
    ) as response:
        assert response.status == 404

    async with http.get(events, headers=as_user("bea")) as first:
        assert first.status == 200
        assert first.headers["content-type"].startswith("text/event-stream")
        assert "script-src 'self'" in first.headers["content-security-policy"]
        seen = await frames_until(first, "waiting")
        assert [int(f["id"]) for f in seen] == list(range(len(seen)))  # id = stream offset
        waiting = seen[-1]
        resume = {**as_user("bea"), "Last-Event-ID": str(int(waiting["id"]) - 1)}
        async with http.get(events, headers=resume) as second:
            [again] = await frames_until(second, "waiting")
            assert again == waiting  # what came after the offset it had, nothing before
            assert inbox.live.watching()[run_id] == 2
            assert inbox.live.subscriptions[run_id] == 1

            await handle.cancel()  # the run ends: both streams say so, and end
            for response in (first, second):
                done = await frames_until(response, "done")
                assert json.loads(done[-1]["data"])["status"] == "cancelled"
                [end] = [frame async for frame in sse_frames(response)]
                assert end["event"] == "end" and "id" not in end
    async with http.get(events, headers=as_user("bea")) as ended:
        [end] = [frame async for frame in sse_frames(ended)]
        assert (end["event"], json.loads(end["data"])) == ("end", {"text": "the run has ended"})
    assert inbox.live.subscriptions[run_id] == 1


async def test_a_state_changing_request_without_its_sessions_token_is_refused(
    live: Live, inbox: InboxServer, http: aiohttp.ClientSession, run_id: str
) -> None:
    handle = await waiting_booking(live, run_id)
    digest = (await wait_for_phase(handle, "awaiting_approval")).pending_approvals[0].args_digest
    user = "workshop-lead"
    token = await csrf_token(http, f"{inbox.url}/runs/{run_id}", user)

    status, page = await decide(http, inbox, run_id, user, args_digest=digest)
    assert status == 403 and "token" in page
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as other:
        # another browser (session) replaying this one's token
        status, _ = await decide(other, inbox, run_id, user, csrf=token, args_digest=digest)
        assert status == 403
    async with http.post(
        f"{inbox.url}/runs/{run_id}/cancel",
        data={"csrf": token},
        headers={**as_user(user), "Origin": "https://elsewhere.example"},
    ) as response:
        assert response.status == 403
    view = await wait_for_phase(handle, "awaiting_approval")
    assert view.refused_decisions == [] and len(view.pending_approvals) == 1
    # Behind a proxy that sends the upstream's name as Host, the form's origin is the name
    # the proxy says the browser used.
    async with http.post(
        f"{inbox.url}/runs/{run_id}/resolve",
        data={"csrf": token, "call_id": "c_none", "outcome": "applied"},
        headers={
            **as_user(user),
            "Origin": "https://inbox.example.com",
            "X-Forwarded-Host": "inbox.example.com",
        },
    ) as response:
        # Past the token check: the run was asked, and refused a resolve of no such call.
        assert response.status == 409
        assert "resolution refused: no write &#39;c_none&#39;" in await response.text()

    async with http.post(
        f"{inbox.url}/runs/{run_id}/cancel", data={"csrf": token}, headers=as_user(user)
    ) as response:
        assert response.status == 200
    result = await result_of(handle)
    assert result.status == "cancelled"


async def test_every_page_says_what_the_browser_may_run_and_no_user_no_page(
    inbox: InboxServer, http: aiohttp.ClientSession
) -> None:
    for path in ("/", "/runs", "/static/inbox.js"):
        async with http.get(inbox.url + path, headers=as_user("bea")) as response:
            assert response.status == 200, path
            policy = response.headers["Content-Security-Policy"]
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy
            assert response.headers["X-Content-Type-Options"] == "nosniff"
    async with aiohttp.ClientSession() as fresh, fresh.get(inbox.url + "/") as response:
        cookie = response.headers.get("Set-Cookie", "")
        assert response.status == 401  # no user header: the proxy is not in front
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    async with http.get(inbox.url + "/", headers=as_user("<b>x</b>")) as response:
        assert response.status == 403
    async with http.get(inbox.url + "/runs/no-such-run", headers=as_user("bea")) as response:
        assert response.status == 404
        assert "no run &#39;no-such-run&#39;" in await response.text()  # escaped


async def test_local_mode_listens_on_127_0_0_1_only_and_asks_a_name_once(
    client: Client, http: aiohttp.ClientSession
) -> None:
    with pytest.raises(InboxUnsafe, match="--auth-header"):
        InboxServer(client, InboxOptions(), "0.0.0.0", 0)
    async with InboxServer(client, InboxOptions(), "127.0.0.1", 0) as local:
        async with http.get(local.url + "/", allow_redirects=False) as response:
            assert (response.status, response.headers["Location"]) == (303, "/whoami")
        token = await csrf_token_of_name_page(http, local)
        async with http.post(
            local.url + "/whoami", data={"csrf": token, "name": "dana"}, allow_redirects=False
        ) as response:
            assert response.status == 303
        async with http.get(local.url + "/") as response:
            assert response.status == 200
            assert "dana · all tenants" in await response.text()
        # A page of another site whose name resolves to 127.0.0.1 (DNS rebinding): refused.
        async with http.get(local.url + "/", headers={"Host": "evil.example"}) as response:
            assert response.status == 400


async def csrf_token_of_name_page(http: aiohttp.ClientSession, local: InboxServer) -> str:
    async with http.get(local.url + "/whoami") as response:
        found = re.search(r'name="csrf" value="([0-9a-f]+)"', await response.text())
    assert found is not None
    return found.group(1)


async def test_the_command_refuses_to_listen_beyond_127_0_0_1_without_a_proxy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentloop.cli.commands import dispatch

    monkeypatch.delenv("AGENTLOOP_CONFIG", raising=False)
    args = build_parser().parse_args(["inbox", "--host", "0.0.0.0"])
    assert await dispatch(args) == ExitCode.USAGE
    assert "--auth-header" in capsys.readouterr().err


@contextlib.asynccontextmanager
async def inbox_process(
    client: Client,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, str]]:
    """`agentloop inbox` (local mode) on a free port: its process, its port, its banner."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = process_env(TEMPORAL_ADDRESS=client.service_client.config.target_host)
    command = [*AGENTLOOP, "inbox", "--port", str(port)]
    async with banner_process(command, "Ctrl-C stops it.", env=env) as (process, banner):
        yield process, port, banner


async def test_the_command_serves_the_inbox_until_interrupted(client: Client) -> None:
    async with inbox_process(client) as (process, port, banner):
        assert f"agentloop inbox on http://127.0.0.1:{port}" in banner
        assert "local mode" in banner
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/", allow_redirects=False) as response,
        ):
            assert (response.status, response.headers["Location"]) == (303, "/whoami")
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 20) == 0
        assert process.stdout is not None
        assert "agentloop inbox stopped" in (await process.stdout.read()).decode()
