"""Exactly-once writes end to end: a real dev server, the scripted provider over HTTP, and the
example service as the system of record, with faults injected on its write and lookup endpoints.

For both example writes (`reserve_seat`, `send_reply`) the same five cases: the answer lost
after the commit (dropped connection, hung response), a refusal before the commit, a lookup that
cannot answer (the run waits for an operator), and an operator who never comes. Every case
checks what the system of record holds and how often its endpoints were hit, not only the run's
status: "exactly once" is a fact about the world, not about the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from temporalio.client import Client, WorkflowHandle

from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    CallRecord,
    PendingCall,
    Principal,
    ResolveRequest,
    RunStatusView,
    SideEffect,
)
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.workflows.steps import LOOKUP_RETRY
from tests.support import result_of, start_run, wait_for_phase, wait_until, write_key

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

CALL_ID = "call_write"
ALL_SCOPES = ["workshops:read", "workshops:write", "tickets:read", "tickets:write"]
LOOKUP_OUTAGE = 50
"""Requests the operation endpoint refuses in the "lookup unavailable" cases: far more than
the lookup activity's attempts (3), so no retry can get an answer."""
HANG_MS = 8_000
"""Longer than the session worker's 2 s HTTP timeout: the client gives up first."""


@dataclass(frozen=True)
class WriteCase:
    """One example write tool and where its effects show in the system of record."""

    tool: str
    arguments: dict[str, Any]
    write_endpoint: str
    lookup_endpoint: str
    record_kind: str
    """The key of `example_service.records()` that counts this write's records."""
    approver: str


RESERVE = WriteCase(
    tool="reserve_seat",
    arguments={"workshop_id": "ws-101", "participant_id": "p-carol"},
    write_endpoint="workshops.reserve",
    lookup_endpoint="workshops.operation",
    record_kind="reservations",
    approver="workshop-lead",
)
REPLY = WriteCase(
    tool="send_reply",
    arguments={
        "ticket_id": "T-1001",
        "recipient": "dana@example.com",
        "body": "Your refund has been issued.",
    },
    write_endpoint="support.reply",
    lookup_endpoint="support.operation",
    record_kind="replies",
    approver="anyone-on-call",
)

both_writes = pytest.mark.parametrize("case", [RESERVE, REPLY], ids=lambda c: c.tool)


def write_script(name: str, case: WriteCase, expect_in_result: str) -> Script:
    """Turn 1 proposes the write; turn 2 is a final text. `expect_in_result` must appear in
    the write's result as the model receives it (checked by the provider)."""
    return Script(
        name=name,
        turns=[
            ScriptTurn(
                tool_calls=[ScriptedToolCall(id=CALL_ID, name=case.tool, arguments=case.arguments)],
                expect_tool_results={CALL_ID: expect_in_result},
            ),
            ScriptTurn(text="Done."),
        ],
    )


def run_input(model: str, case: WriteCase, **overrides: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": f"Please {case.tool}.",
            "provider": "openai-chat",
            "model": model,
            "tools": [case.tool],
            "principal": Principal(subject="p-alice", scopes=ALL_SCOPES),
            **overrides,
        }
    )


async def start_and_approve(
    client: Client,
    settings: Settings,
    example_service: ExampleService,
    run_id: str,
    case: WriteCase,
    **overrides: Any,
) -> WorkflowHandle[Any, AgentRunResult]:
    """Start the run, wait until the write waits for approval, approve it (nothing written
    before that)."""
    handle = await start_run(client, settings, run_id, run_input(run_id, case, **overrides))
    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    assert (pending.call_id, pending.tool) == (CALL_ID, case.tool)
    assert records(example_service, case) == 0
    await handle.signal(
        "approve",
        ApprovalDecision(
            call_id=CALL_ID,
            args_digest=pending.args_digest,
            approved=True,
            approver=case.approver,
        ),
    )
    return handle


def records(example_service: ExampleService, case: WriteCase) -> int:
    return int(example_service.records()[case.record_kind])


def counts(example_service: ExampleService) -> dict[str, int]:
    found: dict[str, int] = example_service.stats()["counts"]
    return found


