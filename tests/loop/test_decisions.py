"""Decisions as typed fields (issue #34 item 6): who approved or rejected a call, when, why
and whether signed, and who said whether an unknown write happened, are fields of the call
ledger that `status`, the result, the stop report and the transcript read; nothing parses
the ledger's `decision` sentence back."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from agentloop.cli.transcript import format_transcript
from agentloop.contract import (
    AgentRunInput,
    ApprovalDecision,
    ApprovalRecord,
    Principal,
    ResolutionRecord,
    ResolveRequest,
)
from agentloop.demo.scripted_provider import ScriptedProvider
from agentloop.events import UserInput
from agentloop.runtime.config import Settings
from agentloop.tool_spec import Outcome
from agentloop.workflows import loop
from agentloop.workflows.loop import Finish, LookupOutcome, RunTools
from agentloop.workflows.loop.views import facts, side_effects
from tests.loop.test_blocked_runs import booking
from tests.loop.test_governance import decision, new_state, pass_preconditions, reserve
from tests.loop.test_loop import T0, model_turn, run_step, tool_output
from tests.operations.test_cli import agentloop as agentloop_cli
from tests.operations.test_cli import process_env
from tests.support import start_run, wait_for_phase

LATER = T0 + timedelta(minutes=5)


def test_an_approval_is_recorded_as_fields_and_the_sentence_is_only_written() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    decided = decision(state, "w1").model_copy(update={"reason": "seat is free"})

    assert loop.receive_decision(state, decided, LATER).accepted

    record = state.calls["w1"]
    assert record.approval == ApprovalRecord(
        approved=True, approver="lead", at=LATER, reason="seat is free", signed=False
    )
    assert record.decision == "approved by lead"  # the ledger's sentence, as it always read
    assert record.resolution is None
    run_step(state)
    assert "reserve_seat w1 was approved by lead" in facts(state)


def test_a_signed_decision_counts_as_signed_only_where_the_worker_checks_signatures() -> None:
    for signing, signed in (("signed", True), ("unsigned", False)):
        state = new_state()
        state.features = list(loop.FEATURES_OF_SET)
        state.approval_signing = signing
        model_turn(state, tool_output(reserve("w1")))
        pass_preconditions(state)
        decided = decision(state, "w1").model_copy(update={"signature": "c2lnbmVk"})
        held = loop.receive_decision(state, decided, T0)
        assert isinstance(held, loop.DecisionToCheck)
        assert loop.record_checked_decision(state, held, "", signing, LATER).accepted
        approval = state.calls["w1"].approval
        assert approval is not None and (approval.signed, approval.at) == (signed, LATER)


def test_a_rejection_is_in_the_result_and_the_stop_report_as_fields() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    rejected = decision(state, "w1", approved=False).model_copy(update={"reason": "full"})
    loop.receive_decision(state, rejected, LATER)

    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and (step.status, step.cause) == ("rejected", "rejected")
    result = loop.record_finish(state, step)

    [call] = result.calls
    assert call.approval is not None
    assert (call.approval.approved, call.approval.approver, call.approval.reason) == (
        False,
        "lead",
        "full",
    )
    assert result.stop_cause == "rejected"
    line = f"  reserve_seat w1: rejected by lead at {LATER.isoformat()} (unsigned): full"
    assert f"Decisions:\n{line}" in result.report
    # The transcript command prints the same from the ledger, after the conversation.
    text = format_transcript([UserInput(text="book it", sender="p-alice")], result.calls)
    assert text.endswith(f"decisions (from the run's call ledger):\n    {line.strip()}")


def test_an_operators_word_on_an_unknown_write_is_recorded_as_fields() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    loop.receive_decision(state, decision(state, "w1"), T0)
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    loop.start_tools(state, step, T0)
    loop.record_tool_results(state, [loop.ToolFailure("w1", "timeout", "transient")])
    assert isinstance(loop.decide(state, T0), LookupOutcome)
    loop.record_outcome(state, "w1", Outcome(state="unknown"), T0)

    request = ResolveRequest(call_id="w1", outcome="applied", operator="ops", note="seen in db")
    assert loop.record_resolution(state, request, LATER) is None

    record = state.calls["w1"]
    assert record.resolution == ResolutionRecord(
        outcome="applied", operator="ops", at=LATER, note="seen in db"
    )
    assert record.approval is not None and record.approval.approver == "lead"
    [effect] = side_effects(state)
    assert effect["confirmed_by"] == "operator (ops says applied: seen in db)"


def test_no_decision_or_resolution_sentence_is_parsed_back() -> None:
    """A sentence that only looks like a decision is not one: only the fields count."""
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    state.calls["w1"].decision = "approved by nobody; resolved: nobody says applied"
    assert facts(state) == []
    state.calls["w1"].status = "confirmed_after_query"
    [effect] = side_effects(state)
    assert effect["confirmed_by"] == "lookup by idempotency key"


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_status_json_shows_who_approved_as_fields(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    run_id: str,
    tmp_path: Path,
) -> None:
    scripted_provider.register(booking(run_id))
    run_input = AgentRunInput(
        task="Book p-carol into ws-101.",
        provider="openai-chat",
        model=run_id,
        tools=["reserve_seat"],
        principal=Principal(subject="agent", scopes=["workshops:write"]),
    )
    handle = await start_run(client, worker, run_id, run_input)
    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    assert view.calls[0].approval is None
    await handle.signal(
        "approve",
        ApprovalDecision(
            call_id="call_r",
            args_digest=pending["args_digest"],
            approved=True,
            approver="workshop-lead",
            reason="the seat is free",
        ),
    )
    result = await handle.result()
    assert result.status == "completed", result.stop_reason

    env = process_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=worker.task_queue,
    )
    status = await agentloop_cli("status", run_id, "--json", env=env, cwd=tmp_path)
    assert status.returncode == 0, status.explain()
    [call] = json.loads(status.stdout)["result"]["calls"]
    approval = call["approval"]
    assert (approval["approved"], approval["approver"], approval["reason"]) == (
        True,
        "workshop-lead",
        "the seat is free",
    )
    assert approval["signed"] is False and approval["at"]
    assert call["resolution"] is None
    assert "Decisions:\n  reserve_seat call_r: approved by workshop-lead at " in result.report
    shown = await agentloop_cli("status", run_id, env=env, cwd=tmp_path)
    assert "    approved by workshop-lead at " in shown.stdout, shown.explain()
