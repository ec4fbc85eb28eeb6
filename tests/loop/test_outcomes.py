"""Unknown write outcomes, decided without a server: ask the system of record by idempotency
key before anything else; resend (same key) only when it definitely did not happen; otherwise
wait for an operator, and stop `unresolved` if none answers."""

from __future__ import annotations

from datetime import timedelta

from agentloop.contract import (
    PendingCall,
    RefusedResolution,
    ResolveRequest,
    SideEffect,
)
from agentloop.events import ToolResult
from agentloop.tool_spec import Outcome, ToolSpec
from agentloop.workflows import loop
from agentloop.workflows.loop import (
    AwaitReconciliation,
    CallModel,
    CheckApprovals,
    Finish,
    LookupOutcome,
    LoopState,
    RunTools,
)
from tests.live import agent_input
from tests.loop.test_governance import resolve
from tests.loop.test_loop import T0, call, model_turn, tool_output

SEND = ToolSpec(name="send_reply", effect="write", has_outcome_lookup=True)


def new_state() -> LoopState:
    run_input = agent_input(
        "m", "openai-chat", "reply", ["send_reply"], reconciliation_timeout_seconds=600
    )
    state = LoopState.start(run_input, [SEND], T0, "wf-7")
    model_turn(state, tool_output(call("w1", "send_reply", ticket_id="T-1", body="hi")))
    return state


def attempt(state: LoopState, status: str = "unknown") -> None:
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools) and [c.call_id for c, _ in step.calls] == ["w1"]
    loop.start_tools(state, step, T0)
    loop.record_tool_results(
        state,
        [
            ToolResult(call_id="w1", tool="send_reply", status=status, side_effect=True)  # type: ignore[arg-type]
        ],
    )


def lookup(state: LoopState, outcome: Outcome) -> None:
    step = loop.decide(state, T0)
    assert isinstance(step, LookupOutcome)
    assert (step.call.call_id, step.idempotency_key) == ("w1", "wf-7/w1")
    loop.record_outcome(state, "w1", outcome, T0)


def test_found_after_the_fact_is_confirmed_and_the_run_goes_on() -> None:
    state = new_state()
    attempt(state)
    assert state.calls["w1"].status == "unknown"
    lookup(state, Outcome(state="applied", record={"reply_id": "R-1"}))
    assert loop.decide(state, T0) == CallModel(turn=2)
    result = state.outbox[0]
    assert isinstance(result, ToolResult) and result.status == "confirmed_after_query"
    assert "R-1" in result.content
    assert state.calls["w1"].attempts == 1
    assert loop.side_effects(state) == [
        SideEffect(
            call_id="w1",
            tool="send_reply",
            idempotency_key="wf-7/w1",
            status="confirmed_after_query",
            confirmed_by="lookup by idempotency key",
        )
    ]


def test_definitely_absent_is_sent_again_with_the_same_key_once() -> None:
    state = new_state()
    attempt(state)
    lookup(state, Outcome(state="not_applied"))
    attempt(state, status="succeeded")
    assert state.calls["w1"].attempts == 2
    assert state.calls["w1"].idempotency_key == "wf-7/w1"
    assert loop.decide(state, T0) == CallModel(turn=2)


def test_absent_after_the_last_attempt_waits_for_an_operator() -> None:
    state = new_state()
    attempt(state)
    lookup(state, Outcome(state="not_applied"))
    attempt(state)
    lookup(state, Outcome(state="not_applied"))
    step = loop.decide(state, T0)
    assert isinstance(step, AwaitReconciliation) and step.call_ids == ["w1"]
    assert "still absent after 2 attempts" in loop.unresolved(state)[0].known


def test_a_refusal_on_record_is_a_definite_failure() -> None:
    state = new_state()
    attempt(state)
    lookup(state, Outcome(state="not_applied", record={"code": "ticket_closed"}))
    assert loop.decide(state, T0) == CallModel(turn=2)
    result = state.outbox[0]
    assert isinstance(result, ToolResult) and result.status == "rejected"
    assert "ticket_closed" in result.content


