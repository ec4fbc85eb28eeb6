"""Waiting runs are cheap (issue #21, first part): a run paused on a person holds only its
place in the worker's sticky cache (`AGENTLOOP_MAX_CACHED_WORKFLOWS`); evicted from it by
other runs, it resumes after the approval by replaying its history, and nothing it did runs
again (counted at the example service)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from temporalio import workflow
from temporalio.client import Client

from agentloop.contract import AgentRunInput, Principal
from agentloop.demo.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.worker import running_worker, worker_parts
from agentloop.workflows.agent_run import AgentRun
from tests.support import approve_as_shown, start_run, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
PRINCIPAL = Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"])


def booking(name: str) -> Script:
    return Script(
        name=name,
        turns=[
            ScriptTurn(
                tool_calls=[
                    ScriptedToolCall(
                        id="c_check", name="check_workshop", arguments={"workshop_id": "ws-101"}
                    ),
                    ScriptedToolCall(id="c_res", name="reserve_seat", arguments=RESERVE),
                ]
            ),
            ScriptTurn(text="Booked."),
        ],
    )


def run_input(model: str, tools: list[str]) -> AgentRunInput:
    return AgentRunInput(
        task="Book p-carol into ws-101.",
        provider="openai-chat",
        model=model,
        tools=tools,
        principal=PRINCIPAL,
    )


async def test_a_run_evicted_while_awaiting_approval_resumes_without_running_anything_again(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
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
    scripted_provider.register(booking(run_id))
    async with running_worker(client, settings):
        waiting = await start_run(
            client, settings, run_id, run_input(run_id, ["check_workshop", "reserve_seat"])
        )
        view = await wait_for_phase(waiting, "awaiting_approval")
        before = dict(example_service.stats()["counts"])
        # Other runs take the one cache slot: the waiting run is evicted.
        for n in range(3):
            other = f"{run_id}-other-{n}"
            scripted_provider.register(Script(name=other, turns=[ScriptTurn(text="Hello.")]))
            done = await start_run(client, settings, other, run_input(other, []))
            assert (await done.result()).status == "completed"
        [pending] = view.pending_approvals
        assert pending["call_id"] == "c_res"
        await approve_as_shown(waiting, pending, "workshop-lead")
        result = await asyncio.wait_for(waiting.result(), 30)
    assert result.status == "completed", result.stop_reason
    after = example_service.stats()["counts"]
    # The read and the precondition check ran once, before the wait; after it, only the write.
    changed = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    assert changed == {"workshops.reserve": 1}, changed
    assert example_service.records()["reservations"] == 1
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
