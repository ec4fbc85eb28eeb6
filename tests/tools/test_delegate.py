"""Sub-agents end to end: the `delegate` tool starts a child `AgentRun` (a real child workflow
on the dev server) with a slice of the parent's budget; the child's usage is charged to the
parent, the child cannot exceed its slice, and cancelling the parent cancels the child."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    CancelRequest,
    Principal,
    RunStatusView,
)
from agentloop.envelope import unwrapped
from agentloop.run_results import read_result
from agentloop.scripted_provider import ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.testing.patience import CEILING_SECONDS
from tests.live import Live, agent_input, scripted
from tests.support import approve_as_shown, result_of, signal_approval, start_run, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

TRAIN = {"train_number": "G1234", "date": "2026-12-01"}
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}


def call(call_id: str, name: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


def parent_input(run_id: str, max_model_calls: int = 5, **overrides: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Find out about train G1234 with a helper.",
            "provider": "openai-chat",
            "model": run_id,
            "delegate_model": f"{run_id}-child",
            "tools": ["delegate", "get_train_status", "reserve_seat"],
            "principal": Principal(subject="p-alice", scopes=["workshops:write"]),
            "limits": {"max_model_calls": max_model_calls, "max_tool_calls": 5},
            **overrides,
        }
    )


def child_handle(client: Client, run_id: str, call_id: str) -> WorkflowHandle[Any, AgentRunResult]:
    return client.get_workflow_handle(f"{run_id}/delegate/{call_id}", result_type=AgentRunResult)


async def child_waiting_for_approval(
    client: Client, run_id: str, call_id: str
) -> tuple[WorkflowHandle[Any, AgentRunResult], RunStatusView]:
    """The child run once it waits for an approval (it exists only once the parent started
    it, so `not found` is retried, bounded)."""
    handle = child_handle(client, run_id, call_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CEILING_SECONDS
    while True:
        try:
            view = await handle.query("status", result_type=RunStatusView)
        except RPCError:
            view = None
        if view is not None and view.phase == "awaiting_approval":
            return handle, view
        assert loop.time() < deadline, (
            f"gave up after {CEILING_SECONDS:g} s waiting for child {handle.id} to wait for "
            f"approval; last phase: {view.phase if view else 'not found'}"
        )
        await asyncio.sleep(0.05)


async def child_input(handle: WorkflowHandle[Any, AgentRunResult]) -> dict[str, Any]:
    """What the child was started with, read from its own history."""
    history = await handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    return dict(json.loads(started.input.payloads[0].data))


def delegation_result(scripted_provider: ScriptedProvider, call_id: str) -> dict[str, Any]:
    """The delegate call's result as the parent's model received it, under its call id."""
    messages = scripted_provider.requests[-1]["body"]["messages"]
    found = [m for m in messages if m["role"] == "tool" and m["tool_call_id"] == call_id]
    assert len(found) == 1, messages
    return dict(json.loads(unwrapped(found[0]["content"])))


async def test_a_child_run_that_ends_failed_still_reports_its_result_to_the_parent(
    live: Live, run_id: str
) -> None:
    # No script for the child: its model call gets a 404, and the child ends `failed`, which
    # fails its workflow with the result in the failure; the parent reads it from there.
    live.provider.register(
        scripted(
            run_id,
            [call("call_d", "delegate", task="Is G1234 late?")],
            "The helper failed.",
        )
    )
    result = await result_of(
        await start_run(live.client, live.worker, run_id, parent_input(run_id))
    )

    child = await read_result(child_handle(live.client, run_id, "call_d"))
    assert child.status == "failed" and child.stop_reason.startswith("model_error")
    assert result.status == "completed", result.stop_reason
    report = delegation_result(live.provider, "call_d")
    assert report["status"] == "failed" and report["stop_reason"] == child.stop_reason
    assert result.usage.model_calls == 2 + child.usage.model_calls


async def test_a_child_run_does_the_sub_task_and_its_usage_is_charged_to_the_parent(
    live: Live, run_id: str
) -> None:
    delegated = {
        "task": "Is G1234 on time on 2026-12-01?",
        "tools": ["get_train_status"],
        "max_model_calls": 2,
    }
    live.provider.register(
        scripted(
            run_id,
            [call("call_d", "delegate", **delegated)],
            "The helper says: {{call_d.output}}",
        )
    )
    live.provider.register(
        scripted(
            f"{run_id}-child",
            [call("call_t", "get_train_status", **TRAIN)],
            "G1234 is {{call_t.status}}.",
        )
    )
    result = await result_of(
        await start_run(live.client, live.worker, run_id, parent_input(run_id))
    )

    assert result.status == "completed", result.stop_reason
    child = await child_handle(live.client, run_id, "call_d").result()
    assert child.status == "completed"
    assert result.output == f"The helper says: {child.output}"
    # The child's slice: its request (2 model calls) within what the parent had left
    # (5 - 1 used - 1 kept to read the answer); the tool calls left after the delegate call.
    limits = (await child_input(child_handle(live.client, run_id, "call_d")))["limits"]
    assert (limits["max_model_calls"], limits["max_tool_calls"]) == (2, 4)
    # The parent's ledger holds both runs: 2 + 2 model calls, 1 delegate + 1 child tool call.
    assert child.usage.model_calls == 2 and child.usage.tool_calls == 1
    assert result.usage.model_calls == 4 and result.usage.tool_calls == 2
    own = [r for r in live.provider.requests if r["script"] == run_id]
    assert len(own) == 2 and len(live.provider.requests) == 4
    assert result.usage.input_tokens > child.usage.input_tokens > 0
    assert live.service.stats()["counts"]["trains"] == 1
    # The child's answer came back to the parent's model under the delegate call's id.
    report = delegation_result(live.provider, "call_d")
    assert report["child_run"] == f"{run_id}/delegate/call_d"
    assert report["status"] == "completed" and report["output"] == child.output
    assert [c.child_run for c in result.calls] == [f"{run_id}/delegate/call_d"]


async def test_a_child_cannot_exceed_its_slice(live: Live, run_id: str) -> None:
    # The parent may make 3 model calls: 1 to delegate, 1 to read the answer, so the child
    # gets 1 whatever it asks for; it wants a second one to read its tool's result.
    live.provider.register(
        scripted(
            run_id,
            [
                call(
                    "call_d",
                    "delegate",
                    task="Check G1234.",
                    tools=["get_train_status"],
                    max_model_calls=5,
                )
            ],
            "The helper ran out of budget.",
        )
    )
    live.provider.register(
        scripted(
            f"{run_id}-child",
            [call("call_t", "get_train_status", **TRAIN)],
            "never reached",
        )
    )
    result = await (
        await start_run(live.client, live.worker, run_id, parent_input(run_id, max_model_calls=3))
    ).result()

    child = await child_handle(live.client, run_id, "call_d").result()
    assert child.status == "limit_reached" and "max_model_calls" in child.stop_reason
    assert child.usage.model_calls == 1
    assert result.status == "completed", result.stop_reason
    assert result.usage.model_calls == 3  # exactly the parent's limit, never past it
    assert len(live.provider.requests) == 3
    report = delegation_result(live.provider, "call_d")
    assert report["status"] == "limit_reached"
    assert result.calls[0].status == "failed"


async def test_too_little_budget_left_for_a_child_starts_nothing(live: Live, run_id: str) -> None:
    live.provider.register(
        scripted(
            run_id,
            [
                call("call_t", "get_train_status", **TRAIN),
                call("call_d", "delegate", task="Check G1234.", tools=[]),
            ],
            "never reached",
        )
    )
    result = await (
        await start_run(live.client, live.worker, run_id, parent_input(run_id, max_model_calls=2))
    ).result()

    assert result.status == "limit_reached"
    assert "delegated run" in result.stop_reason
    assert result.usage.tool_calls == 0
    assert sum(live.service.stats()["counts"].values()) == 0
    with pytest.raises(RPCError):
        await child_handle(live.client, run_id, "call_d").describe()


async def test_tools_outside_the_parents_own_cannot_be_delegated(live: Live, run_id: str) -> None:
    live.provider.register(
        scripted(
            run_id,
            [
                call("call_a", "delegate", task="Reply.", tools=["send_reply"]),
                call("call_b", "delegate", task="Recurse.", tools=["delegate"]),
            ],
            "I could not delegate that.",
        )
    )
    result = await result_of(
        await start_run(live.client, live.worker, run_id, parent_input(run_id))
    )

    assert result.status == "completed"
    for call_id, tool in (("call_a", "send_reply"), ("call_b", "delegate")):
        error = delegation_result(live.provider, call_id)["error"]
        assert error["class"] == "invalid_arguments" and tool in error["message"]
    assert result.usage.model_calls == 2 and result.usage.tool_calls == 0


def register_booking(
    scripted_provider: ScriptedProvider, run_id: str, *child_after_booking: ScriptTurn
) -> None:
    """The parent delegates booking ws-101; the child books it (its write needs approval),
    then plays `child_after_booking`."""
    delegation = call("call_d", "delegate", task="Book ws-101.", tools=["reserve_seat"])
    scripted_provider.register(scripted(run_id, [delegation], "Booked by the helper."))
    booking = ScriptTurn(tool_calls=[call("call_r", "reserve_seat", **RESERVE)])
    scripted_provider.register(scripted(f"{run_id}-child", booking, *child_after_booking))


async def test_a_childs_write_is_a_side_effect_of_the_parent(live: Live, run_id: str) -> None:
    register_booking(live.provider, run_id, ScriptTurn(text="Booked: {{call_r.reservation_id}}"))
    parent = await start_run(live.client, live.worker, run_id, parent_input(run_id))
    # The child asks for approval itself; the parent shows which child holds the call.
    child, waiting = await child_waiting_for_approval(live.client, run_id, "call_d")
    pending = waiting.pending_approvals
    view = await parent.query("status", result_type=RunStatusView)
    assert view.calls[0].child_run == child.id and view.calls[0].status == "running"
    # The child's slice (3 model calls, 4 tool calls) is spoken for while it works.
    assert view.limits_left is not None
    assert (view.limits_left.model_calls, view.limits_left.tool_calls) == (5 - 1 - 3, 5 - 1 - 4)
    metadata = await parent.query("__temporal_workflow_metadata")
    assert f"waiting for sub-agents: {child.id}" in metadata.current_details
    await signal_approval(child, "call_r", pending[0].args_digest, "workshop-lead")
    result = await result_of(parent)

    assert result.status == "completed", result.stop_reason
    assert int(live.service.records()["reservations"]) == 1
    [effect] = result.side_effects
    assert effect.call_id == "call_r" and effect.status == "succeeded"
    assert effect.via == f"{child.id} (delegate call_d)"
    key = effect.idempotency_key  # the child's own chain: WORKFLOW_ID/FIRST_RUN_ID/CALL_ID
    assert key.startswith(f"{child.id}/") and key.endswith("/call_r") and key.count("/") >= 3
    assert "reserve_seat call_r" in result.report


async def test_cancelling_the_parent_cancels_the_child(live: Live, run_id: str) -> None:
    register_booking(live.provider, run_id)
    parent = await start_run(live.client, live.worker, run_id, parent_input(run_id))
    child, _ = await child_waiting_for_approval(live.client, run_id, "call_d")
    await parent.signal("cancel", CancelRequest(reason="the user gave up"))
    result = await result_of(parent)

    assert result.status == "cancelled"
    child_result = await result_of(child)
    assert child_result.status == "cancelled"
    assert "the parent run was cancelled: the user gave up" in child_result.stop_reason
    assert int(live.service.records()["reservations"]) == 0
    assert result.side_effects == []
    # The child's one model call is on the parent's ledger too.
    assert result.usage.model_calls == 2


async def test_temporals_cancel_of_the_parent_lets_the_childs_write_finish_and_records_it(
    live: Live, run_id: str
) -> None:
    """`temporal workflow cancel` (the UI's cancel) on the parent while its child's approved
    write runs: before, the parent ended at once, Temporal terminated the child mid-write, and
    the parent's result left out the reservation that exists at the service."""
    register_booking(live.provider, run_id)
    parent = await start_run(live.client, live.worker, run_id, parent_input(run_id))
    child, waiting = await child_waiting_for_approval(live.client, run_id, "call_d")
    live.service.set_delay("workshops.reserve", 2_000)
    await approve_as_shown(child, waiting.pending_approvals[0], "workshop-lead")

    # The write has reached the service (held there 2 s) when the cancel comes.
    def writes_arrived() -> bool:
        requests = live.service.stats()["requests"]
        return any(r["endpoint"] == "workshops.reserve" for r in requests)

    await wait_until(writes_arrived, "the child's write at the service")
    await parent.cancel()
    result = await result_of(parent)

    assert result.status == "cancelled", result.stop_reason
    child_result = await result_of(child)  # cancelled as told, not terminated
    assert child_result.status == "cancelled", child_result.stop_reason
    assert "the parent run was cancelled" in child_result.stop_reason
    assert int(live.service.records()["reservations"]) == 1
    [effect] = result.side_effects
    assert effect.call_id == "call_r" and effect.via == f"{child.id} (delegate call_d)"


async def test_a_child_whose_id_is_taken_fails_its_delegate_call_not_the_parent(
    live: Live, run_id: str
) -> None:
    """A child's workflow id is predictable (parent id, `/delegate/`, call id): anyone who may
    start workflows can take it first. Before, the parent then failed without a result."""
    register_booking(live.provider, run_id)
    squatter = child_handle(live.client, run_id, "call_d")
    live.provider.register(scripted(f"{run_id}-squat", [call("q", "ask_user", question="?")]))
    squat = agent_input(f"{run_id}-squat", "openai-chat", "Wait.", [])
    await start_run(live.client, live.worker, squatter.id, squat)
    result = await result_of(
        await start_run(live.client, live.worker, run_id, parent_input(run_id))
    )

    assert result.status == "completed", result.stop_reason
    told = delegation_result(live.provider, "call_d")
    assert told["status"] == "failed", told
    assert told["stop_reason"] == (
        f"the child run did not start: a workflow with id {squatter.id!r} is already running"
    )
    assert told["usage"]["model_calls"] == 0 and told["side_effects"] == []
    assert result.usage.model_calls == 2 and result.side_effects == []
    assert int(live.service.records()["reservations"]) == 0
    await squatter.cancel()


async def test_a_token_cap_holds_across_the_parent_and_its_child(live: Live, run_id: str) -> None:
    """The child's slice of `max_total_tokens` is spoken for while it runs, and each run
    reserves its own calls: together they end at or under the parent's cap, and each call was
    sent an output limit within what its run had left."""
    delegated = {"task": "Is G1234 on time?", "tools": ["get_train_status"], "max_model_calls": 3}
    long = "A long account of the train's day. " * 400  # would pass the cap uncut
    live.provider.register(
        scripted(
            run_id,
            [call("call_d", "delegate", **delegated)],
            ScriptTurn(text=long),
        )
    )
    live.provider.register(
        scripted(
            f"{run_id}-child",
            [call("call_t", "get_train_status", **TRAIN)],
            ScriptTurn(text=long),
        )
    )
    cap = 9_000
    run_input = parent_input(
        run_id, limits={"max_model_calls": 6, "max_tool_calls": 5, "max_total_tokens": cap}
    )
    result = await result_of(await start_run(live.client, live.worker, run_id, run_input))
    child = await child_handle(live.client, run_id, "call_d").result()
    child_cap = (await child_input(child_handle(live.client, run_id, "call_d")))["limits"][
        "max_total_tokens"
    ]
    assert child_cap < cap
    used = result.usage.input_tokens + result.usage.output_tokens
    child_used = child.usage.input_tokens + child.usage.output_tokens
    assert child_used <= child_cap and used <= cap, (used, child_used, result.stop_reason)
    assert child_used > 0 and used > child_used  # the child's usage is charged to the parent
    sent = [r["body"]["max_completion_tokens"] for r in live.provider.requests]
    assert all(limit < cap for limit in sent), sent
