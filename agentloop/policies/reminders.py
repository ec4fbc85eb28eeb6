"""When a run waiting for people reminds them, and when it escalates: a pure decision over the
timers of the notice routes (`agentloop.runtime.notice_routes`), the calls still waiting, since
when each waits, and what was sent already.

A route with `remind_after_seconds` reminds its own webhook of the calls routed to it that
long after their first notice; a route with `escalate_after_seconds` tells its `escalate_to`
group of them that long after their first notice. Each is sent once per call: a call answered
is no longer waiting, so nothing more is due for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from agentloop.contract import NoticeSent
from agentloop.notice_timers import NoticeTimers, routes_call

Stage = Literal["reminder", "escalation"]
@dataclass(frozen=True)
class DueNotice:
    stage: Stage
    route: str
    to: str
    call_ids: list[str]


@dataclass(frozen=True)
class _Timer:
    at: datetime
    stage: Stage
    route: str
    to: str
    call_id: str


def _timers(
    routes: Sequence[NoticeTimers],
    tenant: str | None,
    waiting: Mapping[str, tuple[str, datetime]],
    sent: Sequence[NoticeSent],
) -> list[_Timer]:
    """Every reminder and escalation not sent yet of the calls `waiting` (call id -> its tool,
    and when its first notice went out), earliest first, reminders before escalations."""
    done = {(s.stage, s.route, c) for s in sent for c in s.call_ids}
    timers = []
    for route in routes:
        stages: list[tuple[Stage, float | None, str | None]] = [
            ("reminder", route.remind_after_seconds, route.route),
            ("escalation", route.escalate_after_seconds, route.escalate_to),
        ]
        for call_id, (tool, since) in waiting.items():
            if not routes_call(route.tools, route.tenants, tenant, tool):
                continue
            for stage, after, to in stages:
                if after is None or to is None or (stage, route.route, call_id) in done:
                    continue
                at = since + timedelta(seconds=after)
                timers.append(_Timer(at, stage, route.route, to, call_id))
    return sorted(timers, key=lambda t: (t.at, t.stage != "reminder", t.route, t.call_id))


def due_notices(
    routes: Sequence[NoticeTimers],
    tenant: str | None,
    waiting: Mapping[str, tuple[str, datetime]],
    sent: Sequence[NoticeSent],
    now: datetime,
) -> list[DueNotice]:
    """The reminders and escalations due at `now`, one per route and stage, in the order they
    fell due."""
    due: dict[tuple[Stage, str], DueNotice] = {}
    for timer in _timers(routes, tenant, waiting, sent):
        if timer.at > now:
            break
        notice = due.setdefault(
            (timer.stage, timer.route), DueNotice(timer.stage, timer.route, timer.to, [])
        )
        notice.call_ids.append(timer.call_id)
    return list(due.values())


def escalations_now(
    routes: Sequence[NoticeTimers],
    tenant: str | None,
    tools: Mapping[str, str],
    sent: Sequence[NoticeSent],
) -> list[DueNotice]:
    """The escalations of the calls of `tools` (call id -> its tool) not sent yet, all at
    once, whatever the timers (an approval timeout that escalates): one per route with an
    `escalate_to`."""
    escalated = {(s.route, c) for s in sent if s.stage == "escalation" for c in s.call_ids}
    due = []
    for route in routes:
        calls = [
            call_id
            for call_id, tool in tools.items()
            if route.escalate_to is not None
            and (route.route, call_id) not in escalated
            and routes_call(route.tools, route.tenants, tenant, tool)
        ]
        if route.escalate_to is not None and calls:
            due.append(DueNotice("escalation", route.route, route.escalate_to, calls))
    return due


def next_notice_at(
    routes: Sequence[NoticeTimers],
    tenant: str | None,
    waiting: Mapping[str, tuple[str, datetime]],
    sent: Sequence[NoticeSent],
) -> tuple[datetime, str] | None:
    """When the next reminder or escalation falls due, and what it is (None: none is left)."""
    timers = _timers(routes, tenant, waiting, sent)
    if not timers:
        return None
    first = timers[0]
    what = f"remind {first.to}" if first.stage == "reminder" else f"escalate to {first.to}"
    return first.at, what
