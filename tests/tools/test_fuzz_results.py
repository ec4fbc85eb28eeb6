"""Generated answers thrown at runs on a real dev server: a team's activity tools answering
any payload (JSON odd, deep or huge, bytes, protobuf, encodings no one knows, forged store
references), and an MCP server answering any `CallToolResult`. Every call ends with a clear
outcome told to the model under its own call id, within the tool's cap; a write is run once
and never looked up; no history holds a failed workflow task. A short slice runs in CI,
thousands of cases under `make fuzz`; a failure names the seed that reproduces it."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio import activity
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.worker import Interceptor, Worker

import agentloop
from agentloop.client import start_run
from agentloop.contract import AgentRunResult, Limits, Principal
from agentloop.envelope import unwrapped
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.testing.patience import CEILING_SECONDS
from agentloop.tool_spec import DEFAULT_MAX_RESULT_CHARS
from agentloop.tools.activity_results import STORED_ANSWER, STORED_ENCODING
from agentloop.tools.plugins import Plugin, Toolset, build_toolbox
from agentloop.worker import running_worker
from tests.fuzzing import SEED, case_rng, cases
from tests.live import Servers, agent_input, scripted
from tests.loop.test_hardening import assert_never_wedged
from tests.mcp.test_mcp_server import http_server, read_state, steer
from tests.mcp.test_mcp_tools import http_config, mcp_worker
from tests.support import result_of

pytestmark = [
    pytest.mark.integration,
    pytest.mark.fuzz,
    pytest.mark.usefixtures("clean_fakes"),
]

BATCH = 40
"""Calls one model turn asks for at once (a run's batch)."""
HUGE_CHARS = 1_500_000


def text(rng: random.Random, most: int = 40) -> str:
    """Any text: ASCII, letters from every plane, controls, quotes and backslashes."""
    pools = ["abc xyz", "\"\\'\n\t\0", "ßπЖ中文🙂\u200b\u202e\ufeff", "\x7f\x1b\u2028"]
    pool = "".join(rng.sample(pools, rng.randint(1, len(pools))))
    return "".join(rng.choice(pool) for _ in range(rng.randint(0, most)))


def json_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 6 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False, 0, -1, 2**63, -(2**70), 1e308, -0.0, 5e-324])
    if kind in (2, 3, 4):
        return text(rng)
    if kind in (5, 6):
        return {text(rng, 10): json_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}
    return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]


def nested(rng: random.Random) -> bytes:
    depth = rng.choice([50, 500, 2_000, 5_000, 20_000])
    if rng.random() < 0.5:
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def json_payload(data: bytes, **metadata: bytes) -> Payload:
    return Payload(metadata={"encoding": b"json/plain", **metadata}, data=data)


