"""One connection per MCP server is shared by every call on a worker: what happens to one
call must not happen to the others. A call that times out over HTTP ends alone; a server that
restarted (and forgot the session) is reconnected to, having run nothing. Against the demo
server's real process, through the worker's own pool and calls."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentloop.mcp import http as mcp_http
from agentloop.mcp.listing import McpToolsError
from agentloop.mcp.pool import McpConnection, McpPool
from agentloop.mcp.tools import McpTools
from agentloop.runtime.dev_server import free_port
from agentloop.runtime.mcp_config import McpServerConfig
from agentloop.store.memory import MemoryStore
from agentloop.tools.contract import TransientError
from tests.mcp.test_mcp_results import context
from tests.mcp.test_mcp_server import (
    ROOT,
    STDIO_START_SECONDS,
    http_server_process,
    read_state,
    steer,
)
from tests.support import wait_until

FIND = "tickets_find_ticket"
NOTE = "tickets_add_note"


@contextlib.asynccontextmanager
async def tickets(url: str, store: MemoryStore, **config: Any) -> AsyncIterator[McpTools]:
    tools = McpTools(McpPool({"tickets": McpServerConfig(url=url, **config)}), store)
    try:
        await tools.specs([FIND, NOTE])  # listed, as at a run's start
        yield tools
    finally:
        await tools.close()


async def test_a_call_that_times_out_over_http_cuts_off_no_other_call(tmp_path: Path) -> None:
    state, store = tmp_path / "state.json", MemoryStore()
    async with (
        http_server_process(state) as (url, _),
        tickets(url, store, timeout_seconds=2) as tools,
    ):
        connection_before = await tools._pool.connection("tickets").client()
        steer(state, stall_next=True)  # the next call arriving waits 120 s
        read = asyncio.create_task(
            tools.tool(FIND, write=False).handler({"ticket_id": "T-1001"}, context(store, "c1"))
        )
        await wait_until(
            lambda: read_state(state).get("calls", {}).get("find_ticket") == 1, "the read"
        )
        note = tools.tool(NOTE, write=True).handler(
            {"ticket_id": "T-1001", "text": "refund"}, context(store, "c2", "wf/run/c2")
        )
        written = await note
        # The read times out alone: the write on the same connection was answered.
        with pytest.raises(TransientError, match="no answer in 2 s"):
            await read
        assert written["note_id"].startswith("N-")
        assert await tools._pool.connection("tickets").client() is connection_before
        assert len(read_state(state)["notes"]) == 1


@pytest.fixture
def legacy_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's client speaks the pre-2026 protocol, as to a server that has only it: an
    `initialize` handshake and an `Mcp-Session-Id` the server keeps in memory. (On the
    2026-07-28 protocol each request stands alone: a restart goes unnoticed.)"""
    options = McpConnection._client_options

    def legacy(self: McpConnection, stop: asyncio.Event) -> dict[str, Any]:
        return {**options(self, stop), "mode": "legacy"}

    monkeypatch.setattr(McpConnection, "_client_options", legacy)


