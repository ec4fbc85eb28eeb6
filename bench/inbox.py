"""[14] The inbox with many runs waiting for approval (issue #36): the time to the first byte
and to the whole inbox page (an HTTP GET of `/` through the inbox's ASGI app on uvicorn, as
`agentloop inbox` serves it; the body read to its end) and to the page rendered in headless
Chromium (its `load` event, when /usr/bin/chromium is there), the runs listed from the
memo each keeps (feature `inbox-memo`: one visibility list) against the inbox before it,
which asked each run its `status` (measured in the same run, on the same runs, by the same
server, each memo taken as if it left calls out). Then the same page with 2,000 fake
waiting runs beside them (issue 44: `AgentRun`s a keyless client started on a task queue
nobody polls, said by their search attributes to wait for approval in the same tenant, every
other one carrying a real run's sealed memo), against none. Views answer from the listing the
inbox keeps (issue 44: listed in the background, `listed.WaitingList`): each way is an inbox
of its own, its first listing timed from the first view, then the views that read it. The
runs wait on one worker process; the inbox, its client and the Temporal dev server share this
machine."""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from pathlib import Path
from unittest import mock

import aiohttp
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from agentloop import search
from agentloop.contract import WORKFLOW_NAME, AgentRunInput, AgentRunResult, Principal
from agentloop.inbox import InboxOptions, InboxServer, reading
from agentloop.runtime import waiting_memos
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.scripted_provider.server import ScriptedProvider
from agentloop.stream_seals import derived_key
from agentloop.waiting import WAITING_MEMO, WaitingMemo, memo_key
from bench.processes import agentloop_worker
from bench.report import Figure, Section, ratio

USER_HEADER = "X-Bench-User"
USER = "bench-lead"
STARTS_AT_ONCE = 50
WAIT_SECONDS = 900.0
VIEWS = 5
"""Views of the page timed each way after the first (which the old way spends partly reading
each run's start input, kept for later views)."""
ROW = '<tr class="item'
STREAM_KEY = "bench: the worker's stream key"
FAKES_AT_ONCE = 100
CHROMIUM = Path("/usr/bin/chromium")
"""Debian's Chromium (CI installs it); Playwright never downloads a browser of its own here."""


