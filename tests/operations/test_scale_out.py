"""Several workers, one PostgreSQL store (issue #21): two worker processes on one task queue
share the store; many runs wait for approval at once, are approved together, and one worker
is killed with SIGKILL while their writes run. Every run completes, each approved write has
exactly one effect at the service, and each transcript reads back from the store whole."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from agentloop.contract import AgentRunResult, Principal
from agentloop.events import ModelOutput, ToolResult
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script
from agentloop.store import load_transcript
from agentloop.store.postgres import PostgresStore, with_search_path
from agentloop.testing.turns import call as scripted_call
from tests.live import Servers, agent_input, scripted
from tests.store.test_store import postgres_url
from tests.support import (
    approve_as_shown,
    result_of,
    start_run,
    wait_for_phase,
    worker_env,
    worker_process,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

RUNS = 50
PRINCIPAL = Principal(subject="agent-7", scopes=["tickets:read", "tickets:write"])
__all__ = ["postgres_url"]  # the fixture, shared with the store's contract tests


@pytest.fixture
def schema(postgres_url: str) -> Iterator[str]:
    name = f"scale_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def reply(n: int) -> Script:
    body = f"Refund {n} is on its way."
    return scripted(
        f"scale-{n}",
        [
            scripted_call(
                "send_reply",
                f"c_reply_{n}",
                ticket_id="T-1001",
                recipient="dana@example.com",
                body=body,
            )
        ],
        f"Replied ({n}).",
    )


async def test_two_workers_on_one_postgres_store_survive_a_sigkill_with_every_write_once(
    servers: Servers,
    worker_settings: Settings,
    postgres_url: str,
    schema: str,
    run_id: str,
    tmp_path: Path,
) -> None:
    settings = worker_settings.model_copy(update={"task_queue": f"scale-{run_id[-8:]}"})
    env = {
        **worker_env(servers.client, settings, tmp_path / "unused.db"),
        "AGENTLOOP_STORE_URL": with_search_path(postgres_url, schema),
    }
    suffix = run_id[-8:]
    async with worker_process(env) as first, worker_process(env):
        handles = []
        for n in range(RUNS):
            script = reply(n).model_copy(update={"name": f"scale-{n}-{suffix}"})
            servers.provider.register(script)
            run_input = agent_input(
                script.name,
                "openai-chat",
                "Answer ticket T-1001.",
                ["send_reply"],
                principal=PRINCIPAL,
            )
            handles.append(await start_run(servers.client, settings, f"{run_id}-{n}", run_input))
        views = await asyncio.gather(*(wait_for_phase(h, "awaiting_approval") for h in handles))
        for handle, view in zip(handles, views, strict=True):
            [pending] = view.pending_approvals
            await approve_as_shown(handle, pending, "support-lead")
        # One worker dies while the approved writes run (the other finishes every run).
        first.send_signal(signal.SIGKILL)
        await first.wait()
        results: list[AgentRunResult] = await asyncio.gather(*(result_of(h) for h in handles))
    assert [r.status for r in results] == ["completed"] * RUNS, [r.stop_reason for r in results]
    for result in results:
        [write] = result.calls
        assert write.status in ("succeeded", "confirmed_after_query"), write
    # Each approved write had exactly one effect at the service.
    assert servers.service.records()["replies_by_ticket"] == {"T-1001": RUNS}
    replies = [r for r in servers.service.stats()["requests"] if r["endpoint"] == "support.reply"]
    assert len({r["path"] for r in replies}) == 1 and len(replies) == RUNS  # none sent twice
    # Each transcript reads back from the shared store: the reply's result under its id, then
    # the final answer.
    store = PostgresStore(postgres_url, schema=schema)
    try:
        for n, result in enumerate(results):
            events = await load_transcript(store, result.transcript_head)
            answered = [e.call_id for e in events if isinstance(e, ToolResult)]
            assert answered == [f"c_reply_{n}"], answered
            assert isinstance(events[-1], ModelOutput) and events[-1].text == f"Replied ({n})."
    finally:
        await store.close()