@pytest.mark.usefixtures("legacy_sessions")
async def test_a_restarted_http_server_is_reconnected_to_having_run_nothing(
    tmp_path: Path,
) -> None:
    state, store, port = tmp_path / "state.json", MemoryStore(), free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    note = {"ticket_id": "T-1001", "text": "refund"}
    tools = McpTools(McpPool({"tickets": McpServerConfig(url=url)}), store)
    try:
        async with http_server_process(state, port=port):
            await tools.specs([FIND, NOTE])
            await tools.tool(FIND, write=False).handler(
                {"ticket_id": "T-1001"}, context(store, "c1")
            )
        # A new process on the same address: it does not know the worker's session.
        async with http_server_process(state, port=port):
            write = tools.tool(NOTE, write=True)
            with pytest.raises(TransientError, match=r"Session not found.*; reconnecting"):
                await write.handler(note, context(store, "c2", "wf/run/c2"))
            assert read_state(state).get("calls", {}).get("add_note", 0) == 0  # it ran nothing
            # Temporal's retry of the write: on a new session, once.
            written = await write.handler(note, context(store, "c2", "wf/run/c2"))
            assert written["note_id"].startswith("N-")
            assert read_state(state)["calls"]["add_note"] == 1
            assert len(read_state(state)["notes"]) == 1
    finally:
        await tools.close()


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[tuple[str, list[int]]]:
    """An address that takes connections and never answers: a server stalled at start.
    Yields its URL and the count of connections it took."""
    taken = [0]

    async def take(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        taken[0] += 1
        await reader.read()  # until the client gives up

    server = await asyncio.start_server(take, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp", taken
    finally:
        server.close()


async def test_a_stalled_server_fails_its_listing_in_its_budget_and_runs_starting_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Connecting and listing share the server's start budget (60 s; 1 s here); runs starting
    meanwhile are told the same failure instead of each waiting out their own, one after the
    other."""
    async with silent_server() as (url, taken):
        config = McpServerConfig(url=url, start_budget_seconds=1)
        tools = McpTools(McpPool({"stalled": config}), MemoryStore())
        listings = 0
        list_once = tools._list

        async def counted(server: str) -> Any:
            nonlocal listings
            listings += 1
            return await list_once(server)

        monkeypatch.setattr(tools, "_list", counted)
        try:
            outcomes = await asyncio.gather(
                *(tools.specs(["stalled_find"]) for _ in range(3)), return_exceptions=True
            )
        finally:
            await tools.close()
    # Nothing of the connection attempt outlives it: no holder task, no session.
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("mcp:")]
    assert all(isinstance(o, McpToolsError) for o in outcomes), outcomes
    assert {str(o) for o in outcomes} == {
        "MCP server 'stalled' is unreachable: no answer; its start budget of 1 s is spent"
        " (start_budget_seconds; 1 try)"
    }
    # One listing's failure, told to all three (not one budget after another).
    assert listings == 1
    assert taken[0] == 1  # waited for, not connected to again and again


async def test_an_answer_past_the_bound_is_not_read_and_the_connection_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK reads an HTTP answer whole before parsing it: the worker's transport stops
    reading at `MAX_RESPONSE_BYTES` (32 MiB; 100,000 bytes here, against the demo's report of
    a million characters), so no server's answer takes the worker's memory."""
    monkeypatch.setattr(mcp_http, "MAX_RESPONSE_BYTES", 100_000)
    state, store = tmp_path / "state.json", MemoryStore()
    async with http_server_process(state) as (url, _), tickets(url, store) as tools:
        await tools.specs(["tickets_ticket_report"])
        report = tools.tool("tickets_ticket_report", write=False)
        with pytest.raises(TransientError, match="over 100,000 bytes: not read"):
            await report.handler({"ticket_id": "T-1001"}, context(store, "c1"))
        # The connection goes on: the next call is answered.
        found = await tools.tool(FIND, write=False).handler(
            {"ticket_id": "T-1001"}, context(store, "c2")
        )
        assert found["ticket_id"] == "T-1001"
    assert read_state(state)["calls"] == {"ticket_report": 1, "find_ticket": 1}


def stdio_tickets(state: Path, *extra: str) -> McpServerConfig:
    command = [sys.executable, "-m", "agentloop.demo.mcp_server", "--stdio", "--state"]
    return McpServerConfig(
        command=[*command, str(state), *extra],
        cwd=str(ROOT),
        connect_timeout_seconds=STDIO_START_SECONDS,
    )


async def test_a_stdio_server_that_prints_a_banner_first_is_still_used(tmp_path: Path) -> None:
    """A line that is no JSON-RPC while no call waits (here: before the handshake) is only
    logged; it used to close every connection as it opened, so the server was never used."""
    state, store = tmp_path / "state.json", MemoryStore()
    config = stdio_tickets(state, "--banner", "tickets server ready")
    tools = McpTools(McpPool({"tickets": config}), store)
    try:
        await tools.specs([FIND])
        found = await tools.tool(FIND, write=False).handler(
            {"ticket_id": "T-1001"}, context(store, "c1")
        )
    finally:
        await tools.close()
    assert found["ticket_id"] == "T-1001"
    assert read_state(state)["calls"] == {"find_ticket": 1}


async def test_a_stdio_server_that_exited_while_idle_is_started_again_before_a_write(
    tmp_path: Path,
) -> None:
    """Its client used to be handed out dead: the write ended "connection closed", of unknown
    outcome, though it was never sent."""
    state, store = tmp_path / "state.json", MemoryStore()
    # The write starts the process again: on a busy machine that takes past the default 5 s.
    config = stdio_tickets(state).model_copy(update={"connect_timeout_seconds": 30})
    tools = McpTools(McpPool({"tickets": config}), store)
    try:
        await tools.specs([FIND, NOTE])
        connection = tools._pool.connection("tickets")
        first = await connection.client()
        [pid] = [p for p in server_pids(state)]
        os.kill(pid, signal.SIGKILL)
        await wait_until(lambda: not server_pids(state), "the server to exit")
        await wait_until(lambda: not connection._open_and_alive(), "the client to see it")
        written = await tools.tool(NOTE, write=True).handler(
            {"ticket_id": "T-1001", "text": "refund"}, context(store, "c2", "wf/run/c2")
        )
        assert await connection.client() is not first
    finally:
        await tools.close()
    assert written["note_id"].startswith("N-")
    assert len(read_state(state)["notes"]) == 1


def server_pids(state: Path) -> list[int]:
    """The demo stdio server processes serving `state`."""
    found = subprocess.run(
        ["pgrep", "-f", f"agentloop.demo.mcp_server --stdio --state {state}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [int(pid) for pid in found.stdout.split()]
