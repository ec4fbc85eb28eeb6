"""Approvals and authorization end to end: real dev server, the scripted provider over HTTP,
the workshop and support-desk tools against the example service (the system of record counts
what was written)."""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio.client import WithStartWorkflowOperation, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    Principal,
    RefusedApproval,
    RunStatusView,
)
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.scripted_provider.protocols import ANTHROPIC
from agentloop.testing.patience import SERVER_START
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import running_worker
from tests.crash.test_crash_phases import requests_to
from tests.live import Live, Servers, scripted
from tests.support import (
    result_of,
    signal_approval,
    start_run,
    wait_for_phase,
    wait_for_status,
    worker_env,
    worker_process,
    write_key,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

ALL_SCOPES = ["workshops:read", "workshops:write", "tickets:read", "tickets:write"]
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}


def run_input(model: str, scopes: list[str] = ALL_SCOPES, **overrides: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Reserve a seat in ws-101 for p-carol.",
            "provider": "anthropic",
            "model": model,
            "tools": ["check_workshop", "reserve_seat", "read_ticket", "send_reply"],
            "principal": Principal(subject="p-alice", scopes=scopes),
            **overrides,
        }
    )


def reserve_script(name: str) -> Script:
    return scripted(
        name,
        ScriptTurn(
            tool_calls=[
                scripted_call("check_workshop", "call_check", workshop_id="ws-101"),
                scripted_call("reserve_seat", "call_reserve", **RESERVE),
            ],
            expect_tool_results={"call_check": "ws-101"},
        ),
        "Booked: {{call_reserve.reservation_id}}",
    )


async def decide(
    handle: WorkflowHandle[Any, AgentRunResult],
    call_id: str,
    approved: bool = True,
    approver: str = "workshop-lead",
    digest: str | None = None,
) -> None:
    if digest is None:
        view = await handle.query("status", result_type=RunStatusView)
        digest = next(p.args_digest for p in view.pending_approvals if p.call_id == call_id)
    await signal_approval(handle, call_id, digest, approver, approved=approved)


def reservations(example_service: ExampleService) -> int:
    return int(example_service.records()["reservations"])


async def test_a_read_runs_while_the_gated_write_waits_then_approve_runs_it_once(
    live: Live, run_id: str
) -> None:
    live.provider.register(reserve_script(run_id))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    view = await wait_for_phase(handle, "awaiting_approval")
    assert {c.call_id: c.status for c in view.calls} == {
        "call_check": "succeeded",
        "call_reserve": "proposed",
    }
    [pending] = view.pending_approvals
    assert (pending.call_id, pending.tool, pending.arguments) == (
        "call_reserve",
        "reserve_seat",
        RESERVE,
    )
    assert pending.args_digest == next(
        c.args_digest for c in view.calls if c.call_id == "call_reserve"
    )
    assert reservations(live.service) == 0

    await decide(handle, "call_reserve")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert reservations(live.service) == 1
    assert live.service.stats()["counts"]["workshops.reserve"] == 1
    [effect] = result.side_effects
    assert (effect.call_id, effect.status) == ("call_reserve", "succeeded")
    assert effect.confirmed_by == "the system's response"
    assert effect.idempotency_key == write_key(handle, "call_reserve")
    assert (
        "approved by workshop-lead" in {c.call_id: c for c in result.calls}["call_reserve"].decision
    )


async def test_rejection_stops_the_run_and_the_write_never_runs(live: Live, run_id: str) -> None:
    live.provider.register(reserve_script(run_id))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    await wait_for_phase(handle, "awaiting_approval")
    await decide(handle, "call_reserve", approved=False)
    result = await result_of(handle)
    assert result.status == "rejected"
    assert "call_reserve" in result.stop_reason
    assert reservations(live.service) == 0
    assert live.service.stats()["counts"]["workshops.reserve"] == 0
    assert {c.call_id: c.status for c in result.calls}["call_reserve"] == "rejected"
    assert len(live.provider.requests) == 1  # the model was not asked again


async def book_directly(example_service: ExampleService, workshop: str, participant: str) -> None:
    """Someone else books, at the service itself, not through the run."""
    url = f"{example_service.base_url}/workshops/{workshop}/reservations"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            url,
            json={"participant_id": participant},
            headers={"Idempotency-Key": f"elsewhere-{uuid.uuid4().hex}"},
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()


