"""A 1 MB tool output, end to end through `AgentRun` on the real dev server (issue #7): the
model gets a bounded preview with the size and an artifact reference, pages the rest with
`read_artifact`, and the workflow history never carries the megabyte.

The large output is a real HTTP read: the example service's padding knob (a test affordance,
like its fault injection) adds ~1 MB of deterministic text to the `get_weather` answer, so no
public tool schema changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory
from temporalio.testing import ActivityEnvironment

from agentloop.activity_io import RunToolInput
from agentloop.contract import AgentRunInput, AgentRunResult
from agentloop.demo.services import ExampleService
from agentloop.demo.services.control import padding_text
from agentloop.demo.tools import EXAMPLE_TOOLS, ExampleDeps
from agentloop.demo.tools.http import ServiceClient
from agentloop.demo.tools.travel import get_weather
from agentloop.envelope import unwrapped
from agentloop.events import ToolResult
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.store import artifact_key, open_store
from agentloop.testing.turns import call as scripted_call
from agentloop.tools.builtins import PAGE_CHARS
from tests.live import Live, scripted
from tests.support import result_of, start_run, tool_activities

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

PADDING_CHARS = 1_000_000
WEATHER_ARGS = {"city": "Shanghai", "date": "2026-12-01"}
BIG_CALL = "call_big"
HISTORY_LIMIT_BYTES = 200_000
PAYLOAD_LIMIT_BYTES = 64_000
"""No payload anywhere near the megabyte: the largest one here is a page or a preview."""
REQUEST_FRAMING_CHARS = 16_000
"""A model request's own weight besides the preview: task, tool schemas, the other calls."""


async def weather_body(example_service: ExampleService) -> str:
    """The text the tool produces, asked of the service directly (it answers the same again:
    travel answers are stored, the padding is deterministic)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{example_service.base_url}/travel/weather/{WEATHER_ARGS['city']}",
            params={"date": WEATHER_ARGS["date"]},
        ) as response,
    ):
        assert response.status == 200
        return json.dumps(await response.json(), ensure_ascii=False)


async def dry_run_big_call(example_service: ExampleService, store_path: Path) -> ToolResult:
    """What the run's `get_weather` call will give the model: the same activity, same call id,
    same arguments, over the same HTTP read, against a throw-away store. The script needs the
    preview's length to ask for the pages that follow it."""
    store = open_store(f"sqlite:///{store_path}")
    try:
        async with aiohttp.ClientSession() as session:
            deps = ExampleDeps(ServiceClient(example_service.base_url, session))
            tools = tool_activities(EXAMPLE_TOOLS, store, deps)
            request = RunToolInput(
                workflow_id="dry-run", call_id=BIG_CALL, tool="get_weather", arguments=WEATHER_ARGS
            )
            result: ToolResult = await ActivityEnvironment().run(tools.run_tool, request)
            return result
    finally:
        await store.close()


def page_call(call_id: str, ref: str, offset: int, limit: int) -> ScriptedToolCall:
    return scripted_call("read_artifact", call_id, ref=ref, offset=offset, limit=limit)


def paging_script(name: str, ref: str, pages: list[tuple[str, int, int]]) -> Script:
    """The 1 MB read, then one `read_artifact` turn per (call id, offset, limit), then done."""
    big = scripted_call("get_weather", BIG_CALL, **WEATHER_ARGS)
    turns = [ScriptTurn(tool_calls=[big])]
    turns += [ScriptTurn(tool_calls=[page_call(c, ref, o, n)]) for c, o, n in pages]
    return scripted(name, *turns, "done")


def run_input(model: str) -> AgentRunInput:
    return AgentRunInput(
        task="What is the weather in Shanghai on 2026-12-01? Read the whole report.",
        provider="openai-chat",
        model=model,
        tools=["get_weather"],  # read_artifact needs no entry: every run may page its artifacts
    )


def requests_of(provider: ScriptedProvider, script: str) -> list[dict[str, Any]]:
    """The request bodies the model received for `script`, in order (one per turn here)."""
    bodies = [r["body"] for r in provider.requests if r["script"] == script]
    assert all(isinstance(body, dict) for body in bodies)
    return bodies


