"""Workshop and support tools against the real example service over HTTP: handlers,
preconditions, outcome lookups, and how a write's failures are classified."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from jsonschema import Draft202012Validator

from agentloop.demo.services import ExampleService
from agentloop.demo.tools import EXAMPLE_TOOLS, ExampleDeps
from agentloop.demo.tools.http import DEFAULT_TIMEOUT, OutcomeUnknown, ServiceClient
from agentloop.testing import tool_context
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import Tool, ToolContext, ToolError

RESERVE_ALICE = {"workshop_id": "ws-101", "participant_id": "p-alice"}
REPLY_DANA = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "Refund issued."}
TOOLS = {t.spec.name: t for t in EXAMPLE_TOOLS}
LOOKED_UP = {"reserve_seat": RESERVE_ALICE, "send_reply": REPLY_DANA}
"""The arguments an outcome lookup is asked about (it asks by the idempotency key)."""

MakeContext = Callable[..., ToolContext[Any]]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        yield http


@pytest.fixture
def ctx(svc: ExampleService, session: aiohttp.ClientSession) -> MakeContext:
    """A context for one call; `timeout` (s) gives the client a shorter patience."""

    def make(key: str = "wf-1/call-1", timeout: float | None = None) -> ToolContext[Any]:
        client_timeout = aiohttp.ClientTimeout(total=timeout) if timeout else None
        client = ServiceClient(svc.base_url, session, timeout=client_timeout)
        return tool_context(
            ExampleDeps(client), call_id=key.rpartition("/")[2], idempotency_key=key
        )

    return make


def tool(name: str) -> Tool:
    return TOOLS[name]


async def run(name: str, args: dict[str, Any], context: ToolContext[Any]) -> Any:
    return await tool(name).handler(args, context)


async def outcome(
    name: str, context: ToolContext[Any], arguments: dict[str, Any] | None = None
) -> Outcome:
    lookup = tool(name).lookup_outcome
    assert lookup is not None
    return await lookup(arguments or LOOKED_UP[name], context)


async def precondition(name: str, args: dict[str, Any], context: ToolContext[Any]) -> None:
    check = tool(name).precondition
    assert check is not None
    await check(args, context)


def alice_seats(svc: ExampleService) -> int:
    count: int = svc.records()["reservations_by_workshop"].get("ws-101", {}).get("p-alice", 0)
    return count


# --- contract ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecCase:
    name: str
    effect: str
    scopes: list[str]
    approval: bool = False
    approvers: tuple[str, ...] = ()
    action: str = ""
    on_reject: str = "stop"
    precondition: bool = False
    lookup: bool = False


@pytest.mark.parametrize(
    "case",
    [
        SpecCase("check_workshop", "read", ["workshops:read"]),
        SpecCase(
            "reserve_seat",
            "write",
            ["workshops:write"],
            approval=True,
            approvers=("workshop-lead",),
            action="workshops.reserve_seat",
            precondition=True,
            lookup=True,
        ),
        SpecCase("read_ticket", "read", ["tickets:read"]),
        SpecCase("search_policy", "read", ["tickets:read"]),
        SpecCase(
            "send_reply",
            "write",
            ["tickets:write"],
            approval=True,
            action="support.send_reply",
            on_reject="tell_model",
            lookup=True,
        ),
    ],
    ids=lambda case: case.name,
)
def test_specs(case: SpecCase) -> None:
    spec = tool(case.name).spec
    assert (spec.effect, spec.required_scopes) == (case.effect, case.scopes)
    assert (spec.needs_approval, tuple(spec.approvers)) == (case.approval, case.approvers)
    assert (spec.action_name, spec.on_reject) == (case.action or case.name, case.on_reject)
    assert (spec.has_precondition, spec.has_outcome_lookup) == (case.precondition, case.lookup)
    if spec.effect == "write":
        # The activity must outlive the HTTP timeout, so a hang ends as OutcomeUnknown.
        assert DEFAULT_TIMEOUT.total is not None
        assert spec.timeout_seconds > DEFAULT_TIMEOUT.total


@pytest.mark.parametrize(
    ("name", "args", "valid"),
    [
        ("check_workshop", {"workshop_id": "ws-101"}, True),
        ("check_workshop", {"workshop_id": "101"}, False),
        ("check_workshop", {"workshop_id": "ws-101", "seats": 1}, False),
        ("reserve_seat", RESERVE_ALICE, True),
        ("reserve_seat", {**RESERVE_ALICE, "participant_id": "alice"}, False),
        ("reserve_seat", {"workshop_id": "ws-101"}, False),
        ("read_ticket", {"ticket_id": "T-1001"}, True),
        ("read_ticket", {"ticket_id": "1001"}, False),
        ("search_policy", {"query": "late refund"}, True),
        ("search_policy", {"query": ""}, False),
        ("send_reply", REPLY_DANA, True),
        ("send_reply", {**REPLY_DANA, "recipient": "dana"}, False),
        ("send_reply", {**REPLY_DANA, "body": ""}, False),
        ("send_reply", {**REPLY_DANA, "cc": "eve@example.com"}, False),
    ],
)
def test_argument_schemas(name: str, args: dict[str, Any], valid: bool) -> None:
    validator = Draft202012Validator(tool(name).spec.parameters)
    assert validator.is_valid(args) is valid


# --- reads ---------------------------------------------------------------------------------


async def test_reads_return_the_records(ctx: MakeContext) -> None:
    workshop = await run("check_workshop", {"workshop_id": "ws-101"}, ctx())
    assert (workshop["title"], workshop["seats_left"]) == ("Intro to Temporal", 3)
    # The support reads also say what they found to the run's task state.
    ticket = await run("read_ticket", {"ticket_id": "T-1002"}, ctx())
    assert ticket.output["customer_email"] == "erik@example.com"
    assert ticket.state == {"ticket": "T-1002"}
    found = await run("search_policy", {"query": "damaged item"}, ctx())
    assert found.output["results"][0]["policy_id"] == "POL-DAMAGED"
    assert found.state == {"policy": "POL-DAMAGED"}


@pytest.mark.parametrize(
    ("name", "args"),
    [("check_workshop", {"workshop_id": "ws-999"}), ("read_ticket", {"ticket_id": "T-9999"})],
)
async def test_unknown_ids_are_business_errors(
    ctx: MakeContext, name: str, args: dict[str, Any]
) -> None:
    with pytest.raises(ToolError) as caught:
        await run(name, args, ctx())
    assert (caught.value.error_class, caught.value.retryable) == ("business", False)
    assert "not found" in str(caught.value)


# --- reserve_seat --------------------------------------------------------------------------


async def test_eligible_reservation_passes_its_precondition(ctx: MakeContext) -> None:
    await precondition("reserve_seat", RESERVE_ALICE, ctx())


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"workshop_id": "ws-102", "participant_id": "p-alice"}, "full"),
        ({"workshop_id": "ws-103", "participant_id": "p-alice"}, "members only"),
        ({"workshop_id": "ws-102", "participant_id": "p-dave"}, "already has a seat"),
        ({"workshop_id": "ws-101", "participant_id": "p-zed"}, "unknown participant"),
        ({"workshop_id": "ws-999", "participant_id": "p-alice"}, "not found"),
    ],
)
async def test_precondition_gives_the_service_reason(
    ctx: MakeContext, svc: ExampleService, args: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ToolError) as caught:
        await precondition("reserve_seat", args, ctx())
    assert caught.value.error_class == "business"
    assert reason in str(caught.value)
    assert svc.stats()["counts"]["workshops.reserve"] == 0


async def test_reserve_once_and_look_it_up(ctx: MakeContext, svc: ExampleService) -> None:
    call = ctx("wf-1/call-reserve")
    assert await outcome("reserve_seat", call) == Outcome(state="not_applied")
    record = await run("reserve_seat", RESERVE_ALICE, call)
    assert (record["participant_id"], record["operation_id"]) == ("p-alice", "wf-1/call-reserve")
    assert await outcome("reserve_seat", call) == Outcome(state="applied", record=record)
    # Sent again under the same key (a retry after "definitely absent", say): same reservation.
    assert await run("reserve_seat", RESERVE_ALICE, call) == record
    assert alice_seats(svc) == 1


async def test_a_key_used_for_another_request_is_no_proof_of_this_one(
    ctx: MakeContext, svc: ExampleService
) -> None:
    call = ctx("wf-1/call-reserve")
    await run("reserve_seat", RESERVE_ALICE, call)
    lookup = tool("reserve_seat").lookup_outcome
    assert lookup is not None
    # The same key, asked about a different reservation: the service's record is not this one.
    other = {"workshop_id": "ws-101", "participant_id": "p-carol"}
    assert await lookup(other, call) == Outcome(
        state="unknown", record="the key was used for a different request"
    )
    assert (await lookup(RESERVE_ALICE, call)).state == "applied"


async def test_refused_reservation_is_a_business_error_and_not_applied(
    ctx: MakeContext,
) -> None:
    call = ctx()
    full = {"workshop_id": "ws-102", "participant_id": "p-alice"}
    with pytest.raises(ToolError) as caught:
        await run("reserve_seat", full, call)
    assert (caught.value.error_class, type(caught.value)) == ("business", ToolError)
    found = await outcome("reserve_seat", call, full)
    assert found.state == "not_applied"
    assert found.record["code"] == "no_seats"


async def test_dropped_connection_after_commit_is_outcome_unknown(
    ctx: MakeContext, svc: ExampleService
) -> None:
    call = ctx()
    svc.inject_fault("workshops.reserve", "commit_then_drop")
    with pytest.raises(OutcomeUnknown) as caught:
        await run("reserve_seat", RESERVE_ALICE, call)
    assert (caught.value.error_class, caught.value.retryable) == ("outcome_unknown", False)
    found = await outcome("reserve_seat", call)
    assert found.state == "applied"
    assert await run("reserve_seat", RESERVE_ALICE, call) == found.record
    assert alice_seats(svc) == 1


async def test_hung_write_past_the_client_timeout_is_outcome_unknown(
    ctx: MakeContext, svc: ExampleService
) -> None:
    svc.inject_fault("workshops.reserve", "commit_then_hang", hang_ms=5_000)
    with pytest.raises(OutcomeUnknown):
        await run("reserve_seat", RESERVE_ALICE, ctx(timeout=0.5))
    assert (await outcome("reserve_seat", ctx())).state == "applied"
    assert alice_seats(svc) == 1


async def test_failure_before_commit_is_transient_and_not_applied(
    ctx: MakeContext, svc: ExampleService
) -> None:
    svc.inject_fault("workshops.reserve", "fail_before_commit")
    with pytest.raises(ToolError) as caught:
        await run("reserve_seat", RESERVE_ALICE, ctx())
    assert type(caught.value) is ToolError
    assert (caught.value.error_class, caught.value.retryable) == ("transient", True)
    assert await outcome("reserve_seat", ctx()) == Outcome(state="not_applied")
    assert alice_seats(svc) == 0


async def test_a_lookup_that_cannot_answer_is_retryable_never_absent(
    ctx: MakeContext, svc: ExampleService
) -> None:
    svc.inject_fault("workshops.operation", "unavailable")
    with pytest.raises(ToolError) as caught:
        await outcome("reserve_seat", ctx())
    assert (caught.value.error_class, caught.value.retryable) == ("transient", True)
    # The next attempt of the lookup activity gets the real answer.
    assert await outcome("reserve_seat", ctx()) == Outcome(state="not_applied")


async def test_unreachable_service(session: aiohttp.ClientSession, tmp_path: Path) -> None:
    async with ExampleService(tmp_path / "gone.db") as gone:
        url = gone.base_url
    call = tool_context(ExampleDeps(ServiceClient(url, session)), idempotency_key="wf-1/c1")
    # Nothing could be sent, so nothing can have happened: safe to retry, not "unknown".
    with pytest.raises(ToolError) as caught:
        await run("reserve_seat", RESERVE_ALICE, call)
    assert (type(caught.value), caught.value.error_class) == (ToolError, "transient")
    # But the question "did it happen?" has no answer from a service that is down: the lookup
    # fails (retryably) rather than saying "absent".
    with pytest.raises(ToolError) as lookup_failed:
        await outcome("reserve_seat", call)
    assert lookup_failed.value.retryable


async def test_a_write_without_idempotency_key_is_never_sent(
    ctx: MakeContext, svc: ExampleService
) -> None:
    with pytest.raises(ValueError, match="no idempotency key"):
        await run("reserve_seat", RESERVE_ALICE, ctx(key=""))
    assert svc.stats()["counts"]["workshops.reserve"] == 0


# --- send_reply ----------------------------------------------------------------------------


async def test_reply_is_sent_once_per_key(ctx: MakeContext, svc: ExampleService) -> None:
    call = ctx("wf-1/call-reply")
    assert await outcome("send_reply", call) == Outcome(state="not_applied")
    sent = await run("send_reply", REPLY_DANA, call)
    reply = sent.output
    assert (reply["recipient"], reply["body"]) == (REPLY_DANA["recipient"], REPLY_DANA["body"])
    assert sent.state == {"reply_sent_to": REPLY_DANA["recipient"]}
    assert await run("send_reply", REPLY_DANA, call) == sent
    assert await outcome("send_reply", call) == Outcome(state="applied", record=reply)
    assert svc.records()["replies_by_ticket"] == {"T-1001": 1}


async def test_dropped_reply_is_outcome_unknown_then_applied(
    ctx: MakeContext, svc: ExampleService
) -> None:
    svc.inject_fault("support.reply", "commit_then_drop")
    with pytest.raises(OutcomeUnknown):
        await run("send_reply", REPLY_DANA, ctx())
    assert (await outcome("send_reply", ctx())).state == "applied"
    assert svc.records()["replies"] == 1


async def test_hung_reply_is_outcome_unknown(ctx: MakeContext, svc: ExampleService) -> None:
    svc.inject_fault("support.reply", "commit_then_hang", hang_ms=5_000)
    with pytest.raises(OutcomeUnknown):
        await run("send_reply", REPLY_DANA, ctx(timeout=0.5))
    assert (await outcome("send_reply", ctx())).state == "applied"


@pytest.mark.parametrize(
    ("args", "error_class"),
    [
        ({**REPLY_DANA, "recipient": "not-an-email"}, "invalid_arguments"),
        ({**REPLY_DANA, "ticket_id": "T-1003"}, "business"),
        ({**REPLY_DANA, "ticket_id": "T-9999"}, "business"),
    ],
)
async def test_reply_refusals(
    ctx: MakeContext, svc: ExampleService, args: dict[str, Any], error_class: str
) -> None:
    with pytest.raises(ToolError) as caught:
        await run("send_reply", args, ctx())
    assert caught.value.error_class == error_class
    assert svc.records()["replies"] == 0


# --- error mapping of the client, status by status -----------------------------------------


@pytest.fixture
async def stub(session: aiohttp.ClientSession) -> AsyncIterator[ServiceClient]:
    """A service that answers `/<status>` with that status (and `/text` with a non-JSON 200)."""

    async def answer(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "text":
            return web.Response(text="<html>hello</html>")
        code = "invalid_argument" if name == "400" else "refused"
        return web.json_response({"error": {"code": code, "message": name}}, status=int(name))

    app = web.Application()
    app.router.add_route("*", "/{name}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield ServiceClient(f"http://127.0.0.1:{runner.addresses[0][1]}", session)
    await runner.cleanup()


@pytest.mark.parametrize(
    ("path", "read", "write"),
    [
        ("/400", "invalid_arguments", "invalid_arguments"),
        ("/409", "business", "business"),
        ("/422", "business", "business"),
        ("/429", "transient", "transient"),
        ("/503", "transient", "transient"),
        ("/500", "transient", "outcome_unknown"),
        ("/502", "transient", "outcome_unknown"),
        ("/text", "transient", "outcome_unknown"),
    ],
)
async def test_error_classes(stub: ServiceClient, path: str, read: str, write: str) -> None:
    with pytest.raises(ToolError) as on_read:
        await stub.get_json(path)
    assert on_read.value.error_class == read
    with pytest.raises(ToolError) as on_write:
        await stub.post_json(path, {})
    assert on_write.value.error_class == write
    assert isinstance(on_write.value, OutcomeUnknown) is (write == "outcome_unknown")


async def test_get_json_or_none_reads_404_as_absent(stub: ServiceClient) -> None:
    assert await stub.get_json_or_none("/404") is None
    with pytest.raises(ToolError):
        await stub.get_json("/404")