async def test_a_seat_taken_during_the_approval_wait_refuses_the_approved_call(
    live: Live, run_id: str
) -> None:
    script = reserve_script(run_id)
    script.turns[0].expect_tool_results["call_reserve"] = "precondition no longer holds"
    script.turns[1] = ScriptTurn(text="ws-101 filled up before the approval: no seat.")
    live.provider.register(script)
    for participant in ("p-alice", "p-bob"):  # ws-101 seats 3: one is left
        await book_directly(live.service, "ws-101", participant)
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    await wait_for_phase(handle, "awaiting_approval")
    checks = len(requests_to(live.service, "workshops.eligibility"))
    await book_directly(live.service, "ws-101", "p-dave")  # the last seat, meanwhile

    await decide(handle, "call_reserve")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    # Checked once before the wait and once after it; never sent.
    assert len(requests_to(live.service, "workshops.eligibility")) == checks + 1 == 2
    # Only the three direct bookings reached the service: none from the run.
    assert len(requests_to(live.service, "workshops.reserve")) == 3
    assert live.service.records()["reservations_by_workshop"]["ws-101"] == {
        "p-alice": 1,
        "p-bob": 1,
        "p-dave": 1,
    }
    why = (
        "approved by workshop-lead, then refused: precondition no longer holds:"
        " ws-101 is full: no seat left for p-carol"
    )
    record = {c.call_id: c for c in result.calls}["call_reserve"]
    assert (record.decision, record.status, record.attempts) == (why, "rejected", 0)
    assert result.side_effects == []
    # The model is told, under the call's own id.
    told = ANTHROPIC.parse(live.provider.requests[-1]["body"]).result_texts()
    assert json.loads(told["call_reserve"]) == {
        "error": {"class": "precondition_failed", "message": why}
    }


async def test_decisions_for_other_calls_digests_or_approvers_change_nothing(
    live: Live, run_id: str
) -> None:
    live.provider.register(reserve_script(run_id))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    view = await wait_for_phase(handle, "awaiting_approval")
    digest = view.pending_approvals[0].args_digest
    await decide(handle, "call_unknown", digest=digest)
    await decide(handle, "call_reserve", digest="sha256:" + "0" * 64)
    await decide(handle, "call_reserve", approver="mallory")
    # The update twin answers at once, with the same rules.
    verdict = await handle.execute_update(
        "decide_approval",
        ApprovalDecision(
            call_id="call_reserve", args_digest=digest, approved=True, approver="mallory"
        ),
        result_type=ApprovalVerdict,
    )
    assert not verdict.accepted and "may not decide" in verdict.reason

    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "awaiting_approval"
    reasons = [d.refused_because for d in view.refused_decisions]
    assert len(reasons) == 4
    assert "no call 'call_unknown'" in reasons[0]
    assert "stale" in reasons[1]
    assert "may not decide" in reasons[2] and "may not decide" in reasons[3]
    assert reservations(live.service) == 0

    verdict = await handle.execute_update(
        "decide_approval",
        ApprovalDecision(
            call_id="call_reserve", args_digest=digest, approved=True, approver="workshop-lead"
        ),
        result_type=ApprovalVerdict,
    )
    assert verdict.accepted
    assert (await result_of(handle)).status == "completed"
    assert reservations(live.service) == 1


async def test_a_changed_recipient_needs_a_new_approval(live: Live, run_id: str) -> None:
    reply = {"ticket_id": "T-1001", "body": "Your refund is on its way."}
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("send_reply", "call_r1", recipient="dana@example.com", **reply)],
            [scripted_call("send_reply", "call_r2", recipient="mallory@evil.test", **reply)],
            "sent",
        )
    )
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
    first = await wait_for_phase(handle, "awaiting_approval")
    await decide(handle, "call_r1")
    second = await wait_for_status(
        handle,
        lambda v: any(p.call_id == "call_r2" for p in v.pending_approvals),
        "call_r2 to wait for approval",
    )
    assert second.pending_approvals[0].arguments["recipient"] == "mallory@evil.test"
    first_digest = first.pending_approvals[0].args_digest
    assert second.pending_approvals[0].args_digest != first_digest
    assert live.service.records()["replies"] == 1
    # Re-using the first approval's digest for the new call counts for nothing.
    await decide(handle, "call_r2", digest=first_digest)
    view = await handle.query("status", result_type=RunStatusView)
    assert (
        view.phase == "awaiting_approval" and "stale" in view.refused_decisions[-1].refused_because
    )
    await decide(handle, "call_r2", approved=False, approver="support-lead")
    result = await result_of(handle)
    # send_reply tells the model about a rejection instead of stopping the run.
    assert result.status == "completed", result.stop_reason
    assert live.service.records()["replies"] == 1


