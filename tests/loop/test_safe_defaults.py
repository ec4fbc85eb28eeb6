"""Safe when forgotten: a tool that does not say its effect is a write, end to end (a real dev
server, the scripted provider over HTTP, the example service as the system of record); and a
worker says at start what each of its tools is taken for."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from agentloop.contract import AgentRunResult, ResolveRequest
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider
from agentloop.testing.turns import call as scripted_call
from agentloop.tools.source import NO_LOOKUP
from agentloop.worker import running_worker
from tests.live import Servers, agent_input, scripted
from tests.support import (
    result_of,
    start_run,
    wait_for_phase,
    waited_for,
    worker_env,
    worker_process,
    write_key,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

UNDECLARED = "tests.undeclared_tools"
CALL_ID = "call_book"
SEAT = {"workshop_id": "ws-101", "participant_id": "p-alice"}


@pytest.fixture
async def undeclared(client: Client, worker_settings: Settings) -> AsyncIterator[Settings]:
    """A worker serving the example tools and the undeclared ones, on a queue of its own."""
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"undeclared-{uuid.uuid4().hex[:8]}",
            "tools": f"agentloop.demo.tools,{UNDECLARED}",
        }
    )
    async with running_worker(client, settings):
        yield settings


async def book(
    client: Client, settings: Settings, provider: ScriptedProvider, run_id: str, tool: str
) -> WorkflowHandle[Any, AgentRunResult]:
    provider.register(
        scripted(
            run_id,
            [scripted_call(tool, CALL_ID, **SEAT)],
            "Booked.",
        )
    )
    run_input = agent_input(run_id, "openai-chat", "Book me.", [tool])
    return await start_run(client, settings, run_id, run_input)


def bookings(example_service: ExampleService) -> tuple[int, int]:
    """(reservation requests the service got, reservations it holds)."""
    counts = example_service.stats()["counts"]
    return counts["workshops.reserve"], int(example_service.records()["reservations"])


async def test_an_undeclared_tool_failing_after_its_commit_is_looked_up_never_retried(
    servers: Servers, undeclared: Settings, run_id: str
) -> None:
    """Before, it was a read: sent again (three attempts, no key) after the commit."""
    held = bookings(servers.service)[1]
    handle = await book(servers.client, undeclared, servers.provider, run_id, "book_seat")
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert bookings(servers.service) == (1, held + 1)  # one request, one effect
    assert servers.service.stats()["counts"]["workshops.operation"] == 1
    [call] = result.calls
    key = write_key(handle, CALL_ID)
    assert (call.status, call.attempts, call.idempotency_key) == ("confirmed_after_query", 1, key)
    [effect] = result.side_effects
    assert (effect.idempotency_key, effect.status) == (key, "confirmed_after_query")


async def test_an_undeclared_tool_without_a_lookup_waits_for_an_operator(
    servers: Servers, undeclared: Settings, run_id: str
) -> None:
    held = bookings(servers.service)[1]
    handle = await book(servers.client, undeclared, servers.provider, run_id, "book_seat_unchecked")
    view = await wait_for_phase(handle, "awaiting_reconciliation")

    [waiting] = view.unresolved
    key = write_key(handle, CALL_ID)
    assert (waiting.call_id, waiting.idempotency_key) == (CALL_ID, key)
    assert bookings(servers.service) == (1, held + 1)
    assert len(servers.provider.requests) == 1  # the model is not asked while it waits

    await handle.signal(
        "resolve", ResolveRequest(call_id=CALL_ID, outcome="applied", operator="ops")
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    [call] = result.calls
    assert (call.status, call.attempts) == ("confirmed_after_query", 1)
    assert bookings(servers.service) == (1, held + 1)


async def test_a_worker_says_at_start_each_tools_effect_and_which_writes_wait_for_an_operator(
    client: Client, worker_settings: Settings, tmp_path: Path
) -> None:
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"printout-{uuid.uuid4().hex[:8]}",
            "tools": f"agentloop.demo.tools,{UNDECLARED}",
        }
    )
    env = worker_env(client, settings, tmp_path / "store.db")
    # Never reached: a worker opens no MCP connection before a run names the server's tools.
    env["AGENTLOOP_MCP_SERVERS"] = json.dumps({"tickets": {"url": "http://127.0.0.1:9/mcp"}})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    lines: dict[str, list[str]] = {}
    async with worker_process(env, drained=False) as process:
        assert process.stdout is not None
        while "tickets_*" not in lines:
            line = (
                await waited_for(process.stdout.readline(), f"the next tool line after {lines}")
            ).decode()
            assert line, f"the worker stopped printing: {lines}"
            name, *said = line.split()
            lines[name] = said
    assert lines["get_weather"] == ["read"]
    assert lines["reserve_seat"] == ["write", "looked", "up"]
    assert lines["book_seat"] == ["write", "looked", "up"]
    assert lines["book_seat_unchecked"] == ["write", *NO_LOOKUP.split()]
    assert lines["tickets_*"][: 1 + len(NO_LOOKUP.split())] == ["write", *NO_LOOKUP.split()]
    assert "MCP server tickets" in " ".join(lines["tickets_*"])
