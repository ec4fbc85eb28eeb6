"""The timers of a notice route as a run is told them at its start (its URL is not part of
them), and which calls a route takes: vocabulary the worker's configuration, the activities'
inputs and the run's reminder policy (`agentloop.policies.reminders`) share."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

MAX_ROUTES = 64
"""Notice routes a worker takes: every run is told their timers, so they are bounded."""


def routes_call(
    tools: Sequence[str], tenants: Sequence[str], tenant: str | None, tool: str
) -> bool:
    """Whether a route of `tools` and `tenants` (empty: every one) takes a call of `tool` in a
    run of `tenant` (a run without a tenant, None, only routes of every tenant)."""
    if tenants and tenant not in tenants:
        return False
    return not tools or tool in tools


class NoticeTimers(BaseModel):
    """A route's timers, as a run is told them at its start (its URL is not part of it)."""

    model_config = ConfigDict(frozen=True)

    route: str
    tools: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    remind_after_seconds: float | None = None
    escalate_after_seconds: float | None = None
    escalate_to: str | None = None
    """The route told of an escalation: after `escalate_after_seconds`, or when the approval
    timeout escalates (`AgentRunInput.on_approval_timeout`)."""
