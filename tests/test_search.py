"""Visibility: runs are indexed by phase, status, provider and tenant; `agentloop list` finds
exactly the runs waiting for a human."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentloop import search
from agentloop.contract import AgentRunInput, Principal
from agentloop.demo.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.runtime.config import Settings
from tests.support import start_run, wait_for_phase
from tests.test_cli import agentloop, process_env

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

WEATHER = {"city": "Shanghai", "date": "2026-12-01"}
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}


def test_list_queries() -> None:
    assert search.list_query() == "WorkflowType = 'AgentRun'"
    assert search.list_query(phase="awaiting_approval", tenant="acme") == (
        "WorkflowType = 'AgentRun' AND ExecutionStatus = 'Running' AND "
        "AgentPhase = 'awaiting_approval' AND AgentTenant = 'acme'"
    )
    assert "'" not in search.list_query(status="x' OR 1=1").split("AgentStatus = ")[1][1:-1]


async def test_list_awaiting_approval_finds_exactly_the_waiting_runs(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    run_id: str,
    tmp_path: Path,
) -> None:
    reserve = ScriptedToolCall(
        id="call_r",
        name="reserve_seat",
        arguments={"workshop_id": "ws-101", "participant_id": "p-carol"},
    )
    scripted_provider.register(Script(name=f"{run_id}-w", turns=[ScriptTurn(tool_calls=[reserve])]))
    scripted_provider.register(Script(name=f"{run_id}-d", turns=[ScriptTurn(text="done")]))
    principal = Principal(subject="agent", tenant=run_id, scopes=["workshops:write"])

    def run_input(model: str) -> AgentRunInput:
        return AgentRunInput(
            task="book",
            provider="anthropic",
            model=model,
            tools=["reserve_seat"],
            principal=principal,
        )

    waiting = await start_run(client, worker, f"{run_id}-w", run_input(f"{run_id}-w"))
    done = await start_run(client, worker, f"{run_id}-d", run_input(f"{run_id}-d"))
    await wait_for_phase(waiting, "awaiting_approval")
    assert (await done.result()).status == "completed"

    env = process_env(TEMPORAL_ADDRESS=client.service_client.config.target_host)

    async def listed(*flags: str) -> list[dict[str, str]]:
        finished = await agentloop(
            "list", "--tenant", run_id, "--json", *flags, env=env, cwd=tmp_path
        )
        assert finished.returncode == 0, finished.explain()
        return list(json.loads(finished.stdout))

    # Visibility is eventually consistent: wait until both runs are indexed as they are now.
    for _ in range(100):
        found = await listed("--awaiting-approval")
        statuses = {r["workflow_id"]: r["status"] for r in await listed()}
        waiting_ids = [r["workflow_id"] for r in found]
        if waiting_ids == [f"{run_id}-w"] and statuses.get(f"{run_id}-d") == "completed":
            break
    else:
        raise AssertionError(f"visibility never showed the runs as they are: {found}")
    [row] = found
    assert (row["phase"], row["status"], row["provider"], row["tenant"]) == (
        "awaiting_approval",
        "running",
        "anthropic",
        run_id,
    )
    await waiting.cancel()


async def test_a_run_is_indexed_in_the_phase_it_waits_in(
    client: Client, worker: Settings, scripted_provider: ScriptedProvider, run_id: str
) -> None:
    """Visibility sees a run's search attributes as each workflow task ends, which is when
    the run starts to wait: on its model (`calling_model`), on an ordinary tool
    (`executing_tools`). A batch of local reads starts and ends inside one workflow task, so
    it is not indexed at all: no upsert, and none back."""
    weather = ScriptedToolCall(id="call_w", name="get_weather", arguments=WEATHER)
    train = ScriptedToolCall(id="call_t", name="get_train_status", arguments=TRAIN)
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(tool_calls=[weather]),  # local read
                ScriptTurn(tool_calls=[train]),  # an activity
                ScriptTurn(text="done"),
            ],
        )
    )
    run_input = AgentRunInput(
        task="travel",
        provider="openai-chat",
        model=run_id,
        tools=["get_weather", "get_train_status"],
    )
    handle = await start_run(client, worker, run_id, run_input)
    assert (await handle.result()).status == "completed"

    indexed = "calling_model"  # what the run was started with
    upserted: list[str] = []
    waited_in: list[tuple[str, str]] = []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if "AgentPhase" in fields.indexed_fields:
                indexed = json.loads(fields.indexed_fields["AgentPhase"].data)
                upserted.append(indexed)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activity = event.activity_task_scheduled_event_attributes.activity_type.name
            waited_in.append((activity, indexed))
    assert waited_in == [
        ("call_model", "calling_model"),
        ("call_model_by_ref", "calling_model"),
        ("run_tool", "executing_tools"),
        ("call_model_by_ref", "calling_model"),
    ]
    assert upserted == ["executing_tools", "calling_model", "finished"]
