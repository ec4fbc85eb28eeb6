"""Stall detection: the same calls getting the same answers, or the same error again and
again, earn one nudge and then stop the run `stalled`; declared polling is not a stall."""

from __future__ import annotations

from agentloop.contract import Limits
from agentloop.events import StateUpdate, ToolResult
from agentloop.tool_spec import ToolSpec
from agentloop.workflows import loop
from agentloop.workflows.loop import CallModel, Finish, LoopState, RunTools
from tests.live import agent_input
from tests.loop.test_loop import T0, call, model_turn, tool_output

SEARCH = ToolSpec(name="search_policy", parameters={"type": "object"})
JOB = ToolSpec(name="job_status", parameters={"type": "object"}, poll_limit=4)


def new_state() -> LoopState:
    state = LoopState.start(
        agent_input(
            "m",
            "openai-chat",
            "t",
            ["search_policy", "job_status"],
            limits=Limits(max_model_calls=30),
        ),
        [SEARCH, JOB],
        T0,
    )
    return state


def turn(
    state: LoopState,
    call_id: str,
    tool: str,
    content: str,
    status: str = "succeeded",
    **arguments: object,
) -> None:
    model_turn(state, tool_output(call(call_id, tool, **arguments)))
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    loop.start_tools(state, step, T0)
    loop.record_tool_results(
        state,
        [
            ToolResult(
                call_id=call_id,
                tool=tool,
                content=content,
                status=status,  # type: ignore[arg-type]
                error_class="business" if status == "failed" else None,
            )
        ],
    )


def notes(state: LoopState) -> list[str]:
    return [e.text for e in state.outbox if isinstance(e, StateUpdate)]


def test_the_same_search_with_the_same_empty_result_nudges_once_then_stalls() -> None:
    state = new_state()
    turn(state, "s1", "search_policy", '{"results": []}', query="refund")
    assert notes(state) == [] and loop.decide(state, T0) == CallModel(turn=2)
    turn(state, "s2", "search_policy", '{"results": []}', query="refund")
    [nudge] = notes(state)
    assert "search_policy" in nudge and "same result" in nudge
    assert loop.decide(state, T0) == CallModel(turn=3)
    turn(state, "s3", "search_policy", '{"results": []}', query="refund")
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "stalled"
    assert "search_policy" in step.stop_reason


def test_new_arguments_or_new_results_are_progress() -> None:
    state = new_state()
    for i, query in enumerate(["refund", "refunds", "money back", "return"]):
        turn(state, f"s{i}", "search_policy", '{"results": []}', query=query)
    turn(state, "s9", "search_policy", '{"results": [1]}', query="refund")
    assert notes(state) == [] and isinstance(loop.decide(state, T0), CallModel)


def test_the_same_error_three_turns_in_a_row_is_a_stall() -> None:
    state = new_state()
    for i in range(3):
        turn(state, f"e{i}", "search_policy", "boom", status="failed", query=f"q{i}")
    assert notes(state), "the repeated error earns a nudge"
    turn(state, "e3", "search_policy", "boom", status="failed", query="q3")
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "stalled"
    assert "same error" in step.stop_reason


def test_declared_polling_is_not_a_stall_until_its_limit() -> None:
    state = new_state()
    for i in range(JOB.poll_limit or 0):
        turn(state, f"p{i}", "job_status", '{"state": "running"}', job="j1")
    assert notes(state) == [] and isinstance(loop.decide(state, T0), CallModel)
    turn(state, "p9", "job_status", '{"state": "running"}', job="j1")
    assert notes(state), "past its poll limit a polling tool is flagged like any other"
