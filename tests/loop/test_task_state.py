"""Task state apart from the transcript (issue #19 item 1; seed 003, docs/concepts/design.md
§3): the support tools set it with their results (`agentloop.WithState`), the run merges it,
shows it in `status`, the result and the report, hands it to the verifier, and watches it for
progress (seed 001: an unchanging state, a plan that flips)."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop.contract import AgentRunInput, Principal, UserMessage
from agentloop.policies import task_state
from agentloop.policies.progress import TurnFingerprint, stall
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from tests.live import Live, scripted
from tests.support import result_of, signal_approval, start_run, wait_for_phase, wait_for_status

PRINCIPAL = Principal(subject="agent-7", scopes=["tickets:read", "tickets:write"])
REPLY = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "Refund on its way."}


def support_run(model: str, tools: list[str], **fields: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Answer ticket T-1001.",
            "provider": "openai-chat",
            "model": model,
            "tools": tools,
            "principal": PRINCIPAL,
            **fields,
        }
    )


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_the_support_tools_set_the_task_state_and_the_verifier_reads_it(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("read_ticket", "c_read", ticket_id="T-1001")],
            ScriptTurn(
                tool_calls=[scripted_call("search_policy", "c_policy", query="late refund")],
                delay_ms=1_000,  # time to look at the state the first step left
            ),
            [scripted_call("send_reply", "c_reply", **REPLY)],
            "Answered.",
        )
    )
    run_input = support_run(
        run_id,
        ["read_ticket", "search_policy", "send_reply"],
        completion_check="ticket_answered",
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    await wait_for_status(handle, lambda v: v.task_state == {"ticket": "T-1001"}, "the ticket")
    waiting = await wait_for_phase(handle, "awaiting_approval")
    policy = waiting.task_state["policy"]
    assert waiting.task_state == {"ticket": "T-1001", "policy": policy} and policy
    [pending] = waiting.pending_approvals
    await signal_approval(handle, "c_reply", pending.args_digest, "support-lead")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert "completion_check ticket_answered passed" in result.stop_reason
    final = {"ticket": "T-1001", "policy": policy, "reply_sent_to": "dana@example.com"}
    assert result.task_state == final
    assert f'Task state: {{"policy": "{policy}", "reply_sent_to"' in result.report
    assert live.service.records()["replies_by_ticket"] == {"T-1001": 1}
    # The model saw the tools' outputs only: the state is run state, not conversation.
    last = live.provider.requests[-1]["body"]["messages"]
    assert not any("reply_sent_to" in str(m.get("content")) for m in last)


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_verifier_refuses_an_answer_the_task_state_does_not_bear_out(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("read_ticket", "c_read", ticket_id="T-1001")],
            "Answered.",  # no reply was sent
            "Still answered.",
            "Answered, really.",
        )
    )
    run_input = support_run(run_id, ["read_ticket"], completion_check="ticket_answered")
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status != "completed"
    assert "task state shows no reply sent" in result.stop_reason, result.stop_reason


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_model_acting_without_changing_the_task_state_is_stopped_after_one_nudge(
    live: Live, run_id: str
) -> None:
    def weather(day: int) -> ScriptTurn:
        date = f"2026-12-{day:02d}"
        return ScriptTurn(
            tool_calls=[scripted_call("get_weather", f"c_w{day}", city="Oslo", date=date)]
        )

    live.provider.register(
        scripted(
            run_id,
            [scripted_call("read_ticket", "c_read", ticket_id="T-1001")],
            *(weather(day) for day in range(1, 8)),
        )
    )
    run_input = support_run(run_id, ["read_ticket", "get_weather"])
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == "stalled", result.stop_reason
    assert "the task state did not change in 3 tool turns" in result.stop_reason
    # Read, three weather turns (the nudge), one more: stopped before the sixth model call.
    requests = [r for r in live.provider.requests if r["script"] == run_id]
    assert len(requests) == 5 == result.usage.model_calls
    nudges = [m for m in requests[-1]["body"]["messages"] if "No progress" in str(m.get("content"))]
    assert len(nudges) == 1


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_model_alternating_two_calls_is_stopped(live: Live, run_id: str) -> None:
    tickets = ["T-1001", "T-1002"] * 4
    live.provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(tool_calls=[scripted_call("read_ticket", f"c_{n}", ticket_id=ticket)])
                for n, ticket in enumerate(tickets)
            ],
        )
    )
    run_input = support_run(run_id, ["read_ticket"])
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == "stalled", result.stop_reason
    assert result.usage.model_calls < len(tickets)


QUESTIONS = [f"Question {n}?" for n in range(1, 5)]


def questions_then_over_budget(name: str) -> Script:
    """A run that sets the task state, asks the person four questions in a row, then
    proposes two reads when one tool call is left (the run's `max_tool_calls` is 2)."""
    return scripted(
        name,
        [scripted_call("read_ticket", "c_read", ticket_id="T-1001")],
        *(
            ScriptTurn(tool_calls=[scripted_call("ask_user", f"c_ask{n}", question=question)])
            for n, question in enumerate(QUESTIONS, start=1)
        ),
        [
            scripted_call("get_weather", "c_weather", city="Oslo", date="2026-12-01"),
            scripted_call("get_train_status", "c_train", train_number="G1234", date="2026-12-01"),
        ],
    )


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_questions_in_a_row_are_not_a_stall_and_a_batch_over_budget_is_left_pending(
    live: Live, run_id: str
) -> None:
    live.provider.register(questions_then_over_budget(run_id))
    run_input = support_run(
        run_id,
        ["read_ticket", "get_weather", "get_train_status"],
        limits={"max_tool_calls": 2},
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    for n, question in enumerate(QUESTIONS, start=1):
        await wait_for_status(handle, lambda v, q=question: v.question == q, question)
        await handle.signal("message", UserMessage(text=f"Answer {n}.", sender="dana"))
    result = await result_of(handle)

    assert result.status == "limit_reached", result.stop_reason
    assert result.stop_reason.startswith("max_tool_calls"), result.stop_reason
    requests = [r for r in live.provider.requests if r["script"] == run_id]
    assert len(requests) == 6 == result.usage.model_calls
    assert not any("No progress" in str(m.get("content")) for m in requests[-1]["body"]["messages"])
    # The over-budget calls are in the ledger, not run, and left pending at the stop.
    ledger = {c.call_id: (c.decision, c.status) for c in result.calls}
    assert ledger["c_weather"] == ledger["c_train"] == ("over_budget", "proposed")
    assert [p.call_id for p in result.pending] == ["c_weather", "c_train"]
    assert result.usage.tool_calls == 1
    counts = live.service.stats()["counts"]
    assert counts["weather"] == counts["trains"] == 0


def turn(actions: list[str], state: str = "s1", result: str = "") -> TurnFingerprint:
    return TurnFingerprint(calls=[f"{a}|{result}" for a in actions], actions=actions, state=state)


def test_a_plan_flipping_between_two_actions_is_a_stall_even_when_results_differ() -> None:
    a, b = ["search|d1"], ["read|d2"]
    history = [turn(a, "x1", "r1"), turn(b, "x2", "r2"), turn(a, "x3", "r3"), turn(b, "x4", "r4")]
    assert stall(history, {}) == "the plan flips between the same two actions"
    assert stall([*history[:3], turn(["other|d3"], "x4")], {}) is None


def test_paging_and_an_empty_state_are_not_counted_as_standing_still() -> None:
    paging = [turn(["read_artifact|p1"]), turn(["read_artifact|p2"]), turn(["read_artifact|p3"])]
    assert stall([turn(["read|t"]), *paging], {}) is None
    empty = [turn([f"w|{n}"], state="") for n in range(5)]
    assert stall(empty, {}) is None


def test_questions_to_the_person_are_not_counted_as_standing_still() -> None:
    asking = [turn([f"ask_user|q{n}"], result=f"answer {n}") for n in range(4)]
    history = [turn(["read|t"]), *asking]
    assert stall(history, {}) is None
    # Asking beside another tool is a tool turn like any.
    mixed = [turn(["ask_user|q", f"read|{n}"]) for n in range(3)]
    found = stall([turn(["read|t"]), *mixed], {})
    assert found == "the task state did not change in 3 tool turns"


def test_task_state_merges_by_key_a_null_removes_and_bounds_hold() -> None:
    merged = task_state.merged({"ticket": "T-1", "draft": True}, {"draft": None, "policy": "P"})
    assert merged == {"ticket": "T-1", "policy": "P"}
    assert task_state.update_problem(["not", "an", "object"]) is not None
    assert task_state.update_problem({"k" * 65: 1}) is not None
    assert task_state.update_problem({"big": "x" * 3_000}) is not None
    assert task_state.update_problem({"ok": {"nested": [1, 2]}}) is None
    many = {f"k{n}": n for n in range(task_state.MAX_STATE_KEYS)}
    assert isinstance(task_state.merged(many, {"one_more": 1}), str)
    assert task_state.state_hash({}) == "" and task_state.state_hash({"a": 1}) != ""
