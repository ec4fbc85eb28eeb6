"""Compensation (issue #46 item 1), over a real server, the official client against the
scripted provider and the example service over HTTP: a dependent sequence book -> pay where
pay fails for good, then the model gives up. The booking's undo (`cancel_booking`) is offered
under the run's `compensate` policy: `ask` waits for a person (approved here through the
CLI, with the exact arguments shown), `always` asks nobody, `never` leaves the booking as it
is; an undo whose answer is lost is looked up by its own key."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio import activity
from temporalio.worker import Worker

import agentloop
from agentloop.contract import AgentRunInput, AgentRunResult, Principal
from agentloop.demo.tools.travel import BookingArgs, BookTrainArgs
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from agentloop.tools.plugins import Plugin, Toolset, build_toolbox
from agentloop.worker import running_worker
from tests.cli.test_cli import agentloop as agentloop_cli
from tests.cli.test_cli import process_env
from tests.inbox.test_inbox import USER_HEADER, as_user, csrf_token, decide
from tests.live import Live, Servers, scripted
from tests.support import result_of, start_run, wait_for_phase, write_key

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

BOOK = {"train_number": "G1234", "date": "2026-12-01", "traveller": "Ada Lovelace"}
DECLINED = "the card was declined, and it will be declined again"


def book_then_pay(name: str) -> Script:
    """Book, pay that booking with a card that is declined for good, then give up."""
    pay = {"booking_id": "{{call_book.booking_id}}", "payment_token": "pm-declined"}
    return scripted(
        name,
        [scripted_call("book_train", "call_book", **BOOK)],
        [ScriptedToolCall(id="call_pay", name="pay_booking", arguments=pay)],
        [scripted_call("give_up", "call_g", reason=DECLINED)],
    )


def run_input(model: str, **fields: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Book me on G1234 on 2026-12-01 and pay with my card.",
            "provider": "openai-chat",
            "model": model,
            "tools": ["book_train", "pay_booking"],
            "principal": Principal(subject="ada", scopes=["travel:write"]),
            **fields,
        }
    )


async def started(live: Live, run_id: str, **fields: Any) -> Any:
    live.provider.register(book_then_pay(run_id))
    return await start_run(live.client, live.worker, run_id, run_input(run_id, **fields))


def cli_env(live: Live) -> dict[str, str]:
    """The environment `agentloop` commands reach this session's server and queue with."""
    return process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )


def booking_id(result: AgentRunResult) -> str:
    [book] = [c for c in result.calls if c.call_id == "call_book"]
    assert book.status == "succeeded", book
    return str(book.result_summary.split('"booking_id": "')[1].split('"')[0])


def assert_stopped_blocked(result: AgentRunResult) -> None:
    assert (result.status, result.stop_cause) == ("blocked", "give_up"), result.stop_reason
    statuses = {c.call_id: c.status for c in result.calls}
    assert (statuses["call_book"], statuses["call_pay"]) == ("succeeded", "failed")


