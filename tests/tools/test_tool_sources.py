"""A fourth kind of tool source, written against the protocol alone (`ToolSource`): a toy
ledger whose tools are named `ledger_*`, registered beside the team's own tools and run by a
real AgentRun on the real Temporal dev server. Nothing of `agentloop.activities` or
`agentloop.workflows` knows it: the registry routes its names, and the worker's activities
run its read, its write, and the lookup of that write's lost answer."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentloop.client import start_run
from agentloop.contract import AgentRunInput, AgentRunResult
from agentloop.events import ToolResult
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.store import load_transcript, open_store
from agentloop.testing.turns import call as scripted_call
from agentloop.tool_spec import Outcome, ToolSpec
from agentloop.tools.contract import OutcomeUnknown, Tool, ToolContext
from agentloop.tools.plugins import build_toolbox
from agentloop.tools.source import Offer, ToolLine, ToolSource, ToolSourceError
from agentloop.worker import running_worker, tool_effects
from tests.live import Servers, agent_input, scripted
from tests.support import result_of, write_key

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

ACCOUNT = {"account": "acme"}
BALANCE = scripted_call("ledger_balance", "c_balance", **ACCOUNT)
CREDIT = scripted_call("ledger_credit", "c_credit", account="acme", amount=40)
ARGUMENTS = {
    "type": "object",
    "properties": {"account": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["account"],
    "additionalProperties": False,
}


class Ledger:
    """The toy source: an in-memory ledger whose credit's first answer is always lost (it is
    applied, then the connection drops), so the run has to ask the ledger by its key."""

    name = "ledger"

    def __init__(self) -> None:
        self.balances = {"acme": 100}
        self.credits: dict[str, int] = {}
        """Idempotency key -> amount: each write the ledger applied."""
        self.executions: Counter[str] = Counter()
        """Tool (and `lookup`) -> how often the worker ran it."""
        self.call_ids: list[tuple[str, str]] = []
        self.specs = {
            "ledger_balance": ToolSpec(
                name="ledger_balance", description="An account's balance.", parameters=ARGUMENTS
            ),
            "ledger_credit": ToolSpec(
                name="ledger_credit",
                description="Credit an account.",
                parameters=ARGUMENTS,
                effect="write",
                has_outcome_lookup=True,
            ),
        }

    def owns(self, name: str) -> bool:
        return name.startswith("ledger_")

    async def offer(self, names: Sequence[str]) -> Offer:
        missing = [name for name in names if name not in self.specs]
        if missing:
            raise ToolSourceError(f"tools: the ledger has no tool {missing[0]!r}")
        return Offer([self.specs[name] for name in names])

    def tool(self, name: str, *, write: bool) -> Tool:
        handler = self._credit if name == "ledger_credit" else self._balance
        return Tool(
            spec=self.specs[name],
            handler=handler,
            lookup_outcome=self._credited if write else None,
        )

    def describe(self) -> list[ToolLine]:
        return [ToolLine(name, spec.effect, "the toy ledger") for name, spec in self.specs.items()]

    def not_found(self, name: str) -> str:
        return ""

    async def _balance(self, arguments: dict[str, Any], ctx: ToolContext[Any]) -> dict[str, Any]:
        self.executions[ctx.tool] += 1
        self.call_ids.append((ctx.tool, ctx.call_id))
        return {"account": arguments["account"], "balance": self.balances[arguments["account"]]}

    async def _credit(self, arguments: dict[str, Any], ctx: ToolContext[Any]) -> dict[str, Any]:
        self.executions[ctx.tool] += 1
        self.call_ids.append((ctx.tool, ctx.call_id))
        if ctx.idempotency_key not in self.credits:
            self.credits[ctx.idempotency_key] = arguments["amount"]
            self.balances[arguments["account"]] += arguments["amount"]
        raise OutcomeUnknown("the ledger hung up before it answered")

    async def _credited(self, arguments: dict[str, Any], ctx: ToolContext[Any]) -> Outcome:
        self.executions["lookup"] += 1
        amount = self.credits.get(ctx.idempotency_key)
        if amount is None:
            return Outcome(state="not_applied")
        return Outcome(state="applied", record={"credited": amount})


def test_the_toy_ledger_is_a_tool_source_by_the_protocol_alone() -> None:
    """It subclasses nothing of agentloop's; its tools show as the worker starts."""
    ledger: ToolSource = Ledger()
    box = build_toolbox([])
    box.registry.add_source(ledger)
    lines = tool_effects(box, {})
    assert [line.split() for line in lines if line.lstrip().startswith("ledger_")] == [
        ["ledger_balance", "read", "the", "toy", "ledger"],
        ["ledger_credit", "write", "the", "toy", "ledger"],
    ]
    assert "ledger_credit" not in box.registry  # routed to the source, not registered


