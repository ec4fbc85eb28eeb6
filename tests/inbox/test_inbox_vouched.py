"""The inbox lists only runs a worker vouches for (issue 44, problem 7): a client that may only
start workflows starts 2,000 `AgentRun`s on a task queue nobody polls, with the waiting phase
and a tenant as search attributes (some with a real run's memo copied on), and the real
approval is still listed, the page answers, and no fake is asked anything: no `status` query,
no `describe`, no history read (counted at the client). A run opened that does not answer is
shown as such, and every wait on a run is bounded by the inbox's setting. Against the real dev
server and worker; the fakes are deleted at the end (the session's replay audit never reads
them). The page's timing with and without the fakes is `make bench` section 14's."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from temporalio.client import (
    Client,
    DescribeWorkflowInput,
    FetchWorkflowHistoryEventsInput,
    Interceptor,
    OutboundInterceptor,
    QueryWorkflowInput,
    WorkflowHistoryEventAsyncIterator,
)

from agentloop.inbox import InboxOptions, InboxServer
from agentloop.inbox.pages import counts_text
from agentloop.inbox.reading import (
    Listing,
    RunInputs,
    Waiting,
    WaitingItem,
    asked_items,
    read_story,
)
from agentloop.runtime.config import Settings
from agentloop.runtime.waiting_memos import waiting_query
from agentloop.stream_seals import derived_key
from agentloop.waiting import WAITING_MEMO, WaitingMemo, memo_key, sealed_memo, vouched
from agentloop.worker import running_worker
from bench import inbox as bench_inbox
from tests.cli.test_cli import agentloop, process_env
from tests.inbox.test_inbox_memo import booking
from tests.live import Live
from tests.support import eventually, start_run, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

FAKES = 2_000
WAIT = timedelta(seconds=0.5)
USER_HEADER = "X-Inbox-User"


class Asked(Interceptor):
    """Counts, by workflow id, what a client asks of runs: queries (with their timeout),
    describes and history reads."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self.query_timeouts: list[timedelta | None] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Counting(next, self)


class _Counting(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, counts: Asked) -> None:
        super().__init__(next)
        self.counts = counts

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self.counts.asked[input.id] += 1
        self.counts.query_timeouts.append(input.rpc_timeout)
        return await super().query_workflow(input)

    async def describe_workflow(self, input: DescribeWorkflowInput) -> Any:
        self.counts.asked[input.id] += 1
        return await super().describe_workflow(input)

    def fetch_workflow_history_events(
        self, input: FetchWorkflowHistoryEventsInput
    ) -> WorkflowHistoryEventAsyncIterator:
        self.counts.asked[input.id] += 1
        return super().fetch_workflow_history_events(input)


def counting(client: Client, counts: Asked) -> Client:
    """`client`, its asks of runs counted in `counts` (it holds no key of any kind)."""
    return Client(
        client.service_client,
        namespace=client.namespace,
        data_converter=client.data_converter,
        interceptors=[counts],
    )


async def delete_fakes(client: Client, prefix: str, tenant: str) -> None:
    """The fakes deleted, and gone from visibility (the session's replay audit lists it)."""
    await bench_inbox.delete_fakes(client, prefix, FAKES)
    query = waiting_query([tenant]) + f" AND WorkflowId STARTS_WITH '{prefix}'"

    async def gone() -> bool:
        return (await client.count_workflows(query)).count == 0

    await eventually(gone, "the fakes gone from visibility")


async def test_two_thousand_fake_waiting_runs_are_neither_listed_nor_asked(
    live: Live, run_id: str
) -> None:
    tenant = f"vouched-{run_id[-8:]}"
    real_id, prefix = f"{run_id}-real", f"{run_id}-fake"
    real = await start_run(
        live.client, live.worker, real_id, booking(live.provider, real_id, tenant)
    )
    await wait_for_phase(real, "awaiting_approval")
    copied = await (await real.describe()).memo_value(WAITING_MEMO)
    assert copied["seal"]  # the real run's memo, sealed by its worker
    counted = Asked()
    keyless = counting(live.client, counted)
    await bench_inbox.start_fakes(keyless, prefix, tenant, FAKES, copied)
    try:
        everyone = waiting_query([tenant])

        async def all_listed() -> bool:
            return (await live.client.count_workflows(everyone)).count == FAKES + 1

        await eventually(all_listed, "the fakes in visibility")
        # Listed once only (the next listing an hour later): every view reads that one.
        options = InboxOptions(
            auth_header=USER_HEADER,
            tenants={"lead": [tenant]},
            wait=WAIT,
            refresh=timedelta(hours=1),
        )
        async with (
            InboxServer(keyless, options, "127.0.0.1", 0) as inbox,
            aiohttp.ClientSession(headers={USER_HEADER: "lead"}) as http,
        ):
            async with http.get(inbox.url + "/api/inbox") as response:  # starts the listing
                assert response.status == 200

            async def listed() -> bool:
                return inbox.waiting.listings == 1

            await eventually(listed, "the inbox's first listing")
            for path in ("/", "/api/inbox", "/"):  # the page, and what its 2 s poll reads
                async with http.get(inbox.url + path) as response:
                    body = await response.text()
                    assert response.status == 200, body[:300]
                assert body.count('<tr class="item') == 1 and f">{real_id}</a>" in body
                assert f"{FAKES:,} runs said to wait that no worker vouches for" in body
                assert re.search(r'id="counts">listed \d+ s ago: 1 waiting', body), body[:300]
            assert inbox.waiting.listings == 1  # no view listed visibility itself
            assert not any(k.startswith(prefix) for k in counted.asked), counted.asked

        # A fake opened by its address is read as any run, and shown as not answering,
        # within the inbox's wait (the one query it is sent carries that timeout).
        fake = f"{prefix}-1"
        story = await read_story(keyless, RunInputs(), fake, WAIT)
        assert story.view is None and (story.failure or "").startswith("status unreadable")
        assert counted.query_timeouts == [WAIT]
    finally:
        await delete_fakes(live.client, prefix, tenant)
        await real.terminate("test over")


