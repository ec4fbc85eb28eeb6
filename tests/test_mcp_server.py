"""The demo MCP server (`agentloop.demo.mcp_server`), run as its own process over stdio and over
streamable HTTP and driven by the SDK's client: what agentloop's MCP tests stand on. No Temporal
here, so not marked `integration`; each server start costs about a second of imports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import ImageContent, TextContent

from agentloop.runtime.mcp_config import IDEMPOTENCY_META_KEY

ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, "-m", "agentloop.demo.mcp_server"]
READS = ["find_ticket", "lookup_note", "ticket_report", "ticket_chart"]


def read_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def steer(path: Path, **control: Any) -> None:
    """Set control fields the way a test process does: a whole-file rewrite."""
    state = read_state(path) if path.exists() else {}
    state.setdefault("control", {}).update(control)
    path.write_text(json.dumps(state))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stdio_client(state: Path) -> Client:
    args = [*SERVER[1:], "--stdio", "--state", str(state)]
    return Client(StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT)))


@contextlib.asynccontextmanager
async def http_server(state: Path) -> AsyncIterator[str]:
    """A server process over streamable HTTP on a free port, waited for by its banner line
    and stopped on the way out; yields its URL."""
    port = free_port()
    args = ["--http", str(port), "--state", str(state)]
    process = await asyncio.create_subprocess_exec(
        *SERVER, *args, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    assert process.stdout is not None
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
        assert line.strip() == f"mcp server listening on {url}"
        yield url
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


@contextlib.asynccontextmanager
async def connected(transport: str, state: Path) -> AsyncIterator[Client]:
    """A client of a fresh server process."""
    if transport == "stdio":
        async with stdio_client(state) as client:
            yield client
        return
    async with http_server(state) as url, Client(url) as client:
        yield client


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_tools_effects_and_control(transport: str, tmp_path: Path) -> None:
    state = tmp_path / "state.json"  # absent: the server starts empty
    async with connected(transport, state) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        hints = {
            name: tool.annotations and tool.annotations.read_only_hint
            for name, tool in tools.items()
        }
        assert hints == {**dict.fromkeys(READS, True), "add_note": False}

        # The key travels in `_meta`; a retry under it returns the first note and adds none.
        meta = {IDEMPOTENCY_META_KEY: "key-1"}
        args = {"ticket_id": "T-0001", "text": "called the customer"}
        first = await client.call_tool("add_note", args, meta=meta)
        again = await client.call_tool("add_note", args, meta=meta)
        assert not first.is_error and first.structured_content == again.structured_content
        written = read_state(state)
        assert list(written["notes"]) == ["key-1"] and written["notes"]["key-1"]["key"] == "key-1"
        assert written["calls"]["add_note"] == 2

        found = await client.call_tool("lookup_note", {"idempotency_key": "key-1"})
        assert found.structured_content is not None
        assert found.structured_content["state"] == "applied"
        missing = await client.call_tool("lookup_note", {"idempotency_key": "key-2"})
        assert missing.structured_content == {"state": "not_applied"}
        unknown = await client.call_tool("find_ticket", {"ticket_id": "nope"})
        assert unknown.is_error

        # A deploy on the live server: the next listing shows it, with no cache to refresh.
        steer(state, tool_set="v2")
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert "close_ticket" in tools and tools["find_ticket"].description == "Find a ticket (v2)"
        closed = await client.call_tool("close_ticket", {"ticket_id": "T-0001"})
        assert not closed.is_error

        steer(state, fail_next="error")
        down = await client.call_tool("find_ticket", {"ticket_id": "T-0001"})
        assert down.is_error and down.content == [
            TextContent(type="text", text="ticket system is down")
        ]
        assert not (await client.call_tool("find_ticket", {"ticket_id": "T-0001"})).is_error

        chart = await client.call_tool("ticket_chart", {"ticket_id": "T-0001"})
        image, caption = chart.content
        assert isinstance(image, ImageContent) and image.mime_type == "image/png"
        assert isinstance(caption, TextContent) and caption.text == "chart of T-0001"


async def test_exit_after_commit_leaves_the_write_and_disarms(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    steer(state, after_commit="exit")
    async with stdio_client(state) as client:
        with pytest.raises(Exception):  # noqa: B017 - the transport's error, whatever its type
            await client.call_tool(
                "add_note",
                {"ticket_id": "T-0002", "text": "refund issued"},
                meta={IDEMPOTENCY_META_KEY: "key-x"},
                read_timeout_seconds=10,
            )
    written = read_state(state)
    assert written["notes"]["key-x"]["text"] == "refund issued"
    assert written["control"]["after_commit"] is None
