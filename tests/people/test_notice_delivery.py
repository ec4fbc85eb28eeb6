"""Notices never starve and never wander (issue 45): each webhook has its own delivery (its
own timeout, attempts and backoff, all at once), a redirect is never followed, a webhook URL
is a secret (only its host shows in history, logs, `status` and the inbox), and notices are
routed per tool and per tenant. Real dev server, worker and scripted provider; the webhooks
are local aiohttp servers (127.0.0.1) that hang, redirect, redirect in a loop or answer."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentloop.activities.notices import NoticeActivities
from agentloop.activity_io import DeliveryPolicy, NoticeCall, WaitingNotice
from agentloop.contract import AgentRunResult, CancelRequest, Principal
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.runtime.audit import configure_logging, reset_logging
from agentloop.runtime.config import Settings
from agentloop.runtime.notice_routes import Webhook
from agentloop.scripted_provider import ScriptedToolCall
from agentloop.worker import running_worker
from tests.live import Servers, agent_input, scripted
from tests.people.test_inbox_notices import (
    RESERVE,
    SECRET,
    approved_to_completion,
    booking,
    notice_failure,
    notifying,
)
from tests.support import result_of, start_run, wait_for_phase, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

SECRET_PATH = ("hooks-q7", "T0Q7ZSECRET", "B0X9KTOKEN", "xoxb4f2e")
"""A chat incoming-webhook style path: every segment of it is the webhook's secret."""


@dataclass
class Receivers:
    """Webhooks on one local server, each path a behaviour; every request kept by path, in
    the order they came."""

    base: str = ""
    admin_url: str = ""
    """An "internal" endpoint on another local server, which must never be reached."""
    arrivals: list[str] = field(default_factory=list)
    bodies: dict[str, list[bytes]] = field(default_factory=lambda: defaultdict(list))
    admin_hits: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    given_up: list[str] = field(default_factory=list)
    """The hanging requests whose sender gave up waiting (its timeout), in order."""
    given_up_before: dict[str, int] = field(default_factory=dict)
    """How many requests had been given up on when each path's first request came."""

    def url(self, path: str) -> str:
        return f"{self.base}/{path}"

    def count(self, path: str) -> int:
        return len(self.bodies[path])

    async def record(self, request: web.Request) -> str:
        path = request.path.lstrip("/")
        self.bodies[path].append(await request.read())
        self.arrivals.append(path)
        self.given_up_before.setdefault(path, len(self.given_up))
        return path

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = await self.record(request)
        kind = path.split("/")[0]
        if kind == "hang":
            try:
                await self.release.wait()
            except asyncio.CancelledError:  # the sender closed the connection
                self.given_up.append(path)
                raise
        if kind == "redirect":
            return web.Response(status=307, headers={"Location": self.admin_url})
        if kind == SECRET_PATH[0]:  # a loop: the webhook sends the POST back to itself
            return web.Response(status=307, headers={"Location": str(request.url)})
        if kind == "fail":
            return web.Response(status=500)
        return web.Response(status=200)

    async def admin(self, request: web.Request) -> web.Response:
        self.admin_hits += 1
        return web.Response(status=200)


