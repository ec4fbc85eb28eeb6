"""The demo MCP server (`agentloop.demo.mcp_server`), run as its own process over stdio and over
streamable HTTP and driven by the SDK's client: what agentloop's MCP tests stand on. No Temporal
here, so not marked `integration`; each server start costs about a second of imports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    INVALID_PARAMS,
    INVALID_REQUEST,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitResult,
    ErrorData,
    ImageContent,
    InputRequiredResult,
    InputResponses,
    RequestParamsMeta,
    TextContent,
)

from agentloop.mcp.tasks import (
    TASKS_EXTENSION,
    CreatedTask,
    TasksExtension,
    TaskState,
    get_task,
    until_over,
)
from agentloop.runtime.dev_server import free_port
from agentloop.runtime.mcp_config import IDEMPOTENCY_META_KEY
from agentloop.testing.patience import CEILING_SECONDS
from tests.support import banner_process, waited_for

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "agentloop.demo.mcp_server"]
READS = ["find_ticket", "lookup_note", "ticket_report", "ticket_chart"]
STDIO_START_SECONDS = 30.0
"""The `connect_timeout_seconds` of the demo server over stdio in tests (the most it takes): its
start is a Python process importing the MCP SDK, seconds on a busy machine, not the default 5."""


# The client side of the Tasks extension is agentloop's own (`agentloop.mcp.tasks`). The SDK
# stamps every 2026-07-28 request's `_meta` with the client's capabilities, taken from
# `Client(extensions=[...])`: an extension listed there is what declares task support on each
# request (a capability written into a call's own `meta` is overwritten by that stamp).


async def await_task(session: ClientSession, task_id: str) -> TaskState:
    return await until_over(session, task_id, time.monotonic() + CEILING_SECONDS)


def read_state(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def steer(path: Path, **control: Any) -> None:
    """Set control fields the way a test process does: a whole-file rewrite."""
    state = read_state(path) if path.exists() else {}
    state.setdefault("control", {}).update(control)
    path.write_text(json.dumps(state))


def stdio_client(state: Path, **client: Any) -> Client:
    args = [*SERVER[1:], "--stdio", "--state", str(state)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))
    return Client(params, **client)


@contextlib.asynccontextmanager
async def http_server_process(
    state: Path, extra_args: Sequence[str] = (), port: int | None = None
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """A server process over streamable HTTP on `port` (default: a free one), waited for by
    its banner line and stopped on the way out (unless it exited); yields its URL and the
    process."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [*SERVER, "--http", str(port), "--state", str(state), *extra_args]
    banner = f"mcp server listening on {url}"
    async with banner_process(command, banner, cwd=ROOT, with_stderr=False) as (process, out):
        assert out.strip() == banner  # the banner is all it printed on the way up
        yield url, process


@contextlib.asynccontextmanager
async def http_server(state: Path, extra_args: Sequence[str] = ()) -> AsyncIterator[str]:
    """`http_server_process`, yielding only the URL."""
    async with http_server_process(state, extra_args) as (url, _):
        yield url


@contextlib.asynccontextmanager
async def connected(transport: str, state: Path, **client: Any) -> AsyncIterator[Client]:
    """A client (`Client(..., **client)`) of a fresh server process."""
    if transport == "stdio":
        async with stdio_client(state, **client) as opened:
            yield opened
        return
    async with http_server(state) as url, Client(url, **client) as opened:
        yield opened


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_tools_effects_and_control(transport: str, tmp_path: Path) -> None:
    state = tmp_path / "state.json"  # absent: the server starts empty
    async with connected(transport, state) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        hints = {
            name: tool.annotations and tool.annotations.read_only_hint
            for name, tool in tools.items()
        }
        assert hints == {**dict.fromkeys(READS, True), "add_note": False, "reassign_ticket": False}
        assert TASKS_EXTENSION not in (client.server_capabilities.extensions or {})

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
                read_timeout_seconds=CEILING_SECONDS,
            )
    written = read_state(state)
    assert written["notes"]["key-x"]["text"] == "refund issued"
    assert written["control"]["after_commit"] is None


def task_meta(key: str) -> RequestParamsMeta:
    """A call's `_meta` declaring task support, as the spec spells it (the SDK rewrites the
    capability key from the client's extensions; the idempotency key is the call's own)."""
    meta = {
        CLIENT_CAPABILITIES_META_KEY: {"extensions": {TASKS_EXTENSION: {}}},
        IDEMPOTENCY_META_KEY: key,
    }
    return cast(RequestParamsMeta, meta)  # an open TypedDict: its extra keys are not literals


