"""The runner decides: scopes, preconditions and approvals, as pure decisions on run state."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from agentloop.activity_io import PreconditionResult
from agentloop.contract import (
    AgentRunInput,
    ApprovalDecision,
    ApprovalVerdict,
    PendingCall,
    Principal,
    ResolveRequest,
)
from agentloop.events import ToolResult
from agentloop.policies import approval
from agentloop.tool_spec import ToolSpec
from agentloop.workflows import loop
from agentloop.workflows.loop import AwaitApproval, CallModel, CheckPreconditions, Finish, LoopState
from tests.loop.test_loop import T0, call, model_turn, run_step, tool_output

READ = ToolSpec(name="check_workshop", required_scopes=["workshops:read"])
RESERVE = ToolSpec(
    name="reserve_seat",
    effect="write",
    required_scopes=["workshops:write"],
    needs_approval=True,
    approvers=["lead"],
    action="workshops.reserve_seat",
    has_precondition=True,
)
BOOK = ToolSpec(  # another name for the same action in the world
    name="book_seat",
    effect="write",
    required_scopes=["workshops:write"],
    needs_approval=True,
    action="workshops.reserve_seat",
)
REPLY = ToolSpec(
    name="send_reply",
    effect="write",
    required_scopes=["tickets:write"],
    needs_approval=True,
    on_reject="tell_model",
)
ALL_SCOPES = ["workshops:read", "workshops:write", "tickets:write"]


def new_state(scopes: list[str] = ALL_SCOPES, **overrides: object) -> LoopState:
    fields: dict[str, object] = {
        "task": "book ws-101 for p-bob",
        "provider": "anthropic",
        "model": "m",
        "tools": ["check_workshop", "reserve_seat", "book_seat", "send_reply"],
        "principal": Principal(subject="p-alice", scopes=scopes),
    }
    fields.update(overrides)
    return LoopState.start(
        AgentRunInput.model_validate(fields), [READ, RESERVE, BOOK, REPLY], T0, "wf-1"
    )


def reserve(call_id: str, participant: str = "p-bob", tool: str = "reserve_seat"):  # type: ignore[no-untyped-def]
    return call(call_id, tool, workshop_id="ws-101", participant_id=participant)


def decision(
    state: LoopState,
    call_id: str,
    approved: bool = True,
    approver: str = "lead",
    digest: str | None = None,
) -> ApprovalDecision:
    return ApprovalDecision(
        call_id=call_id,
        approved=approved,
        approver=approver,
        args_digest=digest or state.calls[call_id].args_digest,
    )


def decide(state: LoopState, asked: ApprovalDecision, at: datetime) -> ApprovalVerdict:
    """A decision as the run takes it: received, then (held for the worker's check) checked
    by a worker that accepts it."""
    held = loop.receive_decision(state, asked, at)
    if isinstance(held, ApprovalVerdict):
        return held
    return loop.record_checked_decision(state, held, "", None, at)


def resolve(state: LoopState, request: ResolveRequest, at: datetime) -> str | None:
    """An operator's `resolve` as the run takes it: received, then checked by a worker that
    accepts it; why it was refused, if it was."""
    refused = loop.record_resolution(state, request, at)
    for held in loop.decisions_to_check(state):
        refused = loop.record_checked_resolution(state, held, "", None, at)
    return refused


def pass_preconditions(state: LoopState) -> None:
    step = loop.decide(state, T0)
    assert isinstance(step, CheckPreconditions)
    loop.record_preconditions(state, {c.call_id: PreconditionResult() for c, _ in step.calls}, T0)


def test_missing_scope_denies_the_whole_batch_and_answers_every_call_id() -> None:
    state = new_state(scopes=["workshops:read"])
    model_turn(
        state, tool_output(call("r1", "check_workshop", workshop_id="ws-101"), reserve("w1"))
    )
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "denied"
    assert "workshops:write" in step.stop_reason and "p-alice" in step.stop_reason
    assert {c: r.status for c, r in state.calls.items()} == {"r1": "denied", "w1": "denied"}
    assert state.usage.tool_calls == 0


def test_a_read_and_a_gated_write_the_read_runs_the_write_waits() -> None:
    state = new_state()
    model_turn(state, tool_output(call("r1", "check_workshop", workshop_id="x"), reserve("w1")))
    pass_preconditions(state)
    assert run_step(state) == ["r1"]
    step = loop.decide(state, T0)
    assert isinstance(step, AwaitApproval) and step.call_ids == ["w1"]
    assert step.deadline == T0 + timedelta(seconds=86400)
    assert state.calls["w1"].status == "proposed"
    [shown] = loop.pending_approvals(state)
    assert (shown.call_id, shown.tool, shown.args_digest) == (
        "w1",
        "reserve_seat",
        state.calls["w1"].args_digest,
    )
    assert shown.arguments == {"workshop_id": "ws-101", "participant_id": "p-bob"}


def test_an_approved_write_runs_once_then_the_model_sees_all_results() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    assert decide(state, decision(state, "w1"), T0).accepted
    assert state.calls["w1"].decision == "approved by lead"
    assert run_step(state) == ["w1"]
    assert loop.decide(state, T0) == CallModel(turn=2)
    assert [r.call_id for r in state.outbox] == ["w1"]
    assert state.usage.tool_calls == 1


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda s: decision(s, "nope", digest="sha256:x"), "no call 'nope'"),
        (lambda s: decision(s, "w1", digest="sha256:other"), "stale"),
        (lambda s: decision(s, "w1", approver="mallory"), "may not decide"),
    ],
)
def test_decisions_that_do_not_count_change_nothing_and_are_recorded(make, why) -> None:  # type: ignore[no-untyped-def]
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    verdict = decide(state, make(state), T0)
    assert not verdict.accepted and why in verdict.reason
    assert why in state.refused_decisions[0].refused_because
    assert isinstance(loop.decide(state, T0), AwaitApproval)


def test_a_second_decision_on_the_same_call_is_refused() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    decide(state, decision(state, "w1", approved=False), T0)
    later = decide(state, decision(state, "w1", approved=True), T0)
    assert not later.accepted and "already decided" in later.reason


def test_rejection_stops_the_run_and_the_write_never_runs() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    decide(state, decision(state, "w1", approved=False), T0)
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "rejected"
    assert "w1" in step.stop_reason and "lead" in step.stop_reason
    assert state.calls["w1"].status == "rejected" and state.usage.tool_calls == 0


def test_a_rejected_action_is_never_run_again_under_another_name() -> None:
    state = new_state()
    model_turn(
        state, tool_output(call("s1", "send_reply", ticket_id="T-1", recipient="a@x", body="hi"))
    )
    decide(state, decision(state, "s1", approved=False, approver="ops"), T0)
    # send_reply says tell_model: the rejection goes back to the model and the run goes on.
    assert loop.decide(state, T0) == CallModel(turn=2)
    assert state.outbox[0].status == "rejected"  # type: ignore[union-attr]
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    decide(state, decision(state, "w1", approved=False), T0)
    assert isinstance(loop.decide(state, T0), Finish)
    # The same reservation under another tool name for the same action is refused outright.
    state = new_state()
    state.rejected_actions.append(loop.action_digest(RESERVE, reserve("w1").arguments))
    model_turn(state, tool_output(reserve("b1", tool="book_seat")))
    assert loop.decide(state, T0) == CallModel(turn=2)
    refused = state.outbox[0]
    assert isinstance(refused, ToolResult) and refused.status == "rejected"
    assert "rejected this exact action" in refused.content


def test_changed_arguments_need_a_new_approval() -> None:
    state = new_state()
    first = call("s1", "send_reply", ticket_id="T-1", recipient="dana@example.com", body="hi")
    model_turn(state, tool_output(first))
    decide(state, decision(state, "s1"), T0)
    run_step(state)
    changed = call("s2", "send_reply", ticket_id="T-1", recipient="eve@evil.test", body="hi")
    model_turn(state, tool_output(changed))
    step = loop.decide(state, T0)
    assert isinstance(step, AwaitApproval) and step.call_ids == ["s2"]
    # The approval of s1 cannot be replayed for s2: the digest it names is s1's.
    stale = decision(state, "s2", digest=state.calls["s1"].args_digest)
    assert not decide(state, stale, T0).accepted


def test_approval_timeout() -> None:
    state = new_state(approval_timeout_seconds=60)
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    assert isinstance(loop.decide(state, T0 + timedelta(seconds=59)), AwaitApproval)
    step = loop.decide(state, T0 + timedelta(seconds=60))
    assert isinstance(step, Finish) and step.status == "approval_timeout"
    assert loop.pending_at_stop(state) == [
        PendingCall(call_id="w1", tool="reserve_seat", status="awaiting_approval")
    ]


def test_time_waiting_for_a_human_does_not_count_against_the_deadline() -> None:
    state = new_state(limits={"deadline_seconds": 100})
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    decide(state, decision(state, "w1"), T0 + timedelta(seconds=3600))
    loop.record_pause(state, 3600)
    assert run_step(state) == ["w1"]
    assert loop.decide(state, T0 + timedelta(seconds=3650)) == CallModel(turn=2)


def test_a_failed_precondition_goes_back_to_the_model_and_nothing_waits() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    step = loop.decide(state, T0)
    assert isinstance(step, CheckPreconditions)
    loop.record_preconditions(
        state, {"w1": PreconditionResult(problem="ws-101 has no seats left")}, T0
    )
    assert loop.decide(state, T0) == CallModel(turn=2)
    result = state.outbox[0]
    assert isinstance(result, ToolResult) and result.status == "rejected"
    assert "no seats" in result.content and state.calls["w1"].decision == "precondition_failed"


def test_approval_rules() -> None:
    alice = Principal(subject="p-alice")
    spec = ToolSpec(name="t", needs_approval="for_someone_else")
    assert not approval.needs_approval(spec, {"participant_id": "p-alice"}, alice)
    assert approval.needs_approval(spec, {"participant_id": "p-bob"}, alice)
    unknown_rule = ToolSpec(name="t", needs_approval="no_such_rule")
    assert approval.needs_approval(unknown_rule, {}, alice)  # fail safe