async def test_ask_waits_for_a_person_and_the_approved_undo_cancels_the_booking_once(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    handle = await started(live, run_id)  # `ask` by default

    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    assert (pending.call_id, pending.tool) == ("undo-call_book", "cancel_booking")
    booked = live.service.records()
    assert (booked["bookings"], booked["bookings_cancelled"]) == (1, 0)
    assert [line.outcome for line in view.compensation] == ["not_undone"]

    env = cli_env(
        live,
    )
    approved = await agentloop_cli(
        "approve", run_id, "undo-call_book", "--approver", "ops", env=env, cwd=tmp_path
    )
    assert approved.returncode == 0, approved.explain()
    assert f'"booking_id": "{pending.arguments["booking_id"]}"' in approved.stdout  # shown
    result = await result_of(handle)

    assert_stopped_blocked(result)
    assert pending.arguments == {"booking_id": booking_id(result)}
    undo = {c.call_id: c for c in result.calls}["undo-call_book"]
    assert (undo.tool, undo.status, undo.undoes) == ("cancel_booking", "succeeded", "call_book")
    assert undo.approval is not None and undo.approval.approver == "ops"
    assert undo.idempotency_key == write_key(handle, "undo-call_book")
    [line] = result.compensation
    assert (line.call_id, line.outcome, line.undo_call_id, line.undo_status) == (
        "call_book",
        "undone",
        "undo-call_book",
        "succeeded",
    )
    assert "book_train call_book: undone by cancel_booking undo-call_book" in result.report
    assert "approved by ops" in result.report
    # The service saw one cancel, and the booking is cancelled.
    assert live.service.stats()["counts"]["travel.cancel"] == 1
    assert live.service.records()["bookings_cancelled"] == 1
    assert result.usage.human_waits == 1
    # The undo's result went to no model: the model saw three turns, and no undo call.
    assert len(live.provider.requests) == 3
    assert "undo-call_book" not in str(live.provider.requests[-1]["body"])


async def test_always_asks_nobody_and_a_tool_can_say_it_over_the_run(
    live: Live, run_id: str
) -> None:
    handle = await started(
        live,
        run_id,
        compensate="never",
        compensate_per_tool={"book_train": "always"},
    )
    result = await result_of(handle)

    assert_stopped_blocked(result)
    undo = {c.call_id: c for c in result.calls}["undo-call_book"]
    assert (undo.status, undo.approval, undo.arguments) == (
        "succeeded",
        None,
        {"booking_id": booking_id(result)},
    )
    assert result.usage.human_waits == 0
    [line] = result.compensation
    assert (line.outcome, line.why) == ("undone", "compensate: always")
    assert live.service.stats()["counts"]["travel.cancel"] == 1
    assert live.service.records()["bookings_cancelled"] == 1


async def test_never_leaves_the_booking_as_is(live: Live, run_id: str, tmp_path: Path) -> None:
    # Started from the command line, playing the built-in script `travel_booking`.
    env = cli_env(
        live,
    )
    argv = ["--model", "travel_booking", "--tool", "book_train", "--tool", "pay_booking"]
    argv += ["--scope", "travel:write", "--compensate", "never", "--id", run_id]
    started_run = await agentloop_cli("run", "Book and pay.", *argv, env=env, cwd=tmp_path)
    assert started_run.returncode == 0, started_run.explain()
    handle = live.client.get_workflow_handle(run_id, result_type=AgentRunResult)
    result = await result_of(handle)

    assert_stopped_blocked(result)
    assert "undo-call_book" not in {c.call_id for c in result.calls}
    [line] = result.compensation
    assert (line.call_id, line.outcome, line.why) == (
        "call_book",
        "left_as_is",
        "compensate: never",
    )
    assert "book_train call_book: left as is — compensate: never" in result.report
    assert (await wait_for_phase(handle, "finished")).compensation == result.compensation
    assert live.service.stats()["counts"]["travel.cancel"] == 0
    records = live.service.records()
    assert (records["bookings"], records["bookings_cancelled"]) == (1, 0)


async def test_an_undo_whose_answer_is_lost_is_looked_up_by_its_key(
    live: Live, run_id: str
) -> None:
    # The cancel commits, and its answer never reaches the tool: outcome unknown.
    live.service.inject_fault("travel.cancel", "commit_then_drop")
    handle = await started(live, run_id, compensate="always")
    result = await result_of(handle)

    assert_stopped_blocked(result)
    undo = {c.call_id: c for c in result.calls}["undo-call_book"]
    assert (undo.status, undo.attempts) == ("confirmed_after_query", 1)
    key = write_key(handle, "undo-call_book")
    lookups = [
        r["path"] for r in live.service.stats()["requests"] if r["endpoint"] == "travel.operation"
    ]
    assert lookups == [f"/travel/operations/{key}"]
    assert live.service.stats()["counts"]["travel.cancel"] == 1  # never sent again
    assert live.service.records()["bookings_cancelled"] == 1
    [line] = result.compensation
    assert (line.outcome, line.undo_status) == ("undone", "confirmed_after_query")


async def test_the_inbox_shows_the_undo_with_what_it_undoes_and_approving_there_undoes_it(
    live: Live, run_id: str
) -> None:
    handle = await started(live, run_id)
    [pending] = (await wait_for_phase(handle, "awaiting_approval")).pending_approvals
    options = InboxOptions(auth_header=USER_HEADER, tenants={"ops": ["default"]})
    async with (
        InboxServer(live.client, options, "127.0.0.1", 0) as inbox,
        aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http,
    ):
        page_url = f"{inbox.url}/runs/{run_id}"
        token = await csrf_token(http, page_url, "ops")
        async with http.get(page_url, headers=as_user("ops")) as response:
            page = html.unescape(await response.text())
        assert "Approve cancel_booking (undo-call_book)?" in page
        assert "This undoes book_train call_book" in page
        assert pending.arguments["booking_id"] in page
        status, _ = await decide(
            http,
            inbox,
            run_id,
            "ops",
            csrf=token,
            call_id="undo-call_book",
            args_digest=pending.args_digest,
        )
        assert status in (200, 303), status
        result = await result_of(handle)
        async with http.get(page_url, headers=as_user("ops")) as response:
            shown = html.unescape(await response.text())

    assert_stopped_blocked(result)
    [line] = result.compensation
    assert (line.outcome, line.why) == ("undone", "approved by ops")
    assert (
        '<table id="compensation">' in shown
        and "cancel_booking undo-call_book (succeeded)" in shown
    )
    assert live.service.records()["bookings_cancelled"] == 1


class TeamTravel:
    """A team's own Temporal activities on a queue of theirs, over the example service: a
    booking, and its undo. agentloop's runs call them as activity tools."""

    def __init__(self, service_url: str) -> None:
        self.service_url = service_url
        self.cancels: list[dict[str, Any]] = []

    async def _post(self, path: str, body: dict[str, Any], key: str) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                self.service_url + path, json=body, headers={"Idempotency-Key": key}
            ) as resp,
        ):
            resp.raise_for_status()
            answer: dict[str, Any] = await resp.json()
            return answer

    @activity.defn(name="team_book_train")
    async def book(self, request: dict[str, Any]) -> dict[str, Any]:
        return await self._post(
            "/travel/bookings", request["arguments"], request["idempotency_key"]
        )

    @activity.defn(name="team_cancel_booking")
    async def cancel(self, request: dict[str, Any]) -> dict[str, Any]:
        self.cancels.append(request)
        booking = request["arguments"]["booking_id"]
        return await self._post(
            f"/travel/bookings/{booking}/cancellation", {}, request["idempotency_key"]
        )


