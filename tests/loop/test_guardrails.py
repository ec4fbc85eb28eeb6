"""Loop guardrails end to end: a stalling model is nudged once, then stopped."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentloop.contract import AgentRunInput, Principal, RefusedSignal, RunStatusView, UserMessage
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from agentloop.workflows.loop.humans import MAX_ANSWER_CHARS, MIN_ANSWER_ROOM, answer_room
from tests.live import Live, agent_input, scripted
from tests.support import result_of, start_run, wait_for_phase, wait_for_status

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


async def test_the_same_empty_search_is_nudged_once_then_stalled(live: Live, run_id: str) -> None:
    search = {"query": "teleportation refunds"}
    live.provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(
                    tool_calls=[
                        ScriptedToolCall(id=f"call_{i}", name="search_policy", arguments=search)
                    ]
                )
                for i in range(5)
            ],
        )
    )
    run_input = agent_input(
        run_id,
        "anthropic",
        "Find the policy on teleportation refunds.",
        ["search_policy"],
        principal=Principal(subject="agent", scopes=["tickets:read"]),
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))

    assert result.status == "stalled"
    assert "search_policy" in result.stop_reason
    assert result.usage.model_calls == 3 and result.usage.tool_calls == 3
    assert live.service.stats()["counts"]["support.policies"] == 3
    # The nudge reached the model once, after the first repeat, as a runner note.
    texts = [
        block.get("text", "")
        for message in live.provider.requests[-1]["body"]["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
    ]
    nudges = [t for t in texts if t.startswith("[agentloop] No progress")]
    assert len(nudges) == 1


async def test_ask_user_pauses_for_input_and_the_message_continues_the_run(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[
                    scripted_call("ask_user", "call_ask", question="Which date do you travel?")
                ],
                expect_tool_results={"call_ask": "2026-12-01"},
            ),
            [scripted_call("get_train_status", "call_t", train_number="G1234", date="2026-12-01")],
            "G1234 is {{call_t.status}} on 2026-12-01.",
        )
    )
    run_input = agent_input(run_id, "openai-chat", "Is my train G1234 late?", ["get_train_status"])
    handle = await start_run(live.client, live.worker, run_id, run_input)
    view = await wait_for_phase(handle, "awaiting_input")
    assert view.question == "Which date do you travel?"
    assert view.usage.tool_calls == 0  # asking is not a tool execution

    await handle.signal("message", UserMessage(text="On 2026-12-01.", sender="traveller"))
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert {c.call_id: c.status for c in result.calls} == {
        "call_ask": "succeeded",
        "call_t": "succeeded",
    }
    assert result.usage.model_calls == 3 and result.usage.tool_calls == 1


async def test_an_unanswered_question_stops_the_run_input_timeout(live: Live, run_id: str) -> None:
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("ask_user", "call_ask", question="Which train?")],
        )
    )
    run_input = agent_input(run_id, "anthropic", "Is my train late?", [], input_timeout_seconds=1)
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == "input_timeout"
    assert "call_ask" in result.stop_reason


async def test_a_final_answer_without_evidence_is_never_completed(live: Live, run_id: str) -> None:
    live.provider.register(Script(name=run_id, turns=[ScriptTurn(text="Booked!")] * 3))
    run_input = agent_input(
        run_id,
        "openai-responses",
        "Book p-carol into ws-101.",
        ["reserve_seat"],
        completion_check="writes_applied",
        principal=Principal(subject="agent", scopes=["workshops:write"]),
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    assert result.status == "failed"
    assert "completion_check writes_applied failed: no write was made" in result.stop_reason
    assert result.usage.model_calls == 3  # the candidate went back twice, on the same budget
    assert live.service.records()["reservations"] == 0


async def test_a_final_answer_confirmed_by_the_system_of_record_completes(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            "Booked!",  # too early: nothing was written yet
            [
                scripted_call(
                    "reserve_seat", "call_r", workshop_id="ws-101", participant_id="p-carol"
                )
            ],
            "Booked: {{call_r.reservation_id}}",
        )
    )
    run_input = agent_input(
        run_id,
        "anthropic",
        "Book p-carol into ws-101.",
        ["reserve_seat"],
        completion_check="writes_applied",
        principal=Principal(subject="agent", scopes=["workshops:write"]),
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    view = await wait_for_phase(handle, "awaiting_approval")
    await handle.signal(
        "approve",
        {
            "call_id": "call_r",
            "args_digest": view.pending_approvals[0].args_digest,
            "approved": True,
            "approver": "workshop-lead",
        },
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert "completion_check writes_applied passed" in result.stop_reason
    assert result.usage.model_calls == 3
    assert live.service.records()["reservations"] == 1
    # The early, unproven answer went back to the model with the verifier's reason.
    second = live.provider.requests[1]["body"]["messages"][-1]["content"]
    assert any("no write was made" in b.get("text", "") for b in second)


async def test_an_unknown_completion_check_fails_the_run_at_start_naming_it(
    live: Live, run_id: str
) -> None:
    live.provider.register(scripted(run_id, "done"))
    run_input = AgentRunInput(
        task="x",
        provider="openai-chat",
        model=run_id,
        completion_check="telepathy",
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(await start_run(live.client, live.worker, run_id, run_input))
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "completion_check: no verifier 'telepathy'" in cause.message
    assert "writes_applied" in cause.message  # the verifiers this worker has
    # Found before anything ran: not even the model was asked.
    assert [r for r in live.provider.requests if r["script"] == run_id] == []


async def test_an_answer_past_its_share_of_the_step_is_refused_and_the_question_still_waits(
    live: Live, run_id: str
) -> None:
    """Before, long answers to many questions of one output made the next model call's input
    pass Temporal's payload limit: every workflow task failed, and not even cancel moved it.
    Each answer now gets an even share of what the step's answers may hold."""
    questions = [f"Question {n}?" for n in range(3)]
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[
                    scripted_call("ask_user", f"call_q{n}", question=q)
                    for n, q in enumerate(questions)
                ]
            ),
            "Thanks.",
        )
    )
    run_input = agent_input(run_id, "openai-chat", "Ask me.", [])
    handle = await start_run(live.client, live.worker, run_id, run_input)
    share = MAX_ANSWER_CHARS // 3
    await wait_for_status(handle, lambda v: v.question == questions[0], questions[0])
    await handle.signal("message", UserMessage(text="x" * (share + 1), sender="dana"))
    view = await wait_for_status(handle, lambda v: bool(v.refused_decisions), "the refusal")
    [refused] = view.refused_decisions
    assert isinstance(refused, RefusedSignal)
    assert refused.signal == "message" and refused.payload == "x" * 200
    assert f"an answer may hold {share} characters now (3 questions" in refused.refused_because
    assert view.phase == "awaiting_input" and view.question == questions[0]
    answers = ["a" * share, "b" * share, "Short."]  # each within its share: all are taken
    for question, answer in zip(questions, answers, strict=True):
        await wait_for_status(handle, lambda v, q=question: v.question == q, question)
        await handle.signal("message", UserMessage(text=answer, sender="dana"))
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    [*_, last] = [r for r in live.provider.requests if r["script"] == run_id]
    told = {
        m["tool_call_id"]: m["content"] for m in last["body"]["messages"] if m["role"] == "tool"
    }
    assert set(told) == {"call_q0", "call_q1", "call_q2"} and "Short." in told["call_q2"]
    assert len((await handle.query("status", result_type=RunStatusView)).refused_decisions) == 1


def test_each_answer_gets_an_even_share_of_what_is_left_and_never_less_than_the_least() -> None:
    assert answer_room(0, 4) == MAX_ANSWER_CHARS // 4
    assert answer_room(MAX_ANSWER_CHARS // 2, 1) == MAX_ANSWER_CHARS // 2
    assert answer_room(MAX_ANSWER_CHARS, 3) == MIN_ANSWER_ROOM  # a tool asking again


async def test_an_mcp_tool_of_a_server_the_worker_lacks_fails_the_run_saying_so(
    live: Live, run_id: str
) -> None:
    live.provider.register(scripted(run_id, "done"))
    run_input = agent_input(run_id, "openai-chat", "x", ["notes_search"])
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(await start_run(live.client, live.worker, run_id, run_input))
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "unknown tool 'notes_search'" in cause.message, cause.message
    assert "this worker has no MCP server 'notes' configured (no MCP servers;" in cause.message
    assert "AGENTLOOP_MCP_SERVERS" in cause.message
    assert [r for r in live.provider.requests if r["script"] == run_id] == []
