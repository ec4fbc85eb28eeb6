"""A worker process killed with SIGKILL in every phase of a run, and the Temporal dev server
itself restarted: the run finishes on a new process, and each approved write has exactly one
effect in the system of record.

`PHASES` is the table: one named case per phase, each saying how to bring the run there
(`until_killed`) and what must hold once it finished (`check`); `Phase.crash` is the setup
they share. Each case runs its worker as a separate OS process (own task queue, own
transcript store), so the kill is the real thing: no cleanup, no goodbye to the server. The
server notices a lost activity through its heartbeat timeout (5 s for tools, 10 s for model
calls) and a lost sticky workflow task after the workers' sticky timeout (3 s here,
`AGENTLOOP_STICKY_TIMEOUT_SECONDS`), so a case takes 10-20 s of waiting on the server. The
cases therefore run at once (`crashes`), each with its own example service and scripted model
so that no case counts another's effects; the two that restart a dev server of their own
run after them, one at a time, because a restart must fit in a heartbeat's interval. The
machinery (`Phase`, the readers of histories and of the fakes) is in
`tests/crash/crashing.py`. Every
wait is bounded and waits on something observable (the `status` query, the provider's
request log, the service's stats). Each history is checked too: no workflow task failed, and
none timed out but those the killed worker held (`lost_workflow_tasks`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle

from agentloop.activity_io import MODEL_CALLS
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    Principal,
    ResolveRequest,
    RunStatusView,
)
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptTurn
from tests.crash.crashing import (
    RESERVE,
    STICKY_TIMEOUT,
    Crash,
    Phase,
    Place,
    ServerRestart,
    activity_attempts,
    approve,
    approve_pending,
    by_id,
    call,
    chain_of,
    counts,
    heartbeat_recorded,
    held_under,
    history,
    lost_only_while_waiting,
    lost_workflow_tasks,
    requests_to,
    reservations,
    reserve_script,
    result_of,
    run_input,
    start_case_run,
    task_identities,
)
from tests.loop.test_compensation import book_then_pay
from tests.support import wait_for_phase, wait_for_status, wait_until, write_key
from tests.tools.test_delegate import child_waiting_for_approval, delegation_result, parent_input

pytestmark = pytest.mark.integration

REPLY = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "Refund issued."}
DATE = "2026-12-01"


def final_turn_requests(model: ScriptedProvider) -> int:
    """Requests for the second turn of a run's script (the model's answer after the write)."""
    return sum(1 for r in model.requests if r["turn"] == 1)


# --- (a) during a model call ---------------------------------------------------------------


class DuringAModelCall(Phase):
    """The call is made again, and the write stays single."""

    def scripts(self, run_id: str) -> list[Script]:
        # The model's answer after the write takes seconds: the worker dies while it waits.
        return [reserve_script(run_id, run_id, final_delay_ms=4_000)]

    async def until_killed(self, run: Crash) -> None:
        await approve_pending(run.handle, "call_reserve")
        # At least: under load an attempt may already have been timed out and retried.
        await wait_until(lambda: final_turn_requests(run.model) >= 1, "the second model call")

    async def before_second(self, run: Crash) -> None:
        assert reservations(run.service) == 1

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        assert result.output == "Booked."
        # The lost model call was made again on the new worker, and the model was asked at
        # most once per attempt history records: a busy machine may time an attempt out (its
        # heartbeat) and retry it, never ask the model unrecorded.
        *_, (attempts, worker) = activity_attempts(await history(run.handle), *MODEL_CALLS)
        assert 2 <= final_turn_requests(run.model) <= attempts and worker == run.second
        assert result.usage.model_calls == 2  # one budgeted call, whatever its attempts
        assert by_id(result.calls)["call_reserve"].status == "succeeded"
        assert reservations(run.service) == 1
        assert counts(run.service)["workshops.reserve"] == 1
        await lost_only_while_waiting(run)


# --- (b) during a read ---------------------------------------------------------------------


class DuringARead(Phase):
    """The read runs again, and the write runs once; the model gets one result per call."""

    tools = ("check_workshop", "reserve_seat")
    slow_http = True

    def scripts(self, run_id: str) -> list[Script]:
        return [reserve_script(run_id, run_id, with_read=True)]

    def prepare(self, service: ExampleService) -> None:
        service.set_delay("workshops.get", 20_000)

    async def until_killed(self, run: Crash) -> None:
        await wait_until(
            lambda: counts(run.service)["workshops.get"] == 1, "the read to reach the service"
        )

    async def with_second(self, run: Crash) -> None:
        await approve_pending(run.handle, "call_reserve")

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        calls = by_id(result.calls)
        assert (calls["call_check"].status, calls["call_reserve"].status) == (
            "succeeded",
            "succeeded",
        )
        found = counts(run.service)
        assert found["workshops.get"] == 2  # the lost read ran again, once
        assert [r["status"] for r in requests_to(run.service, "workshops.get")] == [None, 200]
        assert found["workshops.reserve"] == 1
        assert reservations(run.service) == 1
        # The model's answer came after exactly one result of each call of the turn the kill
        # cut short, each under its call id.
        last = run.model.requests[-1]["body"]["messages"]
        told = sorted(m["tool_call_id"] for m in last if m["role"] == "tool")
        assert told == ["call_check", "call_reserve"]
        await lost_only_while_waiting(run)


# --- (c) during a write, before its commit -------------------------------------------------


class WhileAWriteIsHeldBeforeItsCommit(Phase):
    """The write is sent again, under the same key."""

    slow_http = True

    def prepare(self, service: ExampleService) -> None:
        # The delay knob holds the request before the handler runs: nothing is committed yet.
        service.set_delay("workshops.reserve", 30_000)

    async def until_killed(self, run: Crash) -> None:
        await approve_pending(run.handle, "call_reserve")
        await wait_until(
            lambda: counts(run.service)["workshops.reserve"] == 1,
            "the write to reach the service",
        )

    async def before_second(self, run: Crash) -> None:
        # The service cancels the abandoned request: it is logged without an answer, no record.
        await wait_until(
            lambda: requests_to(run.service, "workshops.reserve")[0]["finished_seq"] is not None,
            "the service to drop the abandoned write",
        )
        assert requests_to(run.service, "workshops.reserve")[0]["status"] is None
        assert reservations(run.service) == 0

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        # The lost attempt timed out (heartbeat): outcome unknown -> lookup says absent -> the
        # write is sent again with the same key.
        reserve = by_id(result.calls)["call_reserve"]
        assert (reserve.status, reserve.attempts, reserve.idempotency_key) == (
            "succeeded",
            2,
            run.key,
        )
        found = counts(run.service)
        assert found["workshops.reserve"] == 2
        assert found["workshops.operation"] == 1
        assert [r["status"] for r in requests_to(run.service, "workshops.operation")] == [404]
        assert reservations(run.service) == 1
        held = await held_under(run.service, "workshops", run.key)
        assert (held["state"], held["record"]["operation_id"]) == ("applied", run.key)
        await lost_only_while_waiting(run)


# --- (d) after the commit, before the activity completes -----------------------------------


class AfterTheCommit(Phase):
    """The new worker finds the write done and does not send it again."""

    slow_http = True

    def prepare(self, service: ExampleService) -> None:
        service.inject_fault("workshops.reserve", "commit_then_hang", hang_ms=120_000)

    async def until_killed(self, run: Crash) -> None:
        await approve_pending(run.handle, "call_reserve")
        await wait_until(lambda: reservations(run.service) == 1, "the write to commit")

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        reserve = by_id(result.calls)["call_reserve"]
        assert (reserve.status, reserve.attempts, reserve.idempotency_key) == (
            "confirmed_after_query",
            1,
            run.key,
        )
        [effect] = result.side_effects
        assert (effect.call_id, effect.status) == ("call_reserve", "confirmed_after_query")
        found = counts(run.service)
        assert found["workshops.reserve"] == 1
        assert found["workshops.operation"] == 1
        assert reservations(run.service) == 1
        await lost_only_while_waiting(run)


# --- (e) while awaiting approval (send_reply) ----------------------------------------------


class WhileAReplyAwaitsApproval(Phase):
    """The reply approved while no worker runs is sent once."""

    tools = ("send_reply",)

    def scripts(self, run_id: str) -> list[Script]:
        return [
            Script(
                name=run_id,
                turns=[
                    ScriptTurn(
                        tool_calls=[call("call_reply", "send_reply", REPLY)],
                        expect_tool_results={"call_reply": "dana@example.com"},
                    ),
                    ScriptTurn(text="Replied."),
                ],
            )
        ]

    def run_input(self, run_id: str) -> AgentRunInput:
        return run_input(run_id, list(self.tools), provider="anthropic")

    async def until_killed(self, run: Crash) -> None:
        view = await wait_for_phase(run.handle, "awaiting_approval")
        run.kept["digest"] = view.pending_approvals[0].args_digest

    async def before_second(self, run: Crash) -> None:
        assert run.service.records()["replies"] == 0
        # No worker is polling: the signal waits in history for the next one.
        await approve(run.handle, "call_reply", "support-lead", run.kept["digest"])

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        assert by_id(result.calls)["call_reply"].status == "succeeded"
        assert run.service.records()["replies"] == 1
        assert counts(run.service)["support.reply"] == 1
        await lost_only_while_waiting(run)


# --- (f) while awaiting reconciliation -----------------------------------------------------


class WhileAwaitingReconciliation(Phase):
    """The resolution lands on the new worker, and the write is never sent again."""

    def scripts(self, run_id: str) -> list[Script]:
        return [reserve_script(run_id, "workshop-lead says applied")]

    def prepare(self, service: ExampleService) -> None:
        service.inject_fault("workshops.reserve", "commit_then_drop")
        service.inject_fault("workshops.operation", "unavailable", count=50)

    async def until_killed(self, run: Crash) -> None:
        await approve_pending(run.handle, "call_reserve")
        await wait_for_phase(run.handle, "awaiting_reconciliation")

    async def with_second(self, run: Crash) -> None:
        # The new worker rebuilt the wait from history: the same call, the same key.
        view = await wait_for_status(
            run.handle, lambda v: v.phase == "awaiting_reconciliation", "the rebuilt wait"
        )
        assert [(u.call_id, u.idempotency_key) for u in view.unresolved] == [
            ("call_reserve", run.key)
        ]
        await run.handle.signal(
            "resolve",
            ResolveRequest(call_id="call_reserve", outcome="applied", operator="workshop-lead"),
        )

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        assert by_id(result.calls)["call_reserve"].status == "confirmed_after_query"
        assert reservations(run.service) == 1
        assert counts(run.service)["workshops.reserve"] == 1  # never resent
        await lost_only_while_waiting(run)


# --- (g) during an outcome lookup ----------------------------------------------------------


class DuringAnOutcomeLookup(Phase):
    """The new worker looks the write's outcome up again, and never resends it."""

    slow_http = True

    def prepare(self, service: ExampleService) -> None:
        # The write commits but its answer is lost: outcome unknown, so the run asks the system
        # of record by key, and that question is held at the service until the worker is dead.
        service.inject_fault("workshops.reserve", "commit_then_drop")
        service.set_delay("workshops.operation", 30_000)

    async def until_killed(self, run: Crash) -> None:
        await approve_pending(run.handle, "call_reserve")
        await wait_until(
            lambda: counts(run.service)["workshops.operation"] == 1,
            "the outcome lookup to reach the service",
        )

    async def before_second(self, run: Crash) -> None:
        assert reservations(run.service) == 1

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        assert result.output == "Booked."
        reserve = by_id(result.calls)["call_reserve"]
        assert (reserve.status, reserve.attempts, reserve.idempotency_key) == (
            "confirmed_after_query",
            1,
            run.key,
        )
        [effect] = result.side_effects
        assert (effect.call_id, effect.status) == ("call_reserve", "confirmed_after_query")
        found = counts(run.service)
        assert found["workshops.reserve"] == 1  # never resent
        statuses = [r["status"] for r in requests_to(run.service, "workshops.operation")]
        assert statuses == [None, 200]
        assert reservations(run.service) == 1
        events = await history(run.handle)
        # At most the workflow task that waited on the killed worker's sticky queue.
        assert set(lost_workflow_tasks(events, run.killed)) <= {STICKY_TIMEOUT}
        # The one lookup activity: it heartbeats (feature checks-heartbeat), so its lost
        # attempt was given up on at the heartbeat timeout, not the tool's 45 s, and its
        # second attempt ran on the new worker.
        [lookup] = activity_attempts(events, "lookup_outcome")
        assert lookup == (2, run.second)


