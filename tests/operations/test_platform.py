"""A team's own tools, approval rule and verifier, loaded by configuration into an `agentloop
worker` process (issue #17): `tests/team_plugin/team_tools.py` is copied into a folder outside
the package, put on that process's PYTHONPATH, and named in `AGENTLOOP_TOOLS`. The test process
never imports it: whatever runs it, runs in the worker."""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle

import agentloop
from agentloop import Outcome, ToolContext
from agentloop.client import start_run
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    CallRecord,
    Principal,
    UserMessage,
)
from agentloop.envelope import unwrapped
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from agentloop.tools.plugins import Plugin, Toolset, build_toolbox
from agentloop.worker import running_worker
from tests.cli.test_cli import AGENTLOOP, run_process
from tests.crash.test_crash_phases import held_under, requests_to, reservations
from tests.live import Servers, agent_input, scripted
from tests.support import result_of, signal_approval, wait_for_phase, worker_env, worker_process

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

TEAM_SOURCE = Path(__file__).parents[1] / "team_plugin" / "team_tools.py"
ACME = Principal(subject="p-alice", tenant="acme", scopes=["team:read", "team:write"])


class Team:
    """The team's worker process, its task queue and the folder its module lives in."""

    def __init__(self, settings: Settings, module_dir: Path, env: dict[str, str]) -> None:
        self.settings = settings
        self.module_dir = module_dir
        self.env = env


@pytest.fixture(scope="module")
async def team(
    client: Client,
    worker_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Team]:
    module_dir = tmp_path_factory.mktemp("team_module")
    shutil.copy(TEAM_SOURCE, module_dir / "team_tools.py")
    settings = worker_settings.model_copy(
        update={"task_queue": f"team-{uuid.uuid4().hex[:8]}", "tools": "team_tools"}
    )
    store = tmp_path_factory.mktemp("team_store") / "store.db"
    env = worker_env(client, settings, store)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(module_dir), os.environ.get("PYTHONPATH", "")) if p
    )
    async with worker_process(env, command=[*AGENTLOOP, "worker"]):
        yield Team(settings, module_dir, env)


async def start(
    servers: Servers, team: Team, run_id: str, turns: list[ScriptTurn], **fields: Any
) -> WorkflowHandle[Any, AgentRunResult]:
    servers.provider.register(Script(name=run_id, turns=turns))
    run_input = AgentRunInput.model_validate(
        {
            "task": "Handle it for the team.",
            "provider": "openai-chat",
            "model": run_id,
            "principal": ACME,
            **fields,
        }
    )
    return await start_run(
        servers.client, run_input, id=run_id, task_queue=team.settings.task_queue
    )


def by_id(calls: list[CallRecord]) -> dict[str, CallRecord]:
    return {c.call_id: c for c in calls}


def sent_result(provider: ScriptedProvider, run_id: str, call_id: str) -> Any:
    """The tool result the model was sent under `call_id` (Chat Completions `tool` message)."""
    for request in provider.requests:
        if request["script"] != run_id:
            continue
        for message in request["body"]["messages"]:
            if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
                return json.loads(unwrapped(message["content"]))
    raise AssertionError(f"the model was never sent a result for {call_id}")


async def test_the_teams_read_and_write_run_with_its_key_and_principal(
    servers: Servers, team: Team, run_id: str
) -> None:
    handle = await start(
        servers,
        team,
        run_id,
        [
            ScriptTurn(tool_calls=[scripted_call("team_workshop", "c_read", workshop_id="ws-101")]),
            ScriptTurn(
                tool_calls=[
                    scripted_call(
                        "team_book", "c_book", workshop_id="ws-101", participant_id="p-carol"
                    )
                ]
            ),
            ScriptTurn(text="Booked."),
        ],
        tools=["team_workshop", "team_book"],
    )
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    calls = by_id(result.calls)
    assert [(c.call_id, c.status) for c in result.calls] == [
        ("c_read", "succeeded"),
        ("c_book", "succeeded"),
    ]
    # The handler saw the principal; the write went out once, under the run's key.
    read = sent_result(servers.provider, run_id, "c_read")
    assert (read["asked_by"], read["tenant"]) == ("p-alice", "acme")
    key = calls["c_book"].idempotency_key
    assert key and sent_result(servers.provider, run_id, "c_book")["idempotency_key"] == key
    assert len(requests_to(servers.service, "workshops.reserve")) == 1
    assert reservations(servers.service) == 1
    held = await held_under(servers.service, "workshops", key)
    assert held["state"] == "applied"


