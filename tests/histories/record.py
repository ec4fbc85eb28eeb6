"""Re-record the histories the replay test checks: `python -m tests.histories.record [NAME...]`.

Each scenario runs on a throw-away dev stack with the scripted provider and is saved as the
JSON Temporal exports. Never edit the files by hand: record them again after an intended change
of workflow commands (for a change to runs already in flight, see docs/guides/upgrading.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError
from temporalio.worker import Worker

from agentloop import search
from agentloop.cli.dev import DevStack, DevStackPorts
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    CancelRequest,
    Limits,
    ResolveRequest,
    RunStatusView,
    UserMessage,
)
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from tests.live import scripted

HERE = Path(__file__).parent
RULE_TOOLS = "tests.histories.rule_tools"
WEATHER = {"city": "Shanghai", "date": "2026-12-01"}
BEIJING = {"city": "Beijing", "date": "2026-12-01"}
TRAIN = {"train_number": "G1234", "date": "2026-12-01"}
TASK = "Is train G1234 late on 2026-12-01, and the weather in Shanghai?"
QUESTIONS = [f"Question {n}?" for n in range(1, 5)]


def scenarios() -> dict[str, tuple[list[Script], dict[str, Any]]]:
    """name -> (scripts to register, run input overrides)."""
    invalid = scripted(
        "replay-invalid-calls",
        ScriptTurn(
            tool_calls=[
                scripted_call("book_flight", "call_unknown"),
                scripted_call("get_weather", "call_bad", city="X"),
                scripted_call("get_weather", "call_ok", **WEATHER),
            ],
            undeclared_tools=["book_flight"],
        ),
        "done",
    )
    looping = Script(
        name="replay-limit",
        turns=[
            ScriptTurn(tool_calls=[scripted_call("get_weather", f"call_{i}", **WEATHER)])
            for i in range(3)
        ],
    )
    delegating = scripted(
        "replay-delegate",
        [
            scripted_call(
                "delegate", "call_d", task="The weather in Shanghai?", tools=["get_weather"]
            )
        ],
        "{{call_d.output}}",
    )
    delegated = scripted(
        "replay-delegate-child",
        [scripted_call("get_weather", "call_w", **WEATHER)],
        "{{call_w.condition}} in Shanghai.",
    )
    reads = scripted(
        "replay-reads",
        ScriptTurn(  # only reads: one batch
            tool_calls=[
                scripted_call("get_weather", "call_w1", **WEATHER),
                scripted_call("get_weather", "call_w2", **BEIJING),
            ]
        ),
        ScriptTurn(  # a read of another tool beside them
            tool_calls=[
                scripted_call("get_train_status", "call_t", **TRAIN),
                scripted_call("get_weather", "call_w3", **WEATHER),
            ]
        ),
        "{{call_w1.condition}}, {{call_t.status}}",
    )
    noting = scripted(
        "replay-approval-rule",
        [scripted_call("note_for", "call_note", participant_id="anonymous")],
        "Noted.",
    )
    seating = scripted(
        "replay-tools-ask",
        [scripted_call("pick_seat", "call_seat", train_number="G1234")],
        "Seat picked.",
    )
    weather_only = scripted(
        "replay-weather-only",
        [scripted_call("get_weather", "call_w", **WEATHER)],
        "The weather service is unavailable.",
    )
    nested: Any = "Shanghai"
    for _ in range(40):
        nested = [nested]
    bounded = scripted(
        "replay-bounded",
        [
            scripted_call("get_weather", "call_deep", city=nested),
            scripted_call("get_weather", "call_ok", **WEATHER),
        ],
        "{{call_ok.condition}}",
    )
    resolving = scripted(
        "replay-resolution-checked",
        ScriptTurn(
            tool_calls=[
                scripted_call(
                    "reserve_seat", "call_res", workshop_id="ws-101", participant_id="p-carol"
                )
            ],
            expect_tool_results={"call_res": "workshop-lead says applied"},
        ),
        "Booked.",
    )
    reserving = scripted(
        "replay-approval-checked",
        [scripted_call("reserve_seat", "call_res", workshop_id="ws-101", participant_id="p-carol")],
        "Booked.",
    )
    memo_keeping = scripted(
        "replay-inbox-memo",
        reserving.turns[0],
        ScriptTurn(
            tool_calls=[
                scripted_call("ask_user", f"call_q{n}", question=q)
                for n, q in enumerate(QUESTIONS[:2], start=1)
            ]
        ),
        "Booked, and noted.",
    )
    counting = scripted("replay-exact-count", "Mild, then rain.")
    answering = scripted("replay-bounded-schema-work", '{"late": false}')
    booking_parent = scripted(
        "replay-deadline-watch-resumes",
        [scripted_call("delegate", "call_d", task="Book ws-101.", tools=["reserve_seat"])],
        [scripted_call("get_train_status", "call_t", **TRAIN)],
        "Booked; G1234 is {{call_t.status}}.",
    )
    booking_child = scripted("replay-deadline-watch-resumes-child", reserving.turns[0], "Booked.")
    posting = scripted(
        "replay-activity-tool-start-bounded",
        [scripted_call("post_notice", "call_p", text="Hi")],
        "No one took the notice.",
    )
    giving_up = scripted(
        "replay-blocked",
        [scripted_call("get_train_status", "call_t", **TRAIN)],
        [
            scripted_call("get_weather", "call_w", **WEATHER),
            scripted_call(
                "give_up", "call_g", reason="the weather service is not one I may call today"
            ),
        ],
    )
    asking = scripted(
        "replay-questions-not-stalls",
        [scripted_call("read_ticket", "call_r", ticket_id="T-1001")],
        *(
            ScriptTurn(tool_calls=[scripted_call("ask_user", f"call_q{n}", question=q)])
            for n, q in enumerate(QUESTIONS, start=1)
        ),
        [
            scripted_call("get_weather", "call_w", **WEATHER),
            scripted_call("get_train_status", "call_t", **TRAIN),
        ],
    )
    claiming = scripted(
        "replay-write-failed",
        [scripted_call("file_claim", "call_claim", claim="C-7")],
        "The claim could not be filed: {{call_claim.error}}",
    )
    drafting = scripted("replay-verifier", "Draft answer.", "Checked answer: verified.")
    ticketing = scripted(
        "replay-mcp",
        [
            scripted_call("tickets_find_ticket", "call_find", ticket_id="T-1001"),
            scripted_call(
                "tickets_add_note", "call_note", ticket_id="T-1001", text="Refund approved."
            ),
        ],
        "Noted on {{call_find.subject}}.",
    )
    booking_remote = scripted(
        "replay-activity-tool",
        [
            scripted_call(
                "book_seat_remote", "call_book", workshop_id="ws-101", participant_id="p-carol"
            )
        ],
        "Booked by {{call_book.served_by}}.",
    )
    writing = {
        "model": reserving.name,
        "tools": ["reserve_seat"],
        "principal": {"subject": "p-alice", "scopes": ["workshops:write"]},
    }
    return {
        "travel": ([], {"model": "travel"}),
        "travel_unstreamed": ([], {"model": "travel", "stream": False}),
        "travel_responses": ([], {"model": "travel", "provider": "openai-responses"}),
        "travel_anthropic": ([], {"model": "travel", "provider": "anthropic"}),
        "invalid_calls": ([invalid], {"model": invalid.name}),
        "limit_reached": ([looping], {"model": looping.name, "limits": Limits(max_model_calls=2)}),
        "delegate": (
            [delegating, delegated],
            {
                "model": delegating.name,
                "delegate_model": delegated.name,
                "tools": ["delegate", "get_weather"],
            },
        ),
        # Tool specs by reference (`call_model_by_ref` from turn 2).
        "tools_by_reference": ([], {"model": "travel"}),
        # One timer for the run's deadline.
        "run_deadline_timer": ([], {"model": "travel"}),
        # Started with search attributes
        # (`INDEXED`): the phase upserts are commands too.
        "phase_when_waiting": ([reads], {"model": reads.name}),
        # the tool's approval rule is evaluated by
        # the worker (with the precondition check) and the verdict recorded.
        "approval_rule_in_worker": ([noting], {"model": noting.name, "tools": ["note_for"]}),
        # Arguments nested past the bound are refused unparsed, so the
        # output is incomplete and neither of its calls runs.
        "bounded_arguments": ([bounded], {"model": bounded.name}),
        # The decision (sent by the update,
        # see `APPROVED`) is checked by the worker's `check_approval` before it counts.
        "approval_checked": (
            [reserving],
            {
                "model": reserving.name,
                "tools": ["reserve_seat"],
                "principal": {"subject": "p-alice", "scopes": ["workshops:write"]},
            },
        ),
        # the reservation is approved, commits and
        # drops its answer, the lookup cannot say (see `SERVICE_TROUBLE`), and the operator's
        # `resolve` (see `RESOLVED`) is checked by the worker's `check_resolution` before it
        # settles the write.
        "resolution_checked": (
            [resolving],
            {
                "model": resolving.name,
                "tools": ["reserve_seat"],
                "principal": {"subject": "p-alice", "scopes": ["workshops:write"]},
            },
        ),
        # Started WITHOUT search attributes (not in `INDEXED`) on a server that has them: the run
        # reads its tools with `describe_run` and upserts them itself before its first
        # model call.
        "indexed_however_started": ([reads], {"model": reads.name}),
        # A read failing on every attempt (answered 503 until its retries ran out, see
        # `SERVICE_TROUBLE`): the model is told under the call's id and the run completes.
        "read_failed": (
            [weather_only],
            {"model": weather_only.name, "tools": ["get_weather"]},
        ),
        # the long task is
        # stored (`store_texts`) before the first model call, which names
        # it; past 20 events the run continues as new, carrying it by reference.
        "texts_by_reference": (
            [reads],
            {
                "model": reads.name,
                "task": "Is train G1234 late, and the weather in Shanghai? " + "Context. " * 600,
                "continue_as_new_after_events": 20,
            },
        ),
        # the tool asks a person
        # first; the run waits `awaiting_input` (see `ANSWERED`), and the call runs again with
        # the person's message.
        "tools_ask": ([seating], {"model": seating.name, "tools": ["pick_seat"]}),
        # On a worker with a
        # webhook (`notice_receiver`): the run starts the notice as it waits for approval,
        # without waiting on it, and is approved.
        "notify_waiting": (
            [reserving],
            {
                "model": reserving.name,
                "tools": ["reserve_seat"],
                "principal": {"subject": "p-alice", "scopes": ["workshops:write"]},
            },
        ),
        # On a worker whose route for the tenant `reminded` has timers (`REMINDED_ROUTES`):
        # nobody answers; the run reminds after 1 s, its approval timeout (3 s) escalates the
        # call to the second group, and the second timeout ends the run `approval_timeout`.
        "reminded_then_escalated": (
            [reserving],
            {
                "model": reserving.name,
                "tools": ["reserve_seat"],
                "principal": {
                    "subject": "p-alice",
                    "tenant": "reminded",
                    "scopes": ["workshops:write"],
                },
                "approval_timeout_seconds": 3,
                "on_approval_timeout": "escalate",
            },
        ),
        # the principal's
        # size is checked at start, and the calls carry it as before.
        "bounded_principal": (
            [reads],
            {"model": reads.name, "principal": {"subject": "p-alice", "scopes": ["trains:read"]}},
        ),
        # refused
        # decisions arrive while the write waits for approval (see `FLOODED`), and past 30
        # events the run continues as new while it waits; the next run is approved.
        "continue_while_waiting": (
            [reserving],
            {
                "model": reserving.name,
                "tools": ["reserve_seat"],
                "principal": {"subject": "p-alice", "scopes": ["workshops:write"]},
                "continue_as_new_after_events": 30,
            },
        ),
        # the worker
        # counts what checking against the output schema may cost (`describe_run`), and the
        # answer's check has its steps.
        "bounded_schema_work": (
            [answering],
            {"model": answering.name, "tools": [], "output_schema": {"type": "object"}},
        ),
        # the child's
        # write waits for its approver (see `CHILD_APPROVED_LATE`) past the parent's 3 s
        # deadline; the parent's deadline timer fires meanwhile, and starts again once the
        # child's wait is counted, before the parent's next read and model call.
        "deadline_watch_resumes": (
            [booking_parent, booking_child],
            {
                "model": booking_parent.name,
                "delegate_model": booking_child.name,
                "tools": ["delegate", "get_train_status", "reserve_seat"],
                "principal": {"subject": "p-alice", "scopes": ["workshops:write"]},
                "limits": Limits(deadline_seconds=3),
            },
        ),
        # the ticket read sets the task state, four
        # questions in a row (see `ANSWERED`) leave it unchanged and are no stall
        # (`questions-not-stalls`: before it, the run stopped `stalled` after the fourth), then
        # two reads past `max_tool_calls` stop the run with both in the ledger
        # (`over-budget-calls-ledgered`).
        "questions_not_stalls": (
            [asking],
            {
                "model": asking.name,
                "tools": ["read_ticket", "get_weather", "get_train_status"],
                "principal": {"subject": "p-alice", "scopes": ["tickets:read"]},
                "limits": Limits(max_tool_calls=2),
            },
        ),
        # a team's
        # write on a queue no worker polls fails after its 1 s start timeout as never started,
        # is not looked up, and the model is told (before it, the run waited for ever).
        "activity_tool_start_bounded": (
            [posting],
            {"model": posting.name, "tools": ["post_notice"]},
        ),
        # The card's own paths: an approved write whose
        # answer was lost after the commit, found by its lookup (`confirmed_after_query`); one
        # refused before the commit, looked up absent and sent again under its key; one whose
        # lookup stays inconclusive until an operator resolves it (see `RESOLVED`); one its
        # system refuses (`failed`); a run cancelled while its write is in flight (see
        # `CANCELLED_IN_WRITE`: the write finishes first).
        "write_confirmed_after_query": ([reserving], writing),
        "write_not_applied_resent": ([reserving], writing),
        "write_resolved_by_operator": ([reserving], writing),
        "write_failed": ([claiming], {"model": claiming.name, "tools": ["file_claim"]}),
        "cancel_during_write": ([reserving], writing),
        # A verifier (`says_verified`, the worker's) rejects the first answer, whose verdict
        # goes back to the model, and accepts the second.
        "verifier_rejects_then_accepts": (
            [drafting],
            {"model": drafting.name, "tools": [], "completion_check": "says_verified"},
        ),
        # An MCP server's read and write (the demo ticket server over stdio, `MCP_SERVERS`).
        "mcp_read_write": (
            [ticketing],
            {
                "model": ticketing.name,
                "tools": ["tickets_find_ticket", "tickets_add_note"],
                "principal": {"subject": "agent-7", "scopes": ["tickets:read", "tickets:write"]},
            },
        ),
        # the travel case with its stream
        # on (the model activity's publish signals are in the history; the workflow's own
        # items issue no command).
        "run_stream": ([], {"model": "travel"}),
        # A team's activity (tests/team_plugin/plain_worker.py) served on its own queue while
        # the scenario runs (`TEAM_QUEUE`).
        "activity_tool": (
            [booking_remote],
            {"model": booking_remote.name, "tools": ["book_seat_remote"]},
        ),
        # after a read, the
        # model calls `give_up` beside another read, which does not run, and the run stops
        # `blocked` with its reason (before it, `give_up` was an unknown tool: the model was
        # told so and called again).
        "blocked": ([giving_up], {"model": giving_up.name}),
        # ws-101 has one
        # seat left when the write is checked; someone else takes it while the write waits
        # for approval (see `TAKEN_WHILE_WAITING`), and once approved the write's precondition
        # is checked again, fails, and the model is told; the write never runs.
        # a
        # 1,500-token cap and a 2.1 KB task; the bound on the first call's input (a token a
        # byte) does not fit, the provider's count does, and the call is made again with it.
        "exact_count": (
            [counting],
            {
                "model": counting.name,
                "task": "Summarise the weather in Oslo this week for a traveller. " * 37,
                "tools": [],
                "limits": Limits(max_total_tokens=1500),
            },
        ),
        # Started with search
        # attributes: the run writes what it waits for in its memo as it waits for approval,
        # removes it once approved, writes it again for its two questions, again once the
        # first is answered (the wait goes on), and removes it when the second is.
        "inbox_memo": (
            [memo_keeping],
            {
                "model": memo_keeping.name,
                "tools": ["reserve_seat"],
                "principal": {"subject": "p-alice", "scopes": ["workshops:write"]},
            },
        ),
        "recheck_after_wait": (
            [reserving],
            {
                "model": reserving.name,
                "tools": ["reserve_seat"],
                "principal": {"subject": "p-alice", "scopes": ["workshops:write"]},
            },
        ),
    }


def unknown_write(service: ExampleService) -> None:
    """The reservation commits and drops its answer; no lookup can say."""
    service.inject_fault("workshops.reserve", "commit_then_drop")
    service.inject_fault("workshops.operation", "unavailable", 50)


SERVICE_TROUBLE: dict[str, Callable[[ExampleService], None]] = {
    "read_failed": lambda service: service.inject_fault("weather", "unavailable", 10),
    "write_confirmed_after_query": lambda service: service.inject_fault(
        "workshops.reserve", "commit_then_drop"
    ),
    "write_not_applied_resent": lambda service: service.inject_fault(
        "workshops.reserve", "fail_before_commit"
    ),
    "write_resolved_by_operator": unknown_write,
    # The write commits, then its answer takes 2 s: the cancel arrives meanwhile.
    "cancel_during_write": lambda service: service.inject_fault(
        "workshops.reserve", "commit_then_hang", hang_ms=2_000
    ),
    "resolution_checked": unknown_write,
}
"""What the example service does to a scenario's requests (cleared after it)."""

