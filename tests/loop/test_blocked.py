"""Blocked is not completed (issue #34 item 2): a run the model gives up on (`give_up`, or an
empty answer once told) stops `blocked`, and a completed run says whether anything verified it.
The loop's rules without a server here; the runs over a real server in `test_blocked_runs`."""

from __future__ import annotations

import json

import pytest

from agentloop.contract import AgentRunInput
from agentloop.events import ModelOutput, StateUpdate, ToolResult
from agentloop.tool_spec import GIVE_UP
from agentloop.tools.builtins import give_up
from agentloop.workflows import loop
from agentloop.workflows.loop import CallModel, Finish, LoopState, RunTools, Verify
from tests.loop.test_loop import T0, TRAIN, WEATHER, call, model_turn, tool_output


def started(*, offered: bool = True, **fields: object) -> LoopState:
    run_input = AgentRunInput.model_validate(
        {
            "task": "is my train late?",
            "provider": "openai-chat",
            "model": "m",
            "tools": ["get_weather", "get_train_status"],
            **fields,
        }
    )
    builtins = ["read_artifact", "ask_user", *([GIVE_UP] if offered else [])]
    state = LoopState.start(run_input, [WEATHER, TRAIN, give_up.spec], T0, "wf", builtins)
    return state


def test_give_up_stops_the_run_blocked_with_the_models_reason_and_runs_nothing_else() -> None:
    state = started()
    weather = call("c_w", "get_weather", city="Oslo", date="2026-12-01")
    model_turn(state, tool_output(weather, call("c_g", GIVE_UP, reason="no ticket number given")))

    step = loop.decide(state, T0)

    assert step == Finish("blocked", "give_up: no ticket number given", cause="give_up")
    result = loop.record_finish(state, step)
    assert (result.status, result.stop_cause, result.verified) == ("blocked", "give_up", False)
    assert result.usage.tool_calls == 0 and state.calls["c_w"].attempts == 0
    assert [(c.call_id, c.decision, c.status) for c in result.calls] == [
        ("c_w", "not_run", "rejected"),
        ("c_g", "allowed", "succeeded"),
    ]
    assert result.report.startswith("Stopped: blocked — give_up: no ticket number given")
    assert "To continue: agentloop continue wf" in result.report
    # Both call ids answered, for a run that continues this one.
    unsent = {e.call_id: e for e in result.unsent if isinstance(e, ToolResult)}
    assert json.loads(unsent["c_g"].content) == {
        "stopped": "blocked",
        "reason": "no ticket number given",
    }
    assert "not run: the model gave up in call c_g" in unsent["c_w"].content


def test_give_up_without_a_reason_is_refused_and_told_to_the_model() -> None:
    state = started()
    model_turn(state, tool_output(call("c_g", GIVE_UP)))
    assert loop.decide(state, T0) == CallModel(turn=2)
    assert state.calls["c_g"].decision == "invalid_arguments"


def test_a_run_whose_input_turns_give_up_off_is_not_offered_it() -> None:
    state = started(offered=False, offer_give_up=False)
    model_turn(state, tool_output(call("c_g", GIVE_UP, reason="stuck")))
    assert loop.decide(state, T0) == CallModel(turn=2)
    assert state.calls["c_g"].decision == "unknown_tool"


@pytest.mark.parametrize("text", ["", "  \n "])
def test_an_empty_answer_is_sent_back_once_then_the_run_stops_blocked(text: str) -> None:
    state = started()
    model_turn(state, ModelOutput(text=text, stop="final"))
    assert loop.decide(state, T0) == CallModel(turn=2)
    [note] = state.outbox
    assert isinstance(note, StateUpdate) and "Your final answer was empty" in note.text
    assert "call give_up" in note.text

    model_turn(state, ModelOutput(text=text, stop="final"))

    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and (step.status, step.cause) == ("blocked", "empty_answer")
    assert state.usage.model_calls == 2 and state.outbox == []  # told once only


def test_an_empty_answer_after_a_real_one_was_sent_back_still_stops_blocked() -> None:
    """Told once per run: an empty answer after the note ends it, whatever came between."""
    state = started()
    model_turn(state, ModelOutput(text="", stop="final"))
    model_turn(state, tool_output(call("c_t", "get_train_status")))
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    loop.start_tools(state, step, T0)
    loop.record_tool_results(state, [ToolResult(call_id="c_t", tool="get_train_status")])
    model_turn(state, ModelOutput(text="", stop="final"))
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "blocked"


def test_a_completion_checks_verdict_is_in_the_result_and_the_report() -> None:
    state = started(completion_check="writes_applied")
    model_turn(state, ModelOutput(text="Booked.", stop="final"))
    assert isinstance(loop.decide(state, T0), Verify)
    loop.record_verdict(state, True, "every write was applied")

    result = loop.record_finish(state, loop.decide(state, T0))  # type: ignore[arg-type]

    assert (result.status, result.stop_cause) == ("completed", "final_answer")
    assert (result.verified, result.verified_by, result.verification) == (
        True,
        "writes_applied",
        "every write was applied",
    )
    assert "Verified: yes, by writes_applied (every write was applied)" in result.report


def test_a_completion_nothing_checked_says_it_is_unverified() -> None:
    state = started()
    model_turn(state, ModelOutput(text="On time.", stop="final"))
    result = loop.record_finish(state, loop.decide(state, T0))  # type: ignore[arg-type]
    assert (result.status, result.verified, result.verified_by) == ("completed", False, None)
    assert "Verified: no (no completion_check configured" in result.report
