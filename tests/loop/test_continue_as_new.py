"""Continue-as-new keeps every history small without losing anything: run state, transcript
head, ledger, budgets and a pending approval all carry over the boundary."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.client import Client

from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    Principal,
    RefusedApproval,
    RunStatusView,
)
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.workflows import loop
from agentloop.workflows.loop.humans import MAX_REFUSED_RECORDS
from tests.support import approve_as_shown, result_of, start_run, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


def call(call_id: str, name: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


def booking_script(name: str) -> Script:
    """Three reads, then a write waiting for approval: in a run that continues as new every
    20 events (`booking_input`), the write waits in the run's second run or later."""
    return Script(
        name=name,
        turns=[
            ScriptTurn(
                tool_calls=[call("c1", "check_workshop", workshop_id="ws-101")],
                expect_tool_results={"c1": "ws-101"},
            ),
            ScriptTurn(
                tool_calls=[call("c2", "get_weather", city="Oslo", date="2026-12-01")],
                expect_tool_results={"c2": "Oslo"},
            ),
            ScriptTurn(
                tool_calls=[call("c3", "get_train_status", train_number="G1", date="2026-12-01")],
                expect_tool_results={"c3": "G1"},
            ),
            ScriptTurn(
                tool_calls=[
                    call("c4", "reserve_seat", workshop_id="ws-101", participant_id="p-carol")
                ]
            ),
            ScriptTurn(text="{{c1.title}}, {{c2.condition}}, {{c3.status}}, {{c4.reservation_id}}"),
        ],
    )


def booking_input(model: str, tenant: str = "default") -> AgentRunInput:
    return AgentRunInput(
        task="Book p-carol into ws-101 and tell me the weather and my train.",
        provider="openai-responses",
        model=model,
        tools=["check_workshop", "get_weather", "get_train_status", "reserve_seat"],
        principal=Principal(
            subject="p-alice", tenant=tenant, scopes=["workshops:read", "workshops:write"]
        ),
        continue_as_new_after_events=20,
    )


async def test_two_boundaries_with_an_approval_pending_across_one(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    scripted_provider.register(booking_script(run_id))
    handle = await start_run(client, worker, run_id, booking_input(run_id))
    waiting = await wait_for_phase(handle, "awaiting_approval")
    assert len(waiting.run_chain) >= 2, "no continue-as-new before the approval"
    [pending] = waiting.pending_approvals
    assert [c.call_id for c in waiting.calls] == ["c1", "c2", "c3", "c4"]

    await handle.signal(
        "approve",
        ApprovalDecision(
            call_id="c4",
            args_digest=pending.args_digest,
            approved=True,
            approver="workshop-lead",
        ),
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert isinstance(result.output, str) and "Intro to Temporal" in result.output
    assert result.usage.model_calls == 5 and result.usage.tool_calls == 4
    assert [c.status for c in result.calls] == ["succeeded"] * 4
    assert example_service.records()["reservations"] == 1

    final = await handle.query("status", result_type=RunStatusView)
    assert len(final.run_chain) >= 3, final.run_chain
    assert len(set(final.run_chain)) == len(final.run_chain)
    assert final.run_chain[-1] == (await handle.describe()).run_id
    # The transcript survived the boundaries: the last request carried every tool result.
    last = scripted_provider.requests[-1]["body"]["input"]
    outputs = [i["call_id"] for i in last if i.get("type") == "function_call_output"]
    assert outputs == ["c1", "c2", "c3", "c4"]


async def test_a_flood_of_signals_while_waiting_continues_as_new_and_the_chain_stays_bounded(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
) -> None:
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(
                    tool_calls=[
                        call("c1", "reserve_seat", workshop_id="ws-101", participant_id="p-carol")
                    ]
                ),
                ScriptTurn(text="Booked: {{c1.reservation_id}}"),
            ],
        )
    )
    run_input = AgentRunInput(
        task="Book p-carol into ws-101.",
        provider="openai-chat",
        model=run_id,
        tools=["reserve_seat"],
        principal=Principal(subject="p-alice", scopes=["workshops:write"]),
        continue_as_new_after_events=20,
    )
    started = await start_run(client, worker, run_id, run_input)
    waiting = await wait_for_phase(started, "awaiting_approval")
    [pending] = waiting.pending_approvals
    # Signals to the workflow id reach whichever run of the chain is current.
    latest = client.get_workflow_handle(run_id, result_type=AgentRunResult)
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
    assert example_service.records()["reservations"] == 0
    assert len(view.run_chain) == loop.MAX_RUN_CHAIN_IDS
    assert view.run_chain[0] == started.first_execution_run_id
    assert view.run_chain[-1] == current
    chain_length = view.run_chain_left_out + len(view.run_chain)
    for _ in range(100):  # visibility catches up with the closed runs
        runs = [r.run_id async for r in client.list_workflows(f"WorkflowId = '{run_id}'")]
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
    assert example_service.records()["reservations"] == 1
    # The current run's history stayed near the bound, however many signals came.
    events = [e async for e in latest.fetch_history_events()]
    assert len(events) < 200, len(events)