async def test_a_principal_without_the_scope_is_denied_and_nothing_runs(
    live: Live, run_id: str
) -> None:
    live.provider.register(reserve_script(run_id))
    handle = await start_run(
        live.client, live.worker, run_id, run_input(run_id, scopes=["workshops:read"])
    )
    result = await result_of(handle)
    assert result.status == "denied"
    assert "workshops:write" in result.stop_reason
    assert {c.call_id: c.status for c in result.calls} == {
        "call_check": "denied",
        "call_reserve": "denied",
    }
    assert sum(live.service.stats()["counts"].values()) == 0


async def test_the_pending_approval_survives_a_killed_worker(
    servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    settings = worker_settings.model_copy(update={"task_queue": f"kill-{uuid.uuid4().hex[:8]}"})
    env = worker_env(servers.client, settings, tmp_path / "store.db")
    servers.provider.register(reserve_script(run_id))
    async with worker_process(env) as first:
        handle = await start_run(servers.client, settings, run_id, run_input(run_id))
        view = await wait_for_phase(handle, "awaiting_approval")
        first.send_signal(signal.SIGKILL)
        await first.wait()
    # No worker is polling now (a query would fail); the signal waits in history.
    await decide(handle, "call_reserve", digest=view.pending_approvals[0].args_digest)
    async with worker_process(env):
        result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert reservations(servers.service) == 1
    assert servers.service.stats()["counts"]["workshops.get"] == 1


@pytest.fixture
async def time_skipping(
    worker_settings: Settings,
) -> AsyncIterator[tuple[WorkflowEnvironment, Settings]]:
    from agentloop.runtime.dev_server import temporal_binary

    server = Path(temporal_binary()).with_name("temporal-test-server")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(server),
        data_converter=pydantic_data_converter,
        test_server_startup_timeout=SERVER_START,
    )
    settings = worker_settings.model_copy(update={"task_queue": f"skip-{uuid.uuid4().hex[:8]}"})
    async with env, running_worker(env.client, settings):
        yield env, settings


async def test_approval_timeout_on_the_time_skipping_server(
    time_skipping: tuple[WorkflowEnvironment, Settings], servers: Servers, run_id: str
) -> None:
    env, settings = time_skipping
    servers.provider.register(reserve_script(run_id))
    handle = await start_run(
        env.client,
        settings,
        run_id,
        run_input(run_id, approval_timeout_seconds=7 * 86400),
        indexed=False,  # the time-skipping test server has no custom search attributes
    )
    result = await result_of(handle)  # the test server skips the week
    assert result.status == "approval_timeout"
    assert "call_reserve" in result.stop_reason
    assert [(p.call_id, p.status) for p in result.pending] == [
        ("call_reserve", "awaiting_approval")
    ]
    assert reservations(servers.service) == 0


async def test_a_decision_sent_with_the_start_is_answered_with_the_verdict_the_run_acts_on(
    live: Live, run_id: str
) -> None:
    """The update arrives in the run's first workflow task, before the run has its state.
    Before, it was answered "the run has not started yet" and then applied all the same;
    now it waits for the state and answers with the verdict the run records."""
    live.provider.register(scripted(run_id, "Nothing to do."))
    start = WithStartWorkflowOperation(
        WORKFLOW_NAME,
        run_input(run_id),
        id=run_id,
        task_queue=live.worker.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        result_type=AgentRunResult,
    )
    verdict = await live.client.execute_update_with_start_workflow(
        "decide_approval",
        ApprovalDecision(
            call_id="call_early",
            args_digest="sha256:" + "0" * 64,
            approved=True,
            approver="workshop-lead",
        ),
        start_workflow_operation=start,
        result_type=ApprovalVerdict,
    )
    assert not verdict.accepted and "no call 'call_early'" in verdict.reason, verdict.reason
    handle = await start.workflow_handle()
    view = await handle.query("status", result_type=RunStatusView)
    [refused] = view.refused_decisions
    assert isinstance(refused, RefusedApproval)
    assert refused.refused_because == verdict.reason
    assert (refused.signal, refused.call_id) == ("approve", "call_early")
    assert (await result_of(handle)).status == "completed"