INDEXED = {
    "phase_when_waiting",
    "approval_rule_in_worker",
    "bounded_arguments",
    "approval_checked",
    "inbox_memo",
}
"""Scenarios started with agentloop's search attributes, as the CLI starts runs."""
APPROVED = {
    "approval_checked",
    "notify_waiting",
    "continue_while_waiting",
    "write_confirmed_after_query",
    "write_not_applied_resent",
    "write_resolved_by_operator",
    "cancel_during_write",
    "resolution_checked",
    "recheck_after_wait",
    "inbox_memo",
}
"""Scenarios whose pending call is approved (by `decide_approval`) once the run waits."""
ANSWERED = {
    "tools_ask": ["14C"],
    "questions_not_stalls": [f"Answer {n}." for n in range(1, len(QUESTIONS) + 1)],
    "inbox_memo": ["Answer 1.", "Answer 2."],
}
"""Scenarios whose questions are answered (the `message` signal), each once the run asks it."""
RESOLVED = {"resolution_checked", "write_resolved_by_operator"}
"""Scenarios whose unknown write is resolved (`applied`, by `workshop-lead`) once the run waits
for it."""
FLOODED = {"continue_while_waiting"}
"""Scenarios sent refused decisions while they wait for approval, until they continue as new."""
TAKEN_WHILE_WAITING = {"recheck_after_wait": ("ws-101", ["p-alice", "p-bob"], "p-dave")}
"""Scenarios whose workshop (id, booked before the run) has its last seat booked by someone
else, at the service itself, while the run waits for approval."""
CHILD_APPROVED_LATE = {"deadline_watch_resumes": 4.5}
"""Scenarios whose delegated child (of call `call_d`) is approved this many seconds after it
waits."""
CANCELLED_IN_WRITE = {"cancel_during_write"}
"""Scenarios cancelled (the `cancel` signal) once their write reached the service."""
TEAM_QUEUE = "replay-team-queue"
"""Where `book_seat_remote` is scheduled: the recorder serves the team's activities there."""
PLAIN_WORKER = HERE.parent / "team_plugin" / "plain_worker.py"