async def measure(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    work: Path,
    runs: int,
    fakes: int,
) -> Section:
    section = Section(
        "inbox",
        f"The inbox page with {runs:,} runs waiting for approval (HTTP GET, whole body)",
        "the same page asking each run its `status`, as before feature inbox-memo (this run)",
    )
    queue = f"bench-inbox-{uuid.uuid4().hex[:8]}"
    tenant = queue  # the bench's runs only, whatever else the server holds
    options = InboxOptions(
        auth_header=USER_HEADER,
        tenants={USER: [tenant]},
        key=memo_key(derived_key(STREAM_KEY)),
    )
    async with agentloop_worker(settings, work, queue, {"AGENTLOOP_STREAM_KEY": STREAM_KEY}):
        started = time.perf_counter()
        gate = asyncio.Semaphore(STARTS_AT_ONCE)
        await asyncio.gather(
            *(_start(client, provider, queue, tenant, n, gate) for n in range(runs))
        )
        await _all_waiting(client, tenant, runs)
        waiting = time.perf_counter() - started
        memo, rendered = await _listed_views(client, options, nullcontext())
        # The inbox before the memo: every run is asked (as if its memo left calls out).
        no_memo = mock.patch.object(reading, "memo_of", _partial_memo)
        asked, rendered_asking = await _listed_views(client, options, no_memo)
        copied = await client.get_workflow_handle(f"{queue}-0").describe()
        prefix = f"{queue}-fake"
        await start_fakes(client, prefix, tenant, fakes, await copied.memo_value(WAITING_MEMO))
        faked, _ = await _listed_views(client, options, nullcontext(), render=False)
        await delete_fakes(client, prefix, fakes)
        await _terminate(client, queue, runs, gate)
    section.add(
        Figure("runs listed (from memos)", memo.rows, runs, ratio(memo.rows, runs)),
        Figure("runs listed (asking each)", asked.rows, runs, ratio(asked.rows, runs)),
        Figure(
            "the inbox's listing, in the background (ms)",
            memo.listing * 1e3,
            asked.listing * 1e3,
            ratio(memo.listing, asked.listing),
        ),
        *_compared("first view", memo.first, asked.first),
        *_compared(f"median of {VIEWS} views", memo.median, asked.median),
        Figure("page bytes", memo.size, asked.size, ratio(memo.size, asked.size)),
        Figure("seconds to start the runs until all wait", round(waiting, 1)),
    )
    per_fake = (faked.listing - memo.listing) / fakes
    section.add(
        Figure(f"runs listed with {fakes:,} fakes", faked.rows, runs, ratio(faked.rows, runs)),
        Figure(
            f"the inbox's listing with {fakes:,} fakes (ms; baseline: none)",
            faked.listing * 1e3,
            memo.listing * 1e3,
            ratio(faked.listing, memo.listing),
        ),
        Figure(
            f"median of {VIEWS} views with {fakes:,} fakes (ms; baseline: none)",
            faked.median[1] * 1e3,
            memo.median[1] * 1e3,
            ratio(faked.median[1], memo.median[1]),
        ),
        Figure("time a fake adds to the listing, none to a view (ms)", per_fake * 1e3),
    )
    if rendered is not None and rendered_asking is not None:
        section.add(
            Figure(
                "rendered in Chromium, load event (ms)",
                rendered * 1e3,
                rendered_asking * 1e3,
                ratio(rendered, rendered_asking),
            )
        )
    else:
        section.skipped.append(f"render in a browser: no Chromium at {CHROMIUM}")
    if memo.median[1] >= 1.0:
        section.add(Figure("goal", "missed", note="lists the runs in under a second"))
    if faked.median[1] >= 2.0:
        section.add(Figure("goal", "missed", note=f"the page within 2 s with {fakes:,} fakes"))
    return section


async def _listed_views(
    client: Client, options: InboxOptions, way: AbstractContextManager[object], render: bool = True
) -> tuple[Views, float | None]:
    """An inbox started `way`, listing once (`listed.WaitingList`): the time from the first
    view to its first listing complete, then the views that answer from it (and the page in
    Chromium)."""
    once = dataclasses.replace(options, refresh=timedelta(hours=1))
    with way:
        async with (
            InboxServer(client, once, "127.0.0.1", 0) as inbox,
            aiohttp.ClientSession(headers={USER_HEADER: USER}) as http,
        ):
            url = f"{inbox.url}/"
            sent = time.perf_counter()
            async with http.get(url) as response:  # starts the listing, waits for it a while
                await response.read()
            while inbox.waiting.listings == 0:
                await asyncio.sleep(0.01)  # a bench's poll: the listing's time, to 10 ms
            listing = time.perf_counter() - sent
            views = await _views(http, url, listing)
            rendered = await _rendered(url) if render else None
    return views, rendered


async def _rendered(url: str) -> float | None:
    """Seconds from asking headless Chromium for the page to its `load` event (every row
    laid out: the page is server-rendered), after one view to warm the browser; None
    without Chromium."""
    if not CHROMIUM.exists():
        return None
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        page = await browser.new_page(extra_http_headers={USER_HEADER: USER})
        await page.goto(url, wait_until="load")
        sent = time.perf_counter()
        await page.goto(url, wait_until="load")
        seconds = time.perf_counter() - sent
        await browser.close()
    return seconds


def _compared(what: str, memo: tuple[float, float], asked: tuple[float, float]) -> list[Figure]:
    """Time to the first byte and to the whole page (ms), from memos against asking each run."""
    return [
        Figure(f"{what}: {label} (ms)", value * 1e3, baseline * 1e3, ratio(value, baseline))
        for label, value, baseline in (
            ("time to first byte", memo[0], asked[0]),
            ("time to whole page", memo[1], asked[1]),
        )
    ]


