"""A worker process killed with SIGKILL in every phase of a run, and the Temporal dev server
itself restarted: the run finishes on a new process, and each approved write has exactly one
effect in the system of record.

Each test runs its worker as a separate OS process (own task queue, own transcript store), so
the kill is the real thing: no cleanup, no goodbye to the server. The server notices a lost
activity through its heartbeat timeout (5 s for tools, 10 s for model calls) and a lost sticky
workflow task after the workers' sticky timeout (3 s here, `AGENTLOOP_STICKY_TIMEOUT_SECONDS`),
so each test takes 10-20 s; a lost outcome lookup has no
heartbeat and is only given up on at its start-to-close timeout (the tool's 45 s), so that test
takes about 50 s. Every wait is bounded and waits on something observable (the `status` query,
the provider's request log, the service's stats). Each history is checked too: no workflow task
failed, and none timed out but those the killed worker held (`lost_workflow_tasks`).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from agentloop import search
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    CallRecord,
    Principal,
    ResolveRequest,
    RunStatusView,
)
from agentloop.demo.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.runtime.dev_server import FAST_DEV_SERVER, free_port, temporal_binary
from tests.support import (
    local_activity_type,
    start_run,
    wait_for_phase,
    wait_for_status,
    wait_until,
    worker_env,
    worker_process,
    write_key,
)
from tests.test_delegate import child_waiting_for_approval, delegation_result, parent_input

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

ALL_SCOPES = ["workshops:read", "workshops:write", "tickets:read", "tickets:write"]
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
REPLY = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "Refund issued."}
RESULT_SECONDS = 60
"""Bound on a run's end once the second worker is up (heartbeat + sticky timeouts included)."""
SLOW_HTTP = 30.0
"""The tool HTTP timeout of workers that must still be waiting when they are killed."""
STICKY_TIMEOUT = "TIMEOUT_TYPE_SCHEDULE_TO_START"
"""A workflow task that waited on a dead worker's sticky queue (none was lost half done)."""
DATE = "2026-12-01"
CONTINUE_AFTER_EVENTS = 43


def make_env(
    client: Client, worker_settings: Settings, tmp_path: Path, **updates: Any
) -> tuple[Settings, dict[str, str]]:
    """Settings and environment of this test's worker processes: their own task queue and
    store file, shared by the killed worker and the one that finishes the run."""
    settings = worker_settings.model_copy(
        update={"task_queue": f"crash-{uuid.uuid4().hex[:8]}", **updates}
    )
    return settings, worker_env(client, settings, tmp_path / "store.db")


def identity(process: asyncio.subprocess.Process) -> str:
    """A worker process's Temporal identity (its client's default, `PID@HOST`), as history
    names who started a workflow or activity task."""
    return f"{process.pid}@{socket.gethostname()}"


async def kill(process: asyncio.subprocess.Process) -> str:
    """SIGKILL the worker; returns its identity."""
    process.send_signal(signal.SIGKILL)
    await process.wait()
    assert process.returncode == -signal.SIGKILL
    return identity(process)


async def history(handle: WorkflowHandle[Any, Any]) -> list[HistoryEvent]:
    return [e async for e in handle.fetch_history_events()]


async def chain_of(
    client: Client, handle: WorkflowHandle[Any, Any]
) -> list[tuple[str, list[HistoryEvent]]]:
    """Each run of the workflow's chain (continue-as-new), first to last: its run id and its
    history."""
    chain: list[tuple[str, list[HistoryEvent]]] = []
    run_id = handle.first_execution_run_id
    while run_id:
        events = await history(client.get_workflow_handle(handle.id, run_id=run_id))
        chain.append((run_id, events))
        last = events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
            else None
        )
    return chain