async def test_a_vouched_run_is_asked_its_status_only_within_the_inbox_wait(
    live: Live, run_id: str
) -> None:
    """A run whose memo left calls out is asked its `status` within the inbox's wait; with
    nobody to answer for it, it is not asked longer (and `waiting_items` shows it from its
    memo, naming it as not answering)."""
    tenant = f"silent-{run_id[-8:]}"
    settings = live.worker.model_copy(update={"task_queue": f"silent-{run_id[-8:]}"})
    counted = Asked()
    asking = counting(live.client, counted)
    async with running_worker(live.client, settings):
        real = await start_run(
            live.client, settings, run_id, booking(live.provider, run_id, tenant)
        )
        await wait_for_phase(real, "awaiting_approval")
        memo = WaitingMemo.model_validate(await (await real.describe()).memo_value(WAITING_MEMO))
        assert await asked_items(asking, [(run_id, memo)], WAIT) != {}  # served: it answers
    # No worker polls its queue now: the query gets no answer within the wait.
    assert await asked_items(asking, [(run_id, memo)], WAIT) == {}
    assert counted.query_timeouts == [WAIT, WAIT]
    await real.terminate("test over")


def test_a_memo_holds_only_for_the_run_and_worker_key_it_was_sealed_for() -> None:
    key = memo_key(derived_key("the workers' stream key"))
    memo = {"run_id": "r1", "tenant": "acme", "task": "Book.", "calls": [], "left_out": 0}
    sealed = sealed_memo(key, "wf-1", memo)
    assert vouched(key, "wf-1", sealed)
    assert not vouched(key, "wf-2", sealed)  # copied onto another workflow
    assert not vouched(key, "wf-1", {**sealed, "tenant": "globex"})
    assert not vouched(memo_key(derived_key("another key")), "wf-1", sealed)
    assert not vouched(key, "wf-1", memo) and not vouched(None, "wf-1", sealed)
    assert sealed_memo(None, "wf-1", sealed) == memo  # a replay without the key: unsealed


async def test_a_production_inbox_needs_its_key_and_keys_inbox_derives_it() -> None:
    problems = Settings(env="production").inbox_problems()
    assert len(problems) == 1 and "AGENTLOOP_INBOX_KEY" in problems[0]
    assert Settings(env="production", inbox_key="ab" * 32).inbox_problems() == []
    assert Settings().inbox_problems() == []
    printed = await agentloop("keys", "inbox", env=process_env(AGENTLOOP_STREAM_KEY="s3cret"))
    assert printed.returncode == 0, printed.explain()
    key = memo_key(derived_key("s3cret"))
    assert key is not None and printed.stdout.strip() == key.hex()
    as_json = await agentloop(
        "keys", "inbox", "--json", env=process_env(AGENTLOOP_STREAM_KEY="s3cret")
    )
    assert json.loads(as_json.stdout) == {"inbox_key": key.hex()}, as_json.explain()
    refused = await agentloop("inbox", env=process_env(AGENTLOOP_ENV="production"))
    assert refused.returncode == 2 and "AGENTLOOP_INBOX_KEY" in refused.stderr, refused.explain()


def test_the_counts_say_what_was_left_out_and_why() -> None:
    """Runs not vouched for are counted (and, with no key to check, the page says so); runs
    that did not answer are named."""
    silent = [f"run-{n}" for n in range(7)]
    listed_at = datetime(2026, 1, 1, tzinfo=UTC)
    now = listed_at + timedelta(seconds=3)
    text = counts_text([], Waiting(unvouched=1, silent=silent, listed_at=listed_at), now)
    assert text.startswith("listed 3 s ago: 0 waiting: ")
    assert "not answering, shown from what they last wrote: run-0, run-1" in text
    assert "run-4 and 2 more" in text and "run-5" not in text
    assert text.endswith("; 1 run said to wait that no worker vouches for (not listed)")
    keyless = counts_text([], Waiting(unvouched=2_000, keyless=True, listed_at=listed_at), now)
    assert keyless.endswith(
        "2,000 runs said to wait that no worker vouches for (not listed): this inbox has no"
        " AGENTLOOP_INBOX_KEY to check them with"
    )


def test_a_listing_is_cut_to_each_viewers_tenants() -> None:
    """One listing of every tenant serves every viewer: each sees the items, the runs not
    vouched for (by the tenant their search attribute names) and the silent runs of their
    own tenants only; before the first listing, the page says it is still listing."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    item = WaitingItem("wf-a", "approval", "acme", "Book.", "reserve", "c1", [], at)
    listing = Listing(
        items=[item, replace(item, workflow_id="wf-g", tenant="globex")],
        unvouched=Counter({"acme": 3, "globex": 5, "": 1}),
        silent={"wf-a": "acme", "wf-g": "globex"},
        keyless=False,
        listed_at=at,
    )
    acme = listing.seen_by(["acme"])
    assert [i.workflow_id for i in acme.items] == ["wf-a"]
    assert acme.unvouched == 3 and acme.silent == ["wf-a"] and acme.listed_at == at
    assert listing.seen_by([]) == Waiting(listed_at=at)
    everyone = listing.seen_by(None)
    assert len(everyone.items) == 2 and everyone.unvouched == 9 and len(everyone.silent) == 2
    assert counts_text([], Waiting(), at) == (
        "the waiting runs are still being listed: they show here in a moment"
    )
