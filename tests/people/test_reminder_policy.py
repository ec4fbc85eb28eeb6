"""What a waiting run reminds and escalates when (`agentloop.policies.reminders`), and how a
route's timers are configured (`AGENTLOOP_NOTIFY_ROUTES`): pure functions, no server."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentloop.contract import NoticeSent
from agentloop.notice_timers import NoticeTimers
from agentloop.policies.reminders import due_notices, next_notice_at
from agentloop.runtime.notice_routes import mask_routes, notice_timers, parse_routes

T0 = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)
DESK = NoticeTimers(
    route="desk",
    tools=("reserve_seat",),
    remind_after_seconds=60,
    escalate_after_seconds=300,
    escalate_to="leads",
)
TENANT_B = NoticeTimers(route="tenant-b", tenants=("tenant-b",), remind_after_seconds=30)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_call_is_reminded_then_escalated_and_nothing_is_due_twice() -> None:
    waiting = {"c_1": ("reserve_seat", T0)}
    assert due_notices([DESK], None, waiting, [], at(59)) == []
    assert next_notice_at([DESK], None, waiting, []) == (at(60), "remind desk")
    [reminder] = due_notices([DESK], None, waiting, [], at(60))
    assert (reminder.stage, reminder.route, reminder.to, reminder.call_ids) == (
        "reminder",
        "desk",
        "desk",
        ["c_1"],
    )
    sent = [NoticeSent(stage="reminder", route="desk", to="desk", call_ids=["c_1"], at=at(60))]
    assert due_notices([DESK], None, waiting, sent, at(61)) == []
    assert next_notice_at([DESK], None, waiting, sent) == (at(300), "escalate to leads")
    sent.append(
        NoticeSent(stage="escalation", route="desk", to="leads", call_ids=["c_1"], at=at(300))
    )
    assert next_notice_at([DESK], None, waiting, sent) is None
    assert due_notices([DESK], None, waiting, sent, at(10_000)) == []


def test_a_late_wake_sends_the_reminder_before_the_escalation() -> None:
    due = due_notices([DESK], None, {"c_1": ("reserve_seat", T0)}, [], at(1_000))
    assert [(d.stage, d.to) for d in due] == [("reminder", "desk"), ("escalation", "leads")]


def test_only_calls_routed_to_a_route_and_still_waiting_are_timed() -> None:
    waiting = {
        "c_seat": ("reserve_seat", T0),
        "c_reply": ("send_reply", at(10)),
    }
    due = due_notices([DESK, TENANT_B], "tenant-b", waiting, [], at(60))
    assert [(d.route, d.call_ids) for d in due] == [
        ("tenant-b", ["c_seat", "c_reply"]),
        ("desk", ["c_seat"]),
    ]
    # Another tenant's run: only the tool's route; a call answered: no longer in `waiting`.
    due = due_notices([DESK, TENANT_B], "tenant-a", {"c_reply": ("send_reply", T0)}, [], at(60))
    assert due == []
    assert next_notice_at([DESK], None, {}, []) is None


ROUTES: dict[str, Any] = {
    "desk": {
        "url": "https://hooks.example.com/services/desk-SECRET",
        "tools": ["reserve_seat"],
        "remind_after_seconds": 60,
        "escalate_after_seconds": 300,
        "escalate_to": "leads",
    },
    "leads": {"url": "https://hooks.example.com/services/leads-SECRET", "escalation_only": True},
    "all": {"url": "https://all.example.com/x-SECRET"},
}


def test_a_route_s_timers_are_what_a_run_is_told_and_shown_without_urls() -> None:
    webhooks = parse_routes(json.dumps(ROUTES))
    assert notice_timers(webhooks) == [DESK]
    shown = mask_routes(json.dumps(ROUTES))
    assert "SECRET" not in shown
    assert json.loads(shown)["desk"]["escalate_to"] == "leads"
    assert json.loads(shown)["leads"]["escalation_only"] is True


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"escalate_to": "nobody"}, "escalate_to 'nobody' is not another route"),
        ({"escalate_to": "desk"}, "escalate_to 'desk' is not another route"),
        ({"escalate_to": None}, "escalate_after_seconds needs escalate_to"),
        ({"escalate_after_seconds": 30}, "must be longer than remind_after_seconds"),
        ({"remind_after_seconds": 0}, "remind_after_seconds: Input should be greater than 0"),
        ({"escalation_only": True}, "an escalation_only route has no timers of its own"),
    ],
)
def test_a_bad_timer_is_named(change: dict[str, Any], problem: str) -> None:
    desk = {k: v for k, v in {**ROUTES["desk"], **change}.items() if v is not None}
    with pytest.raises(ValueError, match="route 'desk': ") as raised:
        parse_routes(json.dumps({**ROUTES, "desk": desk}))
    assert problem in str(raised.value) and "SECRET" not in str(raised.value)