def activity_answer(rng: random.Random, huge: bool) -> Payload:
    """One answer a team's activity might give, as the payload its worker sends; up to
    `HUGE_CHARS` with `huge` (else at most about 100 KB)."""
    kind = rng.randrange(14 if huge else 13)
    if kind == 0:
        return json_payload(json.dumps(json_value(rng), ensure_ascii=rng.random() < 0.5).encode())
    if kind == 1:
        return json_payload(nested(rng))
    if kind == 2:  # lone surrogates, a number of thousands of digits, non-finite numbers
        return json_payload(rng.choice([b'"\\ud800x"', b"1" * 5_000, b"NaN", b"-Infinity"]))
    if kind == 3:  # not JSON at all, perhaps not even UTF-8
        return json_payload(rng.randbytes(rng.randint(0, 200)))
    if kind == 4:
        return Payload(metadata={"encoding": b"binary/plain"}, data=rng.randbytes(100))
    if kind == 5:
        return Payload(metadata={"encoding": b"binary/plain"}, data=text(rng).encode())
    if kind == 6:
        return Payload(metadata={"encoding": b"binary/null"})
    if kind == 7:
        kind_of = rng.choice([b"temporal.api.common.v1.Payload", b"team.Unknown", b"\xff"])
        return Payload(
            metadata={"encoding": b"binary/protobuf", "messageType": kind_of},
            data=rng.randbytes(rng.randint(0, 60)),
        )
    if kind == 8:
        data = rng.choice([b'{"workflowId": "w"}', b"{", rng.randbytes(20)])
        return Payload(
            metadata={"encoding": b"json/protobuf", "messageType": b"team.Receipt"}, data=data
        )
    if kind == 9:
        return Payload(metadata={"encoding": rng.randbytes(8)}, data=b"{}")
    if kind == 10:
        return Payload(data=b"{}")  # no encoding at all
    if kind == 11:  # a store reference no one made
        forged = rng.choice([b"sha256:" + b"0" * 64, rng.randbytes(30)])
        return json_payload(b"{}", **{STORED_ANSWER: forged, STORED_ENCODING: b"json/plain"})
    if kind == 12:
        return json_payload(json.dumps({"rows": [text(rng)] * rng.randint(100, 1_000)}).encode())
    return json_payload(json.dumps("h" * rng.randint(HUGE_CHARS // 10, HUGE_CHARS)).encode())


STORED = "s"
"""The prefix of the cases whose team worker runs `ActivityToolResults`: only they may answer
huge. Without it, megabytes of answers arriving while a workflow task is in flight are more
than Temporal buffers (2 MB), and it force-closes that task (the run goes on)."""


def answer_to(case: str) -> Payload:
    return activity_answer(case_rng(case), huge=case.startswith(STORED))


EXECUTED: Counter[str] = Counter()
"""The team's activities' executions, by `activity type/call id`."""


@activity.defn(name="fuzz_read")
async def fuzz_read(request: dict[str, Any]) -> RawValue:
    EXECUTED[f"fuzz_read/{request['call_id']}"] += 1
    return RawValue(answer_to(request["arguments"]["case"]))


@activity.defn(name="fuzz_write")
async def fuzz_write(request: dict[str, Any]) -> RawValue:
    EXECUTED[f"fuzz_write/{request['call_id']}"] += 1
    return RawValue(answer_to(request["arguments"]["case"]))


@activity.defn(name="fuzz_lookup")
async def fuzz_lookup(request: dict[str, Any]) -> dict[str, Any]:
    EXECUTED[f"fuzz_lookup/{request['call_id']}"] += 1
    return {"state": "applied"}


class CaseArgs(BaseModel):
    case: str


@asynccontextmanager
async def team_run_worker(
    client: Client, worker_settings: Settings, interceptors: Sequence[Interceptor]
) -> AsyncIterator[str]:
    """agentloop's worker with the team's `fuzz_read` and `fuzz_write` as activity tools, and
    the team's worker serving them; yields agentloop's task queue."""
    team_queue = f"team-fuzz-{uuid.uuid4().hex[:8]}"
    tools = [
        agentloop.activity_tool(
            "fuzz_read",
            activity="fuzz_read",
            task_queue=team_queue,
            parameters=CaseArgs,
            description="Read anything.",
            effect="read",
        ),
        agentloop.activity_tool(
            "fuzz_write",
            activity="fuzz_write",
            task_queue=team_queue,
            parameters=CaseArgs,
            description="Write anything.",
            effect="write",
            lookup_activity="fuzz_lookup",
        ),
    ]
    settings = worker_settings.model_copy(
        update={"task_queue": f"agentloop-fuzz-{uuid.uuid4().hex[:8]}"}
    )
    toolbox = build_toolbox([Plugin("fuzz", Toolset(tools=tools))])
    team = Worker(
        client,
        task_queue=team_queue,
        activities=[fuzz_read, fuzz_write, fuzz_lookup],
        interceptors=interceptors,
    )
    async with team, running_worker(client, settings, toolbox):
        yield settings.task_queue


async def play_batch(
    client: Client,
    provider: ScriptedProvider,
    queue: str,
    tool: str,
    case_ids: list[str],
    argument: str = "case",
) -> tuple[AgentRunResult, dict[str, str]]:
    """One run whose model calls `tool` once per case (its `argument`), all in one turn: its
    result (checked never wedged) and what the model was told, by call id."""
    run_id = f"fuzz-{tool}-{uuid.uuid4().hex[:8]}"
    calls = [
        ScriptedToolCall(id=f"c_{n}", name=tool, arguments={argument: case})
        for n, case in enumerate(case_ids)
    ]
    provider.register(scripted(run_id, ScriptTurn(tool_calls=calls), "Done."))
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Go.",
        [tool],
        limits=Limits(max_tool_calls=len(calls)),
        principal=Principal(subject="fuzzer", scopes=["tickets:read"]),
    )
    handle = await start_run(client, run_input, id=run_id, task_queue=queue)
    try:
        # The ceiling grows with the calls: each one is a round trip to the MCP server.
        result: AgentRunResult = await result_of(handle, CEILING_SECONDS + 3 * len(calls))
    except AssertionError as never_ended:
        raise AssertionError(f"{never_ended} (AGENTLOOP_FUZZ_SEED={SEED})") from None
    await assert_never_wedged(handle)
    assert result.status == "completed", (SEED, result.stop_reason)
    _, second = [r for r in provider.requests if r["script"] == run_id]
    told = [m for m in second["body"]["messages"] if m["role"] == "tool"]
    # The tools' own output, out of its envelope: that is what the result cap bounds.
    by_id = {m["tool_call_id"]: unwrapped(m["content"]) for m in told}
    assert sorted(by_id) == sorted(c.id for c in calls) and len(told) == len(calls), SEED
    assert all(len(shown) <= DEFAULT_MAX_RESULT_CHARS for shown in by_id.values()), SEED
    return result, by_id


def batches(prefix: str, count: int, size: int = BATCH) -> list[list[str]]:
    ids = [f"{prefix}{n}" for n in range(count)]
    return [ids[at : at + size] for at in range(0, count, size)]


async def test_generated_activity_tool_reads_each_end_succeeded_under_their_call_id(
    servers: Servers, worker_settings: Settings
) -> None:
    """Every answer that arrives is a read that succeeded: shown bounded, or a note that it
    cannot be read. Half the batches go through `ActivityToolResults`."""
    store = agentloop.open_store(worker_settings.store_url)
    try:
        for n, batch in enumerate(batches("r", cases(24, 2_000))):
            interceptors = [agentloop.ActivityToolResults(store)] if n % 2 else []
            if interceptors:
                batch = [STORED + case for case in batch]
            EXECUTED.clear()
            async with team_run_worker(servers.client, worker_settings, interceptors) as queue:
                result, _ = await play_batch(
                    servers.client, servers.provider, queue, "fuzz_read", batch
                )
            statuses = {c.call_id: c.status for c in result.calls}
            assert set(statuses.values()) == {"succeeded"}, (
                SEED,
                [(c.call_id, c.result_summary) for c in result.calls if c.status != "succeeded"],
            )
            assert set(EXECUTED.values()) == {1}, (SEED, EXECUTED)
    finally:
        await store.close()
    assert servers.provider.violations == []


async def test_generated_activity_tool_writes_each_succeed_once_never_looked_up(
    servers: Servers, worker_settings: Settings
) -> None:
    """A write that answered happened, whatever it answered: never sent again, never looked
    up."""
    for batch in batches("w", cases(6, 400), size=20):
        EXECUTED.clear()
        async with team_run_worker(servers.client, worker_settings, []) as queue:
            result, _ = await play_batch(
                servers.client, servers.provider, queue, "fuzz_write", batch
            )
        assert {(c.status, c.activity_attempts) for c in result.calls} == {("succeeded", 1)}, (
            SEED,
            result.calls,
        )
        assert [e.call_id for e in result.side_effects] == [c.call_id for c in result.calls]
        assert set(EXECUTED) == {f"fuzz_write/{c.call_id}" for c in result.calls}, SEED
        assert set(EXECUTED.values()) == {1}, (SEED, EXECUTED)
    assert servers.provider.violations == []


def mcp_block(rng: random.Random, valid: bool) -> dict[str, Any]:
    kind = rng.randrange(6 if valid else 7)
    if kind in (0, 1):
        return {"type": "text", "text": text(rng, rng.choice([10, 5_000]))}
    if kind in (2, 3):
        data = rng.choice(["iVBORw0KGgo=", "not base64!", "", "A" * rng.randint(1, 9_000)])
        mime = rng.choice(["image/png", "", "x/\u202e", "text/html"])
        return {"type": rng.choice(["image", "audio"]), "data": data, "mimeType": mime}
    if kind == 4:
        return {"type": "resource_link", "uri": "file:///" + text(rng, 20), "name": text(rng)}
    if kind == 5:
        resource: dict[str, Any] = {"uri": "mem://r", "mimeType": "text/plain"}
        if rng.random() < 0.5:
            resource["text"] = text(rng, 2_000)
        else:
            resource["blob"] = rng.choice(["aGVsbG8=", "%%%"])
        return {"type": "resource", "resource": resource}
    return {"type": rng.choice(["video", "", "text"]), "nothing": json_value(rng)}


def mcp_result(rng: random.Random) -> dict[str, Any]:
    """One `CallToolResult` a server might send, as JSON (the SDK may refuse it: then the
    server answers an error)."""
    blocks = rng.choice([0, 1, 2, 5, 400])
    # A flood's blocks are valid ones: the SDK's report of hundreds of invalid blocks takes
    # the server (rich tracebacks) long enough to miss the next run's 10 s tool listing.
    result: dict[str, Any] = {
        "content": [mcp_block(rng, valid=blocks > 5) for _ in range(blocks)],
        "isError": rng.random() < 0.2,
    }
    if rng.random() < 0.1:
        result["content"].append({"type": "text", "text": "t" * rng.randint(10_000, 1_000_000)})
    if rng.random() < 0.3:
        depth = rng.choice([1, 20, 200])
        structured: Any = json_value(rng)
        for _ in range(depth):
            structured = {"d": structured}
        result["structuredContent"] = structured
    if rng.random() < 0.1:
        result["_meta"] = {text(rng, 5): json_value(rng)}
    return result


async def test_generated_mcp_results_each_end_clearly_under_their_call_id(
    servers: Servers, worker_settings: Settings, tmp_path: Path
) -> None:
    """The demo ticket server answers each call the result generated for its ticket id: each
    read ends succeeded or failed, told to the model within the cap."""
    state = tmp_path / "state.json"
    count = cases(12, 1_000)
    steer(state)
    async with (
        http_server(state) as url,
        mcp_worker(servers.client, worker_settings, tmp_path, {"tickets": http_config(url)}) as own,
    ):
        for batch in batches("M-", count):
            # Only this batch's answers: the server reads its state file on every call.
            steer(state, answers={case: mcp_result(case_rng(case)) for case in batch})
            result, _ = await play_batch(
                servers.client,
                servers.provider,
                own.task_queue,
                "tickets_ticket_report",
                batch,
                argument="ticket_id",
            )
            statuses = {c.call_id: c.status for c in result.calls}
            assert set(statuses.values()) <= {"succeeded", "failed"}, (SEED, statuses)
    assert read_state(state)["calls"].get("ticket_report", 0) >= count
    assert servers.provider.violations == []