async def test_a_dropped_answer_is_resolved_by_the_teams_own_lookup(
    servers: Servers, team: Team, run_id: str
) -> None:
    servers.service.inject_fault("workshops.reserve", "commit_then_drop")
    handle = await start(
        servers,
        team,
        run_id,
        [
            ScriptTurn(
                tool_calls=[
                    scripted_call(
                        "team_book", "c_book", workshop_id="ws-101", participant_id="p-carol"
                    )
                ]
            ),
            ScriptTurn(text="Booked."),
        ],
        tools=["team_book"],
    )
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    booked = by_id(result.calls)["c_book"]
    assert (booked.status, booked.attempts) == ("confirmed_after_query", 1)
    # The team's lookup answered (it marks what it found), and the write exists once.
    assert sent_result(servers.provider, run_id, "c_book")["record"]["found_by"] == "team"
    assert len(requests_to(servers.service, "workshops.reserve")) == 1
    assert len(requests_to(servers.service, "workshops.operation")) >= 1
    assert reservations(servers.service) == 1
    [effect] = result.side_effects
    assert (effect.call_id, effect.status) == ("c_book", "confirmed_after_query")


async def test_another_tenants_object_is_refused_by_the_teams_check_and_never_touched(
    servers: Servers, team: Team, run_id: str
) -> None:
    handle = await start(
        servers,
        team,
        run_id,
        [
            ScriptTurn(
                tool_calls=[
                    scripted_call(
                        "team_book", "c_book", workshop_id="ws-103", participant_id="p-carol"
                    )
                ]
            ),
            ScriptTurn(text="That workshop is not ours."),
        ],
        tools=["team_book"],
    )
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    booked = by_id(result.calls)["c_book"]
    assert (booked.decision, booked.status, booked.attempts) == (
        "precondition_failed",
        "rejected",
        0,
    )
    told = sent_result(servers.provider, run_id, "c_book")
    assert "another tenant" in told["error"]["message"]
    assert requests_to(servers.service, "workshops.reserve") == []
    assert reservations(servers.service) == 0