def mcp_servers(state_dir: Path) -> str:
    """The demo ticket server over stdio, as `tickets` (its state in `state_dir`)."""
    command = [sys.executable, "-m", "agentloop.demo.mcp_server", "--stdio"]
    command += ["--state", str(state_dir / "tickets.json")]
    config = {"command": command, "reads_from_hints": True, "lookup_tool": "lookup_note"}
    return json.dumps({"tickets": config})


@contextlib.asynccontextmanager
async def team_worker(stack: DevStack) -> AsyncIterator[None]:
    """The team's plain worker's activities (imported with the example service's address), on
    `TEAM_QUEUE` in this process."""
    assert stack.client is not None and stack.example_service is not None
    os.environ["TEAM_SERVICE_URL"] = stack.example_service.base_url
    spec = importlib.util.spec_from_file_location("plain_worker", PLAIN_WORKER)
    assert spec is not None and spec.loader is not None
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)
    activities = [plain.book_seat, plain.booking_outcome]
    async with Worker(stack.client, task_queue=TEAM_QUEUE, activities=activities):
        yield


async def cancel_once_written(handle: WorkflowHandle[Any, Any], service: ExampleService) -> None:
    for _ in range(200):
        if service.stats()["counts"].get("workshops.reserve"):
            await handle.signal("cancel", CancelRequest(reason="no longer needed"))
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("the write never reached the service")