# --- (i) while a delegated child run writes ------------------------------------------------


class WhileAChildRunWrites(Phase):
    """Both runs finish, and the child's write lands once."""

    slow_http = True

    def scripts(self, run_id: str) -> list[Script]:
        delegation = call("call_d", "delegate", {"task": "Book ws-101.", "tools": ["reserve_seat"]})
        parent = Script(
            name=run_id,
            turns=[
                ScriptTurn(tool_calls=[delegation]),
                ScriptTurn(text="The helper says: {{call_d.output}}"),
            ],
        )
        child = Script(
            name=f"{run_id}-child",
            turns=[
                ScriptTurn(
                    tool_calls=[call("call_r", "reserve_seat", RESERVE)],
                    expect_tool_results={"call_r": f"{run_id}/delegate/call_d/"},
                ),
                ScriptTurn(text="Booked: {{call_r.record.reservation_id}}"),
            ],
        )
        return [parent, child]

    def run_input(self, run_id: str) -> AgentRunInput:
        return parent_input(run_id)

    def prepare(self, service: ExampleService) -> None:
        # The child's write commits, and its answer is held until the worker is dead.
        service.inject_fault("workshops.reserve", "commit_then_hang", hang_ms=120_000)

    async def until_killed(self, run: Crash) -> None:
        child, waiting = await child_waiting_for_approval(run.client, run.run_id, "call_d")
        [pending] = waiting.pending_approvals
        await approve(child, "call_r", "workshop-lead", pending.args_digest)
        await wait_until(lambda: reservations(run.service) == 1, "the child's write to commit")
        run.kept["child"] = child

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        child: WorkflowHandle[Any, AgentRunResult] = run.kept["child"]
        child_result = await result_of(child)
        assert child_result.status == "completed", child_result.stop_reason
        booking = by_id(child_result.calls)["call_r"]
        # Looked up under the child's own key on the new worker, found, never resent.
        assert (booking.status, booking.attempts) == ("confirmed_after_query", 1)
        assert booking.idempotency_key == f"{child.id}/{(await child.describe()).run_id}/call_r"
        assert result.status == "completed", result.stop_reason
        assert result.output == f"The helper says: {child_result.output}"
        assert isinstance(child_result.output, str)
        assert child_result.output.startswith("Booked: r-")
        found = counts(run.service)
        assert (found["workshops.reserve"], found["workshops.operation"]) == (1, 1)
        assert reservations(run.service) == 1
        # The parent's model got the child's answer under the delegate call's id.
        report = delegation_result(run.model, "call_d")
        assert (report["child_run"], report["status"]) == (child.id, "completed")
        assert report["output"] == child_result.output
        assert [(c.call_id, c.child_run) for c in result.calls] == [("call_d", child.id)]
        [effect] = result.side_effects
        assert (effect.call_id, effect.status) == ("call_r", "confirmed_after_query")
        assert effect.via == f"{child.id} (delegate call_d)"
        assert result.usage.model_calls == 4  # 2 of the parent's, 2 of the child's
        for handle in (run.handle, child):
            assert set(lost_workflow_tasks(await history(handle), run.killed)) <= {STICKY_TIMEOUT}


