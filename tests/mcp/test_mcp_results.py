"""What an MCP server's answers become, without a server: a tool result's content (text kept,
binary content stored as artifacts, a flood of blocks cut), a task's status as a write's
outcome, where a write's task handle is kept, and a server's errors in words. All of it is
untrusted input."""

from __future__ import annotations

import base64
import re
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter, ValidationError

from agentloop.contract import Principal
from agentloop.mcp.calls import MAX_CONTENT_BLOCKS, looked_up, shown_output, task_outcome
from agentloop.mcp.listing import McpToolsError
from agentloop.mcp.pool import MAX_REASON_CHARS, McpPool, error_text, reason_of, unreadable
from agentloop.mcp.tasks import TaskState, handle_key, keep_handle, kept_handle
from agentloop.mcp.tools import McpTools
from agentloop.runtime.mcp_config import McpServerConfig
from agentloop.store.memory import MemoryStore
from agentloop.tools.contract import Artifacts, ToolContext


def context(
    store: MemoryStore, call_id: str = "c_1", key: str = "", tool: str = "tickets_chart"
) -> ToolContext[None]:
    """What a tool's code is told of its call (`key`: a write's idempotency key)."""
    return ToolContext(
        call_id=call_id,
        idempotency_key=key,
        workflow_id="wf",
        run_id="run",
        attempt=1,
        principal=Principal(subject="dana"),
        deps=None,
        artifacts=Artifacts(store),
        tool=tool,
    )


def text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


async def test_text_is_kept_and_binary_content_is_stored_as_an_artifact() -> None:
    store = MemoryStore()
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 10
    result = types.CallToolResult(
        content=[
            text("chart of T-1001"),
            types.ImageContent(
                type="image", data=base64.b64encode(png).decode(), mime_type="image/png"
            ),
            types.ImageContent(type="image", data="not base64!", mime_type="image/png"),
        ]
    )
    shown = await shown_output(result, context(store))
    first, kept, refused = shown.splitlines()
    assert first == "chart of T-1001"
    ref = kept.split("kept as artifact ")[1].rstrip("]")
    assert await store.get_artifact(ref) == (png, "image/png")
    assert refused == "[image image/png: not valid base64, left out]"


async def test_structured_content_wins_and_a_flood_of_blocks_is_cut() -> None:
    store = MemoryStore()
    structured = types.CallToolResult(content=[text("x")], structured_content={"a": 1})
    assert await shown_output(structured, context(store)) == {"a": 1}
    flood = types.CallToolResult(content=[text(str(n)) for n in range(MAX_CONTENT_BLOCKS + 10)])
    lines = (await shown_output(flood, context(store))).splitlines()
    assert len(lines) == MAX_CONTENT_BLOCKS + 1
    assert lines[-1] == "[10 more content blocks left out]"


def task(status: str, **fields: Any) -> TaskState:
    return TaskState.model_validate({"taskId": "t-1", "status": status, **fields})


@pytest.mark.parametrize(
    ("state", "outcome"),
    [
        (
            task(
                "completed",
                result={"content": [], "structuredContent": {"note_id": "N-1"}, "isError": False},
            ),
            "applied",
        ),
        (task("completed", result={"content": [text("closed")], "isError": True}), "not_applied"),
        (task("failed", error={"code": -32603, "message": "lost"}), "unknown"),
        (task("cancelled"), "unknown"),
        # Waiting for input agentloop cannot give through tasks, or a status no spec names:
        # over for the run (a person decides), never polled until the deadline.
        (task("input_required"), "unknown"),
        (task("queued-for-later"), "unknown"),
        # Completed with a result that is no tool result: it ran, only its answer is lost.
        (task("completed", result={"content": "nope"}), "applied"),
    ],
)
def test_a_tasks_status_is_the_writes_outcome_and_only_a_clean_completion_applied(
    state: TaskState, outcome: str
) -> None:
    assert state.over
    assert task_outcome(state).state == outcome


def test_only_a_working_task_is_polled_on() -> None:
    assert not task("working").over
    unreadable = task("completed", result={"content": "nope"}).tool_result()
    assert unreadable is not None and not unreadable.is_error
    [told] = unreadable.content
    assert isinstance(told, types.TextContent) and "could not be read" in told.text


async def test_a_writes_task_handle_is_kept_under_its_idempotency_key_once() -> None:
    store = MemoryStore()
    assert await kept_handle(store, "wf/run/c_1") is None
    await keep_handle(store, "wf/run/c_1", "tickets", "task-1")
    await keep_handle(store, "wf/run/c_1", "tickets", "task-2")  # the first one stands
    assert await kept_handle(store, "wf/run/c_1") == "task-1"
    assert handle_key("wf/run/c_1") != handle_key("wf/run/c_2")


async def test_a_listing_that_fails_in_any_way_names_the_server_and_is_never_retried() -> None:
    """`describe_run` has no end to its retries: whatever breaks a listing (here a transport
    raising what no one expected) must come back as a clear, final refusal, once the
    server's start budget is spent (asked again meanwhile: it may be a server going away)."""
    config = McpServerConfig(url="http://127.0.0.1:9/mcp", start_budget_seconds=1)
    tools = McpTools(McpPool({"tickets": config}))

    class Broken:
        async def list_tools(self, **_: Any) -> Any:
            raise RuntimeError("the transport fell over")

    connection = tools._pool.connection("tickets")  # a transport that breaks oddly
    broken = Broken()

    async def client(wait: float | None = None) -> Any:
        return broken

    connection.client = client  # type: ignore[method-assign]
    with pytest.raises(McpToolsError) as refused:
        await tools.listing("tickets")
    assert re.fullmatch(
        r"MCP server 'tickets' could not list its tools: RuntimeError: the transport fell over;"
        r" its start budget of 1 s is spent \(start_budget_seconds; \d+ tries\)",
        str(refused.value),
    ), str(refused.value)


def test_a_servers_error_text_is_cut_and_an_unreadable_message_told_in_one_line() -> None:
    flood = MCPError(-32603, "x" * 100_000)
    assert error_text(flood).startswith("x" * 100) and len(error_text(flood)) == MAX_REASON_CHARS
    assert (
        len(reason_of(ExceptionGroup("calls", [RuntimeError("y" * 100_000)]))) == MAX_REASON_CHARS
    )
    nested = "[" * 300 + "]" * 300
    with pytest.raises(ValidationError) as parsed:
        TypeAdapter(list[object]).validate_json(nested)
    told = unreadable(parsed.value)
    assert told.startswith("it sent a message that cannot be read: Invalid JSON: recursion limit")
    assert "\n" not in told and "[[[" not in told  # neither pydantic's link nor the message


@pytest.mark.parametrize(
    ("text_answer", "state", "record_starts"),
    [
        # A long record is read whole (the workflow cuts it to the tool's bound).
        ('{"state": "applied", "record": "' + "r" * 5_000 + '"}', "applied", "rrrr"),
        # Nested past what the parser reads: no outcome, said in a line, never a crash.
        ("[" * 1_000 + "]" * 1_000, "unknown", "lookup gave no outcome: '[[[["),
        ("not json", "unknown", "lookup gave no outcome: 'not json'"),
    ],
)
def test_a_lookup_answered_as_text_is_read_whole_and_bounded(
    text_answer: str, state: str, record_starts: str
) -> None:
    outcome = looked_up("lookup", types.CallToolResult(content=[text(text_answer)]))
    assert outcome.state == state
    assert str(outcome.record).startswith(record_starts)
