"""A slow outside server is waited for, within a budget (issue #45): an MCP server's listing
at a run's start gets its `start_budget_seconds`, asked again while it is not up yet or still
starting; only once the budget is spent does the run stop, naming the server and the budget.
Against the demo server's real processes (`--start-delay`: a server slow to start, as one run
through a package runner is on its first start), through the worker's own pool, and in runs
on the real Temporal dev server."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from agentloop.mcp.listing import McpToolsError
from agentloop.mcp.pool import McpPool
from agentloop.mcp.tools import McpTools
from agentloop.runtime.config import Settings
from agentloop.runtime.dev_server import free_port
from agentloop.runtime.mcp_config import MAX_START_BUDGET_SECONDS, McpServerConfig
from agentloop.scripted_provider import ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.workflows.startup import DESCRIBE_RUN_TIMEOUT
from tests.mcp.test_mcp_connection import server_pids
from tests.mcp.test_mcp_server import http_server_process, read_state
from tests.mcp.test_mcp_tools import FIND, mcp_worker, start, stdio_config
from tests.support import result_of, wait_until

FIND_NAME = "tickets_find_ticket"
NEVER = "3600"
"""A start delay no test waits out: a server that never answers."""


def slow_stdio(state: Path, delay: str, **fields: Any) -> dict[str, Any]:
    """The demo server over stdio, answering nothing for its first `delay` seconds."""
    config = stdio_config(state, **fields)
    config["command"] += ["--start-delay", delay]
    return config


def recorded_tries(tools: McpTools) -> list[str]:
    """Each try `tools` makes at a listing, as it ended: "listed", or why not."""
    tries: list[str] = []
    list_once = tools._list_once

    async def recorded(server: str, deadline: float) -> Any:
        try:
            listed = await list_once(server, deadline)
        except Exception as exc:
            tries.append(str(exc))
            raise
        tries.append("listed")
        return listed

    tools._list_once = recorded  # type: ignore[method-assign]
    return tries


def test_a_run_waits_for_a_listing_past_the_longest_budget_a_server_may_have() -> None:
    """Else `describe_run` would time out first and be retried: a server that never answers
    would hold the run starting for good, never failing it naming the budget."""
    assert timedelta(seconds=MAX_START_BUDGET_SECONDS) < DESCRIBE_RUN_TIMEOUT


async def test_a_server_not_up_yet_is_asked_again_until_it_answers(tmp_path: Path) -> None:
    state, port = tmp_path / "state.json", free_port()
    config = McpServerConfig(url=f"http://127.0.0.1:{port}/mcp", start_budget_seconds=120)
    tools = McpTools(McpPool({"tickets": config}))
    tries = recorded_tries(tools)
    try:
        listing = asyncio.create_task(tools.specs([FIND_NAME]))
        await wait_until(lambda: len(tries) >= 2, "two tries at a server not up yet")
        async with http_server_process(state, port=port):
            specs, absent = await listing
    finally:
        await tools.close()
    assert [spec.name for spec in specs] == [FIND_NAME] and absent == []
    assert tries[-1] == "listed"
    assert all(t.startswith("is unreachable") for t in tries[:-1]), tries


async def test_a_server_down_is_asked_until_its_budget_is_spent_an_optional_one_once() -> None:
    down = {"url": "http://127.0.0.1:9/mcp", "start_budget_seconds": 2}
    servers = {
        "tickets": McpServerConfig.model_validate(down),
        "archive": McpServerConfig.model_validate({**down, "optional": True}),
    }
    tools = McpTools(McpPool(servers))
    try:
        with pytest.raises(McpToolsError) as required:
            await tools.listing("tickets")
        with pytest.raises(McpToolsError) as optional:
            await tools.listing("archive")
    finally:
        await tools.close()
    spent = re.fullmatch(
        r"MCP server 'tickets' is unreachable: .+; its start budget of 2 s is spent"
        r" \(start_budget_seconds; (\d+) tries\)",
        str(required.value),
    )
    assert spent is not None and int(spent.group(1)) >= 2, str(required.value)
    # An optional server is not waited for past its first failure: the run goes on without it.
    assert str(optional.value).startswith("MCP server 'archive' is unreachable: ")
    assert "budget" not in str(optional.value)


async def test_a_missing_bearer_token_fails_the_listing_at_once_no_wait_mends_it() -> None:
    config = McpServerConfig(url="http://127.0.0.1:9/mcp", bearer_token_env="TICKETS_TOKEN")
    tools = McpTools(McpPool({"tickets": config}, env={}))
    tries = recorded_tries(tools)
    try:
        with pytest.raises(McpToolsError) as refused:
            await tools.listing("tickets")
    finally:
        await tools.close()
    assert str(refused.value) == (
        "MCP server 'tickets' is unreachable: TICKETS_TOKEN (its bearer token) is not set"
    )
    assert len(tries) == 1, tries


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_a_run_waits_for_a_slow_server_and_stops_naming_one_that_never_answers(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    tmp_path: Path,
    run_id: str,
) -> None:
    """`slow` answers its listing after 12 s, more than the 5 s a connection used to get and
    than the SDK's 10 s for its first question: it is waited for (not started again) within
    the default budget, and the run completes. `silent` never answers: the run stops once
    its budget (2 s here) is spent, naming the server and the budget."""
    slow, silent = tmp_path / "slow.json", tmp_path / "silent.json"
    servers = {
        "slow": slow_stdio(slow, "12"),
        "silent": slow_stdio(silent, NEVER, start_budget_seconds=2),
    }
    find = ScriptedToolCall(id="c_find", name="slow_find_ticket", arguments=FIND.arguments)
    turns = [ScriptTurn(tool_calls=[find]), ScriptTurn(text="Found.")]
    stopped = f"{run_id}-silent"
    async with mcp_worker(client, worker_settings, tmp_path, servers) as own:
        handle = await start(client, scripted_provider, own, run_id, turns, [find.name])
        result = await result_of(handle)
        handle = await start(client, scripted_provider, own, stopped, turns, ["silent_find_ticket"])
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
        # The process waited for is not left behind once the budget is spent.
        await wait_until(lambda: not server_pids(silent), "the silent server to be stopped")
    assert result.status == "completed", result.stop_reason
    assert [(c.call_id, c.status) for c in result.calls] == [("c_find", "succeeded")]
    assert read_state(slow)["calls"] == {"find_ticket": 1}
    message = str(failed.value.cause)
    assert (
        "MCP server 'silent' is unreachable: no answer; its start budget of 2 s is spent"
        " (start_budget_seconds; 1 try)"
    ) in message, message
    assert [r for r in scripted_provider.requests if r["script"] == stopped] == []
    assert not silent.exists()  # it never served: no call reached it
