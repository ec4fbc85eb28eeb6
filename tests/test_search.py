"""Visibility: runs are indexed by phase, status, provider and tenant; `agentloop list` finds
exactly the runs waiting for a human."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

from agentloop import search
from agentloop.config import Settings
from agentloop.contract import AgentRunInput, Principal
from agentloop.demo.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from tests.support import start_run, wait_for_phase
from tests.test_cli import agentloop, process_env

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]


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
