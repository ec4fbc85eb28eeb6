"""Section 11, MCP clients (issue #20): agentloop's MCP tools (the `mcp` SDK used from its own
`run_tool` / `lookup_outcome` activities) beside Temporal's `temporalio-mcp` (a durable MCP
client for workflow code, each operation an activity), on one demo MCP server over
streamable HTTP.

- Reads: one workflow making sequential `find_ticket` calls, each one activity, through each
  client in turn: wall and CPU per call. Both workers run in this process (with the bench's
  scripted provider and service, idle here), the Temporal and MCP servers in their own.
- A write cut off after the server committed it (`after_commit: hang`, then a 1.5 s timeout):
  notes at the server once it is over. temporalio-mcp's activity is retried (at-least-once,
  as its README says), so without a key in `_meta` the note is written twice; agentloop's run
  sends the write once, with its key, and looks the outcome up by that key.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from mcp import Client as McpClient
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.mcp import MCPPlugin, TemporalMCPClient
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agentloop.activity_io import RUN_TOOL, RunToolInput
from agentloop.contract import WORKFLOW_NAME, AgentRunInput, AgentRunResult, Principal
from agentloop.demo.mcp_server import StateFile
from agentloop.events import ToolResult
from agentloop.runtime.config import Settings
from agentloop.runtime.dev_server import free_port
from agentloop.runtime.mcp_config import IDEMPOTENCY_META_KEY
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.server import ScriptedProvider
from agentloop.worker import worker_parts
from bench.processes import child_process
from bench.report import Figure, Section, ratio

SERVER = "tickets"
TICKET = {"ticket_id": "T-1001"}
NOTE = {"ticket_id": "T-1001", "text": "Refund approved."}
CUT_OFF_SECONDS = 1.5
"""The write's timeout, in both clients: the server hangs after committing it."""
REPEATS = 3


@workflow.defn(name="BenchMcpCalls", sandboxed=False)
class McpCalls:
    """`calls` sequential calls of one tool through one client, each an activity; returns
    whether the last one succeeded (`meta`: temporalio-mcp's request `_meta`)."""

    @workflow.run
    async def run(
        self, client: str, tool: str, arguments: dict[str, Any], calls: int, meta: dict[str, str]
    ) -> bool:
        ok = False
        if client == "temporalio-mcp":
            mcp = TemporalMCPClient(
                SERVER,
                activity_config={
                    "start_to_close_timeout": timedelta(seconds=CUT_OFF_SECONDS),
                    "retry_policy": RetryPolicy(maximum_attempts=3),
                },
            )
            for _ in range(calls):
                result = await mcp.call_tool(tool, arguments, meta=meta or None)  # type: ignore[arg-type]
                ok = not result.is_error
            return ok
        for n in range(calls):
            answer: ToolResult = await workflow.execute_activity(
                RUN_TOOL,
                RunToolInput(
                    workflow_id=workflow.info().workflow_id,
                    call_id=f"c{n}",
                    tool=f"{SERVER}_{tool}",
                    arguments=arguments,
                ),
                result_type=ToolResult,
                start_to_close_timeout=timedelta(seconds=10),
                heartbeat_timeout=timedelta(seconds=5),
            )
            ok = answer.status == "succeeded"
        return ok


@asynccontextmanager
async def mcp_server(work: Path) -> AsyncIterator[tuple[str, Path]]:
    """The demo ticket server over streamable HTTP; yields its URL and state file."""
    port = free_port()
    state = work / "mcp-bench-state.json"
    url = f"http://127.0.0.1:{port}/mcp"
    args = ["-m", "agentloop.demo.mcp_server", "--http", str(port), "--state", str(state)]
    async with child_process(args, {}, f"mcp server listening on {url}", work / "mcp.log"):
        yield url, state


def steer(state: Path, **control: Any) -> None:
    """Set control fields of the server's state file, written whole as the server writes it."""
    file = StateFile(state)
    current = file.load()
    current["control"].update(control)
    file.save(current)


def notes(state: Path) -> int:
    return len(StateFile(state).load()["notes"])