async def serve(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    # handler_cancellation: a hanging handler hears when its sender gives up.
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    receivers = Receivers()
    hooks, receivers.base = await serve(receivers.handle)
    internal, internal_base = await serve(receivers.admin)
    receivers.admin_url = f"{internal_base}/internal/admin"
    yield receivers
    receivers.release.set()
    await hooks.cleanup()
    await internal.cleanup()


@pytest.fixture
def worker_log() -> Iterator[io.StringIO]:
    """Everything the in-process worker logs, rendered as `agentloop worker` renders it."""
    stream = io.StringIO()
    configure_logging(level="DEBUG", stream=stream)
    try:
        yield stream
    finally:
        reset_logging()


async def history_text(handle: WorkflowHandle[Any, Any]) -> str:
    """The run's history as JSON, each payload's data decoded (JSON shows it in base64)."""
    history = json.loads((await handle.fetch_history()).to_json())
    decoded: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("data"), str) and "metadata" in node:
                decoded.append(base64.b64decode(node["data"]).decode(errors="replace"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(history)
    return json.dumps(history) + "\n".join(decoded)


async def notice_attempt(handle: WorkflowHandle[Any, Any]) -> int:
    """The attempt of the run's `notify_waiting` activity in flight."""
    pending = (await handle.describe()).raw_description.pending_activities
    [attempt] = [a.attempt for a in pending if a.activity_type.name == "notify_waiting"]
    return attempt


async def test_two_hanging_webhooks_never_starve_a_healthy_one(
    servers: Servers, worker_settings: Settings, receivers: Receivers, run_id: str
) -> None:
    urls = [receivers.url("hang/1"), receivers.url("hang/2"), receivers.url("ok/3")]
    settings = notifying(worker_settings, run_id, *urls)
    async with running_worker(servers.client, settings):
        handle = await start_run(
            servers.client, settings, run_id, booking(servers.provider, run_id)
        )
        view = await wait_for_phase(handle, "awaiting_approval")
        await wait_until(lambda: receivers.count("ok/3") == 1, "the healthy webhook's notice")
        # Told before either hanging webhook's first attempt timed out, by the activity's
        # first attempt: it never waited behind them.
        assert receivers.given_up_before["ok/3"] == 0
        assert await notice_attempt(handle) == 1
        # Each hanging webhook times out and is tried again on its own; the healthy one is
        # never told twice.
        await wait_until(
            lambda: receivers.count("hang/1") >= 2 and receivers.count("hang/2") >= 2,
            "the hanging webhooks' second attempts",
            seconds=90,
        )
        assert {"hang/1", "hang/2"} <= set(receivers.given_up)
        assert receivers.count("ok/3") == 1
        assert await notice_attempt(handle) == 1
        await approved_to_completion(handle, view)


async def test_a_redirect_is_a_named_failure_and_never_followed(
    servers: Servers, worker_settings: Settings, receivers: Receivers, run_id: str
) -> None:
    settings = notifying(
        worker_settings, run_id, receivers.url("redirect/1"), receivers.url("ok/2")
    )
    async with running_worker(servers.client, settings):
        handle = await start_run(
            servers.client, settings, run_id, booking(servers.provider, run_id)
        )
        view, failure = await notice_failure(handle)
        assert f"webhook 1 ({receivers.base}) answered 307, a redirect (not followed)" in failure
        assert "(1 attempt)" in failure and "webhook 2" not in failure
        await approved_to_completion(handle, view)
    assert receivers.count("redirect/1") == 1 and receivers.count("ok/2") == 1
    assert receivers.admin_hits == 0


async def test_a_redirect_loop_shows_no_part_of_the_webhooks_path_anywhere(
    servers: Servers,
    worker_settings: Settings,
    receivers: Receivers,
    worker_log: io.StringIO,
    run_id: str,
) -> None:
    settings = notifying(worker_settings, run_id, receivers.url("/".join(SECRET_PATH)))
    async with running_worker(servers.client, settings):
        handle = await start_run(
            servers.client, settings, run_id, booking(servers.provider, run_id)
        )
        view, failure = await notice_failure(handle)
        options = InboxOptions(auth_header="X-User", tenants={"lead": ["default"]})
        async with (
            InboxServer(servers.client, options, "127.0.0.1", 0) as inbox,
            aiohttp.ClientSession() as http,
            http.get(f"{inbox.url}/runs/{run_id}", headers={"X-User": "lead"}) as page,
        ):
            assert page.status == 200
            inbox_page = await page.text()
        await approved_to_completion(handle, view)
    assert receivers.count("/".join(SECRET_PATH)) == 1  # no hop followed
    assert f"webhook 1 ({receivers.base}) answered 307" in failure
    assert 'id="notice-failures"' in inbox_page and receivers.base in inbox_page
    history = await history_text(handle)
    assert "NoticeNotDelivered" in history and '"notice.webhook"' in worker_log.getvalue()
    shown = {
        "history": history,
        "worker log": worker_log.getvalue(),
        "status": view.model_dump_json(),
        "inbox": inbox_page,
    }
    for where, text in shown.items():
        for segment in SECRET_PATH:
            assert segment not in text, f"{segment!r} in the {where}"


async def test_notices_are_routed_per_tool_and_per_tenant(
    servers: Servers, worker_settings: Settings, receivers: Receivers, run_id: str
) -> None:
    routes = {
        "workshops": {"url": receivers.url("ok/workshops"), "tools": ["reserve_seat"]},
        "desk-b": {
            "url": receivers.url("ok/desk-b"),
            "tools": ["send_reply"],
            "tenants": ["tenant-b"],
        },
        "tenant-a": {"url": receivers.url("ok/tenant-a"), "tenants": ["tenant-a"]},
        "tickets": {"url": receivers.url("ok/tickets"), "tools": ["read_ticket"]},
    }
    settings = notifying(worker_settings, run_id, receivers.url("ok/all")).model_copy(
        update={"notify_routes": json.dumps(routes)}
    )
    reply = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "Refunded."}
    servers.provider.register(
        scripted(
            run_id,
            [
                ScriptedToolCall(id="c_res", name="reserve_seat", arguments=RESERVE),
                ScriptedToolCall(id="c_reply", name="send_reply", arguments=reply),
            ],
            "Done.",
        )
    )
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Book p-carol and tell Dana.",
        ["reserve_seat", "send_reply"],
        principal=Principal(
            subject="p-alice",
            tenant="tenant-b",
            scopes=["workshops:read", "workshops:write", "tickets:read", "tickets:write"],
        ),
    )
    async with running_worker(servers.client, settings):
        handle = await start_run(servers.client, settings, run_id, run_input)
        await wait_for_phase(handle, "awaiting_approval")
        await wait_until(
            lambda: all(receivers.count(f"ok/{n}") for n in ("all", "workshops", "desk-b")),
            "the notices of the routes this run's calls go to",
        )
        await wait_for_notice_end(handle)
        await handle.signal("cancel", CancelRequest(reason="routing seen"))
        result = await result_of(handle)
    assert result.status == "cancelled", result.stop_reason
    called = {path: [c["call_id"] for c in told(receivers, path)] for path in receivers.bodies}
    assert called == {
        "ok/all": ["c_res", "c_reply"],
        "ok/workshops": ["c_res"],
        "ok/desk-b": ["c_reply"],
    }