@pytest.fixture
async def ledger_worker(
    client: Client, worker_settings: Settings, tmp_path: Path
) -> AsyncIterator[tuple[Ledger, Settings]]:
    """A worker with the built-ins and the ledger, on a task queue and store of its own."""
    ledger = Ledger()
    box = build_toolbox([])
    box.registry.add_source(ledger)
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"ledger-{uuid.uuid4().hex[:8]}",
            "store_url": f"sqlite:///{tmp_path / 'store.db'}",
        }
    )
    async with running_worker(client, settings, box):
        yield ledger, settings


def run_input(run_id: str, tools: list[str]) -> AgentRunInput:
    return agent_input(run_id, "openai-chat", "Credit acme 40 and tell me its balance.", tools)


async def test_a_run_reads_and_writes_through_a_source_of_its_own_each_call_once(
    servers: Servers, ledger_worker: tuple[Ledger, Settings], run_id: str
) -> None:
    ledger, settings = ledger_worker
    turns = [ScriptTurn(tool_calls=[BALANCE, CREDIT]), ScriptTurn(text="Credited.")]
    servers.provider.register(Script(name=run_id, turns=turns))
    handle = await start_run(
        servers.client,
        run_input(run_id, ["ledger_balance", "ledger_credit"]),
        id=run_id,
        task_queue=settings.task_queue,
    )
    result: AgentRunResult = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert {c.call_id: (c.tool, c.status) for c in result.calls} == {
        "c_balance": ("ledger_balance", "succeeded"),
        "c_credit": ("ledger_credit", "confirmed_after_query"),
    }
    # Each call ran once under its own id; the write's lost answer was looked up, not resent.
    assert ledger.executions == {"ledger_balance": 1, "ledger_credit": 1, "lookup": 1}
    assert sorted(ledger.call_ids) == [
        ("ledger_balance", "c_balance"),
        ("ledger_credit", "c_credit"),
    ]
    assert ledger.credits == {write_key(handle, "c_credit"): 40}
    assert ledger.balances == {"acme": 140}
    results = await answered(settings, result)
    assert set(results) == {"c_balance", "c_credit"}
    assert json.loads(results["c_balance"].content) == {"account": "acme", "balance": 100}
    assert results["c_credit"].side_effect and not results["c_balance"].side_effect
    assert "credited" in results["c_credit"].content


async def test_a_tool_the_source_does_not_offer_fails_the_run_as_it_starts_in_its_words(
    servers: Servers, ledger_worker: tuple[Ledger, Settings], run_id: str
) -> None:
    ledger, settings = ledger_worker
    servers.provider.register(scripted(run_id, "?"))
    handle = await start_run(
        servers.client,
        run_input(run_id, ["ledger_debit"]),
        id=run_id,
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert cause.message == "tools: the ledger has no tool 'ledger_debit'"
    assert not ledger.executions
    assert [r for r in servers.provider.requests if r["script"] == run_id] == []


async def answered(settings: Settings, result: AgentRunResult) -> dict[str, ToolResult]:
    """The tool results of the run's transcript, by call id (each call answered once)."""
    store = open_store(settings.store_url)
    try:
        events = await load_transcript(store, result.transcript_head)
    finally:
        await store.close()
    results = [e for e in events if isinstance(e, ToolResult)]
    by_id = {r.call_id: r for r in results}
    assert len(by_id) == len(results), [r.call_id for r in results]
    return by_id
