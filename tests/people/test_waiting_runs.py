"""Waiting runs are cheap (issue #21, first part): a run paused on a person holds only its
place in the worker's sticky cache (`AGENTLOOP_MAX_CACHED_WORKFLOWS`); evicted from it by
other runs, it resumes after the approval by replaying its history, and nothing it did runs
again (counted at the example service). And the worker's sizing settings (cache, sticky
timeout, activity and workflow task slots) are what its Temporal worker gets."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

import agentloop
from agentloop import ToolContext
from agentloop.contract import AgentRunInput, Principal
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from agentloop.tools.plugins import Plugin, Toolset, build_toolbox
from agentloop.worker import running_worker, worker_parts
from agentloop.workflows.agent_run import AgentRun
from tests.live import Servers, agent_input, scripted
from tests.support import approve_as_shown, result_of, start_run, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
PRINCIPAL = Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"])


def booking(name: str) -> Script:
    return scripted(
        name,
        [
            scripted_call("check_workshop", "c_check", workshop_id="ws-101"),
            scripted_call("reserve_seat", "c_res", **RESERVE),
        ],
        "Booked.",
    )


def run_input(model: str, tools: list[str]) -> AgentRunInput:
    return agent_input(
        model, "openai-chat", "Book p-carol into ws-101.", tools, principal=PRINCIPAL
    )


async def test_a_run_evicted_while_awaiting_approval_resumes_without_running_anything_again(
    servers: Servers, worker_settings: Settings, run_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    constructed: list[str] = []
    built = AgentRun.__init__

    def counting_init(self: AgentRun) -> None:
        constructed.append(workflow.info().workflow_id)
        built(self)

    monkeypatch.setattr(AgentRun, "__init__", counting_init)
    # A worker of its own that keeps one run in its cache.
    settings = worker_settings.model_copy(
        update={"max_cached_workflows": 1, "task_queue": f"one-cached-{run_id[-8:]}"}
    )
    servers.provider.register(booking(run_id))
    async with running_worker(servers.client, settings):
        waiting = await start_run(
            servers.client, settings, run_id, run_input(run_id, ["check_workshop", "reserve_seat"])
        )
        view = await wait_for_phase(waiting, "awaiting_approval")
        before = dict(servers.service.stats()["counts"])
        # Other runs take the one cache slot: the waiting run is evicted.
        for n in range(3):
            other = f"{run_id}-other-{n}"
            servers.provider.register(scripted(other, "Hello."))
            done = await start_run(servers.client, settings, other, run_input(other, []))
            assert (await result_of(done)).status == "completed"
        [pending] = view.pending_approvals
        assert pending.call_id == "c_res"
        await approve_as_shown(waiting, pending, "workshop-lead")
        result = await result_of(waiting)
    assert result.status == "completed", result.stop_reason
    after = servers.service.stats()["counts"]
    # The read ran once, before the wait; after it, the write's precondition is checked again,
    # then the write.
    changed = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert changed == {"workshops.eligibility": 1, "workshops.reserve": 1}, changed
    assert servers.service.records()["reservations"] == 1
    # It was built anew to resume: replayed from its history, not kept in memory.
    assert constructed.count(run_id) >= 2, constructed


async def test_the_worker_takes_its_cache_size_and_sticky_timeout_from_its_settings(
    client: Client, worker_settings: Settings
) -> None:
    own = worker_settings.model_copy(
        update={"max_cached_workflows": 7, "sticky_timeout_seconds": 2.5}
    )
    async with worker_parts(client, own) as parts:
        given = parts.worker_kwargs()
    assert given["max_cached_workflows"] == 7
    assert given["sticky_queue_schedule_to_start_timeout"] == timedelta(seconds=2.5)
    # Slots unset: Temporal's defaults, and room for a tuner of the user's own.
    assert "max_concurrent_activities" not in given
    assert "max_concurrent_workflow_tasks" not in given


class SlotCount:
    """Calls of `count_in_flight` running at this moment, and the most there ever were."""

    now = 0
    most = 0


@agentloop.tool(effect="read")
async def count_in_flight(ctx: ToolContext[None], n: int) -> str:
    """Hold a slot for a moment, counting how many calls hold one at once."""
    SlotCount.now += 1
    SlotCount.most = max(SlotCount.most, SlotCount.now)
    try:
        await asyncio.sleep(0.3)  # the work a slot is held for, not a synchronisation
    finally:
        SlotCount.now -= 1
    return f"call {n} done under {ctx.idempotency_key}"


async def test_a_worker_with_two_activity_slots_runs_no_more_than_two_calls_at_once(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """Four reads proposed at once, on a worker with two activity slots: all four run, never
    more than two at a time (counted inside the tool), each result under its own call id."""
    own = worker_settings.model_copy(
        update={
            "max_concurrent_activities": 2,
            "max_concurrent_workflow_tasks": 3,
            "task_queue": f"two-slots-{run_id[-8:]}",
        }
    )
    calls = [scripted_call("count_in_flight", f"c_{n}", n=n) for n in range(4)]
    servers.provider.register(scripted(run_id, ScriptTurn(tool_calls=calls), "All four."))
    SlotCount.now = SlotCount.most = 0
    toolbox = build_toolbox([Plugin("slots", Toolset(tools=[count_in_flight]))])
    async with worker_parts(servers.client, own, toolbox) as parts:
        given = parts.worker_kwargs()
        assert (given["max_concurrent_activities"], given["max_concurrent_workflow_tasks"]) == (
            2,
            3,
        )
        async with Worker(servers.client, task_queue=own.task_queue, **given):
            handle = await start_run(
                servers.client, own, run_id, run_input(run_id, ["count_in_flight"])
            )
            result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert SlotCount.most == 2
    _, second = [r for r in servers.provider.requests if r["script"] == run_id]
    answered = {
        m["tool_call_id"]: m["content"] for m in second["body"]["messages"] if m["role"] == "tool"
    }
    assert sorted(answered) == [f"c_{n}" for n in range(4)]
    for n in range(4):
        assert f"call {n} done" in answered[f"c_{n}"], answered
