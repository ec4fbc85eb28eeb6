"""A team's MCP server as a tool source (issue #20), end to end: a real MCP server process (the
demo ticket server, built on the MCP SDK) over streamable HTTP and over stdio, an agentloop
worker whose configuration names it, and runs on the real Temporal dev server. Effects are
counted at the server (its state file); every result is checked under its call id."""

from __future__ import annotations

import asyncio
import faulthandler
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.worker import Replayer

from agentloop.client import start_run
from agentloop.contract import AgentRunResult, Principal, UserMessage
from agentloop.events import ToolResult
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptTurn
from agentloop.store import load_transcript, open_store
from agentloop.testing.patience import CEILING_SECONDS
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import running_worker
from agentloop.workflows.agent_run import AgentRun
from tests.live import Servers, agent_input
from tests.mcp.test_mcp_server import (
    SERVER,
    STDIO_START_SECONDS,
    free_port,
    http_server,
    http_server_process,
    read_state,
    steer,
)
from tests.support import (
    approve_as_shown,
    result_of,
    wait_for_phase,
    wait_for_status,
    wait_until,
    waited_for,
    worker_env,
    worker_process,
    write_key,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

PRINCIPAL = Principal(subject="agent-7", scopes=["tickets:read", "tickets:write"])
FIND = scripted_call("tickets_find_ticket", "c_find", ticket_id="T-1001")
NOTE_ARGS = {"ticket_id": "T-1001", "text": "Refund approved."}
NOTE = scripted_call("tickets_add_note", "c_note", **NOTE_ARGS)
TOOLS = ["tickets_find_ticket", "tickets_add_note"]
BUILTINS = {"read_artifact", "ask_user", "give_up"}


def http_config(url: str, **fields: Any) -> dict[str, Any]:
    return {"url": url, "reads_from_hints": True, "lookup_tool": "lookup_note", **fields}


def stdio_config(state: Path, **fields: Any) -> dict[str, Any]:
    command = [sys.executable, *SERVER[1:], "--stdio", "--state", str(state)]
    return {
        "command": command,
        "reads_from_hints": True,
        "lookup_tool": "lookup_note",
        "connect_timeout_seconds": STDIO_START_SECONDS,
        **fields,
    }


def transport_config(transport: str, state: Path, url: str, **fields: Any) -> dict[str, Any]:
    """The demo server's configuration over stdio, or over HTTP at `url`."""
    return stdio_config(state, **fields) if transport == "stdio" else http_config(url, **fields)


@asynccontextmanager
async def mcp_worker(
    client: Client, settings: Settings, tmp_path: Path, servers: dict[str, Any]
) -> AsyncIterator[Settings]:
    """An agentloop worker in this process whose configuration names `servers`, on a task
    queue and store of its own."""
    own = settings.model_copy(
        update={
            "task_queue": f"mcp-{uuid.uuid4().hex[:8]}",
            "store_url": f"sqlite:///{tmp_path / 'store.db'}",
            "mcp_servers": json.dumps(servers),
        }
    )
    async with running_worker(client, own):
        yield own


@asynccontextmanager
async def tickets_worker(
    client: Client, settings: Settings, tmp_path: Path, **fields: Any
) -> AsyncIterator[Settings]:
    """The demo ticket server over HTTP (its state in `tmp_path/state.json`) and a worker
    whose one MCP server it is, as `tickets`, configured with `fields` over `http_config`."""
    async with (
        http_server(tmp_path / "state.json") as url,
        mcp_worker(client, settings, tmp_path, {"tickets": http_config(url, **fields)}) as own,
    ):
        yield own


async def start(
    client: Client,
    provider: ScriptedProvider,
    settings: Settings,
    run_id: str,
    turns: list[ScriptTurn],
    tools: list[str] = TOOLS,
) -> WorkflowHandle[Any, AgentRunResult]:
    provider.register(Script(name=run_id, turns=turns))
    run_input = agent_input(
        run_id, "openai-chat", "Note the refund on ticket T-1001.", tools, principal=PRINCIPAL
    )
    return await start_run(client, run_input, id=run_id, task_queue=settings.task_queue)


async def failure_at_start(
    client: Client, provider: ScriptedProvider, settings: Settings, run_id: str
) -> str:
    """Why a run that would call find_ticket failed before any call."""
    turns = [ScriptTurn(tool_calls=[FIND]), ScriptTurn(text="?")]
    handle = await start(client, provider, settings, run_id, turns)
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    return str(failed.value.cause)


async def answered(settings: Settings, result: AgentRunResult) -> dict[str, ToolResult]:
    """The tool results of the run's transcript, by call id (each call answered once)."""
    store = open_store(settings.store_url)
    try:
        events = await load_transcript(store, result.transcript_head)
    finally:
        await store.close()
    results = [e for e in events if isinstance(e, ToolResult)]
    by_id = {r.call_id: r for r in results}
    assert len(by_id) == len(results), [r.call_id for r in results]
    return by_id


@pytest.mark.parametrize("transport", ["http", "stdio", "http-tasks"])
async def test_a_run_reads_and_writes_through_an_mcp_server_each_call_once(
    transport: str, servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    state = tmp_path / "state.json"
    turns = [ScriptTurn(tool_calls=[FIND, NOTE]), ScriptTurn(text="Noted.")]
    tasks = ["--tasks"] if transport == "http-tasks" else []
    async with http_server(state, tasks) as url:
        config = transport_config(transport, state, url)
        async with mcp_worker(servers.client, worker_settings, tmp_path, {"tickets": config}) as s:
            handle = await start(servers.client, servers.provider, s, run_id, turns)
            result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert {c.call_id: (c.tool, c.status) for c in result.calls} == {
        "c_find": ("tickets_find_ticket", "succeeded"),
        "c_note": ("tickets_add_note", "succeeded"),
    }
    at_server = read_state(state)
    polls = at_server["calls"].pop("tasks/get", 0)
    assert at_server["calls"] == {"find_ticket": 1, "add_note": 1}
    assert (polls > 0) == bool(tasks)  # a server with the Tasks extension made the note a task
    [note] = at_server["notes"].values()
    assert note["key"] == write_key(handle, "c_note")  # our key, in the request's _meta
    results = await answered(s, result)
    assert json.loads(results["c_find"].content)["subject"] == "Refund for order 17"
    assert json.loads(results["c_note"].content)["note_id"] == note["note_id"]
    assert results["c_note"].side_effect and not results["c_find"].side_effect
    # The model saw each result under its own call id, in the provider's protocol.
    assert servers.provider.violations == []


async def test_a_run_keeps_the_tools_it_started_with_when_the_server_changes_them(
    servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """The approval is bound to the exact arguments; while the run waits for it the server
    deploys a new tool list. The run finishes on the list it started with, and its history
    replays without asking the server."""
    state = tmp_path / "state.json"
    turns = [
        ScriptTurn(tool_calls=[NOTE]),
        ScriptTurn(tool_calls=[FIND]),
        ScriptTurn(text="Noted and checked."),
    ]
    needing = {"tools": {"add_note": {"needs_approval": True}}}
    async with tickets_worker(servers.client, worker_settings, tmp_path, **needing) as s:
        handle = await start(servers.client, servers.provider, s, run_id, turns)
        view = await wait_for_phase(handle, "awaiting_approval")
        [pending] = view.pending_approvals
        assert pending.call_id == "c_note" and pending.arguments == NOTE_ARGS
        assert not state.exists()  # nothing reached the server before the approval
        steer(state, tool_set="v2")
        await approve_as_shown(handle, pending, "support-lead")
        result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert read_state(state)["calls"] == {"add_note": 1, "find_ticket": 1}
    requests = [r["body"] for r in servers.provider.requests if r["script"] == run_id]
    assert len(requests) == 3
    for body in requests:
        offered = {t["function"]["name"]: t["function"] for t in body["tools"]}
        assert "tickets_close_ticket" not in offered
        assert "(v2)" not in offered["tickets_find_ticket"]["description"]
    history = await handle.fetch_history()
    await Replayer(
        workflows=[AgentRun], data_converter=servers.client.data_converter
    ).replay_workflow(history)


@pytest.mark.parametrize("with_lookup", [True, False])
async def test_a_write_cut_off_after_the_server_committed_it_is_never_sent_again(
    with_lookup: bool, servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """The server commits the note, then never answers: the call times out. With the server's
    lookup tool the run learns the note exists; without one it waits for a person."""
    state = tmp_path / "state.json"
    steer(state, after_commit="hang")
    turns = [ScriptTurn(tool_calls=[NOTE]), ScriptTurn(text="Noted.")]
    async with http_server(state) as url:
        config = http_config(url, timeout_seconds=2)
        if not with_lookup:
            del config["lookup_tool"]
        async with mcp_worker(servers.client, worker_settings, tmp_path, {"tickets": config}) as s:
            handle = await start(
                servers.client, servers.provider, s, run_id, turns, ["tickets_add_note"]
            )
            if with_lookup:
                result = await result_of(handle)
            else:
                view = await wait_for_phase(handle, "awaiting_reconciliation")
                await handle.terminate("the test is done")
    at_server = read_state(state)
    assert at_server["calls"].get("add_note") == 1  # never resent
    assert len(at_server["notes"]) == 1
    if with_lookup:
        assert at_server["calls"].get("lookup_note") == 1
        assert result.status == "completed", result.stop_reason
        [write] = result.calls
        assert write.status == "confirmed_after_query", write
    else:
        assert "lookup_note" not in at_server["calls"]
        assert [c.call_id for c in view.unresolved] == ["c_note"]


async def test_large_and_image_results_are_kept_as_artifacts(
    servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    report = scripted_call("tickets_ticket_report", "c_report", ticket_id="T-1001")
    chart = scripted_call("tickets_ticket_chart", "c_chart", ticket_id="T-1001")
    turns = [ScriptTurn(tool_calls=[report, chart]), ScriptTurn(text="Read.")]
    tools = ["tickets_ticket_report", "tickets_ticket_chart"]
    async with tickets_worker(servers.client, worker_settings, tmp_path) as s:
        handle = await start(servers.client, servers.provider, s, run_id, turns, tools)
        result = await result_of(handle)
        results = await answered(s, result)
        store = open_store(s.store_url)
        try:
            big = results["c_report"]
            assert big.artifact_ref is not None and len(big.content) <= 8_000
            kept = await store.get_artifact(big.artifact_ref)
            assert kept is not None and len(kept[0]) >= 1_000_000
            image_ref = results["c_chart"].content.split("kept as artifact ")[1].rstrip("]\n")
            image = await store.get_artifact(image_ref.split("]")[0])
            assert image is not None and image[1] == "image/png"
            assert image[0].startswith(b"\x89PNG")
            assert "chart of T-1001" in results["c_chart"].content
        finally:
            await store.close()
    assert result.status == "completed", result.stop_reason


async def test_a_server_down_at_start_fails_the_run_naming_it_unless_it_is_optional(
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    tmp_path: Path,
    run_id: str,
) -> None:
    down = {"url": "http://127.0.0.1:9/mcp", "reads_from_hints": True}
    state = tmp_path / "state.json"
    async with http_server(state) as url:
        servers = {
            "tickets": {**down, "start_budget_seconds": 1},
            "archive": {**down, "optional": True},
            "notes": http_config(url),
        }
        async with mcp_worker(client, worker_settings, tmp_path, servers) as s:
            turns = [ScriptTurn(tool_calls=[FIND]), ScriptTurn(text="?")]
            handle = await start(client, scripted_provider, s, run_id, turns)
            with pytest.raises(WorkflowFailureError) as failed:
                await result_of(handle)
            message = str(failed.value.cause)
            assert "MCP server 'tickets' is unreachable" in message, message
            assert "its start budget of 1 s is spent (start_budget_seconds;" in message, message
            # An optional server that is down leaves its tools out at once; the run goes on.
            find = scripted_call("notes_find_ticket", "c_find", ticket_id="T-1001")
            turns = [ScriptTurn(tool_calls=[find]), ScriptTurn(text="Found.")]
            handle = await start(
                client,
                scripted_provider,
                s,
                f"{run_id}-optional",
                turns,
                ["archive_find_ticket", "notes_find_ticket"],
            )
            result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert read_state(state)["calls"] == {"find_ticket": 1}
    [first, _] = [
        r["body"] for r in scripted_provider.requests if r["script"] == f"{run_id}-optional"
    ]
    assert {t["function"]["name"] for t in first["tools"]} == {"notes_find_ticket", *BUILTINS}


@pytest.mark.parametrize(
    ("tool_set", "why"),
    [
        ("broken", "not a valid JSON Schema"),
        ("deep", "nests deeper than 32 levels"),
        ("fanning", "could visit more than 20,000 schema nodes"),
    ],
)
async def test_a_tool_whose_schema_fails_the_checks_fails_the_run_naming_server_and_tool(
    tool_set: str,
    why: str,
    servers: Servers,
    worker_settings: Settings,
    tmp_path: Path,
    run_id: str,
) -> None:
    state = tmp_path / "state.json"
    steer(state, tool_set=tool_set)
    async with tickets_worker(servers.client, worker_settings, tmp_path) as s:
        message = await failure_at_start(servers.client, servers.provider, s, run_id)
    assert "tickets_find_ticket of MCP server 'tickets' cannot be used" in message, message
    assert why in message, message
    assert read_state(state).get("calls", {}) == {}  # nothing was called


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_listing_that_cannot_be_read_fails_the_run_at_once_saying_why(
    transport: str, servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """The server lists a schema holding a number longer than the SDK's JSON parser reads.
    Over stdio that answer names no request: it used to be dropped, and the listing waited
    out its 10 s as if the server had said nothing."""
    state = tmp_path / "state.json"
    steer(state, tool_set="huge_number")
    async with http_server(state) as url:
        config = transport_config(transport, state, url)
        async with mcp_worker(servers.client, worker_settings, tmp_path, {"tickets": config}) as s:
            message = await failure_at_start(servers.client, servers.provider, s, run_id)
    said = "MCP server 'tickets' could not list its tools: it sent a message that cannot be read"
    assert said in message, message
    assert "number out of range" in message and "input_value" not in message, message
    assert read_state(state).get("calls", {}) == {}  # nothing was called


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_tool_nested_deeper_than_a_parser_reads_is_left_out_alone(
    transport: str, servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """The server lists find_ticket with a schema 100 levels deep: its answer is past the
    200 levels the SDK's JSON parser reads. Before, the whole listing was unreadable
    ("recursion limit exceeded"), and every run naming any tool of the server failed."""
    state = tmp_path / "state.json"
    steer(state, tool_set="too_deep")
    turns = [ScriptTurn(tool_calls=[NOTE]), ScriptTurn(text="Noted.")]
    async with http_server(state) as url:
        config = transport_config(transport, state, url)
        async with mcp_worker(servers.client, worker_settings, tmp_path, {"tickets": config}) as s:
            message = await failure_at_start(servers.client, servers.provider, s, run_id)
            handle = await start(
                servers.client, servers.provider, s, f"{run_id}-note", turns, ["tickets_add_note"]
            )
            result = await result_of(handle)
    said = "tickets_find_ticket of MCP server 'tickets' cannot be used: its inputSchema nests"
    assert said in message and "deeper than 32 levels" in message, message
    assert result.status == "completed", result.stop_reason
    assert [(c.call_id, c.status) for c in result.calls] == [("c_note", "succeeded")]
    assert read_state(state)["calls"] == {"add_note": 1}  # find_ticket was never called


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_write_whose_answer_cannot_be_read_is_looked_up_at_once_and_runs_once(
    transport: str, servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """The server writes the note, then answers with content too deep to parse: the call's
    outcome is unknown, and the run asks the lookup tool at once rather than after the call's
    60 s timeout (over stdio the unreadable answer closes the connection it came on)."""
    state = tmp_path / "state.json"
    steer(state, garble_next=True)
    turns = [ScriptTurn(tool_calls=[NOTE]), ScriptTurn(text="Noted.")]
    async with http_server(state) as url:
        config = transport_config(transport, state, url, timeout_seconds=60)
        async with mcp_worker(servers.client, worker_settings, tmp_path, {"tickets": config}) as s:
            handle = await start(
                servers.client, servers.provider, s, run_id, turns, ["tickets_add_note"]
            )
            # Its 60 s timeout is not what ended the call: the history says why (below).
            result = await result_of(handle)
            results = await answered(s, result)
    assert result.status == "completed", result.stop_reason
    at_server = read_state(state)
    assert at_server["calls"] == {"add_note": 1, "lookup_note": 1}  # never resent
    [note] = at_server["notes"].values()
    assert note["key"] == write_key(handle, "c_note")
    assert [(c.call_id, c.status) for c in result.calls] == [("c_note", "confirmed_after_query")]
    assert list(results) == ["c_note"] and results["c_note"].side_effect
    history = await handle.fetch_history()
    unknown = [
        e
        for e in history.events
        if b"it sent a message that cannot be read" in e.SerializeToString()
    ]
    assert len(unknown) == 1  # the run_tool result that said why the outcome was unknown
    assert servers.provider.violations == []


def test_a_worker_with_a_bad_mcp_configuration_exits_2_before_polling(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "AGENTLOOP_MCP_SERVERS": json.dumps({"tickets": {"url": "ftp://tickets"}}),
        "AGENTLOOP_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}",
        "TEMPORAL_ADDRESS": "127.0.0.1:1",  # never reached
    }
    for command in (["agentloop", "worker"], ["-m", "agentloop.worker"]):
        argv = (
            [sys.executable, *command]
            if command[0] == "-m"
            else [sys.executable, "-m", "agentloop.cli", "worker"]
        )
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=CEILING_SECONDS
        )
        assert done.returncode == 2, done.stderr
        assert "AGENTLOOP_MCP_SERVERS" in done.stderr and "'tickets'" in done.stderr, done.stderr
        assert "not an http(s) URL" in done.stderr, done.stderr


async def test_a_worker_killed_mid_read_and_mid_write_leaves_one_effect(
    servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """SIGKILL during an MCP read: the next worker runs the read again. SIGKILL during an MCP
    write the server committed: the next worker looks it up by its key; one note."""
    state = tmp_path / "state.json"
    steer(state, stall_next=True, after_commit="hang")  # the read stalls, the write hangs
    turns = [ScriptTurn(tool_calls=[FIND]), ScriptTurn(tool_calls=[NOTE]), ScriptTurn(text="Done.")]

    def calls(tool: str) -> int:
        return int(read_state(state).get("calls", {}).get(tool, 0)) if state.exists() else 0

    async with http_server(state) as url:
        settings = worker_settings.model_copy(
            update={"task_queue": f"mcp-kill-{uuid.uuid4().hex[:8]}"}
        )
        env = {
            **worker_env(servers.client, settings, tmp_path / "store.db"),
            "AGENTLOOP_MCP_SERVERS": json.dumps({"tickets": http_config(url)}),
        }
        async with worker_process(env) as first:
            handle = await start(servers.client, servers.provider, settings, run_id, turns)
            await wait_until(lambda: calls("find_ticket") == 1, "the read at the server")
            first.send_signal(signal.SIGKILL)
        async with worker_process(env) as second:
            await wait_until(lambda: calls("add_note") == 1, "the write at the server")
            assert calls("find_ticket") == 2  # the lost read ran again
            second.send_signal(signal.SIGKILL)
        async with worker_process(env):
            result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    at_server = read_state(state)
    assert at_server["calls"] == {"find_ticket": 2, "add_note": 1, "lookup_note": 1}
    [note] = at_server["notes"].values()
    assert note["key"] == write_key(handle, "c_note")
    statuses = {c.call_id: c.status for c in result.calls}
    assert statuses == {"c_find": "succeeded", "c_note": "confirmed_after_query"}


async def test_a_tool_error_from_the_server_is_told_to_the_model_under_its_call_id(
    servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    state = tmp_path / "state.json"
    steer(state, fail_next="error")
    turns = [ScriptTurn(tool_calls=[FIND]), ScriptTurn(text="The ticket system is down.")]
    async with tickets_worker(servers.client, worker_settings, tmp_path) as s:
        handle = await start(servers.client, servers.provider, s, run_id, turns)
        result = await result_of(handle)
        results = await answered(s, result)
    assert result.status == "completed", result.stop_reason
    told = results["c_find"]
    assert (told.status, told.error_class) == ("failed", "business")
    assert "ticket system is down" in json.loads(told.content)["error"]["message"]
    assert read_state(state)["calls"] == {"find_ticket": 1}  # a refusal is not retried


async def test_a_result_is_not_checked_against_an_output_schema_that_fans_out(
    servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """The SDK's client checks a result against the tool's outputSchema on the worker's event
    loop: this one would visit 2^40 schema nodes, stopping every call and heartbeat. agentloop
    does not check it; the result reaches the model as any tool's does."""
    state = tmp_path / "state.json"
    steer(state, tool_set="fanning_output")
    turns = [ScriptTurn(tool_calls=[FIND]), ScriptTurn(text="Ticket {{c_find.status}}.")]
    # The check would hold this process's event loop (the worker's is the test's): no
    # timeout of its own could fire, so a watchdog thread ends the process instead.
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        async with tickets_worker(servers.client, worker_settings, tmp_path) as s:
            handle = await start(servers.client, servers.provider, s, run_id, turns)
            result = await result_of(handle)
            results = await answered(s, result)
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert result.status == "completed", result.stop_reason
    assert result.output == "Ticket open."
    found = results["c_find"]
    assert found.status == "succeeded" and json.loads(found.content)["ticket_id"] == "T-1001"
    assert read_state(state)["calls"] == {"find_ticket": 1}


async def test_a_write_whose_task_finished_as_the_server_died_is_resolved_by_its_status(
    servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """A server with the Tasks extension makes the note a task, finishes it and dies before
    anyone hears. The call gives up; the lookup asks the restarted server for the task the
    worker kept the handle of (there is no lookup tool): applied, and never sent again."""
    state = tmp_path / "state.json"
    steer(state, task_then="exit")
    port = free_port()
    turns = [ScriptTurn(tool_calls=[NOTE]), ScriptTurn(text="Noted.")]
    async with http_server_process(state, ["--tasks"], port) as (url, first):
        config = {**http_config(url, timeout_seconds=2), "lookup_tool": None}
        async with mcp_worker(servers.client, worker_settings, tmp_path, {"tickets": config}) as s:
            handle = await start(
                servers.client, servers.provider, s, run_id, turns, ["tickets_add_note"]
            )
            assert await waited_for(first.wait(), "the server to exit") == 3  # done, then gone
            await wait_for_status(
                handle, lambda v: [c.status for c in v.calls] == ["unknown"], "the call cut off"
            )
            async with http_server_process(state, ["--tasks"], port):
                result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    [write] = result.calls
    assert write.status == "confirmed_after_query", write
    at_server = read_state(state)
    assert at_server["calls"]["add_note"] == 1 and "lookup_note" not in at_server["calls"]
    assert at_server["calls"]["tasks/get"] >= 1
    [note] = at_server["notes"].values()
    assert note["key"] == write_key(handle, "c_note")


REASSIGN = scripted_call("tickets_reassign_ticket", "c_assign", ticket_id="T-1001")


@pytest.mark.parametrize("reply", ["dana", "decline"])
async def test_a_write_whose_server_asks_a_person_waits_for_the_answer_and_runs_once(
    reply: str, servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    """The server answers the write with `input_required`: the run waits `awaiting_input`
    with the server's question, the person's message goes back to the server with its state,
    and the write happens once (or, declined, not at all: the model is told)."""
    state = tmp_path / "state.json"
    turns = [ScriptTurn(tool_calls=[REASSIGN]), ScriptTurn(text="Done.")]
    tools = ["tickets_reassign_ticket"]
    async with tickets_worker(servers.client, worker_settings, tmp_path) as s:
        handle = await start(servers.client, servers.provider, s, run_id, turns, tools)
        view = await wait_for_phase(handle, "awaiting_input")
        assert view.question == "tickets_reassign_ticket asks: Who should take ticket T-1001?"
        assert read_state(state)["reassignments"] == {}  # asked before it acted
        await handle.signal("message", UserMessage(text=reply, sender="support-lead"))
        result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    at_server = read_state(state)
    assert at_server["calls"] == {"reassign_ticket": 2}  # the question, then the answer
    [call] = result.calls
    assert (call.call_id, call.attempts, result.usage.tool_calls) == ("c_assign", 2, 1)
    content = (await answered(s, result))["c_assign"].content
    if reply == "decline":
        assert (call.status, at_server["reassignments"]) == ("failed", {})
        assert "declined" in content
    else:
        assert call.status == "succeeded"
        [done] = at_server["reassignments"].values()
        assert done == {
            "ticket_id": "T-1001",
            "assignee": "dana",
            "key": write_key(handle, "c_assign"),
        }
        assert json.loads(content) == {"ticket_id": "T-1001", "assignee": "dana"}
    assert servers.provider.violations == []
    history = await handle.fetch_history()
    await Replayer(
        workflows=[AgentRun], data_converter=servers.client.data_converter
    ).replay_workflow(history)


async def test_mcp_list_shows_each_tool_with_its_effect_and_why(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    steer(state, tool_set="broken")  # find_ticket's schema fails our checks

    async def mcp_list(servers: dict[str, Any], *args: str) -> tuple[int, str, str]:
        env = {**os.environ, "AGENTLOOP_MCP_SERVERS": json.dumps(servers)}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentloop.cli",
            "mcp",
            "list",
            *args,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await waited_for(process.communicate(), f"agentloop mcp list {' '.join(args)}")
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async with http_server(state) as url:
        servers = {"tickets": {"url": url, "exclude": ["ticket_report"]}}
        code, out, _ = await mcp_list(servers, "--json")
        assert code == 0, out
        [tickets] = json.loads(out)
        tools = {t["name"]: t for t in tickets["tools"]}
        assert "tickets_ticket_report" not in tools
        assert tools["tickets_add_note"]["effect"] == "write"
        assert "no readOnlyHint" in tools["tickets_add_note"]["why"]
        # What the model is told and the arguments it must give, as the run would have them.
        assert tools["tickets_add_note"]["description"] == "Add a note to a ticket"
        schema = tools["tickets_add_note"]["input_schema"]
        assert set(schema["properties"]) == {"ticket_id", "text"}, schema
        assert set(schema["required"]) == {"ticket_id", "text"}, schema
        assert tools["tickets_find_ticket"]["input_schema"] is None  # left out: no schema
        assert tools["tickets_lookup_note"]["effect"] == "write"  # hints not believed
        assert tools["tickets_find_ticket"]["effect"] is None
        assert "left out" in tools["tickets_find_ticket"]["why"]
        trusting = {"tickets": {"url": url, "reads_from_hints": True}}
        code, out, _ = await mcp_list(trusting)
        assert code == 0 and "tickets_lookup_note" in out and "read: the server's" in out, out
        assert "      Add a note to a ticket\n" in out, out
        assert "      arguments: ticket_id (string, required), text (string, required)" in out
    code, _, err = await mcp_list(servers, "other")
    assert code == 2 and "no MCP server 'other'" in err, err
    gone = {"tickets": {**servers["tickets"], "start_budget_seconds": 1}}
    code, out, _ = await mcp_list(gone)  # the server is gone: listed within its budget
    assert code == 1 and "MCP server 'tickets' is unreachable" in out, out
