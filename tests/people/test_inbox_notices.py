"""Notices: when a run starts waiting for a person, its worker
POSTs a signed JSON notice to the configured webhooks, without the run waiting on it; a
webhook that keeps failing never fails or delays the run, and `status` says the notice was
not delivered. Real dev server, worker, scripted provider; the webhooks are small HTTP
servers in the test."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agentloop.activities.notices import SIGNATURE_HEADER
from agentloop.contract import AgentRunInput, Principal, RunStatusView
from agentloop.runtime.config import CONFIG_FILE_VARIABLE, ConfigError, Settings, load_config
from agentloop.scripted_provider import ScriptedProvider
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import running_worker
from tests.live import Servers, agent_input, scripted
from tests.operations.test_config import problems_of
from tests.support import (
    result_of,
    signal_approval,
    start_run,
    wait_for_phase,
    wait_for_status,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

SECRET = "notice-secret-for-tests"
INBOX_URL = "https://inbox.example.com"
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}


@dataclass
class Webhook:
    """A receiver answering `status`, keeping every request it got."""

    status: int = 200
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((dict(request.headers), await request.read()))
        return web.Response(status=self.status)


@pytest.fixture
async def webhooks() -> AsyncIterator[tuple[Webhook, Webhook]]:
    good, bad = Webhook(), Webhook(status=500)
    app = web.Application()
    app.router.add_post("/good", good.handle)
    app.router.add_post("/bad", bad.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    good.url, bad.url = f"http://127.0.0.1:{port}/good", f"http://127.0.0.1:{port}/bad"
    yield good, bad
    await runner.cleanup()


def notifying(settings: Settings, run_id: str, *urls: str) -> Settings:
    return settings.model_copy(
        update={
            "notify_webhooks": ",".join(urls),
            "notify_secret": SECRET,
            "inbox_url": INBOX_URL,
            "task_queue": f"notices-{run_id[-8:]}",
        }
    )


def booking(scripted_provider: ScriptedProvider, run_id: str) -> AgentRunInput:
    scripted_provider.register(
        scripted(
            run_id,
            [scripted_call("reserve_seat", "c_res", **RESERVE)],
            "Booked.",
        )
    )
    return agent_input(
        run_id,
        "openai-chat",
        "Book p-carol into ws-101.",
        ["reserve_seat"],
        principal=Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"]),
    )


async def approve(handle: Any, digest: str) -> None:
    await signal_approval(handle, "c_res", digest, "workshop-lead")


async def approved_to_completion(handle: Any, view: RunStatusView) -> None:
    """Approve the call the run waits on as `view` shows it: the run then completes."""
    await approve(handle, view.pending_approvals[0].args_digest)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason


async def notice_failure(handle: Any) -> tuple[RunStatusView, str]:
    """The run's status once it says its one notice was not delivered, and what it says."""
    view = await wait_for_status(
        handle, lambda v: bool(v.notice_failures), "the notice's failure", seconds=60
    )
    [failure] = view.notice_failures
    return view, failure


async def test_a_run_waiting_for_approval_sends_one_signed_notice(
    servers: Servers, worker_settings: Settings, webhooks: tuple[Webhook, Webhook], run_id: str
) -> None:
    good, _ = webhooks
    settings = notifying(worker_settings, run_id, good.url)
    async with running_worker(servers.client, settings):
        handle = await start_run(
            servers.client, settings, run_id, booking(servers.provider, run_id)
        )
        view = await wait_for_phase(handle, "awaiting_approval")
        await wait_until(lambda: len(good.received) == 1, "the notice")
        headers, body = good.received[0]
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers[SIGNATURE_HEADER], expected)
        notice = json.loads(body)
        digest = view.pending_approvals[0].args_digest
        assert notice["run"] == run_id and notice["kind"] == "approval"
        assert notice["calls"] == [
            {
                "call_id": "c_res",
                "tool": "reserve_seat",
                "args_digest": digest,
                "approvers": ["workshop-lead"],
            }
        ]
        assert notice["link"] == f"{INBOX_URL}/runs/{run_id}"
        assert "reserve_seat (c_res)" in notice["text"] and notice["link"] in notice["text"]
        await approved_to_completion(handle, view)
    assert len(good.received) == 1  # told once
    assert view.notice_failures == []