# --- (j) across a continue-as-new ----------------------------------------------------------


def continued_script(name: str, *, delay_ms: int) -> Script:
    """Reserve a seat; then check ws-101 and answer, each model turn after the write taking
    `delay_ms`."""
    return Script(
        name=name,
        turns=[
            ScriptTurn(
                tool_calls=[call("call_reserve", "reserve_seat", RESERVE)],
                expect_tool_results={"call_reserve": f"{name}/"},
            ),
            ScriptTurn(
                tool_calls=[call("call_check", "check_workshop", {"workshop_id": "ws-101"})],
                expect_tool_results={"call_check": "p-carol"},
                delay_ms=delay_ms,
            ),
            ScriptTurn(
                text="{{call_check.title}}: {{call_reserve.reservation_id}}", delay_ms=delay_ms
            ),
        ],
    )


def write_result_task(events: list[HistoryEvent]) -> int:
    """The event id of the workflow task that took the write `call_reserve`'s result in a
    run's history: the history's length as that task's workflow code sees it (Temporal's
    `get_current_history_length`), so a run told to continue as new past that many events
    (`continue_as_new_after_events`) continues at the first safe point after its write, and
    at none before it. Fails when the history holds no such result."""
    scheduled = [
        (e.event_id, e.activity_task_scheduled_event_attributes)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    writes = {
        event_id
        for event_id, attributes in scheduled
        if attributes.activity_type.name == "run_tool"
        and b'"call_reserve"' in attributes.input.SerializeToString()
    }
    [completed] = [
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.scheduled_event_id in writes
    ]
    return next(
        e.event_id
        for e in events
        if e.event_id > completed and e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    )


class RightAfterAContinueAsNew(Phase):
    """The continued run finishes intact, its ledger carried over."""

    tools = ("reserve_seat", "check_workshop")
    slow_http = True

    def scripts(self, run_id: str) -> list[Script]:
        return [continued_script(run_id, delay_ms=3_000)]

    async def measured_input(
        self, place: Place, settings: Settings, model: ScriptedProvider, service: ExampleService
    ) -> AgentRunInput:
        """The run continues as new once its history is as long as that of a run of the same
        script (without delays, on the same worker) when its write's result came in: right
        after the write, wherever a change to the loop moves that (`write_result_task`)."""
        measured_id = f"{place.run_id}-measured"
        model.register(continued_script(measured_id, delay_ms=0))
        measured = self.run_input(measured_id)
        handle = await start_case_run(place.client, settings, measured_id, measured)
        await approve_pending(handle, "call_reserve")
        result = await result_of(handle)
        assert result.status == "completed", result.stop_reason
        boundary = write_result_task(await history(handle))
        model.reset()
        service.reset()  # its write and its requests are not the case's
        return run_input(place.run_id, list(self.tools), continue_as_new_after_events=boundary)

    def prepare(self, service: ExampleService) -> None:
        # Every step after the write takes seconds, so the one the continued run starts with
        # is still in flight when the worker is killed.
        service.set_delay("workshops.get", 3_000)

    async def until_killed(self, run: Crash) -> None:
        first_step = {
            # The model call of turn 2 (the continued run started right after the write) ...
            "calling_model": lambda: any(r["turn"] == 1 for r in run.model.requests),
            # ... or the read it asked for (the run continued after that model call).
            "executing_tools": lambda: counts(run.service)["workshops.get"] >= 1,
        }
        await approve_pending(run.handle, "call_reserve")
        view = await wait_for_status(
            run.handle, lambda v: len(v.run_chain) == 2, "the run to continue as new"
        )
        await wait_until(first_step[view.phase], f"the continued run's first step ({view.phase})")
        run.kept["view"] = view

    async def before_second(self, run: Crash) -> None:
        # The write was made before the boundary; the continued run started with it in its
        # ledger.
        assert by_id(run.kept["view"].calls)["call_reserve"].status == "succeeded"
        assert reservations(run.service) == 1

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        final = await run.handle.query("status", result_type=RunStatusView)
        assert result.status == "completed", result.stop_reason
        assert isinstance(result.output, str)
        assert result.output.startswith("Intro to Temporal: r-")
        # The step the kill cut short ran again, once; nothing else did.
        found = counts(run.service)
        redone = {"calling_model": (4, 1), "executing_tools": (3, 2)}[run.kept["view"].phase]
        model_requests, reads = redone
        assert found["workshops.get"] == reads
        assert found["workshops.reserve"] == 1 and reservations(run.service) == 1
        calls = by_id(result.calls)
        assert [c.call_id for c in result.calls] == ["call_reserve", "call_check"]
        assert (calls["call_reserve"].status, calls["call_reserve"].idempotency_key) == (
            "succeeded",
            run.key,
        )
        assert calls["call_check"].status == "succeeded"
        # The ledger carried over: one budgeted call per turn, whatever the kill cut short.
        assert (result.usage.model_calls, result.usage.tool_calls) == (3, 2)
        # The continued run's model saw every result of the chain, each under its call id.
        last = run.model.requests[-1]["body"]["messages"]
        assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == [
            "call_reserve",
            "call_check",
        ]

        chain = await chain_of(run.client, run.handle)
        assert len(chain) == 2, [first for first, _ in chain]
        # As many model requests as on a quiet machine, and no more than the attempts history
        # records: a busy machine may time an attempt out (its heartbeat) and retry it, never
        # ask the model unrecorded.
        attempts = [a for _, events in chain for a, _ in activity_attempts(events, *MODEL_CALLS)]
        assert model_requests <= len(run.model.requests) <= sum(attempts)
        (_, first_run), (_, continued) = chain
        # The first run took the write's result in before it continued (else this fails).
        assert write_result_task(first_run) < first_run[-1].event_id
        # The killed worker ran the first run to its continue-as-new and started the continued
        # run; the new worker took the continued run over and finished it.
        assert set(task_identities(first_run)) == {run.killed}
        last_event = first_run[-1].event_type
        assert last_event == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        workers = task_identities(continued)
        assert workers[0] == run.killed and workers[-1] == run.second
        assert set(workers) == {run.killed, run.second}
        assert lost_workflow_tasks(first_run, run.killed) == []
        assert set(lost_workflow_tasks(continued, run.killed)) <= {STICKY_TIMEOUT}
        assert final.run_chain == [first for first, _ in chain]


# --- the dev server itself restarted -------------------------------------------------------


class ServerRestartedMidRun(ServerRestart):
    """The run is kept, and the write approved after the restart happens once."""

    async def before_restart(self, run: Crash) -> None:
        view = await wait_for_phase(run.handle, "awaiting_approval")
        run.kept["digest"] = view.pending_approvals[0].args_digest

    async def after_restart(self, run: Crash) -> None:
        await approve(run.handle, "call_reserve", "workshop-lead", run.kept["digest"])

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        assert by_id(result.calls)["call_reserve"].status == "succeeded"
        assert reservations(run.service) == 1
        assert counts(run.service)["workshops.reserve"] == 1
        assert lost_workflow_tasks(await history(run.handle)) == []


class ServerRestartedWhileAWriteIsInFlight(ServerRestart):
    """The write in flight through the restart lands once, in its first attempt."""

    slow_http = True

    def prepare(self, service: ExampleService) -> None:
        # The write is held before its commit for longer than the restart takes: it commits,
        # and its activity completes, against the restarted server.
        service.set_delay("workshops.reserve", 8_000)

    async def before_restart(self, run: Crash) -> None:
        await approve_pending(run.handle, "call_reserve")
        await wait_until(
            lambda: counts(run.service)["workshops.reserve"] == 1,
            "the write to reach the service",
        )
        # Right after a recorded heartbeat: the next one (the SDK sends them 4 s apart)
        # reaches the restarted server within the 5 s heartbeat timeout, so the attempt is
        # kept.
        await heartbeat_recorded(run.handle)

    async def after_restart(self, run: Crash) -> None:
        [write] = requests_to(run.service, "workshops.reserve")
        assert write["finished_seq"] is None  # still held at the service: in flight throughout

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert result.status == "completed", result.stop_reason
        reserve = by_id(result.calls)["call_reserve"]
        assert (reserve.status, reserve.attempts, reserve.idempotency_key) == (
            "succeeded",
            1,
            run.key,
        )
        found = counts(run.service)
        assert (found["workshops.reserve"], found["workshops.operation"]) == (1, 0)
        assert reservations(run.service) == 1
        held = await held_under(run.service, "workshops", run.key)
        assert (held["state"], held["record"]["operation_id"]) == ("applied", run.key)
        events = await history(run.handle)
        assert lost_workflow_tasks(events) == []
        assert activity_attempts(events, "run_tool") == [(1, run.second)]


# --- (h) during an undo --------------------------------------------------------------------


class DuringAnUndo(Phase):
    """A run ending without delivering undoes its booking (`compensate: always`), and the
    worker dies while the cancel is held before its commit: the undo is looked up by its own
    key, sent again under it, and cancels the booking once."""

    tools = ("book_train", "pay_booking")
    slow_http = True

    def scripts(self, run_id: str) -> list[Script]:
        return [book_then_pay(run_id)]

    def run_input(self, run_id: str) -> AgentRunInput:
        return run_input(
            run_id,
            list(self.tools),
            compensate="always",
            principal=Principal(subject="ada", scopes=["travel:write"]),
        )

    def prepare(self, service: ExampleService) -> None:
        service.set_delay("travel.cancel", 30_000)

    async def until_killed(self, run: Crash) -> None:
        await wait_until(
            lambda: counts(run.service)["travel.cancel"] == 1, "the undo to reach the service"
        )

    async def before_second(self, run: Crash) -> None:
        await wait_until(
            lambda: requests_to(run.service, "travel.cancel")[0]["finished_seq"] is not None,
            "the service to drop the abandoned undo",
        )
        assert run.service.records()["bookings_cancelled"] == 0

    async def check(self, run: Crash, result: AgentRunResult) -> None:
        assert (result.status, result.stop_cause) == ("blocked", "give_up"), result.stop_reason
        key = write_key(run.handle, "undo-call_book")
        undo = by_id(result.calls)["undo-call_book"]
        assert (undo.status, undo.attempts, undo.idempotency_key) == ("succeeded", 2, key)
        found = counts(run.service)
        assert (found["travel.cancel"], found["travel.operation"]) == (2, 1)
        assert run.service.records()["bookings_cancelled"] == 1
        held = await held_under(run.service, "travel", key)
        assert (held["state"], held["record"]["status"]) == ("applied", "cancelled")
        [line] = result.compensation
        assert (line.outcome, line.undo_status) == ("undone", "succeeded")
        await lost_only_while_waiting(run)


# --- the table -----------------------------------------------------------------------------

PHASES = [
    pytest.param(DuringAModelCall(), id="killed-during-a-model-call"),
    pytest.param(DuringARead(), id="killed-during-a-read"),
    pytest.param(WhileAWriteIsHeldBeforeItsCommit(), id="killed-before-a-write-commits"),
    pytest.param(AfterTheCommit(), id="killed-after-a-write-commits"),
    pytest.param(WhileAReplyAwaitsApproval(), id="killed-while-awaiting-approval"),
    pytest.param(WhileAwaitingReconciliation(), id="killed-while-awaiting-reconciliation"),
    pytest.param(DuringAnOutcomeLookup(), id="killed-during-an-outcome-lookup"),
    pytest.param(WhileAChildRunWrites(), id="killed-while-a-child-run-writes"),
    pytest.param(RightAfterAContinueAsNew(), id="killed-right-after-a-continue-as-new"),
    pytest.param(DuringAnUndo(), id="killed-during-an-undo"),
    pytest.param(ServerRestartedMidRun(), id="server-restarted-mid-run"),
    pytest.param(ServerRestartedWhileAWriteIsInFlight(), id="server-restarted-mid-write"),
]


async def after(
    before: list[asyncio.Task[None]], crash: Callable[[Place], Awaitable[None]], place: Place
) -> None:
    """`crash` at `place` once every task of `before` is done, however it ended."""
    if before:
        await asyncio.wait(before)
    await crash(place)


@pytest.fixture(scope="module")
async def crashes(
    request: pytest.FixtureRequest,
    client: Client,
    worker_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """Each selected case's crash by its id, all started with the first case's test: the
    worker kills at once (most of a case is waiting on the server's timeouts), then the
    restarts one by one. Each case's test awaits its own: its failure is that test's alone."""
    selected: dict[str, Phase] = {
        item.callspec.id: item.callspec.params["phase"]
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.getparent(pytest.Module) is request.node
        and hasattr(item, "callspec")
    }

    # Worker processes start two at a time (the cores of a small CI machine).
    starting = asyncio.Semaphore(2)

    def place(name: str) -> Place:
        run_id = f"crash-{name}-{uuid.uuid4().hex[:8]}"
        return Place(client, worker_settings, tmp_path_factory.mktemp(name), run_id, starting)

    runs = {
        name: asyncio.create_task(phase.crash(place(name)))
        for name, phase in selected.items()
        if not phase.alone
    }
    before = list(runs.values())
    for name, phase in selected.items():
        if phase.alone:
            runs[name] = asyncio.create_task(after(before, phase.crash, place(name)))
            before = [runs[name]]
    try:
        yield runs
    finally:
        for task in runs.values():
            task.cancel()
        await asyncio.gather(*runs.values(), return_exceptions=True)


@pytest.mark.parametrize("phase", PHASES)
async def test_the_run_finishes_and_each_write_has_one_effect(
    phase: Phase, crashes: dict[str, asyncio.Task[None]], request: pytest.FixtureRequest
) -> None:
    await crashes[request.node.callspec.id]