def the_call(calls: list[CallRecord]) -> CallRecord:
    return {c.call_id: c for c in calls}[CALL_ID]


CONFIRMED_BY = {
    "succeeded": "the system's response",
    "confirmed_after_query": "lookup by idempotency key",
    "unknown": "not confirmed: outcome unknown",
}


def check_effect(
    result: AgentRunResult, key: str, case: WriteCase, status: str, confirmed_by: str = ""
) -> None:
    """The write is in `side_effects` exactly once, under its key, with `status`, and the
    report says how it was confirmed."""
    [effect] = result.side_effects
    assert effect == SideEffect(
        call_id=CALL_ID,
        tool=case.tool,
        idempotency_key=key,
        status=status,
        confirmed_by=confirmed_by or CONFIRMED_BY[status],
    )
    assert f"{case.tool} {CALL_ID}: {status}" in result.report


@both_writes
@pytest.mark.parametrize("fault", ["commit_then_drop", "commit_then_hang"])
async def test_an_answer_lost_after_the_commit_is_confirmed_by_lookup_not_resent(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
    case: WriteCase,
    fault: str,
) -> None:
    # The model is given the record the lookup found: it carries the idempotency key.
    scripted_provider.register(write_script(run_id, case, f"{run_id}/"))
    hang = {"hang_ms": HANG_MS} if fault == "commit_then_hang" else {}
    example_service.inject_fault(case.write_endpoint, fault, **hang)

    handle = await start_and_approve(client, worker, example_service, run_id, case)
    key = write_key(handle, CALL_ID)
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert result.output == "Done."
    assert records(example_service, case) == 1
    found = counts(example_service)
    assert found[case.write_endpoint] == 1  # never sent a second time
    assert found[case.lookup_endpoint] == 1
    call = the_call(result.calls)
    assert (call.status, call.attempts, call.idempotency_key) == ("confirmed_after_query", 1, key)
    check_effect(result, key, case, "confirmed_after_query")
    assert example_service.stats()["faults"] == {}  # the fault was consumed by the one write
    # At the service the write was logged without an answer delivered: dropped, or abandoned
    # by the client that gave up waiting (the service then cancels the hung response).
    await wait_until(
        lambda: all(r["finished_seq"] is not None for r in example_service.stats()["requests"]),
        "the abandoned write to be logged as finished",
    )
    [write] = [
        r for r in example_service.stats()["requests"] if r["endpoint"] == case.write_endpoint
    ]
    assert write["status"] is None


@both_writes
async def test_a_write_refused_before_the_commit_is_sent_again_with_the_same_key(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
    case: WriteCase,
) -> None:
    scripted_provider.register(write_script(run_id, case, f"{run_id}/"))
    example_service.inject_fault(case.write_endpoint, "fail_before_commit")

    handle = await start_and_approve(client, worker, example_service, run_id, case)
    key = write_key(handle, CALL_ID)
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert records(example_service, case) == 1
    stats = example_service.stats()
    assert stats["counts"][case.write_endpoint] == 2
    assert stats["counts"][case.lookup_endpoint] == 1
    # The order at the service: refused write, lookup says absent (404), the write again.
    seen = [
        (r["endpoint"], r["status"])
        for r in stats["requests"]
        if r["endpoint"] in (case.write_endpoint, case.lookup_endpoint)
    ]
    assert seen == [
        (case.write_endpoint, 503),
        (case.lookup_endpoint, 404),
        (case.write_endpoint, 200),
    ]
    call = the_call(result.calls)
    assert (call.status, call.attempts, call.idempotency_key) == ("succeeded", 2, key)
    check_effect(result, key, case, "succeeded")
    # The one record is the one made under the run's key for this call.
    held = await operation(example_service, case, key)
    assert held["state"] == "applied"
    assert held["record"]["operation_id"] == key


async def operation(example_service: ExampleService, case: WriteCase, key: str) -> Any:
    """What the system of record holds under `key` (`GET /<domain>/operations/{key}`)."""
    domain = case.lookup_endpoint.split(".")[0]
    url = f"{example_service.base_url}/{domain}/operations/{quote(key, safe='')}"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