async def approve_when_waiting(handle: WorkflowHandle[Any, Any]) -> None:
    for _ in range(200):
        view = await handle.query("status", result_type=RunStatusView)
        if view.pending_approvals:
            [pending] = view.pending_approvals
            decision = ApprovalDecision(
                call_id=pending.call_id,
                args_digest=pending.args_digest,
                approved=True,
                approver="workshop-lead",
            )
            verdict = await handle.execute_update(
                "decide_approval", decision, result_type=ApprovalVerdict
            )
            assert verdict.accepted, verdict.reason
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the run never waited for approval")


async def resolve_when_waiting(handle: WorkflowHandle[Any, Any]) -> None:
    for _ in range(600):
        view = await handle.query("status", result_type=RunStatusView)
        if view.unresolved:
            [waiting] = view.unresolved
            # reserve_seat's approver: who may settle its write (the stored histories, recorded
            # before issue 44, name `ops`; the commands are the same)
            word = ResolveRequest(
                call_id=waiting.call_id, outcome="applied", operator="workshop-lead"
            )
            await handle.signal("resolve", word)
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the run never waited for reconciliation")


async def book_directly(service: ExampleService, workshop: str, participant: str) -> None:
    """A booking made at the service, not through a run."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{service.base_url}/workshops/{workshop}/reservations",
            json={"participant_id": participant},
            headers={"Idempotency-Key": f"elsewhere/{workshop}/{participant}"},
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()


async def wait_until_waiting(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the run (a child, which exists only once its parent started it) waits for an
    approval."""
    for _ in range(200):
        with contextlib.suppress(RPCError):
            view = await handle.query("status", result_type=RunStatusView)
            if view.pending_approvals:
                return
        await asyncio.sleep(0.05)
    raise TimeoutError("the run never waited for approval")


