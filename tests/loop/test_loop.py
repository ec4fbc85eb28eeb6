"""The loop's decisions, without a server: `decide` is a pure function of the run state."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentloop.activity_io import CallModelResult, PreconditionResult
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    Limits,
    PendingCall,
    Usage,
    UserMessage,
)
from agentloop.digests import args_digest
from agentloop.events import (
    ErrorClass,
    ModelOutput,
    StateUpdate,
    ToolCall,
    ToolResult,
    UserInput,
)
from agentloop.policies.completion import check_output
from agentloop.tool_spec import Outcome, ToolSpec
from agentloop.workflows import loop
from agentloop.workflows.loop import (
    CallModel,
    Finish,
    LookupOutcome,
    LoopState,
    RunTools,
    Verify,
    results,
    stops,
)
from tests.live import agent_input

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)

WEATHER = ToolSpec(
    name="get_weather",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "date": {"type": "string"}},
        "required": ["city", "date"],
        "additionalProperties": False,
    },
)
TRAIN = ToolSpec(name="get_train_status", parameters={"type": "object"})
WRITE = ToolSpec(name="reserve_seat", effect="write", parameters={"type": "object"})


def new_state(**overrides: object) -> LoopState:
    fields: dict[str, object] = {
        "task": "is my train late?",
        "provider": "openai-chat",
        "model": "m",
        "tools": ["get_weather", "get_train_status", "reserve_seat"],
    }
    fields.update(overrides)
    return LoopState.start(AgentRunInput.model_validate(fields), [WEATHER, TRAIN, WRITE], T0)


def call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(
        call_id=call_id, name=name, arguments=arguments, args_digest=args_digest(name, arguments)
    )


def model_turn(state: LoopState, output: ModelOutput) -> None:
    step = loop.decide(state, T0)
    assert isinstance(step, CallModel)
    loop.start_model_call(state, step)
    loop.record_model_output(state, CallModelResult(head=f"h{step.turn}", output=output), T0)


def run_step(state: LoopState, **contents: str) -> list[str]:
    """Carry out the next RunTools step with results `contents` (call id -> content)."""
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools), step
    loop.start_tools(state, step, T0)
    ids = [c.call_id for c, _ in step.calls]
    loop.record_tool_results(
        state,
        [
            ToolResult(call_id=i, tool=state.calls[i].tool, content=contents.get(i, "ok"))
            for i in ids
        ],
    )
    return ids


def tool_output(*calls: ToolCall) -> ModelOutput:
    return ModelOutput(stop="tool_calls", tool_calls=list(calls))


def test_first_step_is_a_model_call_with_the_task_verbatim() -> None:
    state = new_state(task="  exact task text  ")
    assert loop.decide(state, T0) == CallModel(turn=1)
    assert state.outbox == [UserInput(text="  exact task text  ", sender="anonymous")]


def test_final_answer_completes() -> None:
    state = new_state()
    model_turn(state, ModelOutput(text="on time", stop="final"))
    assert loop.decide(state, T0) == Finish(
        "completed", "final answer", "on time", cause="final_answer"
    )
    assert state.usage.model_calls == 1 and state.usage.tool_calls == 0


@pytest.mark.parametrize(
    ("stop", "status"),
    [("refused", "refused"), ("content_filtered", "refused"), ("truncated", "incomplete")],
)
def test_refusal_and_truncation_stop_without_running_anything(stop: str, status: str) -> None:
    state = new_state()
    output = ModelOutput(stop=stop, tool_calls=[call("c1", "get_weather", city="X")])  # type: ignore[arg-type]
    model_turn(state, output)
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == status
    assert state.usage.tool_calls == 0


def test_tool_calls_are_validated_and_refusals_keep_their_call_ids() -> None:
    state = new_state()
    good = call("c_good", "get_weather", city="Paris", date="2026-12-01")
    bad_args = call("c_bad", "get_weather", city=3)
    unknown = call("c_unknown", "delete_everything")
    model_turn(state, tool_output(good, bad_args, unknown))
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    assert [c.call_id for c, _ in step.calls] == ["c_good"]
    assert state.batch is not None
    refused = state.batch.results
    assert set(refused) == {"c_bad", "c_unknown"}
    assert refused["c_bad"].status == "rejected"
    assert refused["c_bad"].error_class == "invalid_arguments"
    assert "date" in refused["c_bad"].content and "city" in refused["c_bad"].content
    assert refused["c_unknown"].error_class == "unknown_tool"


def test_a_tool_not_whitelisted_for_the_run_is_unknown() -> None:
    state = new_state(tools=["get_weather"])
    model_turn(state, tool_output(call("c1", "get_train_status")))
    # Nothing to run: the refusal alone answers the batch and goes back to the model.
    assert loop.decide(state, T0) == CallModel(turn=2)
    result = state.outbox[0]
    assert isinstance(result, ToolResult) and result.error_class == "unknown_tool"


def test_results_are_recorded_by_call_id_not_position() -> None:
    state = new_state()
    a, b = call("call_a", "get_train_status"), call("call_b", "get_weather", city="X", date="d")
    model_turn(state, tool_output(a, b))
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    loop.start_tools(state, step, T0)
    # Completion order is b then a; the outbox follows the model's order, keyed by id.
    loop.record_tool_results(
        state,
        [
            ToolResult(call_id="call_b", tool="get_weather", content="sunny"),
            ToolResult(call_id="call_a", tool="get_train_status", content="late"),
        ],
    )
    assert [(r.call_id, r.content) for r in state.outbox] == [
        ("call_a", "late"),
        ("call_b", "sunny"),
    ]
    assert state.calls["call_a"].result_summary == "late"
    assert state.calls["call_b"].result_summary == "sunny"
    assert state.usage.tool_calls == 2
    assert loop.decide(state, T0) == CallModel(turn=2)


def test_results_that_do_not_answer_the_calls_are_refused() -> None:
    state = new_state()
    model_turn(state, tool_output(call("call_a", "get_train_status")))
    with pytest.raises(ValueError, match="does not answer"):
        loop.record_tool_results(state, [ToolResult(call_id="call_x")])


@pytest.mark.parametrize("ids", [["c1", "c1"], ["", "c2"]])
def test_duplicate_or_empty_call_ids_are_a_protocol_failure(ids: list[str]) -> None:
    state = new_state()
    model_turn(state, tool_output(*(call(i, "get_train_status") for i in ids)))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "failed"
    assert step.stop_reason.startswith("protocol")


def test_max_model_calls_is_checked_before_the_call() -> None:
    state = new_state(limits=Limits(max_model_calls=1))
    model_turn(state, tool_output(call("c1", "get_train_status")))
    run_step(state)
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "limit_reached"
    assert "max_model_calls" in step.stop_reason


def test_a_tool_batch_that_does_not_fit_does_not_start_at_all() -> None:
    state = new_state(limits=Limits(max_tool_calls=1))
    model_turn(state, tool_output(call("c1", "get_train_status"), call("c2", "get_train_status")))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "limit_reached"
    assert "max_tool_calls" in step.stop_reason
    assert state.usage.tool_calls == 0


def test_per_tool_cap() -> None:
    state = new_state(limits=Limits(per_tool={"get_train_status": 1}))
    model_turn(state, tool_output(call("c1", "get_train_status"), call("c2", "get_train_status")))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and "per_tool" in step.stop_reason


def test_deadline_and_cancel_win_over_everything() -> None:
    state = new_state(limits=Limits(deadline_seconds=10))
    assert loop.decide(state, T0 + timedelta(seconds=9)) == CallModel(turn=1)
    step = loop.decide(state, T0 + timedelta(seconds=10))
    assert isinstance(step, Finish) and step.status == "limit_reached"
    state.cancel_reason = "user changed their mind"
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "cancelled"
    assert "user changed their mind" in step.stop_reason


def test_output_schema_rejection_goes_back_to_the_model_then_stops() -> None:
    schema = {"type": "object", "required": ["late"]}
    state = new_state(output_schema=schema)
    model_turn(state, ModelOutput(text="not json", stop="final"))
    assert loop.decide(state, T0) == CallModel(turn=2)
    note = state.outbox[0]
    assert isinstance(note, StateUpdate) and "not valid JSON" in note.text
    model_turn(state, ModelOutput(text='{"late": true}', stop="final"))
    assert loop.decide(state, T0) == Finish(
        "completed", "final answer matches output_schema", {"late": True}, cause="final_answer"
    )


def test_output_schema_corrections_are_bounded() -> None:
    state = new_state(output_schema={"type": "object"})
    for _ in range(loop.MAX_OUTPUT_CORRECTIONS + 1):
        model_turn(state, ModelOutput(text="[]", stop="final"))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "failed"
    assert step.stop_reason.startswith("verification")
    assert state.usage.model_calls == loop.MAX_OUTPUT_CORRECTIONS + 1


def test_an_answer_is_checked_against_output_schema_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """When it is recorded; the completion check and the finish read the verdict kept (each
    used to check the answer again)."""
    checks: list[str] = []

    def counted(
        schema: dict[str, Any], text: str, *, steps: int | None = None
    ) -> tuple[Any, list[str]]:
        checks.append(text)
        return check_output(schema, text, steps=steps)

    monkeypatch.setattr(stops, "check_output", counted)
    state = new_state(output_schema={"type": "object"}, completion_check="writes_applied")
    model_turn(state, ModelOutput(text='{"late": false}', stop="final"))
    step = loop.decide(state, T0)
    assert isinstance(step, Verify)
    loop.record_verdict(state, True, "nothing to apply")
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and (step.status, step.output) == ("completed", {"late": False})
    assert checks == ['{"late": false}']


def test_a_call_id_reused_from_an_earlier_turn_is_a_protocol_failure() -> None:
    state = new_state()
    model_turn(state, tool_output(call("c1", "get_train_status")))
    run_step(state)
    model_turn(state, tool_output(call("c1", "get_train_status")))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "failed"
    assert "reused" in step.stop_reason
    assert state.calls["c1"].status == "succeeded"


def test_refused_calls_are_capped_per_run() -> None:
    state = new_state(limits=Limits(max_model_calls=20))
    for i in range(loop.MAX_REFUSED_CALLS + 1):
        model_turn(state, tool_output(call(f"c{i}", f"no_such_tool_{i}")))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "failed"
    assert step.stop_reason.startswith("invalid_calls")


def test_a_tools_own_per_run_cap_applies() -> None:
    capped = TRAIN.model_copy(update={"max_calls_per_run": 1})
    state = LoopState.start(
        agent_input("m", "openai-chat", "t", ["get_train_status"]),
        [capped],
        T0,
    )
    model_turn(state, tool_output(call("c1", "get_train_status"), call("c2", "get_train_status")))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "limit_reached"
    assert "get_train_status" in step.stop_reason


def test_a_batch_over_budget_is_in_the_ledger_as_left_undone() -> None:
    state = new_state(limits=Limits(max_tool_calls=1))
    weather = call("c_w", "get_weather", city="Oslo", date="2026-12-01")
    model_turn(state, tool_output(weather, call("c_t", "get_train_status")))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "limit_reached"
    result = loop.record_finish(state, step)
    assert result.usage.tool_calls == 0
    assert [(c.call_id, c.decision, c.status, c.arguments) for c in result.calls] == [
        ("c_w", "over_budget", "proposed", {}),
        ("c_t", "over_budget", "proposed", {}),
    ]
    assert result.calls[0].args_digest == weather.args_digest
    assert [(p.call_id, p.status) for p in result.pending] == [
        ("c_w", "proposed"),
        ("c_t", "proposed"),
    ]
    assert "Pending: get_weather c_w (proposed), get_train_status c_t (proposed)" in result.report
    # The model is told each call did not run, under its own id, if the run is continued.
    assert {r.call_id for r in result.unsent if isinstance(r, ToolResult)} == {"c_w", "c_t"}


def test_what_the_last_call_sent_shortened_goes_back_in_the_next_budget() -> None:
    state = new_state(limits=Limits(max_total_tokens=100_000))
    step = loop.decide(state, T0)
    assert isinstance(step, CallModel)
    first = loop.start_model_call(state, step).request.budget
    assert first.elided_before == 0
    output = tool_output(call("c1", "get_train_status"))
    loop.record_model_output(state, CallModelResult(head="h1", output=output, elided_through=7), T0)
    run_step(state)
    step = loop.decide(state, T0)
    assert isinstance(step, CallModel)
    budget = loop.start_model_call(state, step).request.budget
    assert budget.elided_before == 7


def test_max_total_tokens_is_checked_before_the_next_model_call() -> None:
    state = new_state(limits=Limits(max_total_tokens=100))
    model_turn(state, tool_output(call("c1", "get_train_status")))
    state.usage.input_tokens, state.usage.output_tokens = 70, 30
    run_step(state)
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "limit_reached"
    assert step.stop_reason == "max_total_tokens: 100 of 100 tokens used"
    assert state.usage.model_calls == 1


def test_a_child_run_that_ends_without_a_result_is_charged_its_whole_slice() -> None:
    from agentloop.tools.builtins import delegate

    state = LoopState.start(
        AgentRunInput.model_validate(
            {
                "task": "t",
                "provider": "openai-chat",
                "model": "m",
                "tools": ["delegate", "reserve_seat"],
                "limits": {"max_model_calls": 6, "max_tool_calls": 10, "max_cost_usd": 1.0},
            }
        ),
        [delegate.spec, WRITE],
        T0,
        workflow_id="wf",
    )
    model_turn(state, tool_output(call("c1", "delegate", task="book", tools=["reserve_seat"])))
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    [child] = loop.start_tools(state, step, T0).children.values()
    assert child.tools == ["reserve_seat"] and child.limits.max_model_calls == 4
    assert state.calls["c1"].child_run == "wf/delegate/c1"

    loop.record_tool_results(state, [loop.ChildOutcome("c1", None)])
    [result] = [e for e in state.outbox if isinstance(e, ToolResult) and e.call_id == "c1"]
    # Nothing is known of what it did: its whole slice is spent, and it may have written.
    assert state.usage.model_calls == 1 + 4 and state.usage.tool_calls == 1 + 9
    assert state.usage.cost_usd == pytest.approx(0.5)  # the parent kept half for itself
    assert result.status == "failed" and result.side_effect
    assert loop.decide(state, T0) == CallModel(turn=2)


def test_a_broken_tool_is_internal_and_not_worth_retrying_in_runs_that_tell_classes_apart() -> None:
    def failed(state: LoopState, call_id: str, message: str, error_class: ErrorClass) -> ToolResult:
        """The result the model is sent for a read whose activity failed for good."""
        model_turn(state, tool_output(call(call_id, "get_weather", city="Oslo", date="2026-12-01")))
        step = loop.decide(state, T0)
        assert isinstance(step, RunTools)
        loop.start_tools(state, step, T0)
        loop.record_tool_results(state, [loop.ToolFailure(call_id, message, error_class)])
        return next(e for e in state.outbox if isinstance(e, ToolResult) and e.call_id == call_id)

    broken = failed(new_state(), "c1", "boom", "internal")
    assert (broken.error_class, broken.retryable, broken.status) == ("internal", False, "failed")
    slow = failed(new_state(), "c2", "timeout", "transient")
    assert (slow.error_class, slow.retryable) == ("transient", True)
    write = results.failure(call("c3", "reserve_seat"), "boom", "internal", write=True)
    assert (write.status, write.retryable, write.side_effect) == ("unknown", False, True)


def test_a_failed_write_is_unknown_and_waits_for_its_lookup() -> None:
    state = new_state()
    model_turn(state, tool_output(call("c3", "reserve_seat")))
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    loop.start_tools(state, step, T0)
    loop.record_tool_results(state, [loop.ToolFailure("c3", "boom", "internal")])
    assert state.calls["c3"].status == "unknown"
    assert isinstance(loop.decide(state, T0), LookupOutcome)


def test_a_childs_long_answer_is_cut_to_the_delegate_tools_cap() -> None:
    from agentloop.contract import AgentRunResult
    from agentloop.tools.builtins import delegate

    state = LoopState.start(
        AgentRunInput.model_validate(
            {"task": "t", "provider": "openai-chat", "model": "m", "tools": ["delegate"]}
        ),
        [delegate.spec],
        T0,
        workflow_id="wf",
    )
    model_turn(state, tool_output(call("c1", "delegate", task="summarise", tools=[])))
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    loop.start_tools(state, step, T0)
    answer = "x" * 50_000
    child = AgentRunResult(status="completed", stop_reason="final answer", output=answer)
    loop.record_tool_results(state, [loop.ChildOutcome("c1", child)])
    [result] = [e for e in state.outbox if isinstance(e, ToolResult) and e.call_id == "c1"]
    assert len(result.content) <= delegate.spec.max_result_chars
    report = json.loads(result.content)
    assert report["output"].startswith("x" * 1_000) and "truncated" in report["output"]
    assert (report["status"], result.status, result.call_id) == ("completed", "succeeded", "c1")


def test_a_message_that_arrives_during_a_model_call_waits_for_the_next_one() -> None:
    state = new_state(output_schema={"type": "object"})
    step = loop.decide(state, T0)
    assert isinstance(step, CallModel)
    turn = loop.start_model_call(state, step)
    loop.record_message(state, UserMessage(text="Friday, please", sender="p-alice"), T0)
    not_json = ModelOutput(stop="final", text="not JSON")
    loop.record_model_output(state, CallModelResult(head="h1", output=not_json), T0, len(turn.sent))
    # The answer is sent back for correction; the message goes with it, first.
    kinds = [(type(e).__name__, getattr(e, "kind", "")) for e in state.outbox]
    expected = [("UserInput", ""), ("StateUpdate", "verification")]
    assert kinds == expected


def test_the_run_chain_keeps_its_first_and_latest_ids_and_counts_the_rest() -> None:
    state = new_state()
    runs = [f"run-{i}" for i in range(50)]
    for run in runs:
        loop.record_run_started(state, run)
    assert len(state.run_chain) == loop.MAX_RUN_CHAIN_IDS
    # The first id keys the run's writes and signed decisions: it never leaves.
    assert state.run_chain == [runs[0], *runs[-(loop.MAX_RUN_CHAIN_IDS - 1) :]]
    assert state.run_chain_left_out == len(runs) - loop.MAX_RUN_CHAIN_IDS
    assert loop.status_view(state, T0).run_chain_left_out == state.run_chain_left_out


def delegating_state() -> LoopState:
    """A run whose one output delegates twice around a write, with a capped read after the
    write: [d1 delegate, w1 write, r1 read (cap 1), d2 delegate]."""
    from agentloop.tools.builtins import delegate

    state = LoopState.start(
        AgentRunInput.model_validate(
            {
                "task": "t",
                "provider": "openai-chat",
                "model": "m",
                "tools": ["delegate", "get_train_status", "reserve_seat"],
                "limits": {
                    "max_model_calls": 6,
                    "max_tool_calls": 8,
                    "per_tool": {"get_train_status": 1},
                },
            }
        ),
        [delegate.spec, TRAIN, WRITE],
        T0,
        workflow_id="wf",
    )
    model_turn(
        state,
        tool_output(
            call("d1", "delegate", task="look up", tools=["get_train_status"]),
            call("w1", "reserve_seat"),
            call("r1", "get_train_status"),
            call("d2", "delegate", task="check", tools=[]),
        ),
    )
    return state


def test_a_childs_slice_leaves_the_batchs_later_calls_and_delegates_their_share() -> None:
    state = delegating_state()
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools) and [c.call_id for c, _ in step.calls] == ["d1"]
    first = loop.start_tools(state, step, T0).children["d1"].limits
    # 5 model calls left, one kept to read the answers, shared with d2; 7 tool calls left
    # after d1, 3 of them (w1, r1, d2) the batch's still to start; r1 has the read's one call.
    assert (first.max_model_calls, first.max_tool_calls) == (2, 2)
    assert first.per_tool == {"get_train_status": 0}
    spent = AgentRunResult(
        status="completed",
        stop_reason="final answer",
        output="ok",
        usage=Usage(model_calls=2, tool_calls=2),
    )
    loop.record_tool_results(state, [loop.ChildOutcome("d1", spent)])
    assert run_step(state) == ["w1"]
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools) and [c.call_id for c, _ in step.calls] == ["r1", "d2"]
    # The delegate after the write still has a model call of its own (not 0, which no
    # `Limits` takes: the workflow task failed there).
    second = loop.start_tools(state, step, T0).children["d2"].limits
    assert second.max_model_calls == (6 - 1 - 2 - 1) // 1
    assert state.usage.tool_calls == 1 + 2 + 1 + 2 <= 8


def test_a_write_sent_again_under_its_key_is_the_call_already_counted() -> None:
    """The lookup says the write is absent: it is sent again with the same key, which is
    not a second tool call."""
    send = ToolSpec(name="send_reply", effect="write", has_outcome_lookup=True)
    state = LoopState.start(
        agent_input(
            "m",
            "openai-chat",
            "reply",
            ["send_reply"],
            limits=Limits(max_tool_calls=1, per_tool={"send_reply": 1}),
        ),
        [send],
        T0,
        "wf",
    )
    model_turn(state, tool_output(call("w1", "send_reply", ticket_id="T-1")))

    def attempt(status: str) -> None:
        step = loop.decide(state, T0)
        assert isinstance(step, RunTools), step
        loop.start_tools(state, step, T0)
        result = ToolResult(call_id="w1", tool="send_reply", status=status, side_effect=True)
        loop.record_tool_results(state, [result], now=T0)

    attempt("unknown")
    assert isinstance(loop.decide(state, T0), LookupOutcome)
    loop.record_outcome(state, "w1", Outcome(state="not_applied"), T0)
    attempt("succeeded")
    assert state.calls["w1"].attempts == 2 and state.calls["w1"].status == "succeeded"
    assert state.usage.tool_calls == 1 == state.used_per_tool()["send_reply"]
    assert loop.status_view(state, T0).limits_left.tool_calls == 0


def test_calls_waiting_on_a_person_a_tool_asked_are_left_undone_at_the_stop() -> None:
    state = new_state()
    model_turn(state, tool_output(call("w1", "reserve_seat"), call("r1", "get_train_status")))
    state.calls["w1"].status = "awaiting_input"
    state.calls["r1"].status = "pending"
    assert loop.pending_at_stop(state) == [
        PendingCall(call_id="w1", tool="reserve_seat", status="awaiting_input"),
        PendingCall(call_id="r1", tool="get_train_status", status="pending"),
    ]


def approved_after_a_wait() -> LoopState:
    """A write whose precondition passed, approved after a wait."""
    checked = WRITE.model_copy(
        update={"has_precondition": True, "needs_approval": True, "approvers": ["lead"]}
    )
    state = LoopState.start(
        agent_input("m", "openai-chat", "t", ["reserve_seat"]),
        [checked],
        T0,
    )
    model_turn(state, tool_output(call("w1", "reserve_seat", seat="12A")))
    assert isinstance(loop.decide(state, T0), loop.CheckPreconditions)
    loop.record_preconditions(state, {"w1": PreconditionResult()}, T0)
    assert isinstance(loop.decide(state, T0), loop.AwaitApproval)
    loop.record_pause_started(state, T0)
    digest = state.calls["w1"].args_digest
    decision = ApprovalDecision(call_id="w1", args_digest=digest, approved=True, approver="lead")
    loop.receive_decision(state, decision, T0)
    for held in loop.decisions_to_check(state):
        loop.record_checked_decision(state, held, "", None, T0)
    loop.record_pause(state, 60.0)
    return state


def test_an_approved_call_is_checked_again_after_the_wait_and_refused_if_it_fails() -> None:
    state = approved_after_a_wait()
    step = loop.decide(state, T0)
    assert isinstance(step, loop.CheckPreconditions)
    assert [c.call_id for c, _ in step.calls] == ["w1"] and step.rules == {}
    loop.record_preconditions(state, {"w1": PreconditionResult(problem="seat 12A is taken")}, T0)
    why = "approved by lead, then refused: precondition no longer holds: seat 12A is taken"
    assert state.calls["w1"].decision == why
    assert state.calls["w1"].status == "rejected" and state.calls["w1"].attempts == 0
    [told] = state.outbox
    assert isinstance(told, ToolResult) and told.call_id == "w1"
    assert json.loads(told.content) == {"error": {"class": "precondition_failed", "message": why}}
    assert loop.decide(state, T0) == CallModel(turn=2)


def test_an_approved_call_that_still_passes_after_the_wait_runs_once_checked_again() -> None:
    state = approved_after_a_wait()
    assert isinstance(loop.decide(state, T0), loop.CheckPreconditions)
    loop.record_preconditions(state, {"w1": PreconditionResult()}, T0)
    assert run_step(state) == ["w1"]
    assert state.calls["w1"].decision == "approved by lead"
    assert state.calls["w1"].status == "succeeded" and state.calls["w1"].attempts == 1
    assert loop.decide(state, T0) == CallModel(turn=2)


def test_an_approved_call_whose_check_cannot_be_made_again_is_refused_saying_so() -> None:
    state = approved_after_a_wait()
    assert isinstance(loop.decide(state, T0), loop.CheckPreconditions)
    lost = PreconditionResult(problem="precondition not checked: timed out", made=False)
    loop.record_preconditions(state, {"w1": lost}, T0)
    why = "approved by lead, then refused: precondition not checked: timed out"
    assert state.calls["w1"].decision == why and state.calls["w1"].attempts == 0
    assert loop.decide(state, T0) == CallModel(turn=2)
