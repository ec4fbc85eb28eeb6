"""The run's deadline on the time-skipping test server (issue #6): a 600 s deadline proven in
a fraction of a second of wall time, and time spent waiting for a human left out of it.

What the test server can and cannot skip (measured here): it skips time whenever the run is
waiting on the server (a timer, an approval, an activity's retry backoff), but never while an
activity is running on the worker: a tool held 1.5 s by the example service took 1.5 s of
virtual time too. So "a slow operation" is made of server time: the provider answers 429 with
`Retry-After: 400`, and Temporal holds the model call's next attempt for 400 s (the
`next_retry_delay` the activity asks for). Attempts at 0 s and 400 s reach the provider; the
one due at 800 s would start past the 600 s deadline, and never does.

Proven: the deadline timer fires at 600 s of run time while a model call waits for its retry,
the call is cancelled (its next attempt never reaches the provider), the run stops
`limit_reached` naming the deadline; a 2-hour wait for an approval is not counted (the run then
completes under the same 600 s deadline), while the run's working time after the wait still is.
Not proven here: cutting short an operation that is busy on the worker past the deadline
(`test_agent_run.py` does that on the dev server with a 1 s deadline and a slowed tool).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from agentloop.contract import AgentRunResult, Limits, RunStatusView
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider, ScriptTurn
from agentloop.scripted_provider.scripts import ScriptedError
from agentloop.testing.turns import call as scripted_call
from tests.live import Servers, scripted
from tests.people import test_approvals
from tests.people.test_approvals import decide, reservations, reserve_script, run_input
from tests.support import deadline_timers, start_run, wait_for_phase, wait_for_status
from tests.tools.test_delegate import RESERVE, child_waiting_for_approval, parent_input
from tests.tools.test_delegate import call as delegate_call

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

time_skipping = test_approvals.time_skipping
"""The approval-timeout test's fixture: a time-skipping test server and a worker on it."""

DEADLINE = 600
RETRY_AFTER = 400
"""The provider's Retry-After: the second attempt is due at 400 s, the third at 800 s."""
HUMAN_WAIT = timedelta(hours=2)
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}


def kept_waiting(text: str = "never") -> ScriptTurn:
    """A model turn the provider keeps answering 429 `Retry-After: 400`."""
    return ScriptTurn(
        text=text, errors=[ScriptedError(status=429, retry_after=str(RETRY_AFTER))] * 3
    )


async def run_seconds(handle: WorkflowHandle[Any, AgentRunResult]) -> float:
    """The run's span in the server's (virtual) time: from its start to its close."""
    events = [e async for e in handle.fetch_history_events()]
    return (events[-1].event_time.ToDatetime() - events[0].event_time.ToDatetime()).total_seconds()


async def event_types(handle: WorkflowHandle[Any, AgentRunResult]) -> list[int]:
    return [e.event_type async for e in handle.fetch_history_events()]


def requests(provider: ScriptedProvider, script: str) -> int:
    return sum(1 for r in provider.requests if r["script"] == script)


async def test_a_model_call_kept_waiting_past_the_deadline_stops_the_run(
    time_skipping: tuple[WorkflowEnvironment, Settings], servers: Servers, run_id: str
) -> None:
    env, settings = time_skipping
    servers.provider.register(
        scripted(
            run_id,
            [scripted_call("get_train_status", "call_t", **TRAIN)],
            kept_waiting(),
        )
    )
    handle = await start_run(
        env.client,
        settings,
        run_id,
        run_input(
            run_id,
            task="Is train G1234 late?",
            tools=["get_train_status"],
            limits=Limits(deadline_seconds=DEADLINE),
        ),
        indexed=False,  # the time-skipping test server has no custom search attributes
    )
    result = await handle.result()

    assert result.status == "limit_reached", result.stop_reason
    assert result.stop_reason == f"deadline: {float(DEADLINE)} s passed"
    # The deadline fired during the wait for the third attempt, not before the second.
    assert DEADLINE <= await run_seconds(handle) < 2 * RETRY_AFTER
    # Turn 1, then turn 2's attempts at 0 s and 400 s; the one due at 800 s never came.
    assert requests(servers.provider, run_id) == 1 + 2
    assert servers.service.stats()["counts"]["trains"] == 1
    # One timer for the deadline across both turns and the tool call, which fired.
    assert await deadline_timers(handle) == {"started": 1, "fired": 1, "cancelled": 0}
    assert (result.usage.model_calls, result.usage.tool_calls) == (2, 1)
    assert {c.call_id: c.status for c in result.calls} == {"call_t": "succeeded"}
    # The model call was cancelled on the server: no further attempt can be dispatched.
    types = await event_types(handle)
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED in types
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED in types
    assert "limit_reached — deadline" in result.report


async def approval_waited_on(
    env: WorkflowEnvironment, settings: Settings, run_id: str
) -> WorkflowHandle[Any, AgentRunResult]:
    """A run with the 600 s deadline whose write has waited two hours for its approver."""
    handle = await start_run(
        env.client,
        settings,
        run_id,
        run_input(run_id, limits=Limits(deadline_seconds=DEADLINE)),
        indexed=False,
    )
    await wait_for_phase(handle, "awaiting_approval")
    await env.sleep(HUMAN_WAIT.total_seconds())
    return handle