async def test_a_write_declaring_tasks_is_answered_with_a_task(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    args = {"ticket_id": "T-0001", "text": "called the customer"}
    async with (
        http_server(state, ["--tasks"]) as url,
        Client(url, extensions=[TasksExtension()]) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.extensions == {TASKS_EXTENSION: {}}

        created = await client.session.call_tool(
            "add_note", args, meta=task_meta("k1"), allow_claimed=True
        )
        assert isinstance(created, CreatedTask)
        assert created.status == "working"
        assert (created.ttl_ms, created.poll_interval_ms) == (600_000, 200)
        # Durable before it was answered.
        assert read_state(state)["tasks"][created.task_id]["createdAt"] == created.created_at

        done = await await_task(client.session, created.task_id)
        assert done.status == "completed" and done.result is not None
        result = CallToolResult.model_validate(done.result)
        assert not result.is_error
        assert result.structured_content == {**args, "note_id": "N-1"}
        written = read_state(state)
        assert [note["key"] for note in written["notes"].values()] == ["k1"]
        assert written["calls"]["add_note"] == 1
        assert written["calls"]["tasks/get"] >= 2  # at least one "working", then "completed"

        # The claim's resolver makes a task transparent to `Client.call_tool`. A tool error is
        # a completed task whose result is the error (not a failed task).
        steer(state, fail_next="error")
        down = await client.call_tool("add_note", args, meta=task_meta("k2"))
        assert down.is_error and down.content == [
            TextContent(type="text", text="ticket system is down")
        ]
        written = read_state(state)
        assert list(written["notes"]) == ["k1"] and len(written["tasks"]) == 2

        # Other tools are not turned into tasks.
        found = await client.session.call_tool(
            "find_ticket", {"ticket_id": "T-0001"}, meta=task_meta("k2"), allow_claimed=True
        )
        assert isinstance(found, CallToolResult) and not found.is_error

        with pytest.raises(MCPError) as unknown:
            await get_task(client.session, "task-nope")
        assert unknown.value.error.code == INVALID_PARAMS


async def test_without_the_client_capability_a_write_is_answered_in_place(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    async with http_server(state, ["--tasks"]) as url, Client(url) as client:
        assert client.server_capabilities.extensions == {TASKS_EXTENSION: {}}
        result = await client.session.call_tool(
            "add_note",
            {"ticket_id": "T-0001", "text": "refund issued"},
            meta={IDEMPOTENCY_META_KEY: "k1"},
            allow_claimed=True,
        )
        assert isinstance(result, CallToolResult) and not result.is_error
        written = read_state(state)
        assert list(written["notes"]) == ["k1"] and written["tasks"] == {}


async def test_a_task_outlives_its_server(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    steer(state, task_then="exit")
    args = {"ticket_id": "T-0003", "text": "escalated"}
    async with (
        http_server_process(state, ["--tasks"]) as (url, process),
        Client(url, extensions=[TasksExtension()]) as client,
    ):
        created = await client.session.call_tool(
            "add_note", args, meta=task_meta("k3"), allow_claimed=True
        )
        assert isinstance(created, CreatedTask)
        assert await waited_for(process.wait(), "the server to exit") == 3
    written = read_state(state)
    assert written["notes"]["k3"]["text"] == "escalated"
    assert written["tasks"][created.task_id]["status"] == "completed"
    assert written["control"]["task_then"] is None
    # A task its server never finished (it died mid-way): no running server owns it now.
    orphan = {**written["tasks"][created.task_id], "status": "working", "taskId": "task-orphan"}
    del orphan["result"]
    written["tasks"]["task-orphan"] = orphan
    state.write_text(json.dumps(written))

    async with (
        http_server(state, ["--tasks"]) as url,
        Client(url, extensions=[TasksExtension()]) as client,
    ):
        task = await get_task(client.session, created.task_id)
        assert task.status == "completed" and task.result is not None
        assert task.result["structuredContent"] == {**args, "note_id": "N-1"}
        assert task.created_at == created.created_at
        lost = await get_task(client.session, "task-orphan")
        assert lost.status == "failed" and lost.error is not None
        assert lost.error["code"] == -32603 and "unknown" in lost.error["message"]


# `reassign_ticket` asks a person through the SDK's resolvers. The server asks only a client
# whose capabilities (stamped on every 2026-07-28 request by the SDK) declare `elicitation`, and
# the SDK's client declares it only when it has an `elicitation_callback`. Driving the rounds
# by hand (`session.call_tool(..., allow_input_required=True)`) never calls the callback.


async def not_asked_this_way(
    context: ClientRequestContext, params: ElicitRequestParams
) -> ElicitResult | ErrorData:
    return ErrorData(code=INVALID_REQUEST, message="a 2026-07-28 server asks in its result")


ASKING = {"elicitation_callback": not_asked_this_way}


async def reassign(
    client: Client,
    key: str | None,
    answer: ElicitResult | None = None,
    asked: InputRequiredResult | None = None,
    ticket_id: str = "T-0001",
) -> CallToolResult | InputRequiredResult:
    """One round of `reassign_ticket` under the idempotency key `key`, answering the one
    question of the round `asked` with `answer`."""
    responses: InputResponses | None = None
    if answer is not None and asked is not None:
        [question] = asked.input_requests or {}
        responses = {question: answer}
    result = await client.session.call_tool(
        "reassign_ticket",
        {"ticket_id": ticket_id},
        meta=cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: key}) if key is not None else None,
        input_responses=responses,
        request_state=asked.request_state if asked is not None else None,
        allow_input_required=True,
    )
    assert isinstance(result, CallToolResult | InputRequiredResult)
    return result


def accept(assignee: str) -> ElicitResult:
    return ElicitResult(action="accept", content={"assignee": assignee})


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_reassignment_asks_a_person_once_and_applies_once_per_key(
    transport: str, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    async with connected(transport, state, **ASKING) as client:
        assert client.protocol_version == "2026-07-28"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        tool = tools["reassign_ticket"]
        assert tool.description == "Reassign a ticket to someone a person names"
        assert tool.annotations is not None and tool.annotations.read_only_hint is False

        asked = await reassign(client, "r1")
        assert isinstance(asked, InputRequiredResult) and asked.request_state
        [request] = (asked.input_requests or {}).values()
        assert isinstance(request, ElicitRequest)
        assert isinstance(request.params, ElicitRequestFormParams)
        assert request.params.mode == "form"
        assert request.params.message == "Who should take ticket T-0001?"
        schema = request.params.requested_schema
        assert schema["type"] == "object" and schema["required"] == ["assignee"]
        assert {name: p["type"] for name, p in schema["properties"].items()} == {
            "assignee": "string"
        }
        assert read_state(state)["reassignments"] == {}  # nothing until a person answered

        done = await reassign(client, "r1", accept("dana"), asked)
        assert isinstance(done, CallToolResult) and not done.is_error
        assert done.structured_content == {"ticket_id": "T-0001", "assignee": "dana"}
        applied = {"r1": {"ticket_id": "T-0001", "assignee": "dana", "key": "r1"}}
        assert read_state(state)["reassignments"] == applied

        # A retry under the key, even answered otherwise, gets the first result; so does a new
        # call under it, at once, without asking anyone again.
        again = await reassign(client, "r1", accept("erin"), asked)
        assert isinstance(again, CallToolResult)
        assert again.structured_content == done.structured_content
        fresh = await reassign(client, "r1")
        assert isinstance(fresh, CallToolResult)
        assert fresh.structured_content == done.structured_content
        written = read_state(state)
        assert written["reassignments"] == applied
        assert written["calls"]["reassign_ticket"] == 4  # every round is a call


async def test_a_declined_reassignment_is_a_tool_error_and_records_nothing(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.json"
    async with connected("http", state, **ASKING) as client:
        for key, action in [("r1", "decline"), ("r2", "cancel")]:
            asked = await reassign(client, key)
            assert isinstance(asked, InputRequiredResult)
            refused = await reassign(client, key, ElicitResult(action=action), asked)
            assert isinstance(refused, CallToolResult) and refused.is_error
            [text] = refused.content
            assert isinstance(text, TextContent)
            assert "the reassignment of T-0001 was declined" in text.text

        # No question about a ticket that does not exist.
        unknown = await reassign(client, "r3", ticket_id="nope")
        assert isinstance(unknown, CallToolResult) and unknown.is_error

        # The faults apply to it like to any tool, on any round.
        steer(state, fail_next="error")
        down = await reassign(client, "r4")
        assert isinstance(down, CallToolResult) and down.is_error
        assert down.content == [TextContent(type="text", text="ticket system is down")]
        asked = await reassign(client, "r4")
        assert isinstance(asked, InputRequiredResult)
        steer(state, fail_next="error")
        down = await reassign(client, "r4", accept("dana"), asked)
        assert isinstance(down, CallToolResult) and down.is_error
        written = read_state(state)
        assert written["reassignments"] == {}
        assert written["calls"]["reassign_ticket"] == 8


async def test_a_client_that_cannot_be_asked_is_refused_with_a_protocol_error(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.json"
    async with connected("http", state) as client:  # no elicitation callback: not declared
        assert client.protocol_version == "2026-07-28"
        with pytest.raises(MCPError) as refused:
            await reassign(client, "r1")
        assert refused.value.error.code == MISSING_REQUIRED_CLIENT_CAPABILITY
        assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert read_state(state)["reassignments"] == {}