async def test_an_activity_tools_undo_is_a_temporal_activity_on_the_teams_queue(
    servers: Servers, worker_settings: Settings, run_id: str, tmp_path: Path
) -> None:
    team_queue = f"team-travel-{run_id[-8:]}"
    book = agentloop.activity_tool(
        "team_book",
        activity="team_book_train",
        parameters=BookTrainArgs,
        description="Book a train.",
        task_queue=team_queue,
        effect="write",
        compensate="team_cancel",
    )
    cancel = agentloop.activity_tool(
        "team_cancel",
        activity="team_cancel_booking",
        parameters=BookingArgs,
        description="Cancel a booking.",
        task_queue=team_queue,
        effect="write",
    )
    toolbox = build_toolbox([Plugin("team", Toolset(tools=[book, cancel]))])
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"agentloop-{run_id[-8:]}",
            "store_url": f"sqlite:///{tmp_path / 'store.db'}",
        }
    )
    team = TeamTravel(servers.service.base_url)
    servers.provider.register(
        scripted(
            run_id,
            [scripted_call("team_book", "call_book", **BOOK)],
            [scripted_call("give_up", "call_g", reason="no")],
        )
    )
    started_input = run_input(run_id, tools=["team_book"], compensate="always")
    async with (
        Worker(servers.client, task_queue=team_queue, activities=[team.book, team.cancel]),
        running_worker(servers.client, settings, toolbox),
    ):
        handle = await start_run(servers.client, settings, run_id, started_input)
        result = await result_of(handle)

    assert (result.status, result.stop_cause) == ("blocked", "give_up"), result.stop_reason
    [cancelled] = team.cancels
    undo = {c.call_id: c for c in result.calls}["undo-call_book"]
    assert undo.status == "succeeded" and undo.tool == "team_cancel"
    assert cancelled["idempotency_key"] == write_key(handle, "undo-call_book")
    assert cancelled["arguments"] == {"booking_id": booking_id(result)}
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in (await handle.fetch_history()).events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert ("team_cancel_booking", team_queue) in [
        (s.activity_type.name, s.task_queue.name) for s in scheduled
    ]
    assert servers.service.records()["bookings_cancelled"] == 1


async def test_a_run_out_of_budget_undoes_its_booking_past_its_limits(
    live: Live, run_id: str
) -> None:
    # Two model calls: the booking, the declined payment; the third is over the budget.
    limits = {"max_model_calls": 2, "max_tool_calls": 2}
    handle = await started(live, run_id, compensate="always", limits=limits)
    result = await result_of(handle)

    assert (result.status, result.stop_cause) == ("limit_reached", "budget"), result.stop_reason
    assert result.usage.tool_calls == 3  # the undo is counted, and no limit refused it
    [line] = result.compensation
    assert (line.outcome, line.undo_status) == ("undone", "succeeded")
    assert live.service.records()["bookings_cancelled"] == 1


async def test_the_model_rolls_back_its_booking_and_goes_on(live: Live, run_id: str) -> None:
    again = {**BOOK, "date": "2026-12-02"}
    live.provider.register(
        scripted(
            run_id,
            [scripted_call("book_train", "c1", **BOOK)],
            ScriptTurn(
                tool_calls=[
                    scripted_call("roll_back", "c2", reason="wrong date"),
                    ScriptedToolCall(id="c3", name="book_train", arguments=again),
                ],
                expect_tool_results={"c2": '"outcome": "undone"', "c3": "not_run"},
            ),
            [ScriptedToolCall(id="c4", name="book_train", arguments=again)],
            "Booked on the 2nd: {{c4.booking_id}}.",
        )
    )
    handle = await start_run(
        live.client, live.worker, run_id, run_input(run_id, compensate="always")
    )
    result = await result_of(handle)

    assert result.status == "completed", result.stop_reason
    calls = {c.call_id: c for c in result.calls}
    assert (calls["undo-c1"].status, calls["undo-c1"].undoes) == ("succeeded", "c1")
    assert (calls["c3"].status, calls["c4"].status) == ("rejected", "succeeded")
    assert "undo-c4" not in calls  # a delivered run keeps its writes
    # The model was offered roll_back, and its result said what was undone; the undo's own
    # result went to no model.
    offered = [t["function"]["name"] for t in live.provider.requests[0]["body"]["tools"]]
    assert "roll_back" in offered and "cancel_booking" not in offered
    assert "undo-c1" not in str(live.provider.requests[-1]["body"])
    [line] = result.compensation
    assert (line.call_id, line.outcome, line.undo_call_id) == ("c1", "undone", "undo-c1")
    records = live.service.records()
    assert (records["bookings"], records["bookings_cancelled"]) == (2, 1)