async def test_the_teams_approval_rule_gates_only_the_long_reply_and_its_history_replays(
    servers: Servers, team: Team, run_id: str, tmp_path: Path
) -> None:
    short = {"ticket_id": "T-1001", "body": "On its way."}
    long = {"ticket_id": "T-1001", "body": "Your refund of 40 EUR was issued today; " * 2}
    handle = await start(
        servers,
        team,
        run_id,
        [
            ScriptTurn(
                tool_calls=[
                    scripted_call("team_reply", "c_short", **short),
                    scripted_call("team_reply", "c_long", **long),
                ]
            ),
            ScriptTurn(text="Replied twice."),
        ],
        tools=["team_reply"],
    )
    view = await wait_for_phase(handle, "awaiting_approval")
    assert [p.call_id for p in view.pending_approvals] == ["c_long"]
    assert servers.service.records()["replies"] == 0  # no write of the batch runs before it
    digest = view.pending_approvals[0].args_digest
    await signal_approval(handle, "c_long", digest, "lead")
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    calls = by_id(result.calls)
    assert (calls["c_short"].decision, calls["c_short"].status) == ("allowed", "succeeded")
    assert (calls["c_long"].decision, calls["c_long"].status) == ("approved by lead", "succeeded")
    assert servers.service.records()["replies"] == 2

    # The history replays where the team's module cannot even be imported.
    exported = tmp_path / "history.json"
    exported.write_text((await handle.fetch_history()).to_json())
    env = {k: v for k, v in team.env.items() if k != "PYTHONPATH"}
    env = {**os.environ, **env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    env.pop("AGENTLOOP_TOOLS", None)
    probe = await run_process(sys.executable, "-c", "import team_tools", env=env, cwd=tmp_path)
    assert probe.returncode != 0 and "No module named 'team_tools'" in probe.stderr
    replayed = await run_process(*AGENTLOOP, "replay", str(exported), env=env, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.explain()


async def test_the_teams_verifier_rejects_the_first_answer_and_accepts_the_second(
    servers: Servers, team: Team, run_id: str
) -> None:
    handle = await start(
        servers,
        team,
        run_id,
        [
            ScriptTurn(text="All done."),
            ScriptTurn(
                tool_calls=[
                    scripted_call(
                        "team_book", "c_book", workshop_id="ws-101", participant_id="p-bob"
                    )
                ]
            ),
            ScriptTurn(text="Booked, now it is done."),
        ],
        tools=["team_book"],
        completion_check="seat_booked",
    )
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    assert result.output == "Booked, now it is done."
    assert "completion_check seat_booked passed" in result.stop_reason
    # The rejected candidate cost a model call like any other.
    assert result.usage.model_calls == 3
    assert reservations(servers.service) == 1
    second = [r for r in servers.provider.requests if r["script"] == run_id][1]
    assert "no seat is booked yet" in json.dumps(second["body"])


# --- what a team's tool returns, and keeps when it asks (a worker in this process) ---------


class Claim(BaseModel):
    claim_id: str
    filed_at: datetime
    tags: set[str]


class Opaque:
    """What no JSON writer knows."""


FILED: list[str] = []
LOOKED_UP: list[str] = []
ASKED_AGAIN: list[dict[str, Any]] = []


async def _claim_filed(ctx: ToolContext[Any], order_id: str) -> Outcome:
    LOOKED_UP.append(ctx.idempotency_key)
    return Outcome(state="applied" if ctx.idempotency_key in FILED else "not_applied")


@agentloop.tool(effect="write", lookup_outcome=_claim_filed)
async def file_claim(ctx: ToolContext[Any], order_id: str) -> Claim:
    """File a claim; returns it."""
    FILED.append(ctx.idempotency_key)
    return Claim(claim_id=f"cl-{order_id}", filed_at=datetime(2024, 1, 2, 3, 4), tags={"new"})


@agentloop.tool(effect="write")
async def stamp_order(ctx: ToolContext[Any], order_id: str) -> dict[str, Any]:
    """Stamp an order; its answer holds what cannot be written."""
    FILED.append(ctx.idempotency_key)
    return {"stamp": Opaque()}


@agentloop.tool(effect="read")
async def peek_order(ctx: ToolContext[Any], order_id: str) -> Opaque:
    """A read whose answer cannot be written."""
    return Opaque()


@agentloop.tool(effect="read")
async def orders_since(ctx: ToolContext[Any], order_id: str) -> dict[str, str]:
    """Asks since when, keeping a date."""
    if ctx.reply is None:
        raise agentloop.InputNeeded("Since when?", {"since": date(2024, 1, 1), "of": order_id})
    ASKED_AGAIN.append(ctx.reply.pending)
    return {"orders_since": ctx.reply.text}


@agentloop.tool(effect="read")
async def asks_badly(ctx: ToolContext[Any], order_id: str) -> str:
    """Asks, keeping what cannot be written."""
    raise agentloop.InputNeeded("Which?", {"it": Opaque()})


@agentloop.approval_rule("over_amount")
def over_amount(arguments: dict[str, Any], principal: Any) -> bool:
    """A team's rule with a bug: the tool has no `amount`."""
    return bool(arguments["amount"] > 100)


@agentloop.tool(effect="write", needs_approval="over_amount")
async def refund_order(ctx: ToolContext[Any], order_id: str) -> str:
    """Refund an order (approval by the team's rule)."""
    FILED.append(ctx.idempotency_key)
    return "refunded"


RETURNING_TOOLS = [file_claim, stamp_order, peek_order, orders_since, asks_badly, refund_order]


async def start_returning(
    client: Client,
    settings: Settings,
    provider: ScriptedProvider,
    run_id: str,
    calls: list[ScriptedToolCall],
) -> WorkflowHandle[Any, AgentRunResult]:
    provider.register(scripted(run_id, ScriptTurn(tool_calls=calls), "Done."))
    run_input = agent_input(run_id, "openai-chat", "Go.", sorted({c.name for c in calls}))
    return await start_run(client, run_input, id=run_id, task_queue=settings.task_queue)


@pytest.fixture
async def returning(client: Client, worker_settings: Settings) -> AsyncIterator[Settings]:
    """A worker in this process serving `RETURNING_TOOLS` on a queue of its own."""
    for kept in (FILED, LOOKED_UP, ASKED_AGAIN):
        kept.clear()
    toolbox = build_toolbox(
        [Plugin("returning", Toolset(tools=RETURNING_TOOLS, rules=[over_amount]))]
    )
    settings = worker_settings.model_copy(
        update={"task_queue": f"returning-{uuid.uuid4().hex[:8]}"}
    )
    async with running_worker(client, settings, toolbox):
        yield settings


async def test_a_write_returning_a_model_succeeded_once_and_the_model_reads_it_as_json(
    servers: Servers, returning: Settings, run_id: str
) -> None:
    """Before, writing the model raised after the write happened: its outcome was looked up
    (`confirmed_after_query`) and what it returned was lost."""
    handle = await start_returning(
        servers.client,
        returning,
        servers.provider,
        run_id,
        [scripted_call("file_claim", "c_1", order_id="7")],
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    [filed] = result.calls
    assert (filed.status, filed.activity_attempts) == ("succeeded", 1)
    assert [e.status for e in result.side_effects] == ["succeeded"]
    assert len(FILED) == 1 and LOOKED_UP == []
    assert sent_result(servers.provider, run_id, "c_1") == {
        "claim_id": "cl-7",
        "filed_at": "2024-01-02T03:04:00",
        "tags": ["new"],
    }


async def test_what_cannot_be_written_fails_a_read_once_and_leaves_a_write_succeeded(
    servers: Servers, returning: Settings, run_id: str
) -> None:
    """Before, the write waited `awaiting_reconciliation` for a person, though it answered;
    the read ran three times; a pending no JSON writer knows failed the call the same way."""
    calls = [
        scripted_call("stamp_order", "c_write", order_id="7"),
        scripted_call("peek_order", "c_read", order_id="7"),
        scripted_call("asks_badly", "c_ask", order_id="7"),
    ]
    handle = await start_returning(servers.client, returning, servers.provider, run_id, calls)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    by_call = by_id(result.calls)
    assert (by_call["c_write"].status, by_call["c_write"].activity_attempts) == ("succeeded", 1)
    assert [e.status for e in result.side_effects] == ["succeeded"] and len(FILED) == 1
    told = sent_result(servers.provider, run_id, "c_write")
    assert told["done"] is True and "stamp_order returned a dict" in told["not_shown"]
    assert "Opaque" in told["not_shown"], told
    for call_id, named in [("c_read", "peek_order returned a Opaque"), ("c_ask", "pending")]:
        assert (by_call[call_id].status, by_call[call_id].activity_attempts) == ("failed", 1)
        error = sent_result(servers.provider, run_id, call_id)["error"]
        assert error["class"] == "internal" and named in error["message"], error
        assert "Opaque" in error["message"], error
    assert (
        "asks_badly: its InputNeeded.pending"
        in sent_result(servers.provider, run_id, "c_ask")["error"]["message"]
    )


async def test_a_tool_keeping_a_date_while_it_asks_gets_it_back_as_json(
    servers: Servers, returning: Settings, run_id: str
) -> None:
    """Before, the date failed the call (`internal`, after three attempts) instead of asking."""
    handle = await start_returning(
        servers.client,
        returning,
        servers.provider,
        run_id,
        [scripted_call("orders_since", "c_1", order_id="7")],
    )
    view = await wait_for_phase(handle, "awaiting_input")
    assert view.question == "orders_since asks: Since when?"
    await handle.signal("message", UserMessage(text="March", sender="lead"))
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert ASKED_AGAIN == [{"since": "2024-01-01", "of": "7"}]
    assert sent_result(servers.provider, run_id, "c_1") == {"orders_since": "March"}


async def test_an_approval_rule_that_raises_is_named_and_the_write_never_runs(
    servers: Servers, returning: Settings, run_id: str
) -> None:
    """Before, the model and the ledger were told the tool's precondition was not checked
    (the tool has none): the team's rule, which broke, went unnamed."""
    handle = await start_returning(
        servers.client,
        returning,
        servers.provider,
        run_id,
        [scripted_call("refund_order", "c_1", order_id="7")],
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    [refused] = result.calls
    assert refused.status == "rejected" and FILED == []
    error = sent_result(servers.provider, run_id, "c_1")["error"]
    assert error["message"] == (
        "approval not assessed: approval rule 'over_amount' raised KeyError: 'amount'"
    ), error