def test_an_inconclusive_lookup_waits_then_resolve_applied_continues_without_a_resend() -> None:
    state = new_state()
    attempt(state)
    lookup(state, Outcome(state="unknown", record="lookup failed: 503"))
    step = loop.decide(state, T0)
    assert isinstance(step, AwaitReconciliation)
    assert step.deadline == T0 + timedelta(seconds=600)
    [shown] = loop.unresolved(state)
    assert shown.idempotency_key == "wf-7/w1" and "503" in shown.known
    assert shown.arguments == {"ticket_id": "T-1", "body": "hi"}
    refused = resolve(state, ResolveRequest(call_id="nope", outcome="applied", operator="op"), T0)
    assert refused is not None
    [record] = state.refused_decisions
    assert isinstance(record, RefusedResolution)
    assert (record.signal, record.call_id) == ("resolve", "nope")
    assert (
        resolve(
            state, ResolveRequest(call_id="w1", outcome="applied", operator="op", note="seen"), T0
        )
        is None
    )
    assert loop.decide(state, T0) == CallModel(turn=2)
    assert state.calls["w1"].status == "confirmed_after_query"
    assert state.calls["w1"].attempts == 1  # no second send


def test_resolve_not_applied_tells_the_model_it_failed() -> None:
    state = new_state()
    attempt(state)
    lookup(state, Outcome(state="unknown"))
    resolve(state, ResolveRequest(call_id="w1", outcome="not_applied", operator="op"), T0)
    assert loop.decide(state, T0) == CallModel(turn=2)
    assert state.calls["w1"].status == "failed"


def test_no_resolution_before_the_timeout_stops_the_run_unresolved() -> None:
    state = new_state()
    attempt(state)
    lookup(state, Outcome(state="unknown"))
    loop.record_pause(state, 600)  # the shell records the wait; it is not working time
    step = loop.decide(state, T0 + timedelta(seconds=600))
    assert isinstance(step, Finish) and step.status == "unresolved"
    assert "w1" in step.stop_reason
    assert loop.pending_at_stop(state) == [
        PendingCall(call_id="w1", tool="send_reply", status="unknown")
    ]


def test_a_resolve_waits_for_the_workers_word() -> None:
    """A `resolve` settles nothing until the worker has checked it (its signature, under
    approver keys); refused, it is recorded and the write still waits."""
    state = new_state()
    attempt(state)
    lookup(state, Outcome(state="unknown"))
    mallory = ResolveRequest(call_id="w1", outcome="not_applied", operator="mallory")
    assert loop.record_resolution(state, mallory, T0) is None
    step = loop.decide(state, T0)
    assert isinstance(step, CheckApprovals)
    [held] = step.decisions
    assert held.decision == mallory and state.calls["w1"].status == "unknown"

    refused = loop.record_checked_resolution(state, held, "unsigned: ...", "signed", T0)
    assert refused == "unsigned: ..."
    [record] = state.refused_decisions
    assert isinstance(record, RefusedResolution)
    assert (record.signal, record.operator, record.refused_because) == (
        "resolve",
        "mallory",
        "unsigned: ...",
    )
    assert "signature" not in record.model_dump(mode="json")
    assert isinstance(loop.decide(state, T0), AwaitReconciliation)

    ops = ResolveRequest(call_id="w1", outcome="applied", operator="ops", signature="c2ln")
    loop.record_resolution(state, ops, T0)
    step = loop.decide(state, T0)
    assert isinstance(step, CheckApprovals)
    assert loop.record_checked_resolution(state, step.decisions[0], "", "signed", T0) is None
    assert loop.decide(state, T0) == CallModel(turn=2)
    assert state.calls["w1"].status == "confirmed_after_query"
    assert state.approval_signing == "signed"