def lost_workflow_tasks(events: list[HistoryEvent], *killed: str) -> list[str]:
    """The timeout type of each timed-out workflow task of a run's history, once it is checked
    that no workflow task failed (a replay that diverged) and that each one that timed out was
    held by a killed worker (`kill`'s identities): started by it and lost with it, or waiting
    on its sticky queue. Anything else would be a wedged run (`assert_never_wedged`)."""
    by_id = {e.event_id: e for e in events}
    failed = [
        e.workflow_task_failed_event_attributes.failure.message
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed == [], failed
    lost = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            continue
        timed_out = event.workflow_task_timed_out_event_attributes
        if timed_out.started_event_id:
            started = by_id[timed_out.started_event_id]
            holder = started.workflow_task_started_event_attributes.identity
        else:  # never started: it waited on a sticky queue, named `IDENTITY-UUID`
            scheduled = by_id[timed_out.scheduled_event_id]
            queue = scheduled.workflow_task_scheduled_event_attributes.task_queue.name
            holder = queue.rpartition("-")[0]
        assert holder in killed, f"workflow task {event.event_id} of {holder} timed out"
        lost.append(TimeoutType.Name(timed_out.timeout_type))
    return lost


def task_identities(events: list[HistoryEvent]) -> list[str]:
    """Who started each workflow task of a run, in order."""
    return [
        e.workflow_task_started_event_attributes.identity
        for e in events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
    ]


def activity_attempts(events: list[HistoryEvent], activity_type: str) -> list[tuple[int, str]]:
    """For each activity of that type in a run's history: the attempt that ended it and the
    worker that ran that attempt (history keeps only the last attempt's start)."""
    scheduled = {
        e.event_id
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    }
    return [
        (
            e.activity_task_started_event_attributes.attempt,
            e.activity_task_started_event_attributes.identity,
        )
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
    ]


def call(call_id: str, name: str, arguments: dict[str, Any]) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


def run_input(model: str, tools: list[str], **overrides: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Do the thing, once.",
            "provider": "openai-chat",
            "model": model,
            "tools": tools,
            "principal": Principal(subject="p-alice", scopes=ALL_SCOPES),
            **overrides,
        }
    )


def reserve_script(
    name: str, expect: str, *, final_delay_ms: int = 0, with_read: bool = False
) -> Script:
    """Turn 1: (optionally check ws-101, then) reserve a seat; turn 2: a final text."""
    calls = [call("call_reserve", "reserve_seat", RESERVE)]
    expected = {"call_reserve": expect}
    if with_read:
        calls.insert(0, call("call_check", "check_workshop", {"workshop_id": "ws-101"}))
        expected["call_check"] = "Intro to Temporal"
    return Script(
        name=name,
        turns=[
            ScriptTurn(tool_calls=calls, expect_tool_results=expected),
            ScriptTurn(text="Booked.", delay_ms=final_delay_ms),
        ],
    )


async def approve(
    handle: WorkflowHandle[Any, AgentRunResult], call_id: str, approver: str, digest: str
) -> None:
    await handle.signal(
        "approve",
        ApprovalDecision(call_id=call_id, args_digest=digest, approved=True, approver=approver),
    )


async def approve_pending(
    handle: WorkflowHandle[Any, AgentRunResult], call_id: str, approver: str = "workshop-lead"
) -> None:
    view = await wait_for_phase(handle, "awaiting_approval", seconds=RESULT_SECONDS)
    [pending] = view.pending_approvals
    assert pending["call_id"] == call_id
    await approve(handle, call_id, approver, pending["args_digest"])


async def result_of(
    handle: WorkflowHandle[Any, AgentRunResult], seconds: float = RESULT_SECONDS
) -> AgentRunResult:
    return await asyncio.wait_for(handle.result(), seconds)


def counts(example_service: ExampleService) -> dict[str, int]:
    found: dict[str, int] = example_service.stats()["counts"]
    return found


def reservations(example_service: ExampleService) -> int:
    return int(example_service.records()["reservations"])


def by_id(calls: list[CallRecord]) -> dict[str, CallRecord]:
    return {c.call_id: c for c in calls}


def requests_to(example_service: ExampleService, endpoint: str) -> list[dict[str, Any]]:
    return [r for r in example_service.stats()["requests"] if r["endpoint"] == endpoint]