def told(receivers: Receivers, path: str) -> list[dict[str, Any]]:
    [body] = receivers.bodies[path]
    calls: list[dict[str, Any]] = json.loads(body)["calls"]
    return calls


async def wait_for_notice_end(handle: WorkflowHandle[Any, AgentRunResult]) -> None:
    """Until the run's history holds the end of its `notify_waiting` (no webhook is told
    after it)."""

    async def ended() -> bool:
        notices = set()
        async for event in handle.fetch_history_events():
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name == "notify_waiting":
                notices.add(event.event_id)
            done = event.activity_task_completed_event_attributes
            if done.scheduled_event_id in notices:
                return True
        return False

    async with asyncio.timeout(60):
        while not await ended():
            await asyncio.sleep(0.2)


# --- the activity alone: a retry resumes from its heartbeats ---------------------------------


def notice() -> WaitingNotice:
    return WaitingNotice(
        workflow_id="run-1",
        kind="approval",
        calls=[NoticeCall(call_id="c1", tool="reserve_seat")],
        tenant="default",
    )


async def test_a_retried_notice_tells_only_the_webhooks_not_told_yet(
    receivers: Receivers,
) -> None:
    webhooks = [
        Webhook(name="webhook 1", url=receivers.url("ok/1")),
        Webhook(name="webhook 2", url=receivers.url("ok/2")),
        Webhook(name="webhook 3", url=receivers.url("fail/3")),
    ]
    quick = DeliveryPolicy(first_backoff_seconds=0.01)
    activities = NoticeActivities(webhooks, SECRET, "https://inbox.example.com", quick)
    env = ActivityEnvironment()
    before = {
        "webhook 1": {"attempts": 1, "delivered": True},
        "webhook 3": {"attempts": 3, "failure": "answered 500"},
    }
    env.info = dataclasses.replace(env.info, attempt=2, heartbeat_details=[before])
    beats: list[Any] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    with pytest.raises(ApplicationError, match=r"webhook 3 \(.*\) answered 500 \(4 attempts\)"):
        await env.run(activities.notify_waiting, notice())
    assert receivers.count("ok/1") == 0  # told by the attempt before
    assert receivers.count("ok/2") == 1
    assert receivers.count("fail/3") == 1  # its last attempt of 4
    assert beats[-1][0]["webhook 2"] == {
        "attempts": 1,
        "delivered": True,
        "failure": None,
        "final": False,
    }
