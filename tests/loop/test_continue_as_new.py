"""Continue-as-new keeps every history small without losing anything: run state, transcript
head, ledger, budgets and a pending approval all carry over the boundary."""

from __future__ import annotations

import asyncio

import pytest

from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    Principal,
    RefusedApproval,
    RunStatusView,
)
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from agentloop.workflows import loop
from agentloop.workflows.loop.humans import MAX_REFUSED_RECORDS
from tests.live import Live, agent_input, scripted
from tests.support import approve_as_shown, result_of, signal_approval, start_run, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


def booking_script(name: str) -> Script:
    """Three reads, then a write waiting for approval: in a run that continues as new every
    20 events (`booking_input`), the write waits in the run's second run or later."""
    return scripted(
        name,
        ScriptTurn(
            tool_calls=[scripted_call("check_workshop", "c1", workshop_id="ws-101")],
            expect_tool_results={"c1": "ws-101"},
        ),
        ScriptTurn(
            tool_calls=[scripted_call("get_weather", "c2", city="Oslo", date="2026-12-01")],
            expect_tool_results={"c2": "Oslo"},
        ),
        ScriptTurn(
            tool_calls=[
                scripted_call("get_train_status", "c3", train_number="G1", date="2026-12-01")
            ],
            expect_tool_results={"c3": "G1"},
        ),
        [scripted_call("reserve_seat", "c4", workshop_id="ws-101", participant_id="p-carol")],
        "{{c1.title}}, {{c2.condition}}, {{c3.status}}, {{c4.reservation_id}}",
    )


def booking_input(model: str, tenant: str = "default") -> AgentRunInput:
    return agent_input(
        model,
        "openai-responses",
        "Book p-carol into ws-101 and tell me the weather and my train.",
        ["check_workshop", "get_weather", "get_train_status", "reserve_seat"],
        principal=Principal(
            subject="p-alice", tenant=tenant, scopes=["workshops:read", "workshops:write"]
        ),
        continue_as_new_after_events=20,
    )


async def test_two_boundaries_with_an_approval_pending_across_one(live: Live, run_id: str) -> None:
    live.provider.register(booking_script(run_id))
    handle = await start_run(live.client, live.worker, run_id, booking_input(run_id))
    waiting = await wait_for_phase(handle, "awaiting_approval")
    assert len(waiting.run_chain) >= 2, "no continue-as-new before the approval"
    [pending] = waiting.pending_approvals
    assert [c.call_id for c in waiting.calls] == ["c1", "c2", "c3", "c4"]

    await signal_approval(handle, "c4", pending.args_digest, "workshop-lead")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert isinstance(result.output, str) and "Intro to Temporal" in result.output
    assert result.usage.model_calls == 5 and result.usage.tool_calls == 4
    assert [c.status for c in result.calls] == ["succeeded"] * 4
    assert live.service.records()["reservations"] == 1

    final = await handle.query("status", result_type=RunStatusView)
    assert len(final.run_chain) >= 3, final.run_chain
    assert len(set(final.run_chain)) == len(final.run_chain)
    assert final.run_chain[-1] == (await handle.describe()).run_id
    # The transcript survived the boundaries: the last request carried every tool result.
    last = live.provider.requests[-1]["body"]["input"]
    outputs = [i["call_id"] for i in last if i.get("type") == "function_call_output"]
    assert outputs == ["c1", "c2", "c3", "c4"]


async def test_a_flood_of_signals_while_waiting_continues_as_new_and_the_chain_stays_bounded(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("reserve_seat", "c1", workshop_id="ws-101", participant_id="p-carol")],
            "Booked: {{c1.reservation_id}}",
        )
    )
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Book p-carol into ws-101.",
        ["reserve_seat"],
        principal=Principal(subject="p-alice", scopes=["workshops:write"]),
        continue_as_new_after_events=20,
    )
    started = await start_run(live.client, live.worker, run_id, run_input)
    waiting = await wait_for_phase(started, "awaiting_approval")
    [pending] = waiting.pending_approvals
    # Signals to the workflow id reach whichever run of the chain is current.
    latest = live.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    wrong = ApprovalDecision(
        call_id="c1", args_digest="sha256:" + "0" * 64, approved=True, approver="workshop-lead"
    )
    sent = 0
    view = waiting
    # Temporal starts a run continued within a second of its start a second late: the
    # boundaries come about one a second, and the bound needs more than 20 runs.
    while view.run_chain_left_out < 1:
        assert sent < 3_000, f"{sent} refused signals and the run never continued as new"
        for _ in range(10):
            await latest.signal("approve", wrong)
        sent += 10
        view = await latest.query("status", result_type=RunStatusView)
    # The last signals may still take the run over one more boundary: read the chain once
    # the run the server has current is the one that answers.
    for _ in range(100):
        current = (await latest.describe()).run_id
        view = await latest.query("status", result_type=RunStatusView)
        if view.run_chain[-1] == current:
            break
        await asyncio.sleep(0.05)
    # Each boundary was taken while the run waited: the call still waits, nothing ran.
    assert view.phase == "awaiting_approval"
    assert [p.call_id for p in view.pending_approvals] == ["c1"]
    assert live.service.records()["reservations"] == 0
    assert len(view.run_chain) == loop.MAX_RUN_CHAIN_IDS
    assert view.run_chain[0] == started.first_execution_run_id
    assert view.run_chain[-1] == current
    chain_length = view.run_chain_left_out + len(view.run_chain)
    for _ in range(100):  # visibility catches up with the closed runs
        runs = [r.run_id async for r in live.client.list_workflows(f"WorkflowId = '{run_id}'")]
        if len(runs) >= chain_length:
            break
        await asyncio.sleep(0.05)
    assert chain_length == len(runs)
    assert set(view.run_chain) <= set(runs)
    # The refusals were recorded, as many as the record keeps, across the boundaries.
    assert len(view.refused_decisions) == MAX_REFUSED_RECORDS
    assert {r.call_id for r in view.refused_decisions if isinstance(r, RefusedApproval)} == {"c1"}
    assert all(isinstance(r, RefusedApproval) for r in view.refused_decisions)

    await approve_as_shown(latest, pending, "workshop-lead")
    result = await result_of(latest)
    assert result.status == "completed", result.stop_reason
    assert [(c.call_id, c.status) for c in result.calls] == [("c1", "succeeded")]
    assert live.service.records()["reservations"] == 1
    # The current run's history stayed near the bound, however many signals came.
    events = [e async for e in latest.fetch_history_events()]
    assert len(events) < 200, len(events)