async def test_time_waiting_for_an_approval_does_not_count_against_the_deadline(
    time_skipping: tuple[WorkflowEnvironment, Settings], servers: Servers, run_id: str
) -> None:
    env, settings = time_skipping
    servers.provider.register(reserve_script(run_id))
    handle = await approval_waited_on(env, settings, run_id)
    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "awaiting_approval"
    assert reservations(servers.service) == 0

    await decide(handle, "call_reserve")
    result = await handle.result()

    assert result.status == "completed", result.stop_reason
    assert await run_seconds(handle) >= HUMAN_WAIT.total_seconds() > DEADLINE
    assert requests(servers.provider, run_id) == 2
    assert reservations(servers.service) == 1
    assert {c.call_id: c.status for c in result.calls} == {
        "call_check": "succeeded",
        "call_reserve": "succeeded",
    }


async def test_working_time_after_the_wait_still_counts(
    time_skipping: tuple[WorkflowEnvironment, Settings], servers: Servers, run_id: str
) -> None:
    """The wait is left out, the deadline is not switched off: after two hours waiting for
    the approver, the next model call is kept waiting 400 s twice and the run stops at 600 s
    of working time, with the approved write listed as done."""
    env, settings = time_skipping
    servers.provider.register(scripted(run_id, reserve_script(run_id).turns[0], kept_waiting()))
    handle = await approval_waited_on(env, settings, run_id)
    await decide(handle, "call_reserve")
    result = await handle.result()

    assert result.status == "limit_reached", result.stop_reason
    assert result.stop_reason == f"deadline: {float(DEADLINE)} s passed"
    waited = HUMAN_WAIT.total_seconds()
    assert waited + DEADLINE <= await run_seconds(handle) < waited + 2 * RETRY_AFTER
    assert requests(servers.provider, run_id) == 1 + 2
    assert reservations(servers.service) == 1
    assert [(e.call_id, e.status) for e in result.side_effects] == [("call_reserve", "succeeded")]
    # The deadline's timer fired during the wait, which did not count: it started again
    # for what was left when the wait ended, and fired at the deadline.
    assert await deadline_timers(handle) == {"started": 2, "fired": 2, "cancelled": 0}


async def test_a_childs_wait_for_its_approver_does_not_cut_the_parents_next_calls(
    time_skipping: tuple[WorkflowEnvironment, Settings], servers: Servers, run_id: str
) -> None:
    """A delegated child waits two hours for its approver, past the parent's 600 s deadline.
    The parent's deadline timer fires meanwhile: the child's wait is added to the parent's
    paused time only when the child comes back. Then the deadline has moved, the timer starts
    again, and the parent's next read and model calls run
    whole. Before it the deadline stayed passed: every later call was cancelled as it
    started, and the run stopped on its model calls having asked nothing."""
    env, settings = time_skipping
    delegation = delegate_call("call_d", "delegate", task="Book ws-101.", tools=["reserve_seat"])
    read = delegate_call("call_t", "get_train_status", **TRAIN)
    servers.provider.register(
        scripted(
            run_id,
            [delegation],
            [read],
            "Booked, and G1234 is {{call_t.status}}.",
        )
    )
    booking = delegate_call("call_r", "reserve_seat", **RESERVE)
    servers.provider.register(scripted(f"{run_id}-child", [booking], "Booked."))
    limits = {"max_model_calls": 6, "max_tool_calls": 5, "deadline_seconds": DEADLINE}
    parent = await start_run(
        env.client, settings, run_id, parent_input(run_id, limits=limits), indexed=False
    )
    child, _ = await child_waiting_for_approval(env.client, run_id, "call_d")
    await env.sleep(HUMAN_WAIT.total_seconds())
    await decide(child, "call_r")
    result = await parent.result()

    assert result.status == "completed", result.stop_reason
    assert result.output.startswith("Booked, and G1234 is ")
    assert {c.call_id: c.status for c in result.calls} == {
        "call_d": "succeeded",
        "call_t": "succeeded",
    }
    assert requests(servers.provider, run_id) == 3
    assert requests(servers.provider, f"{run_id}-child") == 2
    assert reservations(servers.service) == 1
    assert servers.service.stats()["counts"]["trains"] == 1
    assert await run_seconds(parent) >= HUMAN_WAIT.total_seconds() > DEADLINE
    # Fired during the child's wait, started again once the wait was counted; cancelled
    # when the run ended with time left.
    timers = await deadline_timers(parent)
    assert (timers["started"], timers["fired"]) == (2, 1), timers


async def test_status_shows_the_deadline_time_left_while_a_human_decides(
    time_skipping: tuple[WorkflowEnvironment, Settings],
    scripted_provider: ScriptedProvider,
    run_id: str,
) -> None:
    env, settings = time_skipping
    scripted_provider.register(reserve_script(run_id))
    handle = await approval_waited_on(env, settings, run_id)
    # Someone who may not approve this tool answers: the run wakes, refuses it, waits on.
    await decide(handle, "call_reserve", approver="intern")
    view = await wait_for_status(handle, lambda v: bool(v.refused_decisions), "the refusal")
    assert view.phase == "awaiting_approval"
    assert view.limits_left is not None and view.limits_left.seconds is not None
    assert view.limits_left.seconds > DEADLINE - 60