async def test_a_failing_webhook_neither_fails_nor_delays_the_run_and_status_says_so(
    servers: Servers, worker_settings: Settings, webhooks: tuple[Webhook, Webhook], run_id: str
) -> None:
    good, bad = webhooks
    settings = notifying(worker_settings, run_id, bad.url, good.url)
    async with running_worker(servers.client, settings):
        handle = await start_run(
            servers.client, settings, run_id, booking(servers.provider, run_id)
        )
        view = await wait_for_phase(handle, "awaiting_approval")
        assert view.notice_failures == []  # waiting already, the notice still being retried
        view, failure = await notice_failure(handle)
        assert "approval c_res" in failure and "/bad" not in failure
        assert f"webhook 1 ({bad.url.removesuffix('/bad')}) answered 500 (4 attempts)" in failure
        assert len(bad.received) == 4  # its own attempts, with backoff
        assert len(good.received) == 1  # its own delivery: told once
        await approved_to_completion(handle, view)


def test_webhooks_without_a_secret_are_a_configuration_error() -> None:
    settings = Settings(notify_webhooks="https://hooks.example.com/a")
    with pytest.raises(ConfigError, match="AGENTLOOP_NOTIFY_SECRET"):
        settings.notice_webhooks()


HOOK_PATH = "/hooks-q7/T0Q7Z/B0X9K/xoxb4f2eTOKEN"


def test_routes_come_from_the_file_s_tables_beside_the_listed_webhooks(tmp_path: Path) -> None:
    config = tmp_path / "agentloop.toml"
    config.write_text(
        f'notify_secret = "{SECRET}"\n'
        f'notify_webhooks = ["https://all.example.com{HOOK_PATH}"]\n'
        "[notify_routes.workshops]\n"
        f'url = "https://chat.example.com:8443{HOOK_PATH}"\n'
        'tools = ["reserve_seat"]\n'
        'tenants = ["tenant-b"]\n'
    )
    loaded = load_config({CONFIG_FILE_VARIABLE: str(config)})
    first, route = loaded.settings.notice_webhooks()
    assert (first.name, first.tools, first.tenants) == ("webhook 1", (), ())
    assert (route.name, route.tools, route.tenants) == (
        "workshops",
        ("reserve_seat",),
        ("tenant-b",),
    )
    assert route.label == "workshops (https://chat.example.com:8443)"
    assert route.takes("tenant-b", "reserve_seat")
    assert not route.takes("tenant-a", "reserve_seat") and not route.takes("tenant-b", "send_reply")
    assert not route.takes(None, "reserve_seat")  # a notice from before routing
    assert first.takes(None, "anything")
    printed = "\n".join(loaded.lines()) + json.dumps(loaded.as_json()) + repr(loaded.settings)
    assert "AGENTLOOP_NOTIFY_WEBHOOKS=https://all.example.com/… (file)" in loaded.lines()
    assert "https://chat.example.com:8443/…" in printed
    for part in HOOK_PATH.strip("/").split("/"):
        assert part not in printed


@pytest.mark.parametrize(
    ("routes", "problem"),
    [
        ({"chat": {"ulr": f"https://chat.example.com{HOOK_PATH}"}}, "route 'chat': url: Field"),
        ({"chat": {"url": f"ftp://chat.example.com{HOOK_PATH}"}}, "route 'chat': url: expected"),
        ({"Chat Room": {"url": f"https://chat.example.com{HOOK_PATH}"}}, "route 'Chat Room': a"),
        ({"chat": {"url": f"https://chat.example.com{HOOK_PATH}", "tools": "x"}}, "tools:"),
    ],
)
def test_a_bad_route_is_named_without_its_url(routes: dict[str, Any], problem: str) -> None:
    env = {"AGENTLOOP_NOTIFY_ROUTES": json.dumps(routes), "AGENTLOOP_NOTIFY_SECRET": SECRET}
    [said] = problems_of(env)
    assert said.startswith("AGENTLOOP_NOTIFY_ROUTES") and problem in said, said
    for part in HOOK_PATH.strip("/").split("/"):
        assert part not in said
