"""The support-desk domain over real HTTP: seeds, policy search, idempotent replies, lookup."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from agentloop.demo.services import ExampleService
from agentloop.demo.services.control import request_fingerprint
from tests.tools.test_example_service_workshops import Answer, lookup, send

REPLY = {"recipient": "dana@example.com", "body": "Your refund was issued today."}


async def reply(
    http: aiohttp.ClientSession,
    svc: ExampleService,
    key: str | None,
    body: Any = None,
    ticket: str = "T-1001",
) -> Answer:
    url = f"{svc.base_url}/support/tickets/{ticket}/replies"
    return await send(http, "POST", url, REPLY if body is None else body, key=key)


async def ticket(http: aiohttp.ClientSession, svc: ExampleService, ticket_id: str) -> Any:
    answer = await send(http, "GET", f"{svc.base_url}/support/tickets/{ticket_id}")
    assert answer.status == 200, answer
    return answer.body


async def policies(http: aiohttp.ClientSession, svc: ExampleService, query: str) -> list[str]:
    answer = await send(http, "GET", f"{svc.base_url}/support/policies?query={query}")
    assert answer.status == 200, answer
    return [p["policy_id"] for p in answer.body["results"]]


def replies(svc: ExampleService, ticket_id: str = "T-1001") -> int:
    count: int = svc.records()["replies_by_ticket"].get(ticket_id, 0)
    return count


async def test_seeded_tickets(svc: ExampleService, http: aiohttp.ClientSession) -> None:
    refund = await ticket(http, svc, "T-1001")
    assert set(refund) == {"ticket_id", "customer_email", "subject", "body", "status", "replies"}
    assert (refund["customer_email"], refund["status"], refund["replies"]) == (
        "dana@example.com",
        "open",
        [],
    )
    assert "refund" in refund["body"]
    damaged = await ticket(http, svc, "T-1002")
    assert damaged["customer_email"] == "erik@example.com"
    assert "cracked" in damaged["body"]
    assert svc.records()["replies"] == 0


async def test_unknown_ticket_is_a_json_404(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    answer = await send(http, "GET", f"{svc.base_url}/support/tickets/T-9999")
    assert (answer.status, answer.body["error"]["code"]) == (404, "not_found")


@pytest.mark.parametrize(
    ("query", "first"),
    [
        ("refund", "POL-REFUND"),
        ("LATE REFUND", "POL-REFUND"),
        ("damaged item", "POL-DAMAGED"),
        ("Damaged", "POL-DAMAGED"),
        ("parcel lost", "POL-SHIPPING"),
    ],
)
async def test_policy_search_is_a_case_insensitive_keyword_match(
    svc: ExampleService, http: aiohttp.ClientSession, query: str, first: str
) -> None:
    assert (await policies(http, svc, query))[0] == first


async def test_policy_results_carry_the_text(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    answer = await send(http, "GET", f"{svc.base_url}/support/policies?query=damaged")
    (result, *_) = answer.body["results"]
    assert set(result) == {"policy_id", "title", "text"}
    assert result["title"] == "Damaged goods policy"
    assert await policies(http, svc, "xylophone") == []


@pytest.mark.parametrize("query", ["", "?query=", "?query=a%20b", "?query=" + "x" * 201])
async def test_policy_search_needs_a_keyword(
    svc: ExampleService, http: aiohttp.ClientSession, query: str
) -> None:
    answer = await send(http, "GET", f"{svc.base_url}/support/policies{query}")
    assert (answer.status, answer.body["error"]["code"]) == (400, "invalid_argument")


async def test_reply_is_sent_once_and_shows_on_the_ticket(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    sent = await reply(http, svc, "key-1")
    assert (sent.status, sent.replay) == (200, False)
    assert set(sent.body) == {
        "reply_id",
        "operation_id",
        "ticket_id",
        "recipient",
        "body",
        "sent_at",
    }
    assert (sent.body["operation_id"], sent.body["recipient"]) == ("key-1", REPLY["recipient"])
    after = await ticket(http, svc, "T-1001")
    assert (after["status"], after["replies"]) == ("answered", [sent.body])
    assert replies(svc) == 1

    found = await lookup(http, svc, "support", "key-1")
    assert found.body == {
        "operation_id": "key-1",
        "state": "applied",
        "record": sent.body,
        "fingerprint": request_fingerprint({"ticket_id": "T-1001", **REPLY}),
    }


async def test_same_key_never_sends_twice(svc: ExampleService, http: aiohttp.ClientSession) -> None:
    first = await reply(http, svc, "key-1")
    answers = await asyncio.gather(*(reply(http, svc, "key-1") for _ in range(10)))
    assert all((a.status, a.body, a.replay) == (200, first.body, True) for a in answers)
    assert replies(svc) == 1


async def test_a_new_key_is_a_new_reply(svc: ExampleService, http: aiohttp.ClientSession) -> None:
    await reply(http, svc, "key-1")
    await reply(http, svc, "key-2")
    assert replies(svc) == 2


@pytest.mark.parametrize(
    "body",
    [
        {**REPLY, "recipient": "someone.else@example.com"},
        {**REPLY, "body": "Something else."},
    ],
)
async def test_same_key_with_other_recipient_or_text_is_refused(
    svc: ExampleService, http: aiohttp.ClientSession, body: dict[str, str]
) -> None:
    await reply(http, svc, "key-1")
    answer = await reply(http, svc, "key-1", body)
    assert (answer.status, answer.body["error"]["code"]) == (409, "idempotency_key_reused")
    assert replies(svc) == 1


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (REPLY, None),
        ({**REPLY, "recipient": "dana"}, "key-bad"),
        ({**REPLY, "recipient": "dana@example.com, eve@example.com"}, "key-bad"),
        ({**REPLY, "body": "   "}, "key-bad"),
        ({**REPLY, "body": "x" * 5001}, "key-bad"),
        ({**REPLY, "cc": "eve@example.com"}, "key-bad"),
        ({"recipient": "dana@example.com"}, "key-bad"),
    ],
)
async def test_malformed_replies_are_invalid_and_not_recorded(
    svc: ExampleService, http: aiohttp.ClientSession, body: Any, key: str | None
) -> None:
    answer = await reply(http, svc, key, body)
    assert (answer.status, answer.body["error"]["code"]) == (400, "invalid_argument")
    assert svc.records()["replies"] == 0
    assert (await lookup(http, svc, "support", "key-bad")).status == 404


@pytest.mark.parametrize(
    ("ticket_id", "status", "code"),
    [("T-1003", 409, "ticket_closed"), ("T-9999", 404, "not_found")],
)
async def test_refused_replies_are_recorded_under_the_key(
    svc: ExampleService, http: aiohttp.ClientSession, ticket_id: str, status: int, code: str
) -> None:
    refused = await reply(http, svc, "key-no", ticket=ticket_id)
    assert (refused.status, refused.body["error"]["code"]) == (status, code)
    again = await reply(http, svc, "key-no", ticket=ticket_id)
    assert (again.status, again.body, again.replay) == (status, refused.body, True)
    found = await lookup(http, svc, "support", "key-no")
    assert (found.body["state"], found.body["error"]["code"]) == ("refused", code)
    assert svc.records()["replies"] == 0


async def test_operation_keys_are_per_domain(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    await reply(http, svc, "shared-key")
    assert (await lookup(http, svc, "workshops", "shared-key")).status == 404
    url = f"{svc.base_url}/workshops/ws-101/reservations"
    reserved = await send(http, "POST", url, {"participant_id": "p-alice"}, key="shared-key")
    assert (reserved.status, reserved.replay) == (200, False)


async def test_reset_restores_tickets(svc: ExampleService, http: aiohttp.ClientSession) -> None:
    before = await ticket(http, svc, "T-1001")
    await reply(http, svc, "key-1")
    svc.reset()
    assert await ticket(http, svc, "T-1001") == before
    assert svc.records()["replies"] == 0
    assert (await lookup(http, svc, "support", "key-1")).status == 404
