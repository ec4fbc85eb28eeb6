"""Section 8, runs waiting on people (issue #21): many runs started (in waves of the cache's
size), each pausing for an approval, on one worker whose sticky cache holds fewer runs than
that; then all approved at once. What a paused run costs the worker, and how fast evicted runs
resume (each replays its history, running nothing again: the writes are counted at the example
service)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.service import RPCError

from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    Principal,
    RunStatusView,
)
from agentloop.demo.services import ExampleService
from agentloop.run_client import RunClient
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.server import ScriptedProvider
from bench.memory import ProcessMemory
from bench.processes import agentloop_worker
from bench.report import Figure, Section, ratio

PRINCIPAL = Principal(subject="bench", scopes=["tickets:write"])
WAIT_SECONDS = 600.0
QUERIES_AT_ONCE = 50
"""Queries (each answered by the worker) and result long polls (the dev server refuses past
a namespace's poller limit) in flight at once."""


async def measure(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    service: ExampleService,
    work: Path,
    runs: int,
    cached: int,
) -> Section:
    section = Section(
        "paused_runs",
        f"runs waiting on people: {runs} paused on one worker caching {cached}",
        "the same worker idle, before the runs (measured in this run)",
    )
    queue = f"bench-paused-{uuid.uuid4().hex[:8]}"
    extra = {"AGENTLOOP_MAX_CACHED_WORKFLOWS": str(cached)}
    service.reset()
    async with agentloop_worker(settings, work, queue, extra) as worker:
        memory = ProcessMemory(worker.pid)
        idle = memory.rss_mib()
        memory.reset_peak()
        gate = asyncio.Semaphore(QUERIES_AT_ONCE)
        handles: list[RunClient] = []
        views: list[RunStatusView] = []
        # In waves of the cache's size: all at once, the worker evicts runs before they reach
        # their pause and spends its time replaying them (the thrash a deployment avoids by
        # sizing the cache to the runs in flight, not to the runs waiting).
        for first in range(0, runs, cached):
            wave = range(first, min(runs, first + cached))
            started_wave = await asyncio.gather(*(_start(client, provider, queue, n) for n in wave))
            views += await asyncio.gather(*(_paused(h, gate) for h in started_wave))
            handles += started_wave
        paused = memory.rss_mib()
        started = time.perf_counter()
        await asyncio.gather(*(_approve(h, v) for h, v in zip(handles, views, strict=True)))
        results: list[AgentRunResult] = await asyncio.wait_for(
            asyncio.gather(*(_result(h, gate) for h in handles)), WAIT_SECONDS
        )
        resumed = time.perf_counter() - started
        peak = memory.peak_mib()
    failed = sum(1 for r in results if r.status != "completed")
    writes = service.records().get("replies_by_ticket", {}).get("T-1001", 0)
    per_run = (paused - idle) / runs
    section.add(
        Figure("paused runs that failed to complete", failed, 0),
        Figure(
            "worker RSS with every run paused (MiB)",
            round(paused, 1),
            round(idle, 1),
            ratio(paused, idle),
        ),
        Figure("worker RSS per paused run (MiB)", round(per_run, 3), note="target <= 0.15"),
        Figure("worker peak RSS (MiB)", round(peak, 1), round(idle, 1), ratio(peak, idle)),
        Figure("seconds until all approved runs complete", round(resumed, 2)),
        Figure("resumed runs/s", round(runs / resumed, 1) if resumed else 0.0),
        Figure(
            "runs resumed from history (beyond the cache)",
            max(0, runs - cached),
            note="at least: the cache held the rest",
        ),
        Figure(
            "writes at the service (one per run: nothing re-ran)", writes, runs, ratio(writes, runs)
        ),
    )
    return section


async def _start(client: Client, provider: ScriptedProvider, queue: str, n: int) -> RunClient:
    name = f"{queue}-{n}"
    call = ScriptedToolCall(
        id=f"c_reply_{n}",
        name="send_reply",
        arguments={"ticket_id": "T-1001", "recipient": "dana@example.com", "body": f"#{n}"},
    )
    provider.register(
        Script(name=name, turns=[ScriptTurn(tool_calls=[call]), ScriptTurn(text="Sent.")])
    )
    run_input = AgentRunInput(
        task="Answer ticket T-1001.",
        provider="openai-chat",
        model=name,
        tools=["send_reply"],
        principal=PRINCIPAL,
    )
    await client.start_workflow("AgentRun", run_input, id=name, task_queue=queue)
    return RunClient(client, name)


async def _paused(run: RunClient, gate: asyncio.Semaphore) -> RunStatusView:
    """The run's status once it waits for its approval. A query is answered by the worker
    (replaying the run first when it is not cached), so at most `gate` are asked at once,
    and one that times out under the load is asked again."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            async with gate:
                view = await run.status()
        except RPCError:
            view = None
        if view is not None and view.phase == "awaiting_approval" and view.pending_approvals:
            return view
        if time.monotonic() > deadline:
            phase = view.phase if view is not None else "unknown"
            raise TimeoutError(f"{run.id} never paused for approval ({phase})")
        await asyncio.sleep(0.5)


async def _result(run: RunClient, gate: asyncio.Semaphore) -> AgentRunResult:
    """A result is a long poll of the server; the dev server takes so many at once."""
    async with gate:
        return await run.result()


async def _approve(run: RunClient, view: RunStatusView) -> None:
    [pending] = view.pending_approvals
    await run.send_decision(
        ApprovalDecision(
            call_id=pending.call_id,
            args_digest=pending.args_digest,
            approved=True,
            approver="support-lead",
        ),
    )