@both_writes
async def test_a_brief_lookup_outage_is_ridden_out_by_the_lookups_retries(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
    case: WriteCase,
) -> None:
    scripted_provider.register(write_script(run_id, case, f"{run_id}/"))
    example_service.inject_fault(case.write_endpoint, "commit_then_drop")
    example_service.inject_fault(case.lookup_endpoint, "unavailable", count=1)

    handle = await start_and_approve(client, worker, example_service, run_id, case)
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert records(example_service, case) == 1
    assert counts(example_service)[case.write_endpoint] == 1
    assert counts(example_service)[case.lookup_endpoint] == 2
    assert the_call(result.calls).status == "confirmed_after_query"
    assert (await handle.query("status", result_type=RunStatusView)).refused_decisions == []


@both_writes
async def test_an_inconclusive_lookup_waits_for_the_operator_and_never_resends(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
    case: WriteCase,
) -> None:
    scripted_provider.register(write_script(run_id, case, "workshop-lead says applied"))
    example_service.inject_fault(case.write_endpoint, "commit_then_drop")
    example_service.inject_fault(case.lookup_endpoint, "unavailable", count=LOOKUP_OUTAGE)

    handle = await start_and_approve(client, worker, example_service, run_id, case)
    key = write_key(handle, CALL_ID)
    view = await wait_for_phase(handle, "awaiting_reconciliation")
    [waiting] = view.unresolved
    assert (waiting.call_id, waiting.tool, waiting.idempotency_key) == (
        CALL_ID,
        case.tool,
        key,
    )
    assert waiting.arguments == case.arguments
    assert "inconclusive" in waiting.known
    assert the_call(view.calls).status == "unknown"
    # The write did commit; nothing was resent while the lookup failed.
    assert records(example_service, case) == 1
    assert counts(example_service)[case.write_endpoint] == 1
    # The lookup was retried by its own policy before anyone was asked.
    assert counts(example_service)[case.lookup_endpoint] == LOOKUP_RETRY.maximum_attempts
    assert len(scripted_provider.requests) == 1  # the model is not asked while it waits

    await handle.signal(
        "resolve", ResolveRequest(call_id=CALL_ID, outcome="applied", operator="workshop-lead")
    )
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert records(example_service, case) == 1
    assert counts(example_service)[case.write_endpoint] == 1
    call = the_call(result.calls)
    assert (call.status, call.attempts, call.idempotency_key) == ("confirmed_after_query", 1, key)
    assert "resolved: workshop-lead says applied" in call.decision
    assert call.resolution is not None
    assert (call.resolution.operator, call.resolution.outcome) == ("workshop-lead", "applied")
    confirmed_by = "operator (workshop-lead says applied)"
    check_effect(result, key, case, "confirmed_after_query", confirmed_by)


@both_writes
async def test_no_operator_before_the_reconciliation_timeout_stops_the_run_unresolved(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    run_id: str,
    case: WriteCase,
) -> None:
    scripted_provider.register(write_script(run_id, case, f"{run_id}/"))
    example_service.inject_fault(case.write_endpoint, "commit_then_drop")
    example_service.inject_fault(case.lookup_endpoint, "unavailable", count=LOOKUP_OUTAGE)

    handle = await start_and_approve(
        client, worker, example_service, run_id, case, reconciliation_timeout_seconds=2
    )
    key = write_key(handle, CALL_ID)
    result = await result_of(handle)

    assert result.status == "unresolved", result.stop_reason
    assert CALL_ID in result.stop_reason
    assert result.pending == [PendingCall(call_id=CALL_ID, tool=case.tool, status="unknown")]
    call = the_call(result.calls)
    assert (call.status, call.attempts, call.idempotency_key) == ("unknown", 1, key)
    check_effect(result, key, case, "unknown")
    # The commit happened (once); the run did not pretend otherwise, nor send it again.
    assert records(example_service, case) == 1
    assert counts(example_service)[case.write_endpoint] == 1
    assert len(scripted_provider.requests) == 1
    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "finished"
