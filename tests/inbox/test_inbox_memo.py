"""The inbox lists waiting runs from the memo each keeps, not by asking
each its `status`: with the worker stopped (a `status` query then has nobody to answer it),
the list still holds every waiting call with its tool, who may decide, the task and when the
wait times out. Against the real dev server, worker and scripted provider."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    Principal,
    UserMessage,
)
from agentloop.inbox import InboxOptions
from agentloop.inbox.reading import WaitingItem, waiting_items
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from agentloop.waiting import WAITING_MEMO
from agentloop.worker import running_worker
from tests.live import Servers, agent_input, scripted
from tests.support import result_of, start_run, wait_for_phase, wait_for_status

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
TENANT = "tenant-memo"
WAIT = timedelta(seconds=2)


def booking(scripted_provider: ScriptedProvider, name: str, tenant: str = TENANT) -> AgentRunInput:
    """A run (of `tenant`) whose reservation waits for the workshop lead's approval."""
    call = scripted_call("reserve_seat", "c_res", **RESERVE)
    scripted_provider.register(scripted(name, [call], "Booked."))
    return agent_input(
        name,
        "openai-chat",
        "Book p-carol into ws-101. " + "Context. " * 40,
        ["reserve_seat"],
        principal=Principal(subject="p-alice", tenant=tenant, scopes=["workshops:write"]),
    )


def asking(scripted_provider: ScriptedProvider, name: str) -> AgentRunInput:
    """A run asking two questions in one step."""
    calls = [scripted_call("ask_user", f"c_q{n}", question=f"Question {n}?") for n in (1, 2)]
    scripted_provider.register(scripted(name, ScriptTurn(tool_calls=calls), "Thanks."))
    return agent_input(
        name, "openai-chat", "Ask twice.", [], principal=Principal(subject="p-alice", tenant=TENANT)
    )


async def listed(
    client: Client, run_ids: set[str], holds: Callable[[list[WaitingItem]], bool]
) -> list[WaitingItem]:
    """The inbox's items of `run_ids` once `holds` says they are as expected (the dev server
    indexes an upsert a moment after the workflow task that made it; bounded)."""
    items: list[WaitingItem] = []
    for _ in range(100):
        every = await waiting_items(client, InboxOptions().memo_key(), [TENANT], WAIT)
        items = [i for i in every.items if i.workflow_id in run_ids]
        if holds(items):
            return items
        await asyncio.sleep(0.1)
    raise AssertionError(f"the inbox never listed what was expected: {items}")


async def memo_of(handle: WorkflowHandle[Any, AgentRunResult]) -> Any:
    return await (await handle.describe()).memo_value(WAITING_MEMO, None)


async def test_the_inbox_lists_waiting_runs_from_their_memo_with_no_worker_to_ask(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    settings = worker_settings.model_copy(update={"task_queue": f"memo-{run_id[-8:]}"})
    book_id, ask_id = f"{run_id}-book", f"{run_id}-ask"
    async with running_worker(servers.client, settings):
        book = await start_run(
            servers.client, settings, book_id, booking(servers.provider, book_id)
        )
        ask = await start_run(servers.client, settings, ask_id, asking(servers.provider, ask_id))
        booked = await wait_for_phase(book, "awaiting_approval")
        await wait_for_phase(ask, "awaiting_input")
        # The first question answered, the run waits on for the second: its memo says so.
        await ask.signal("message", UserMessage(text="One.", sender="traveller"))
        asked = await wait_for_status(ask, lambda v: v.question == "Question 2?", "question 2")
        both = {book_id, ask_id}
        items = await listed(
            servers.client, both, lambda i: {x.text for x in i} == {"", "Question 2?"}
        )
    # No worker polls the queue now: a `status` query would find nobody to answer it.
    assert items == await listed(servers.client, both, lambda i: len(i) == 2)
    approval, question = sorted(items, key=lambda i: i.kind)
    assert (approval.workflow_id, approval.kind) == (book_id, "approval")
    assert (approval.tool, approval.call_id) == ("reserve_seat", "c_res")
    assert approval.approvers == ["workshop-lead"]
    assert approval.tenant == TENANT
    assert approval.task.startswith("Book p-carol into ws-101.") and approval.task.endswith("…")
    assert len(approval.task) == 120  # the memo holds the task's start
    assert approval.since == booked.pending_approvals[0].requested_at
    assert approval.until == booked.wait_until
    assert (question.workflow_id, question.kind, question.tool) == (ask_id, "question", "ask_user")
    assert (question.call_id, question.text) == ("c_q2", "Question 2?")
    assert question.until == asked.wait_until and question.task == "Ask twice."
    now = datetime.now(UTC)
    assert approval.times_out(now).startswith("in ") and approval.waited(now).endswith(" s")

    # Served again, the runs go on; once the wait is over, the memo no longer says it waits.
    async with running_worker(servers.client, settings):
        digest = booked.pending_approvals[0].args_digest
        decision = ApprovalDecision(
            call_id="c_res", args_digest=digest, approved=True, approver="workshop-lead"
        )
        await book.signal("approve", decision)
        await ask.signal("message", UserMessage(text="Two.", sender="traveller"))
        results = [await result_of(book), await result_of(ask)]
    assert [r.status for r in results] == ["completed", "completed"]
    assert [await memo_of(book), await memo_of(ask)] == [None, None]