async def measure(
    client: Client, settings: Settings, provider: ScriptedProvider, work: Path, calls: int
) -> Section:
    section = Section(
        "mcp_clients",
        f"MCP clients: {calls} sequential find_ticket reads per workflow, and a write cut off "
        "after the server committed it, on one demo MCP server over streamable HTTP",
        "Temporal's temporalio-mcp (its durable workflow client; each call an activity) on "
        f"the same server in this run; medians of {REPEATS} alternating batches; CPU: this "
        "process (both workers, and the bench's scripted provider and service, idle here)",
    )
    queue = f"bench-mcp-{uuid.uuid4().hex[:8]}"
    async with mcp_server(work) as (url, state):
        servers = {
            SERVER: {
                "url": url,
                "reads_from_hints": True,
                "lookup_tool": "lookup_note",
                "timeout_seconds": CUT_OFF_SECONDS,
            }
        }
        own = settings.model_copy(
            update={
                "task_queue": queue,
                "store_url": f"sqlite:///{work / 'mcp-bench.db'}",
                "mcp_servers": json.dumps(servers),
            }
        )
        plugin = MCPPlugin({SERVER: lambda: McpClient(url)})
        async with worker_parts(client, own) as parts:
            worker = Worker(
                client,
                task_queue=queue,
                workflows=[*parts.workflows, McpCalls],
                activities=parts.activities,
                workflow_runner=UnsandboxedWorkflowRunner(),
                plugins=[plugin],
            )
            async with worker:
                await reads(client, queue, calls, section)
                await cut_off_writes(client, provider, queue, state, section)
    return section


async def reads(client: Client, queue: str, calls: int, section: Section) -> None:
    async def batch(which: str) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        ok = await client.execute_workflow(
            McpCalls.run,
            args=[which, "find_ticket", TICKET, calls, {}],
            id=f"bench-mcp-{which}-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        assert ok, f"{which}: find_ticket failed"
        return (time.perf_counter() - wall) / calls * 1e3, (time.process_time() - cpu) / calls * 1e3

    await batch("agentloop"), await batch("temporalio-mcp")  # connections, caches
    timings: dict[str, list[tuple[float, float]]] = {"agentloop": [], "temporalio-mcp": []}
    for _ in range(REPEATS):
        for which in timings:
            timings[which].append(await batch(which))
    ours = [statistics.median(t[i] for t in timings["agentloop"]) for i in (0, 1)]
    theirs = [statistics.median(t[i] for t in timings["temporalio-mcp"]) for i in (0, 1)]
    for i, what in enumerate(("wall", "CPU")):
        section.add(
            Figure(
                f"read: {what} per call (ms)",
                round(ours[i], 2),
                round(theirs[i], 2),
                ratio(ours[i], theirs[i]),
                "one activity per call in both; agentloop's bounds and frames the result",
            )
        )


async def cut_off_writes(
    client: Client, provider: ScriptedProvider, queue: str, state: Path, section: Section
) -> None:
    """One write each way, the server hanging after it committed; notes counted after."""
    counted: dict[str, int] = {}
    for which, meta in (
        ("temporalio-mcp", {}),
        ("temporalio-mcp, our key in _meta", {IDEMPOTENCY_META_KEY: f"bench-{uuid.uuid4()}"}),
    ):
        before = notes(state)
        steer(state, after_commit="hang")
        await client.execute_workflow(
            McpCalls.run,
            args=["temporalio-mcp", "add_note", NOTE, 1, meta],
            id=f"bench-mcp-write-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        counted[which] = notes(state) - before
    run_id = f"bench-mcp-run-{uuid.uuid4().hex[:8]}"
    provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(
                    tool_calls=[
                        ScriptedToolCall(id="c_note", name=f"{SERVER}_add_note", arguments=NOTE)
                    ]
                ),
                ScriptTurn(text="Noted."),
            ],
        )
    )
    before = notes(state)
    steer(state, after_commit="hang")
    result: AgentRunResult = await client.execute_workflow(
        WORKFLOW_NAME,
        AgentRunInput(
            task="Note the refund on ticket T-1001.",
            provider="openai-chat",
            model=run_id,
            tools=[f"{SERVER}_add_note"],
            principal=Principal(subject="bench"),
        ),
        id=run_id,
        task_queue=queue,
        result_type=AgentRunResult,
    )
    assert result.status == "completed", result.stop_reason
    ours = notes(state) - before
    for which, written in counted.items():
        section.add(
            Figure(
                f"cut-off write: notes at the server, agentloop vs {which}",
                ours,
                written,
                ratio(ours, written),
                "agentloop: sent once with its key, outcome looked up by it (lookup_note)"
                if "key" not in which
                else "with the key the server deduplicates the retry: the author's job there",
            )
        )