async def held_under(example_service: ExampleService, domain: str, key: str) -> Any:
    """What the system of record holds under an idempotency key (read after the counts)."""
    url = f"{example_service.base_url}/{domain}/operations/{quote(key, safe='')}"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def query_when_served(
    handle: WorkflowHandle[Any, AgentRunResult],
    predicate: Callable[[RunStatusView], bool],
    what: str,
    seconds: float = RESULT_SECONDS,
) -> RunStatusView:
    """Like `wait_for_status`, but a query the server cannot deliver yet (the workflow's
    sticky worker is dead and the new one has not taken over) is asked again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    last = "no answer"
    while True:
        try:
            view: RunStatusView = await asyncio.wait_for(
                handle.query("status", result_type=RunStatusView), timeout=15
            )
        except (RPCError, TimeoutError) as exc:
            last = repr(exc)
        else:
            if predicate(view):
                return view
            last = view.phase
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {last}")
        await asyncio.sleep(0.1)


# --- (a) during a model call ---------------------------------------------------------------


async def test_killed_during_a_model_call_the_call_is_made_again_and_the_write_stays_single(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path)
    # The model's answer after the write takes seconds: the worker dies while it waits.
    scripted_provider.register(reserve_script(run_id, run_id, final_delay_ms=4_000))

    def final_turn_requests() -> int:
        return sum(1 for r in scripted_provider.requests if r["turn"] == 1)

    async with worker_process(env) as first:
        handle = await start_run(client, settings, run_id, run_input(run_id, ["reserve_seat"]))
        await approve_pending(handle, "call_reserve")
        await wait_until(lambda: final_turn_requests() == 1, "the second model call", 30)
        killed = await kill(first)
    assert reservations(example_service) == 1
    async with worker_process(env):
        result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert result.output == "Booked."
    assert final_turn_requests() == 2  # the lost model call was made again, once
    assert result.usage.model_calls == 2  # one budgeted call, whatever its attempts
    assert by_id(result.calls)["call_reserve"].status == "succeeded"
    assert reservations(example_service) == 1
    assert counts(example_service)["workshops.reserve"] == 1
    assert set(lost_workflow_tasks(await history(handle), killed)) <= {STICKY_TIMEOUT}


# --- (b) during a read ---------------------------------------------------------------------


async def test_killed_during_a_read_the_read_runs_again_and_the_write_runs_once(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path, tool_http_timeout_seconds=SLOW_HTTP)
    scripted_provider.register(reserve_script(run_id, run_id, with_read=True))
    example_service.set_delay("workshops.get", 20_000)
    tools = ["check_workshop", "reserve_seat"]

    async with worker_process(env) as first:
        handle = await start_run(client, settings, run_id, run_input(run_id, tools))
        await wait_until(
            lambda: counts(example_service)["workshops.get"] == 1, "the read to reach the service"
        )
        killed = await kill(first)
    example_service.set_delay("workshops.get", 0)
    async with worker_process(env):
        await approve_pending(handle, "call_reserve")
        result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    calls = by_id(result.calls)
    assert (calls["call_check"].status, calls["call_reserve"].status) == ("succeeded", "succeeded")
    found = counts(example_service)
    assert found["workshops.get"] == 2  # the lost read ran again, once
    assert [r["status"] for r in requests_to(example_service, "workshops.get")] == [None, 200]
    assert found["workshops.reserve"] == 1
    assert reservations(example_service) == 1
    assert set(lost_workflow_tasks(await history(handle), killed)) <= {STICKY_TIMEOUT}


# --- (c) during a write, before its commit -------------------------------------------------


async def test_killed_while_a_write_is_held_before_its_commit_it_is_sent_again_same_key(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path, tool_http_timeout_seconds=SLOW_HTTP)
    scripted_provider.register(reserve_script(run_id, f"{run_id}/"))
    # The delay knob holds the request before the handler runs: nothing is committed yet.
    example_service.set_delay("workshops.reserve", 30_000)

    async with worker_process(env) as first:
        handle = await start_run(client, settings, run_id, run_input(run_id, ["reserve_seat"]))
        key = write_key(handle, "call_reserve")
        await approve_pending(handle, "call_reserve")
        await wait_until(
            lambda: counts(example_service)["workshops.reserve"] == 1,
            "the write to reach the service",
        )
        killed = await kill(first)
    # The service cancels the abandoned request: it is logged without an answer, no record.
    await wait_until(
        lambda: requests_to(example_service, "workshops.reserve")[0]["finished_seq"] is not None,
        "the service to drop the abandoned write",
        10,
    )
    assert requests_to(example_service, "workshops.reserve")[0]["status"] is None
    assert reservations(example_service) == 0
    example_service.set_delay("workshops.reserve", 0)

    async with worker_process(env):
        result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    # The lost attempt timed out (heartbeat): outcome unknown -> lookup says absent -> the
    # write is sent again with the same key.
    reserve = by_id(result.calls)["call_reserve"]
    assert (reserve.status, reserve.attempts, reserve.idempotency_key) == ("succeeded", 2, key)
    found = counts(example_service)
    assert found["workshops.reserve"] == 2
    assert found["workshops.operation"] == 1
    assert [r["status"] for r in requests_to(example_service, "workshops.operation")] == [404]
    assert reservations(example_service) == 1
    held = await held_under(example_service, "workshops", key)
    assert (held["state"], held["record"]["operation_id"]) == ("applied", key)
    assert set(lost_workflow_tasks(await history(handle), killed)) <= {STICKY_TIMEOUT}


# --- (d) after the commit, before the activity completes -----------------------------------


async def test_killed_after_the_commit_the_new_worker_finds_it_and_does_not_resend(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path, tool_http_timeout_seconds=SLOW_HTTP)
    scripted_provider.register(reserve_script(run_id, f"{run_id}/"))
    example_service.inject_fault("workshops.reserve", "commit_then_hang", hang_ms=120_000)

    async with worker_process(env) as first:
        handle = await start_run(client, settings, run_id, run_input(run_id, ["reserve_seat"]))
        key = write_key(handle, "call_reserve")
        await approve_pending(handle, "call_reserve")
        await wait_until(lambda: reservations(example_service) == 1, "the write to commit")
        killed = await kill(first)
    async with worker_process(env):
        result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    reserve = by_id(result.calls)["call_reserve"]
    assert (reserve.status, reserve.attempts, reserve.idempotency_key) == (
        "confirmed_after_query",
        1,
        key,
    )
    [effect] = result.side_effects
    assert (effect["call_id"], effect["status"]) == ("call_reserve", "confirmed_after_query")
    found = counts(example_service)
    assert found["workshops.reserve"] == 1
    assert found["workshops.operation"] == 1
    assert reservations(example_service) == 1
    assert set(lost_workflow_tasks(await history(handle), killed)) <= {STICKY_TIMEOUT}


# --- (e) while awaiting approval (send_reply) ----------------------------------------------


async def test_killed_while_a_reply_awaits_approval_the_approved_reply_is_sent_once(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path)
    scripted_provider.register(
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
    )
    async with worker_process(env) as first:
        handle = await start_run(
            client, settings, run_id, run_input(run_id, ["send_reply"], provider="anthropic")
        )
        view = await wait_for_phase(handle, "awaiting_approval")
        killed = await kill(first)
    assert example_service.records()["replies"] == 0
    # No worker is polling: the signal waits in history for the next one.
    await approve(handle, "call_reply", "support-lead", view.pending_approvals[0]["args_digest"])
    async with worker_process(env):
        result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert by_id(result.calls)["call_reply"].status == "succeeded"
    assert example_service.records()["replies"] == 1
    assert counts(example_service)["support.reply"] == 1
    assert set(lost_workflow_tasks(await history(handle), killed)) <= {STICKY_TIMEOUT}


# --- (f) while awaiting reconciliation -----------------------------------------------------


async def test_killed_while_awaiting_reconciliation_the_resolution_lands_on_the_new_worker(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path)
    scripted_provider.register(reserve_script(run_id, "ops says applied"))
    example_service.inject_fault("workshops.reserve", "commit_then_drop")
    example_service.inject_fault("workshops.operation", "unavailable", count=50)

    async with worker_process(env) as first:
        handle = await start_run(client, settings, run_id, run_input(run_id, ["reserve_seat"]))
        key = write_key(handle, "call_reserve")
        await approve_pending(handle, "call_reserve")
        await wait_for_phase(handle, "awaiting_reconciliation")
        killed = await kill(first)
    async with worker_process(env):
        # The new worker rebuilt the wait from history: the same call, the same key.
        view = await query_when_served(
            handle, lambda v: v.phase == "awaiting_reconciliation", "the rebuilt wait"
        )
        assert [(u["call_id"], u["idempotency_key"]) for u in view.unresolved] == [
            ("call_reserve", key)
        ]
        await handle.signal(
            "resolve", ResolveRequest(call_id="call_reserve", outcome="applied", operator="ops")
        )
        result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert by_id(result.calls)["call_reserve"].status == "confirmed_after_query"
    assert reservations(example_service) == 1
    assert counts(example_service)["workshops.reserve"] == 1  # never resent
    assert set(lost_workflow_tasks(await history(handle), killed)) <= {STICKY_TIMEOUT}


# --- (g) during an outcome lookup ----------------------------------------------------------


async def test_killed_during_an_outcome_lookup_the_new_worker_looks_it_up_again(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path, tool_http_timeout_seconds=SLOW_HTTP)
    scripted_provider.register(reserve_script(run_id, f"{run_id}/"))
    # The write commits but its answer is lost: outcome unknown, so the run asks the system of
    # record by key, and that question is held at the service until the worker is dead.
    example_service.inject_fault("workshops.reserve", "commit_then_drop")
    example_service.set_delay("workshops.operation", 30_000)

    async with worker_process(env) as first:
        handle = await start_run(client, settings, run_id, run_input(run_id, ["reserve_seat"]))
        key = write_key(handle, "call_reserve")
        await approve_pending(handle, "call_reserve")
        await wait_until(
            lambda: counts(example_service)["workshops.operation"] == 1,
            "the outcome lookup to reach the service",
        )
        killed = await kill(first)
    assert reservations(example_service) == 1
    example_service.set_delay("workshops.operation", 0)
    async with worker_process(env) as second:
        # The lookup heartbeats (feature checks-heartbeat): its lost attempt is given up on
        # at the heartbeat timeout, not the tool's 45 s, then attempt 2 runs here.
        result = await result_of(handle, RESULT_SECONDS)

    assert result.status == "completed", result.stop_reason
    assert result.output == "Booked."
    reserve = by_id(result.calls)["call_reserve"]
    assert (reserve.status, reserve.attempts, reserve.idempotency_key) == (
        "confirmed_after_query",
        1,
        key,
    )
    [effect] = result.side_effects
    assert (effect["call_id"], effect["status"]) == ("call_reserve", "confirmed_after_query")
    found = counts(example_service)
    assert found["workshops.reserve"] == 1  # never resent
    assert [r["status"] for r in requests_to(example_service, "workshops.operation")] == [None, 200]
    assert reservations(example_service) == 1
    events = await history(handle)
    # At most the workflow task that waited on the killed worker's sticky queue.
    assert set(lost_workflow_tasks(events, killed)) <= {"TIMEOUT_TYPE_SCHEDULE_TO_START"}
    # The one lookup activity: its second attempt ran on the new worker.
    [lookup] = activity_attempts(events, "lookup_outcome")
    assert lookup == (2, identity(second))


# --- (h) during a batch of local reads -----------------------------------------------------


async def test_killed_during_a_batch_of_local_reads_the_batch_runs_again_each_under_its_id(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path, tool_http_timeout_seconds=SLOW_HTTP)
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(
                    tool_calls=[
                        call("call_sh", "get_weather", {"city": "Shanghai", "date": DATE}),
                        call("call_bj", "get_weather", {"city": "Beijing", "date": DATE}),
                    ],
                    expect_tool_results={"call_sh": "Shanghai", "call_bj": "Beijing"},
                ),
                ScriptTurn(text="{{call_sh.city}} and {{call_bj.city}}"),
            ],
        )
    )
    # Local reads run inside the workflow task: the worker dies holding it, both reads in
    # flight (within the local reads' 5 s timeout).
    example_service.set_delay("weather", 4_000)

    async with worker_process(env) as first:
        handle = await start_run(client, settings, run_id, run_input(run_id, ["get_weather"]))
        await wait_until(
            lambda: counts(example_service)["weather"] == 2, "both reads to reach the service"
        )
        killed = await kill(first)
    example_service.set_delay("weather", 0)
    async with worker_process(env):
        result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert result.output == "Shanghai and Beijing"
    assert {c.call_id: c.status for c in result.calls} == {
        "call_sh": "succeeded",
        "call_bj": "succeeded",
    }
    assert (result.usage.model_calls, result.usage.tool_calls) == (2, 2)
    # The lost attempts were abandoned unanswered; the batch ran again, each read once.
    assert [r["status"] for r in requests_to(example_service, "weather")] == [None, None, 200, 200]
    # Each result went back under its own call id.
    last = scripted_provider.requests[-1]["body"]["messages"]
    tool_messages = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    assert set(tool_messages) == {"call_sh", "call_bj"}
    assert "Shanghai" in tool_messages["call_sh"] and "Beijing" in tool_messages["call_bj"]
    assert "Beijing" not in tool_messages["call_sh"] and "Shanghai" not in tool_messages["call_bj"]
    events = await history(handle)
    # The workflow task the reads ran in was lost with the worker (that is how a local
    # activity's attempt is lost); the batch was recorded once, still local, by the new one.
    assert lost_workflow_tasks(events, killed) == ["TIMEOUT_TYPE_START_TO_CLOSE"]
    assert sum(local_activity_type(e) == "run_tool" for e in events) == 2
    assert activity_attempts(events, "run_tool") == []


# --- (i) while a delegated child run writes ------------------------------------------------


async def test_killed_while_a_child_run_writes_both_runs_finish_and_the_write_lands_once(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path, tool_http_timeout_seconds=SLOW_HTTP)
    delegation = call("call_d", "delegate", {"task": "Book ws-101.", "tools": ["reserve_seat"]})
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(tool_calls=[delegation]),
                ScriptTurn(text="The helper says: {{call_d.output}}"),
            ],
        )
    )
    scripted_provider.register(
        Script(
            name=f"{run_id}-child",
            turns=[
                ScriptTurn(
                    tool_calls=[call("call_r", "reserve_seat", RESERVE)],
                    expect_tool_results={"call_r": f"{run_id}/delegate/call_d/"},
                ),
                ScriptTurn(text="Booked: {{call_r.record.reservation_id}}"),
            ],
        )
    )
    # The child's write commits, and its answer is held until the worker is dead.
    example_service.inject_fault("workshops.reserve", "commit_then_hang", hang_ms=120_000)

    async with worker_process(env) as first:
        parent = await start_run(client, settings, run_id, parent_input(run_id))
        child, waiting = await child_waiting_for_approval(client, run_id, "call_d")
        [pending] = waiting.pending_approvals
        await approve(child, "call_r", "workshop-lead", pending["args_digest"])
        await wait_until(lambda: reservations(example_service) == 1, "the child's write to commit")
        killed = await kill(first)
    async with worker_process(env):
        result = await result_of(parent)
    child_result = await result_of(child)

    assert child_result.status == "completed", child_result.stop_reason
    booking = by_id(child_result.calls)["call_r"]
    # Looked up under the child's own key on the new worker, found, never resent.
    assert (booking.status, booking.attempts) == ("confirmed_after_query", 1)
    assert booking.idempotency_key == f"{child.id}/{(await child.describe()).run_id}/call_r"
    assert result.status == "completed", result.stop_reason
    assert result.output == f"The helper says: {child_result.output}"
    assert isinstance(child_result.output, str) and child_result.output.startswith("Booked: r-")
    found = counts(example_service)
    assert (found["workshops.reserve"], found["workshops.operation"]) == (1, 1)
    assert reservations(example_service) == 1
    # The parent's model got the child's answer under the delegate call's id.
    report = delegation_result(scripted_provider, "call_d")
    assert (report["child_run"], report["status"]) == (child.id, "completed")
    assert report["output"] == child_result.output
    assert [(c.call_id, c.child_run) for c in result.calls] == [("call_d", child.id)]
    [effect] = result.side_effects
    assert (effect["call_id"], effect["status"]) == ("call_r", "confirmed_after_query")
    assert effect["via"] == f"{child.id} (delegate call_d)"
    assert result.usage.model_calls == 4  # 2 of the parent's, 2 of the child's
    # No workflow task was in flight at the kill; one may have waited on the dead worker's
    # sticky queue before the server handed it to the new worker.
    for run in (parent, child):
        assert set(lost_workflow_tasks(await history(run), killed)) <= {STICKY_TIMEOUT}


# --- (j) across a continue-as-new ----------------------------------------------------------


async def test_killed_right_after_a_continue_as_new_the_continued_run_finishes_intact(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    settings, env = make_env(client, worker_settings, tmp_path, tool_http_timeout_seconds=SLOW_HTTP)
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(
                    tool_calls=[call("call_reserve", "reserve_seat", RESERVE)],
                    expect_tool_results={"call_reserve": f"{run_id}/"},
                ),
                ScriptTurn(
                    tool_calls=[call("call_check", "check_workshop", {"workshop_id": "ws-101"})],
                    expect_tool_results={"call_check": "p-carol"},
                    delay_ms=3_000,
                ),
                ScriptTurn(
                    text="{{call_check.title}}: {{call_reserve.reservation_id}}", delay_ms=3_000
                ),
            ],
        )
    )
    # Every step after the write takes seconds, so the one the continued run starts with is
    # still in flight when the worker is killed.
    example_service.set_delay("workshops.get", 3_000)
    tools = ["reserve_seat", "check_workshop"]
    # The first run reaches about 42 events with the write (the write's precondition checked
    # before its approval and again after it), give or take a workflow task: it
    # continues as new right after the write, or after the next model call, never before.
    limited = run_input(run_id, tools, continue_as_new_after_events=CONTINUE_AFTER_EVENTS)
    first_step = {
        # The model call of turn 2 (the continued run started right after the write) ...
        "calling_model": lambda: len(scripted_provider.requests) == 2,
        # ... or the read it asked for (the run continued after that model call).
        "executing_tools": lambda: counts(example_service)["workshops.get"] == 1,
    }

    async with worker_process(env) as first:
        handle = await start_run(client, settings, run_id, limited)
        key = write_key(handle, "call_reserve")
        await approve_pending(handle, "call_reserve")
        view = await wait_for_status(
            handle, lambda v: len(v.run_chain) == 2, "the run to continue as new"
        )
        await wait_until(first_step[view.phase], f"the continued run's first step ({view.phase})")
        killed = await kill(first)
    # The write was made before the boundary; the continued run started with it in its ledger.
    assert by_id(view.calls)["call_reserve"].status == "succeeded"
    assert reservations(example_service) == 1
    example_service.set_delay("workshops.get", 0)
    async with worker_process(env) as second:
        result = await result_of(handle)
        final = await handle.query("status", result_type=RunStatusView)

    assert result.status == "completed", result.stop_reason
    assert isinstance(result.output, str) and result.output.startswith("Intro to Temporal: r-")
    # The step the kill cut short ran again, once; nothing else did.
    found = counts(example_service)
    redone = {"calling_model": (4, 1), "executing_tools": (3, 2)}[view.phase]
    assert (len(scripted_provider.requests), found["workshops.get"]) == redone
    assert found["workshops.reserve"] == 1 and reservations(example_service) == 1
    calls = by_id(result.calls)
    assert [c.call_id for c in result.calls] == ["call_reserve", "call_check"]
    assert (calls["call_reserve"].status, calls["call_reserve"].idempotency_key) == (
        "succeeded",
        key,
    )
    assert calls["call_check"].status == "succeeded"
    # The ledger carried over: one budgeted call per turn, whatever the kill cut short.
    assert (result.usage.model_calls, result.usage.tool_calls) == (3, 2)
    # The continued run's model saw every result of the chain, each under its call id.
    last = scripted_provider.requests[-1]["body"]["messages"]
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == [
        "call_reserve",
        "call_check",
    ]

    chain = await chain_of(client, handle)
    assert len(chain) == 2, [run for run, _ in chain]
    (_, first_run), (_, continued) = chain
    # The killed worker ran the first run to its continue-as-new and started the continued
    # run; the new worker took the continued run over and finished it.
    assert set(task_identities(first_run)) == {killed}
    assert first_run[-1].event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
    workers = task_identities(continued)
    assert workers[0] == killed and workers[-1] == identity(second)
    assert set(workers) == {killed, identity(second)}
    assert lost_workflow_tasks(first_run, killed) == []
    assert set(lost_workflow_tasks(continued, killed)) <= {STICKY_TIMEOUT}
    assert final.run_chain == [run for run, _ in chain]


# --- the dev server itself restarted -------------------------------------------------------


class DevServer:
    """`temporal server start-dev` on a fixed port with a persistent database file."""

    def __init__(self, port: int, db_file: Path) -> None:
        self.port = port
        self.db_file = db_file
        self.process: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Client:
        self.process = await asyncio.create_subprocess_exec(
            temporal_binary(),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--headless",
            "--log-level",
            "error",
            "--db-filename",
            str(self.db_file),
            *FAST_DEV_SERVER,
            *search.dev_server_flags(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        return await self._connect()

    async def _connect(self) -> Client:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            assert self.process is not None
            if self.process.returncode is not None:
                raise AssertionError(f"temporal server exited with {self.process.returncode}")
            try:
                return await Client.connect(self.address, data_converter=pydantic_data_converter)
            except RuntimeError:
                if loop.time() > deadline:
                    raise AssertionError("the Temporal dev server did not start in time") from None
                await asyncio.sleep(0.2)

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


@pytest.fixture
async def dev_server(tmp_path: Path) -> AsyncIterator[DevServer]:
    server = DevServer(free_port(), tmp_path / "temporal.db")
    try:
        yield server
    finally:
        await server.stop()


async def test_the_dev_server_restarted_mid_run_keeps_the_run_and_the_write_happens_once(
    dev_server: DevServer,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    client = await dev_server.start()
    settings, env = make_env(client, worker_settings, tmp_path)
    scripted_provider.register(reserve_script(run_id, run_id))

    async with worker_process(env) as worker:
        handle = await start_run(client, settings, run_id, run_input(run_id, ["reserve_seat"]))
        view = await wait_for_phase(handle, "awaiting_approval")
        digest = view.pending_approvals[0]["args_digest"]

        await dev_server.stop()
        assert dev_server.db_file.exists()
        fresh = await dev_server.start()  # same port, same database file
        assert worker.returncode is None  # the worker rode out the outage

        again = fresh.get_workflow_handle(run_id, result_type=AgentRunResult)
        await approve(again, "call_reserve", "workshop-lead", digest)
        result = await result_of(again)

    assert result.status == "completed", result.stop_reason
    assert by_id(result.calls)["call_reserve"].status == "succeeded"
    assert reservations(example_service) == 1
    assert counts(example_service)["workshops.reserve"] == 1
    assert lost_workflow_tasks(await history(again)) == []


async def heartbeat_recorded(handle: WorkflowHandle[Any, Any], seconds: float = 10) -> None:
    """Until the server holds a heartbeat of the run's activity in flight (bounded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        if any(p.HasField("last_heartbeat_time") for p in pending):
            return
        if loop.time() > deadline:
            raise AssertionError("timed out waiting for a heartbeat of the activity in flight")
        await asyncio.sleep(0.05)


