"""A tool that asks a person before its call can happen (`InputNeeded`; an MCP server's
`input_required`): the loop's decisions (pure, no server) and the MCP translation both ways.
End to end through a real MCP server: `tests/mcp/test_mcp_tools.py`."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import mcp_types as types
import pytest

from agentloop.activity_io import PreconditionResult
from agentloop.contract import UserMessage
from agentloop.events import InputRequest, ToolResult
from agentloop.mcp.input import MAX_PENDING_BYTES, answered, asking
from agentloop.tools.contract import BusinessRefusal, InputNeeded, Reply
from agentloop.workflows import loop
from agentloop.workflows.loop import (
    AwaitInput,
    CallModel,
    CheckPreconditions,
    Finish,
    LoopState,
    RunTools,
)
from agentloop.workflows.loop.state import MAX_INPUT_ROUNDS
from tests.live import agent_input
from tests.loop.test_loop import T0, call, model_turn, new_state, tool_output
from tests.loop.test_loop import TRAIN as TRAIN_SPEC

QUESTION = "Who should take ticket T-1?"
FALLBACK = json.dumps({"error": {"class": "business", "message": f"needs an answer: {QUESTION}"}})


def started(*calls: Any) -> LoopState:
    state = new_state(input_timeout_seconds=60)
    model_turn(state, tool_output(*calls))
    return state


def asked(call_id: str, tool: str, ref: str = "sha256:p1") -> ToolResult:
    """What `run_tool` answers for a call whose tool asked: the fallback and the question."""
    return ToolResult(
        call_id=call_id,
        tool=tool,
        status="failed",
        error_class="business",
        content=FALLBACK,
        input_request=InputRequest(question=QUESTION, pending_ref=ref),
    )


def run(state: LoopState, *results: ToolResult) -> None:
    """The next step runs exactly these calls, with these results."""
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools), step
    assert [c.call_id for c, _ in step.calls] == [r.call_id for r in results]
    loop.start_tools(state, step, T0)
    loop.record_tool_results(state, list(results), now=T0)


def reply(state: LoopState, text: str) -> None:
    loop.record_message(state, UserMessage(text=text, sender="lead"), T0)


def test_a_read_whose_tool_asks_waits_for_the_answer_and_runs_again_with_it() -> None:
    state = started(call("c1", "get_train_status", train="ICE 5"))
    run(state, asked("c1", "get_train_status"))
    step = loop.decide(state, T0)
    assert isinstance(step, AwaitInput) and step.call_ids == ["c1"]
    assert loop.status_view(state, T0).question == f"get_train_status asks: {QUESTION}"
    assert state.calls["c1"].status == "awaiting_input" and state.outbox == []
    reply(state, "the 8:15")
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    started_run = loop.start_tools(state, step, T0)
    assert started_run.replies["c1"].model_dump() == {
        "pending_ref": "sha256:p1", "text": "the 8:15", "sender": "lead",
    }  # fmt: skip
    loop.record_tool_results(state, [ToolResult(call_id="c1", tool="get_train_status")], now=T0)
    # One call reserved once, run twice; its one result goes to the model under its id.
    assert (state.usage.tool_calls, state.calls["c1"].attempts) == (1, 2)
    assert [(r.call_id, r.status) for r in state.outbox] == [("c1", "succeeded")]  # type: ignore[union-attr]
    assert loop.decide(state, T0) == CallModel(turn=2)


def test_a_read_after_a_write_that_asks_waits_for_the_write() -> None:
    state = started(call("w1", "reserve_seat"), call("r1", "get_weather", city="X", date="D"))
    run(state, asked("w1", "reserve_seat"))
    assert isinstance(loop.decide(state, T0), AwaitInput)  # r1 does not run before w1
    reply(state, "seat 12")
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools) and [c.call_id for c, _ in step.calls] == ["w1"]
    first_key = state.calls["w1"].idempotency_key
    run(state, ToolResult(call_id="w1", tool="reserve_seat", side_effect=True))
    assert state.calls["w1"].idempotency_key == first_key  # the same write, the same key
    run(state, ToolResult(call_id="r1", tool="get_weather"))
    assert [r.call_id for r in state.outbox] == ["w1", "r1"]  # type: ignore[union-attr]


def test_a_tool_that_keeps_asking_is_refused_to_the_model_after_the_last_round() -> None:
    state = started(call("c1", "get_train_status"))
    for _ in range(MAX_INPUT_ROUNDS):
        run(state, asked("c1", "get_train_status"))
        reply(state, "again")
    run(state, asked("c1", "get_train_status"))
    [result] = state.outbox
    assert isinstance(result, ToolResult) and result.input_request is None
    assert (result.call_id, result.status, result.content) == ("c1", "failed", FALLBACK)
    assert state.calls["c1"].attempts == MAX_INPUT_ROUNDS + 1


def test_no_answer_in_time_stops_the_run_input_timeout() -> None:
    state = started(call("c1", "get_train_status"))
    run(state, asked("c1", "get_train_status"))
    late = T0 + timedelta(seconds=state.run_input.input_timeout_seconds)
    step = loop.decide(state, late)
    assert isinstance(step, Finish) and step.status == "input_timeout"


# --------------------------------------------------------------- MCP's input_required


def elicitation(**params: Any) -> types.ElicitRequest:
    return types.ElicitRequest(params=types.ElicitRequestFormParams(**params))


FORM = {"type": "object", "properties": {"assignee": {"type": "string"}}, "required": ["assignee"]}


def required(*requests: Any, state: str | None = "s1") -> types.InputRequiredResult:
    return types.InputRequiredResult(
        input_requests={f"k{i}": r for i, r in enumerate(requests)}, request_state=state
    )


def test_one_form_question_is_asked_with_what_the_server_needs_back() -> None:
    needed = asking("assign", required(elicitation(message=QUESTION, requested_schema=FORM)))
    assert needed.question == QUESTION
    assert needed.pending == {
        "key": "k0", "request_state": "s1", "mode": "form", "schema": FORM, "question": QUESTION,
    }  # fmt: skip


def test_a_url_question_asks_the_person_to_open_it() -> None:
    url = types.ElicitRequest(
        params=types.ElicitRequestURLParams(
            message="Sign in", url="https://tickets.example/auth", elicitation_id="e1"
        )
    )
    needed = asking("assign", required(url))
    assert "https://tickets.example/auth" in needed.question
    assert answered("assign", Reply("done", "lead", needed.pending)) == (
        {"k0": types.ElicitResult(action="accept")},
        "s1",
    )


@pytest.mark.parametrize(
    ("requests", "why"),
    [
        (
            [elicitation(message="a", requested_schema=FORM)] * 2,
            "2 inputs at once",
        ),
        (
            [types.ListRootsRequest()],
            "roots/list",
        ),
        (
            [elicitation(message="a", requested_schema={"type": "object", "properties": {}})],
            "no fields",
        ),
    ],
)
def test_what_a_run_cannot_answer_is_refused_saying_why(requests: list[Any], why: str) -> None:
    with pytest.raises(BusinessRefusal, match=why):
        asking("assign", required(*requests))


def test_a_server_asking_to_keep_too_much_is_refused() -> None:
    big = required(elicitation(message="a", requested_schema=FORM), state="x" * MAX_PENDING_BYTES)
    with pytest.raises(BusinessRefusal, match="at most"):
        asking("assign", big)


PENDING = {"key": "k0", "request_state": "s1", "mode": "form", "schema": FORM, "question": "Q?"}


@pytest.mark.parametrize(
    ("text", "result"),
    [
        ("dana", types.ElicitResult(action="accept", content={"assignee": "dana"})),
        ('{"assignee": "sam"}', types.ElicitResult(action="accept", content={"assignee": "sam"})),
        (" Decline ", types.ElicitResult(action="decline")),
        ("cancel", types.ElicitResult(action="cancel")),
    ],
)
def test_a_reply_becomes_the_elicitation_result(text: str, result: types.ElicitResult) -> None:
    assert answered("assign", Reply(text, "lead", PENDING)) == ({"k0": result}, "s1")


def test_a_reply_that_does_not_fit_the_form_is_asked_again_saying_why() -> None:
    counted = {
        **PENDING,
        "schema": {"type": "object", "properties": {"seats": {"type": "integer", "minimum": 1}}},
    }
    assert answered("book", Reply("3", "lead", counted))[0]["k0"].content == {"seats": 3}
    with pytest.raises(InputNeeded) as again:
        answered("book", Reply("0", "lead", counted))
    assert again.value.question.startswith("Q? (That answer does not fit")
    assert again.value.pending == counted
    with pytest.raises(BusinessRefusal, match="no longer kept"):
        answered("book", Reply("3", "lead", {}))


def test_a_reply_nested_past_the_bound_is_only_text() -> None:
    """Not parsed (no recursion to crash the activity): text that fits no form."""
    deep = "[" * 50_000 + "]" * 50_000
    with pytest.raises(InputNeeded, match="does not fit"):
        answered(
            "book",
            Reply(
                deep,
                "lead",
                {
                    **PENDING,
                    "schema": {
                        **FORM,
                        "properties": {
                            "assignee": {"type": "string"},
                            "floor": {"type": "integer"},
                        },
                    },
                },
            ),
        )


def test_a_checked_call_whose_tool_asked_is_checked_again_before_it_runs_with_the_answer() -> None:
    checked = TRAIN_SPEC.model_copy(update={"has_precondition": True})
    state = LoopState.start(
        agent_input("m", "openai-chat", "t", ["get_train_status"], input_timeout_seconds=60),
        [checked],
        T0,
    )  # fmt: skip
    model_turn(state, tool_output(call("c1", "get_train_status", train="ICE 5")))
    loop.record_preconditions(state, {"c1": PreconditionResult()}, T0)
    run(state, asked("c1", "get_train_status"))
    assert isinstance(loop.decide(state, T0), AwaitInput)
    loop.record_pause_started(state, T0)  # the wait for the answer
    reply(state, "the 8:15")
    loop.record_pause(state, 30.0)
    step = loop.decide(state, T0)
    assert isinstance(step, CheckPreconditions) and [c.call_id for c, _ in step.calls] == ["c1"]
    loop.record_preconditions(state, {"c1": PreconditionResult(problem="ICE 5 is cancelled")}, T0)
    why = "refused after a wait: precondition no longer holds: ICE 5 is cancelled"
    [told] = state.outbox
    assert isinstance(told, ToolResult) and (told.call_id, told.status) == ("c1", "rejected")
    assert json.loads(told.content)["error"]["message"] == why
    assert state.calls["c1"].decision == why and state.calls["c1"].attempts == 1
    assert loop.decide(state, T0) == CallModel(turn=2)
