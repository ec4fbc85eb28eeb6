"""Long texts travel by reference (issue #18 item 5): a long
task, instructions or message rides in history once, where it came in, and is stored before
the model call that first sends it; model call inputs, the state continue-as-new carries and
the result's `unsent` name it instead. The model still sees every text whole, once."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from agentloop.activity_io import STORE_TEXTS
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    Principal,
    RefusedSignal,
)
from agentloop.envelope import ENVELOPE_NOTE
from agentloop.events import Instruction, UserInput
from agentloop.policies.bounds import MAX_INLINE_TEXT_CHARS, MAX_LEDGER_ARGUMENT_BYTES
from agentloop.scripted_provider import (
    Script,
    ScriptedError,
    ScriptTurn,
)
from agentloop.store import load_transcript, open_store
from agentloop.testing.turns import call as scripted_call
from agentloop.workflows.loop.humans import MAX_WAITING_MESSAGES
from tests.live import Live, scripted
from tests.loop.test_hardening import assert_never_wedged
from tests.loop.test_large_output import payloads
from tests.support import result_of, start_run, wait_for_phase, wait_for_status

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

TASK = "Plan the offsite. " + "Details of the brief, line by line. " * 4_000 + "QZ-TASK-END"
"""About 140,000 characters, ending in a canary."""
INSTRUCTIONS = "You are careful. " + "A rule to follow. " * 3_000 + "QZ-RULES-END"
MESSAGE = "Also consider this. " * 1_000 + "QZ-MESSAGE-END"
CANARIES = ("QZ-TASK-END", "QZ-RULES-END", "QZ-MESSAGE-END")
PRINCIPAL = Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"])
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}


def booking(name: str, then: ScriptTurn) -> Script:
    """A script that books a seat (a write waiting for approval), then plays `then`."""
    return scripted(name, [scripted_call("reserve_seat", "c_res", **RESERVE)], then)


def run_input(model: str, tools: list[str], **fields: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": TASK,
            "instructions": INSTRUCTIONS,
            "provider": "openai-chat",
            "model": model,
            "tools": tools,
            "principal": PRINCIPAL,
            **fields,
        }
    )


async def histories(client: Client, handle: WorkflowHandle[Any, Any]) -> list[Any]:
    """The history of every run of the chain `handle` started, in order."""
    view = await wait_for_status(handle, lambda v: v.phase == "finished", "the end")
    return [
        await client.get_workflow_handle(handle.id, run_id=run).fetch_history()
        for run in view.run_chain
    ]


def canaries_in(event: Any) -> list[str]:
    data = b"".join(p.data for p in payloads(event))
    return [canary for canary in CANARIES if canary.encode() in data]


async def approve(handle: WorkflowHandle[Any, Any], call_id: str) -> None:
    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    decision = ApprovalDecision(
        call_id=call_id, args_digest=pending.args_digest, approved=True, approver="workshop-lead"
    )
    await handle.signal("approve", decision)


async def test_long_texts_ride_in_history_only_where_they_came_in_and_reach_the_model_whole(
    live: Live, run_id: str
) -> None:
    live.provider.register(booking(run_id, ScriptTurn(text="Booked, and noted.")))
    handle = await start_run(
        live.client,
        live.worker,
        run_id,
        run_input(run_id, ["reserve_seat"], continue_as_new_after_events=20),
    )
    await wait_for_phase(handle, "awaiting_approval")
    await handle.signal("message", {"text": MESSAGE, "sender": "p-alice"})
    await approve(handle, "c_res")
    result: AgentRunResult = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert [c.status for c in result.calls] == ["succeeded"]

    # The model saw each text whole, and once: the task and instructions in both calls (the
    # transcript), the message in the second only.
    first, second = (r["body"]["messages"] for r in live.provider.requests)
    for messages, texts in ((first, (INSTRUCTIONS, TASK)), (second, (INSTRUCTIONS, TASK, MESSAGE))):
        said = [m["content"] for m in messages if m["role"] in ("system", "developer", "user")]
        # The envelope note follows the instructions (the run offers tools).
        assert said == [texts[0], ENVELOPE_NOTE, *texts[1:]], [s[-20:] for s in said]

    # In history, each text is where it came in (the start input, the signal) and in the
    # input of the one `store_texts` activity that put it in the store (an ordinary activity:
    # its input is recorded, where a local activity's was not; issue 42), and nowhere else: no
    # model call input, no continue-as-new, no result carries it.
    chain = await histories(live.client, handle)
    assert len(chain) >= 2, "the run did not continue as new"
    where: dict[str, list[str]] = {}
    for history in chain:
        for event in history.events:
            for canary in canaries_in(event):
                scheduled = event.activity_task_scheduled_event_attributes.activity_type.name
                where.setdefault(canary, []).append(scheduled or EventType.Name(event.event_type))
    assert where == {
        "QZ-TASK-END": ["EVENT_TYPE_WORKFLOW_EXECUTION_STARTED", STORE_TEXTS],
        "QZ-RULES-END": ["EVENT_TYPE_WORKFLOW_EXECUTION_STARTED", STORE_TEXTS],
        "QZ-MESSAGE-END": ["EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED", STORE_TEXTS],
    }, where
    for history in chain[1:]:
        carried = history.events[0].workflow_execution_started_event_attributes.input
        assert sum(p.ByteSize() for p in carried.payloads) < 20_000

    # The transcript holds them whole, as the store keeps it.
    store = open_store(live.worker.store_url)
    try:
        events = await load_transcript(store, result.transcript_head)
    finally:
        await store.close()
    texts = [e.text for e in events if isinstance(e, Instruction | UserInput)]
    assert texts == [INSTRUCTIONS, TASK, MESSAGE]
    for history in chain:
        await assert_never_wedged(live.client.get_workflow_handle(handle.id, run_id=history.run_id))


async def test_a_stopped_runs_unsent_texts_go_by_reference_and_a_continuing_run_sends_them(
    live: Live, run_id: str
) -> None:
    # The call that would have sent the message fails for good.
    failing = ScriptTurn(text="x", errors=[ScriptedError(status=400, message="bad request")])
    live.provider.register(booking(run_id, failing))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, ["reserve_seat"]))
    await wait_for_phase(handle, "awaiting_approval")
    await handle.signal("message", {"text": MESSAGE, "sender": "p-alice"})
    await wait_for_status(handle, lambda v: v.phase == "awaiting_approval", "the message")
    await approve(handle, "c_res")
    stopped = await result_of(handle)
    assert stopped.status == "failed", stopped.stop_reason
    # The message was stored for that call: the result names it instead of carrying it.
    [waiting] = [e for e in stopped.unsent if isinstance(e, UserInput)]
    assert waiting.text == "" and waiting.text_ref.startswith("sha256:")
    assert not canaries_in(await _result_event(handle))

    following = f"{run_id}-next"
    continued = await start_run(
        live.client,
        live.worker,
        following,
        AgentRunInput(
            task="Go on.",
            provider="openai-chat",
            model=run_id,  # the script's second turn answers, its error spent
            principal=PRINCIPAL,
            continue_from=run_id,
        ),
    )
    result = await result_of(continued)
    assert result.status == "completed", result.stop_reason
    request = live.provider.requests[-1]["body"]["messages"]
    users = [m["content"] for m in request if m["role"] == "user"]
    assert users[0] == TASK and users.count(MESSAGE) == 1 and users[-1] == "Go on."
    history = await continued.fetch_history()
    scheduled = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name.startswith("call_model")
    ]
    assert scheduled and not any(canaries_in(e) for e in scheduled)


async def _result_event(handle: WorkflowHandle[Any, Any]) -> Any:
    history = await handle.fetch_history()
    return history.events[-1]


async def test_at_most_so_many_messages_wait_for_the_model(live: Live, run_id: str) -> None:
    live.provider.register(booking(run_id, ScriptTurn(text="Read them all.")))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, ["reserve_seat"]))
    await wait_for_phase(handle, "awaiting_approval")
    for n in range(MAX_WAITING_MESSAGES + 1):
        await handle.signal("message", {"text": f"note {n}", "sender": "p-alice"})
    view = await wait_for_status(handle, lambda v: len(v.refused_decisions) == 1, "a refusal")
    [refused] = view.refused_decisions
    assert isinstance(refused, RefusedSignal)
    assert refused.signal == "message" and refused.payload == f"note {MAX_WAITING_MESSAGES}"
    assert f"{MAX_WAITING_MESSAGES} messages already wait" in refused.refused_because
    await approve(handle, "c_res")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    notes = [
        m["content"]
        for m in live.provider.requests[-1]["body"]["messages"]
        if m["role"] == "user" and m["content"].startswith("note ")
    ]
    assert notes == [f"note {n}" for n in range(MAX_WAITING_MESSAGES)]
    await assert_never_wedged(handle)


async def test_a_run_whose_calls_would_hold_too_many_argument_bytes_stops_before_they_run(
    live: Live, run_id: str
) -> None:
    city = "Q" * 200_000

    def output(turn: str) -> ScriptTurn:
        return ScriptTurn(
            tool_calls=[
                scripted_call("get_weather", f"c_{turn}{n}", city=city, date="2026-12-01")
                for n in range(2)
            ],
            fragment_chars=4096,  # not 5: 80,000 events a turn test nothing more
        )

    live.provider.register(scripted(run_id, output("a"), output("b"), "Never reached."))
    handle = await start_run(
        live.client,
        live.worker,
        run_id,
        run_input(run_id, ["get_weather"], task="Weather, please."),
    )
    result = await result_of(handle)
    assert result.status == "limit_reached", result.stop_reason
    assert f"over the {MAX_LEDGER_ARGUMENT_BYTES} a run may hold" in result.stop_reason
    # The first output's calls are in the ledger (refused: the city is not one); the second's
    # are left undone, in the ledger without their arguments (the cap they did not fit).
    ledger = {c.call_id: (c.decision, c.status, len(c.arguments)) for c in result.calls}
    assert ledger == {
        "c_a0": ("invalid_arguments", "rejected", 2),
        "c_a1": ("invalid_arguments", "rejected", 2),
        "c_b0": ("over_budget", "proposed", 0),
        "c_b1": ("over_budget", "proposed", 0),
    }
    assert [p.call_id for p in result.pending] == ["c_b0", "c_b1"]
    assert len(live.provider.requests) == 2
    await assert_never_wedged(handle)


def test_the_inline_text_bound_is_below_every_text_the_tests_send_by_reference() -> None:
    assert min(len(TASK), len(INSTRUCTIONS), len(MESSAGE)) > MAX_INLINE_TEXT_CHARS