async def test_the_dev_server_restarted_while_a_write_is_in_flight_the_write_lands_once(
    dev_server: DevServer,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    client = await dev_server.start()
    settings, env = make_env(client, worker_settings, tmp_path, tool_http_timeout_seconds=SLOW_HTTP)
    scripted_provider.register(reserve_script(run_id, f"{run_id}/"))
    # The write is held before its commit for longer than the restart takes: it commits, and
    # its activity completes, against the restarted server.
    example_service.set_delay("workshops.reserve", 8_000)

    async with worker_process(env) as worker:
        handle = await start_run(client, settings, run_id, run_input(run_id, ["reserve_seat"]))
        key = write_key(handle, "call_reserve")
        await approve_pending(handle, "call_reserve")
        await wait_until(
            lambda: counts(example_service)["workshops.reserve"] == 1,
            "the write to reach the service",
        )
        # Right after a recorded heartbeat: the next one (the SDK sends them 4 s apart) reaches
        # the restarted server within the 5 s heartbeat timeout, so the attempt is kept.
        await heartbeat_recorded(handle)
        await dev_server.stop()
        fresh = await dev_server.start()  # same port, same database file
        assert worker.returncode is None  # the worker rode out the outage
        [write] = requests_to(example_service, "workshops.reserve")
        assert write["finished_seq"] is None  # still held at the service: in flight throughout
        again = fresh.get_workflow_handle(run_id, result_type=AgentRunResult)
        result = await result_of(again)

    assert result.status == "completed", result.stop_reason
    reserve = by_id(result.calls)["call_reserve"]
    assert (reserve.status, reserve.attempts, reserve.idempotency_key) == ("succeeded", 1, key)
    found = counts(example_service)
    assert (found["workshops.reserve"], found["workshops.operation"]) == (1, 0)
    assert reservations(example_service) == 1
    held = await held_under(example_service, "workshops", key)
    assert (held["state"], held["record"]["operation_id"]) == ("applied", key)
    events = await history(again)
    assert lost_workflow_tasks(events) == []
    assert activity_attempts(events, "run_tool") == [(1, identity(worker))]