def tool_content(body: dict[str, Any], call_id: str) -> str:
    found = [
        m["content"]
        for m in body["messages"]
        if m["role"] == "tool" and m["tool_call_id"] == call_id
    ]
    assert len(found) == 1, f"{call_id}: {len(found)} tool messages"
    content: str = unwrapped(found[0])  # the tool's own output, out of its envelope
    return content


def call_pairs(body: dict[str, Any]) -> list[tuple[list[str], list[str]]]:
    """For each assistant message with tool calls: its call ids, and the ids of the tool
    messages right after it (Chat Completions' ordering rule)."""
    messages, pairs = body["messages"], []
    for i, message in enumerate(messages):
        if message["role"] != "assistant" or not message.get("tool_calls"):
            continue
        asked = [call["id"] for call in message["tool_calls"]]
        answered = []
        for after in messages[i + 1 :]:
            if after["role"] != "tool":
                break
            answered.append(after["tool_call_id"])
        pairs.append((asked, answered))
    return pairs


def payloads(message: Message) -> Iterator[Payload]:
    """Every `Payload` anywhere inside a history event."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if isinstance(value, Message):
            values = [value]
        elif field.message_type.GetOptions().map_entry:
            values = [v for v in value.values() if isinstance(v, Message)]
        else:  # a repeated message field
            values = list(value)
        for item in values:
            yield from payloads(item)


def history_sizes(history: WorkflowHistory) -> tuple[int, int]:
    """(total bytes of the history's events, bytes of its largest payload)."""
    total = sum(event.ByteSize() for event in history.events)
    largest = max(p.ByteSize() for event in history.events for p in payloads(event))
    return total, largest


async def play_paging_run(
    live: Live, tmp_path: Path, run_id: str, limit: int
) -> tuple[AgentRunResult, str, ToolResult, list[dict[str, Any]], WorkflowHistory]:
    """Pad the weather answer to ~1 MB and play: the big read, two `read_artifact` pages of
    `limit` characters right after the preview, done. Returns the result, the full output,
    the dry run's result, the model requests and the history."""
    live.service.set_padding("weather", PADDING_CHARS)
    try:
        full = await weather_body(live.service)
        dry = await dry_run_big_call(live.service, tmp_path / "dry-run.db")
    finally:
        live.service.set_padding(None, 0)
    ref = artifact_key(full.encode("utf-8"))
    assert dry.artifact_ref == ref
    preview = json.loads(dry.content)["preview"]
    assert full.startswith(preview)
    first = len(preview)
    pages = [("call_page_1", first, limit), ("call_page_2", first + limit, limit)]
    live.provider.register(paging_script(run_id, ref, pages))

    reads_before = live.service.stats()["counts"]["weather"]
    live.service.set_padding("weather", PADDING_CHARS)
    try:
        handle = await start_run(live.client, live.worker, run_id, run_input(run_id))
        result = await result_of(handle)
    finally:
        live.service.set_padding(None, 0)
    assert live.service.stats()["counts"]["weather"] == reads_before + 1  # one real read
    history = await live.client.get_workflow_handle(run_id).fetch_history()
    return result, full, dry, requests_of(live.provider, run_id), history


async def test_a_one_megabyte_output_reaches_the_model_as_a_preview_it_can_page(
    live: Live, tmp_path: Path, run_id: str
) -> None:
    limit = 3_000  # fits read_artifact's cap even re-escaped: comes back whole (next test: 4000)
    result, full, dry, requests, history = await play_paging_run(live, tmp_path, run_id, limit)
    assert len(full) > PADDING_CHARS

    # The run completes; every call is recorded under its id.
    assert result.status == "completed", result.stop_reason
    assert result.output == "done"
    assert [(c.call_id, c.tool, c.status) for c in result.calls] == [
        (BIG_CALL, "get_weather", "succeeded"),
        ("call_page_1", "read_artifact", "succeeded"),
        ("call_page_2", "read_artifact", "succeeded"),
    ]
    assert len(requests) == 4

    # The request that carried the big result: a bounded preview, the size and the reference.
    carried = requests[1]
    content = tool_content(carried, BIG_CALL)
    max_chars = get_weather.spec.max_result_chars
    assert len(content) <= max_chars
    assert content == dry.content  # what the worker made of the same read
    frame = json.loads(content)
    assert frame["truncated"] is True
    assert frame["total_chars"] == len(full)
    assert frame["artifact"] == artifact_key(full.encode("utf-8"))
    assert frame["source"] == {"tool": "get_weather", "call_id": BIG_CALL}
    assert full.startswith(frame["preview"]) and len(frame["preview"]) > max_chars // 2
    assert len(json.dumps(carried, ensure_ascii=False)) <= max_chars + REQUEST_FRAMING_CHARS

    # Two pages, right after the preview, each exactly the original's characters there.
    offset = len(frame["preview"])
    for turn, call_id in ((2, "call_page_1"), (3, "call_page_2")):
        page = json.loads(tool_content(requests[turn], call_id))
        assert "truncated" not in page, f"{call_id}: the page itself was cut into an artifact"
        assert page["ref"] == frame["artifact"] and page["total_chars"] == len(full)
        assert page["offset"] == offset
        assert page["text"] == full[offset : offset + limit]
        assert page["next_offset"] == offset + limit
        offset += limit
    for body in requests:  # never more than the preview and the pages asked for
        assert len(json.dumps(body, ensure_ascii=False)) < 4 * max_chars + REQUEST_FRAMING_CHARS

    # Call ids pair in every request: each assistant call answered right after, once.
    last = requests[-1]
    assert call_pairs(last) == [
        ([BIG_CALL], [BIG_CALL]),
        (["call_page_1"], ["call_page_1"]),
        (["call_page_2"], ["call_page_2"]),
    ]
    for body in requests[:-1]:
        assert all(asked == answered for asked, answered in call_pairs(body))

    # The history stays small: the megabyte lives in the store only.
    total, largest = history_sizes(history)
    assert total < HISTORY_LIMIT_BYTES, f"history is {total:,} bytes"
    exported = len(history.to_json().encode())  # what `agentloop history` writes
    assert exported < HISTORY_LIMIT_BYTES, f"exported history is {exported:,} bytes"
    assert largest < PAYLOAD_LIMIT_BYTES, f"a {largest:,}-byte payload is in history"
    beyond = full[offset + 100_000 : offset + 100_030]  # text no page and no preview showed
    assert all(beyond.encode() not in event.SerializeToString() for event in history.events)


async def test_a_full_page_of_escaped_text_reaches_the_model_whole(
    live: Live, tmp_path: Path, run_id: str
) -> None:
    """The preview invites `limit=<up to 4000>`; a page that large must come back readable:
    whole, or shorter with `next_offset` saying where to go on (either fix passes)."""
    result, full, dry, requests, _ = await play_paging_run(live, tmp_path, run_id, PAGE_CHARS)
    assert result.status == "completed", result.stop_reason
    offset = len(json.loads(dry.content)["preview"])
    page = json.loads(tool_content(requests[2], "call_page_1"))
    assert "truncated" not in page, "the page itself was cut into an artifact"
    assert page["offset"] == offset and page["next_offset"] > offset
    assert page["text"] == full[offset : page["next_offset"]]


async def test_the_padding_knob_pads_reads_until_cleared(example_service: ExampleService) -> None:
    """The test affordance itself: set over HTTP like the other knobs, exact and
    deterministic, applied to 200 answers only, cleared by `reset`."""
    base = example_service.base_url
    weather = f"{base}/travel/weather/Oslo?date=2026-12-01"
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/_control/padding", json={"endpoint": "nowhere"}) as bad:
            assert bad.status == 400
        body = {"endpoint": "weather", "chars": 1_000}
        async with http.post(f"{base}/_control/padding", json=body) as set_:
            assert set_.status == 200 and (await set_.json()) == {"padding": {"weather": 1_000}}
        async with http.get(weather) as padded:
            answer = await padded.json()
        async with http.get(f"{base}/travel/weather/Oslo?date=2026-99-01") as refused:
            assert refused.status == 400 and "padding" not in await refused.json()
        assert answer["padding"] == padding_text(1_000) and answer["city"] == "Oslo"
        lines = padding_text(100_000).splitlines()
        assert len(padding_text(100_000)) == 100_000 and len(set(lines)) == len(lines)
        assert example_service.stats()["padding"] == {"weather": 1_000}
        example_service.reset()
        async with http.get(weather) as plain:
            assert "padding" not in await plain.json()