async def flood_until_continued(handle: WorkflowHandle[Any, Any]) -> None:
    wrong = ApprovalDecision(
        call_id="call_res",
        args_digest="sha256:" + "0" * 64,
        approved=True,
        approver="workshop-lead",
    )
    waiting_in: str | None = None
    for _ in range(200):
        view = await handle.query("status", result_type=RunStatusView)
        if view.pending_approvals:
            waiting_in = waiting_in or view.run_chain[-1]
            if view.run_chain[-1] != waiting_in:
                return
            await handle.signal("approve", wrong)
        await asyncio.sleep(0.05)
    raise TimeoutError("the run never continued as new while waiting")


async def answer_when_asked(handle: WorkflowHandle[Any, Any], texts: list[str]) -> None:
    """Answers the run's questions (each unlike the one before) in turn with `texts`."""
    answered: str | None = None
    for text in texts:
        for _ in range(200):
            view = await handle.query("status", result_type=RunStatusView)
            if view.question and view.question != answered:
                await handle.signal("message", UserMessage(text=text, sender="traveller"))
                answered = view.question
                break
            await asyncio.sleep(0.05)
        else:
            raise TimeoutError(f"the run never asked: {view.phase}, {view.stop_reason}")


@contextlib.asynccontextmanager
async def notice_receiver() -> AsyncIterator[str]:
    """A webhook taking every notice (`notify-waiting`); its URL."""

    async def take(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


def reminded_routes(webhook: str) -> str:
    """The recorder's notice routes: timers only for the runs of the tenant `reminded`, so
    every other scenario's commands stay as they were."""
    routes = {
        "desk": {
            "url": webhook,
            "tenants": ["reminded"],
            "remind_after_seconds": 1,
            "escalate_to": "leads",
        },
        "leads": {"url": webhook, "escalation_only": True},
    }
    return json.dumps(routes)


async def record(only: set[str]) -> None:
    with tempfile.TemporaryDirectory() as state_dir:
        async with notice_receiver() as webhook:
            settings = Settings.from_env().model_copy(
                update={
                    "mcp_servers": mcp_servers(Path(state_dir)),
                    # Notices of waiting runs go to the recorder's webhook (`notify-waiting`).
                    "notify_webhooks": webhook,
                    "notify_routes": reminded_routes(webhook),
                    "notify_secret": "recording",
                }
            )
            async with (
                DevStack(
                    DevStackPorts.free(),
                    state_dir=Path(state_dir),
                    quiet=True,
                    tools=[RULE_TOOLS],
                    settings=settings,
                ) as stack,
                team_worker(stack),
            ):
                assert stack.client is not None and stack.scripted_provider is not None
                for name, (scripts, overrides) in scenarios().items():
                    if only and name not in only:
                        continue
                    for script in scripts:
                        stack.scripted_provider.register(script)
                    assert stack.example_service is not None
                    stack.example_service.reset()
                    trouble = SERVICE_TROUBLE.get(name)
                    if trouble is not None:
                        trouble(stack.example_service)
                    run_input = AgentRunInput.model_validate(
                        {
                            "task": TASK,
                            "provider": "openai-chat",
                            "tools": ["get_train_status", "get_weather"],
                            **overrides,
                        }
                    )
                    handle = await stack.client.start_workflow(
                        WORKFLOW_NAME,
                        run_input,
                        id=f"replay-{name}",
                        task_queue=stack.settings.task_queue,
                        result_type=AgentRunResult,
                        search_attributes=search.initial(run_input) if name in INDEXED else None,
                    )
                    taken = TAKEN_WHILE_WAITING.get(name)
                    for participant in taken[1] if taken else []:
                        await book_directly(stack.example_service, taken[0], participant)
                    if name in FLOODED:
                        await flood_until_continued(handle)
                    if taken:
                        await wait_until_waiting(handle)
                        await book_directly(stack.example_service, taken[0], taken[2])
                    if name in APPROVED:
                        await approve_when_waiting(handle)
                    if name in CANCELLED_IN_WRITE:
                        await cancel_once_written(handle, stack.example_service)
                    if name in RESOLVED:
                        await resolve_when_waiting(handle)
                    if name in ANSWERED:
                        await answer_when_asked(handle, ANSWERED[name])
                    if name in CHILD_APPROVED_LATE:
                        child = stack.client.get_workflow_handle(f"{handle.id}/delegate/call_d")
                        await wait_until_waiting(child)
                        await asyncio.sleep(CHILD_APPROVED_LATE[name])
                        await approve_when_waiting(child)
                    result = await handle.result()
                    view = await handle.query("status", result_type=RunStatusView)
                    # Each run of a chain that continued as new, the first under the name.
                    for n, run in enumerate(view.run_chain, start=1):
                        run_handle = stack.client.get_workflow_handle(handle.id, run_id=run)
                        history = await run_handle.fetch_history()
                        path = HERE / (f"{name}.json" if n == 1 else f"{name}_{n}.json")
                        path.write_text(json.dumps(json.loads(history.to_json()), indent=1) + "\n")
                        print(f"{path.name}: {result.status} ({result.stop_reason})")


if __name__ == "__main__":
    # Names of scenarios to record (default: all of them).
    asyncio.run(record(set(sys.argv[1:])))
