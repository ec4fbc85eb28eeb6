"""Reminders and escalations (issue 47, part 2): a notice route with timers reminds its own
webhook of a call nobody answered, then tells its `escalate_to` group, each once, from durable
timers in the run; an answer cancels what is left. Real dev server, worker and scripted
provider; the webhooks are local aiohttp servers (`Receivers`)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from temporalio.client import WorkflowHandle

from agentloop.cli.progress import status_lines
from agentloop.contract import AgentRunResult
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.runtime.config import Settings
from agentloop.worker import running_worker
from tests.live import Servers
from tests.people import test_notice_delivery
from tests.people.test_inbox_notices import approved_to_completion, booking, notifying
from tests.people.test_notice_delivery import Receivers, wait_for_notice_end
from tests.support import result_of, start_run, wait_for_phase, wait_for_status, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]
receivers = test_notice_delivery.receivers
"""The local webhooks (a fixture)."""


def routed(
    settings: Settings, receivers: Receivers, run_id: str, remind: float, escalate: float
) -> Settings:
    """`settings` with one route for the booking's tool that reminds after `remind` s and
    escalates after `escalate` s to `leads`, a group told of nothing else."""
    routes = {
        "desk": {
            "url": receivers.url("ok/desk"),
            "tools": ["reserve_seat"],
            "remind_after_seconds": remind,
            "escalate_after_seconds": escalate,
            "escalate_to": "leads",
        },
        "leads": {"url": receivers.url("ok/leads"), "escalation_only": True},
    }
    return notifying(settings, run_id).model_copy(update={"notify_routes": json.dumps(routes)})


def stages(receivers: Receivers) -> list[tuple[str, str, list[str]]]:
    """Every notice the receivers got, in order: path, stage, call ids."""
    told = []
    for path in receivers.arrivals:
        body = json.loads(receivers.bodies[path][len([t for t in told if t[0] == path])])
        told.append((path, body["stage"], [c["call_id"] for c in body["calls"]]))
    return told


async def notify_activities(handle: WorkflowHandle[Any, AgentRunResult]) -> list[str]:
    """The summaries of the run's `notify_waiting` activities, in order."""
    summaries = []
    async for event in handle.fetch_history_events():
        scheduled = event.activity_task_scheduled_event_attributes
        if scheduled.activity_type.name == "notify_waiting":
            summaries.append(json.loads(event.user_metadata.summary.data))
    return summaries


async def test_an_unanswered_call_is_reminded_then_escalated_each_once(
    servers: Servers, worker_settings: Settings, receivers: Receivers, run_id: str
) -> None:
    settings = routed(worker_settings, receivers, run_id, remind=2, escalate=4)
    async with running_worker(servers.client, settings):
        handle = await start_run(
            servers.client, settings, run_id, booking(servers.provider, run_id)
        )
        await wait_for_phase(handle, "awaiting_approval")
        await wait_until(lambda: receivers.count("ok/leads") == 1, "the escalation", seconds=60)
        view = await wait_for_status(
            handle, lambda v: len(v.notices_sent) == 2, "the reminder and escalation in status"
        )
        [reminder, escalation] = view.notices_sent
        assert (reminder.stage, reminder.route, reminder.to) == ("reminder", "desk", "desk")
        assert (escalation.stage, escalation.route, escalation.to) == (
            "escalation",
            "desk",
            "leads",
        )
        assert reminder.call_ids == escalation.call_ids == ["c_res"]
        assert view.waiting_since is not None and view.waiting_since < reminder.at < escalation.at
        shown = "\n".join(line.text for line in status_lines(run_id, view))
        assert "reminded desk of c_res at" in shown, shown
        assert "escalated to leads of c_res at" in shown, shown
        options = InboxOptions(auth_header="X-User", tenants={"lead": ["default"]})
        async with (
            InboxServer(servers.client, options, "127.0.0.1", 0) as inbox,
            aiohttp.ClientSession() as http,
            http.get(f"{inbox.url}/runs/{run_id}", headers={"X-User": "lead"}) as page,
        ):
            inbox_page = await page.text()
        await approved_to_completion(handle, view)
        await wait_for_notice_end(handle)
        summaries = await notify_activities(handle)
    assert stages(receivers) == [
        ("ok/desk", "notice", ["c_res"]),
        ("ok/desk", "reminder", ["c_res"]),
        ("ok/leads", "escalation", ["c_res"]),
    ]
    assert summaries == [
        "notify: approval c_res",
        "reminder to desk: approval c_res",
        "escalation to leads: approval c_res",
    ]
    assert f"reminded desk of c_res at {reminder.at:%Y-%m-%d %H:%M:%S} UTC" in inbox_page
    assert f"escalated to leads of c_res at {escalation.at:%Y-%m-%d %H:%M:%S} UTC" in inbox_page
    first, escalated = (json.loads(receivers.bodies[path][0]) for path in ("ok/desk", "ok/leads"))
    assert escalated["id"] == f"{first['id']}/escalation"
    assert escalated["text"].startswith("Escalated, unanswered: Run ")


