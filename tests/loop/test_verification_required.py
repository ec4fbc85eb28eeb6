"""`require_verification`, decided without a server: a final answer no completion check
accepted ends the run `unverified` (never `completed`), after the model was told once; without
the setting nothing changes. (End to end, with the official client:
tests/loop/test_run_endings.py.)"""

from __future__ import annotations

from agentloop.events import ModelOutput, StateUpdate
from agentloop.workflows import loop
from agentloop.workflows.loop import CallModel, Finish, Verify
from tests.loop.test_loop import T0, model_turn, new_state

DECLINE = ModelOutput(text="I cannot do this.", stop="final")


def test_a_decline_in_words_is_told_once_then_ends_unverified() -> None:
    state = new_state(require_verification=True)
    state.require_verification = True  # as `startup.start` sets it from the input
    model_turn(state, DECLINE)
    assert loop.decide(state, T0) == CallModel(turn=2)
    [note] = state.outbox
    assert isinstance(note, StateUpdate) and "not accepted" in note.text
    model_turn(state, DECLINE)
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "unverified"
    assert step.cause == "verification" and step.output == "I cannot do this."
    assert state.usage.model_calls == 2


def test_without_the_setting_the_same_answer_completes() -> None:
    state = new_state()
    model_turn(state, DECLINE)
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "completed"


def test_a_completion_check_that_keeps_saying_no_ends_unverified_not_failed() -> None:
    state = new_state(completion_check="writes_applied")
    state.require_verification = True
    for _ in range(loop.MAX_OUTPUT_CORRECTIONS + 1):
        model_turn(state, DECLINE)
        assert isinstance(loop.decide(state, T0), Verify)
        loop.record_verdict(state, False, "no write applied")
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "unverified", step
    assert "no write applied" in step.stop_reason and state.failure is None


def test_a_check_that_accepts_completes_verified() -> None:
    state = new_state(completion_check="writes_applied")
    state.require_verification = True
    model_turn(state, ModelOutput(text="done", stop="final"))
    assert isinstance(loop.decide(state, T0), Verify)
    loop.record_verdict(state, True, "1 write applied")
    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and step.status == "completed"
    assert loop.record_finish(state, step).verified
