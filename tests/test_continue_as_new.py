"""Continue-as-new keeps every history small without losing anything: run state, transcript
head, ledger, budgets and a pending approval all carry over the boundary."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client

from agentloop.contract import AgentRunInput, ApprovalDecision, Principal, RunStatusView
from agentloop.demo.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from tests.support import start_run, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


def call(call_id: str, name: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


async def test_two_boundaries_with_an_approval_pending_across_one(
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
                    tool_calls=[call("c1", "check_workshop", workshop_id="ws-101")],
                    expect_tool_results={"c1": "ws-101"},
                ),
                ScriptTurn(
                    tool_calls=[call("c2", "get_weather", city="Oslo", date="2026-12-01")],
                    expect_tool_results={"c2": "Oslo"},
                ),
                ScriptTurn(
                    tool_calls=[
                        call("c3", "get_train_status", train_number="G1", date="2026-12-01")
                    ],
                    expect_tool_results={"c3": "G1"},
                ),
                ScriptTurn(
                    tool_calls=[
                        call("c4", "reserve_seat", workshop_id="ws-101", participant_id="p-carol")
                    ]
                ),
                ScriptTurn(
                    text="{{c1.title}}, {{c2.condition}}, {{c3.status}}, {{c4.reservation_id}}"
                ),
            ],
        )
    )
    run_input = AgentRunInput(
        task="Book p-carol into ws-101 and tell me the weather and my train.",
        provider="openai-responses",
        model=run_id,
        tools=["check_workshop", "get_weather", "get_train_status", "reserve_seat"],
        principal=Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"]),
        continue_as_new_after_events=20,
    )
    handle = await start_run(client, worker, run_id, run_input)
    waiting = await wait_for_phase(handle, "awaiting_approval")
    assert len(waiting.run_chain) >= 2, "no continue-as-new before the approval"
    [pending] = waiting.pending_approvals
    assert [c.call_id for c in waiting.calls] == ["c1", "c2", "c3", "c4"]

    await handle.signal(
        "approve",
        ApprovalDecision(
            call_id="c4",
            args_digest=pending["args_digest"],
            approved=True,
            approver="workshop-lead",
        ),
    )
    result = await handle.result()
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