async def test_an_answer_before_the_reminder_cancels_the_rest(
    servers: Servers, worker_settings: Settings, receivers: Receivers, run_id: str
) -> None:
    # Timers far longer than the test: the answer comes first on any machine.
    settings = routed(worker_settings, receivers, run_id, remind=600, escalate=1200)
    async with running_worker(servers.client, settings):
        handle = await start_run(
            servers.client, settings, run_id, booking(servers.provider, run_id)
        )
        view = await wait_for_phase(handle, "awaiting_approval")
        await wait_until(lambda: receivers.count("ok/desk") == 1, "the first notice")
        await approved_to_completion(handle, view)
        timers = [
            (e.timer_started_event_attributes.timer_id, json.loads(e.user_metadata.summary.data))
            async for e in handle.fetch_history_events()
            if e.HasField("timer_started_event_attributes")
        ]
        canceled = [
            e.timer_canceled_event_attributes.timer_id
            async for e in handle.fetch_history_events()
            if e.HasField("timer_canceled_event_attributes")
        ]
        summaries = await notify_activities(handle)
    # The wait slept until the reminder, and the answer cancelled that timer.
    [reminder_timer] = [timer_id for timer_id, summary in timers if summary == "remind desk"]
    assert reminder_timer in canceled
    assert summaries == ["notify: approval c_res"]
    assert stages(receivers) == [("ok/desk", "notice", ["c_res"])]


async def test_an_approval_timeout_may_reject_block_or_escalate_then_end(
    servers: Servers, worker_settings: Settings, receivers: Receivers, run_id: str
) -> None:
    # No timers of its own: `desk` escalates only when the approval timeout does.
    settings = routed(worker_settings, receivers, run_id, remind=600, escalate=1200)
    routes = json.loads(settings.notify_routes or "")
    del routes["desk"]["remind_after_seconds"], routes["desk"]["escalate_after_seconds"]
    settings = settings.model_copy(update={"notify_routes": json.dumps(routes)})
    results = {}
    async with running_worker(servers.client, settings):
        for action in ("reject", "blocked", "escalate"):
            name = f"{run_id}-{action}"
            run_input = booking(servers.provider, name).model_copy(
                update={"approval_timeout_seconds": 1, "on_approval_timeout": action}
            )
            handle = await start_run(servers.client, settings, name, run_input)
            results[action] = await result_of(handle)
        summaries = await notify_activities(handle)
    rejected = results["reject"]
    assert rejected.status == "rejected", rejected.stop_reason
    assert rejected.stop_reason == "rejected: c_res by approval_timeout: no decision within 1 s"
    [call] = rejected.calls
    assert call.approval is not None and call.approval.approver == "approval_timeout"
    assert call.status != "succeeded" and rejected.side_effects == []
    blocked = results["blocked"]
    assert (blocked.status, blocked.stop_cause) == ("blocked", "approval_timeout")
    # Escalated at the first timeout, once; the second ends the run as `end` would.
    escalated = results["escalate"]
    assert (escalated.status, escalated.stop_cause) == ("approval_timeout", "approval_timeout")
    assert summaries == ["notify: approval c_res", "escalation to leads: approval c_res"]
    assert [stage for path, stage, _ in stages(receivers) if path == "ok/leads"] == ["escalation"]
    assert [stage for path, stage, _ in stages(receivers) if path == "ok/desk"] == ["notice"] * 3