class Views:
    def __init__(
        self, timings: list[tuple[float, float]], rows: int, size: int, listing: float
    ) -> None:
        self.listing = listing
        """Seconds from the first view to the inbox's first listing complete."""
        self.first = timings[0]
        later = timings[1:]
        self.median = (
            statistics.median(t for t, _ in later),
            statistics.median(w for _, w in later),
        )
        self.rows = rows
        self.size = size


async def _views(http: aiohttp.ClientSession, url: str, listing: float) -> Views:
    """The page viewed `VIEWS + 1` times: (seconds to the first byte, to the last) each."""
    timings = []
    page = b""
    for _ in range(VIEWS + 1):
        sent = time.perf_counter()
        async with http.get(url) as response:
            first = await response.content.readany()
            first_byte = time.perf_counter() - sent
            page = first + await response.read()
            whole = time.perf_counter() - sent
            assert response.status == 200, page[:300]
        timings.append((first_byte, whole))
    return Views(timings, page.count(ROW.encode()), len(page), listing)


_vouched_memo = reading.memo_of


async def _partial_memo(
    client: Client, key: bytes | None, info: WorkflowExecutionInfo
) -> WaitingMemo | None:
    memo = await _vouched_memo(client, key, info)
    return memo.model_copy(update={"left_out": 1}) if memo is not None else None


async def start_fakes(
    client: Client, prefix: str, tenant: str, fakes: int, copied_memo: object
) -> None:
    """`fakes` runs (`PREFIX-N`) as a client that may only start workflows makes them: on a
    task queue no worker polls, said by their search attributes to wait for an approval in
    `tenant`; every other one carries `copied_memo` (a real run's sealed memo)."""
    queue = f"nobody-polls-{uuid.uuid4().hex[:8]}"
    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(search.AGENT_PHASE, "awaiting_approval"),
            SearchAttributePair(search.AGENT_STATUS, "running"),
            SearchAttributePair(search.AGENT_TENANT, tenant),
        ]
    )
    gate = asyncio.Semaphore(FAKES_AT_ONCE)

    async def one(n: int) -> None:
        async with gate:
            await client.start_workflow(
                WORKFLOW_NAME,
                {"task": f"fake {n}"},
                id=f"{prefix}-{n}",
                task_queue=queue,
                search_attributes=attributes,
                memo={WAITING_MEMO: copied_memo} if n % 2 else {},
            )

    await asyncio.gather(*map(one, range(fakes)))


async def delete_fakes(client: Client, prefix: str, fakes: int) -> None:
    """The fakes of `start_fakes` deleted (a replay audit reading the server never sees
    them); any that was never started is skipped."""
    gate = asyncio.Semaphore(FAKES_AT_ONCE)

    async def one(n: int) -> None:
        request = DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=f"{prefix}-{n}"),
        )
        async with gate:
            try:
                await client.workflow_service.delete_workflow_execution(request)
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise

    await asyncio.gather(*map(one, range(fakes)))


async def _start(
    client: Client,
    provider: ScriptedProvider,
    queue: str,
    tenant: str,
    n: int,
    gate: asyncio.Semaphore,
) -> None:
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
        task=f"Answer ticket T-1001 (#{n}).",
        provider="openai-chat",
        model=name,
        tools=["send_reply"],
        principal=Principal(subject="bench", tenant=tenant, scopes=["tickets:write"]),
    )
    async with gate:
        await client.start_workflow(
            WORKFLOW_NAME,
            run_input,
            id=name,
            task_queue=queue,
            result_type=AgentRunResult,
            search_attributes=search.initial(run_input),
        )


async def _all_waiting(client: Client, tenant: str, runs: int) -> None:
    query = waiting_memos.waiting_query([tenant])
    deadline = time.monotonic() + WAIT_SECONDS
    while (count := (await client.count_workflows(query)).count) < runs:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} of {runs} runs wait for approval after {WAIT_SECONDS} s")
        await asyncio.sleep(0.5)


async def _terminate(client: Client, queue: str, runs: int, gate: asyncio.Semaphore) -> None:
    async def one(n: int) -> None:
        async with gate:
            await client.get_workflow_handle(f"{queue}-{n}").terminate("benchmark over")

    await asyncio.gather(*map(one, range(runs)))
