"""The workshops domain over real HTTP: seeds, reads, idempotent reservations, operation lookup."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import aiohttp
import pytest

from agentloop.demo.services import ExampleService
from agentloop.demo.services.control import request_fingerprint


class Answer(NamedTuple):
    status: int
    body: Any
    replay: bool
    """The response carried `Idempotent-Replay: true`."""


async def send(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Any = None,
    *,
    key: str | None = None,
    timeout: float | None = None,
) -> Answer:
    headers = {} if key is None else {"Idempotency-Key": key}
    client_timeout = aiohttp.ClientTimeout(total=timeout) if timeout else None
    async with http.request(
        method, url, json=body, headers=headers, timeout=client_timeout
    ) as resp:
        replay = resp.headers.get("Idempotent-Replay") == "true"
        return Answer(resp.status, await resp.json(), replay)


async def reserve(
    http: aiohttp.ClientSession, svc: ExampleService, ws: str, participant: str, key: str
) -> Answer:
    url = f"{svc.base_url}/workshops/{ws}/reservations"
    return await send(http, "POST", url, {"participant_id": participant}, key=key)


async def lookup(http: aiohttp.ClientSession, svc: ExampleService, domain: str, key: str) -> Answer:
    return await send(http, "GET", f"{svc.base_url}/{domain}/operations/{quote(key, safe='')}")


async def workshop(http: aiohttp.ClientSession, svc: ExampleService, ws: str) -> dict[str, Any]:
    answer = await send(http, "GET", f"{svc.base_url}/workshops/{ws}")
    assert answer.status == 200, answer
    body: dict[str, Any] = answer.body
    return body


def booked(svc: ExampleService, ws: str, participant: str) -> int:
    """Reservations the system of record holds for this pair."""
    count: int = svc.records()["reservations_by_workshop"].get(ws, {}).get(participant, 0)
    return count


async def test_seeded_workshops(svc: ExampleService, http: aiohttp.ClientSession) -> None:
    intro = await workshop(http, svc, "ws-101")
    assert intro == {
        "workshop_id": "ws-101",
        "title": "Intro to Temporal",
        "date": "2026-12-03",
        "capacity": 3,
        "seats_left": 3,
        "members_only": False,
        "participants": [],
    }
    full = await workshop(http, svc, "ws-102")
    assert (full["seats_left"], full["participants"]) == (0, ["p-dave", "p-erin"])
    assert (await workshop(http, svc, "ws-103"))["members_only"] is True
    # Seeded bookings are not writes: a fresh world has none.
    assert svc.records() == {
        "reservations": 0,
        "reservations_by_workshop": {},
        "replies": 0,
        "replies_by_ticket": {},
        "bookings": 0,
        "bookings_cancelled": 0,
    }


async def test_unknown_workshop_is_a_json_404(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    for path in ("/workshops/ws-999", "/workshops/ws-999/eligibility/p-alice"):
        answer = await send(http, "GET", svc.base_url + path)
        assert answer.status == 404
        assert answer.body["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("ws", "participant", "code"),
    [
        ("ws-101", "p-alice", "ok"),
        ("ws-102", "p-dave", "already_booked"),
        ("ws-102", "p-alice", "no_seats"),
        ("ws-103", "p-alice", "not_eligible"),
        ("ws-103", "p-bob", "ok"),
        ("ws-101", "p-nobody", "not_eligible"),
    ],
)
async def test_eligibility(
    svc: ExampleService, http: aiohttp.ClientSession, ws: str, participant: str, code: str
) -> None:
    answer = await send(http, "GET", f"{svc.base_url}/workshops/{ws}/eligibility/{participant}")
    assert answer.status == 200
    assert answer.body["eligible"] is (code == "ok")
    assert answer.body["code"] == code
    assert participant in answer.body["reason"]


async def test_reservation_writes_one_record_and_takes_a_seat(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    answer = await reserve(http, svc, "ws-101", "p-alice", "key-1")
    assert (answer.status, answer.replay) == (200, False)
    record = answer.body
    assert set(record) == {
        "reservation_id",
        "operation_id",
        "workshop_id",
        "participant_id",
        "created_at",
    }
    assert (record["operation_id"], record["workshop_id"], record["participant_id"]) == (
        "key-1",
        "ws-101",
        "p-alice",
    )
    after = await workshop(http, svc, "ws-101")
    assert (after["seats_left"], after["participants"]) == (2, ["p-alice"])
    assert booked(svc, "ws-101", "p-alice") == 1
    assert svc.records()["reservations"] == 1
    assert svc.stats()["records"] == svc.records()

    found = await lookup(http, svc, "workshops", "key-1")
    assert found.status == 200
    assert found.body == {
        "operation_id": "key-1",
        "state": "applied",
        "record": record,
        "fingerprint": request_fingerprint({"workshop_id": "ws-101", "participant_id": "p-alice"}),
    }


async def test_same_key_again_replays_the_first_result(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    first = await reserve(http, svc, "ws-101", "p-alice", "key-1")
    again = await reserve(http, svc, "ws-101", "p-alice", "key-1")
    assert (again.status, again.body, again.replay) == (200, first.body, True)
    assert booked(svc, "ws-101", "p-alice") == 1
    assert (await workshop(http, svc, "ws-101"))["seats_left"] == 2


async def test_concurrent_requests_with_one_key_write_once(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    answers = await asyncio.gather(
        *(reserve(http, svc, "ws-101", "p-alice", "key-race") for _ in range(10))
    )
    assert {a.status for a in answers} == {200}
    assert all(a.body == answers[0].body for a in answers)
    assert sorted(a.replay for a in answers) == [False] + [True] * 9
    assert booked(svc, "ws-101", "p-alice") == 1
    assert (await workshop(http, svc, "ws-101"))["seats_left"] == 2


async def test_racing_for_the_last_seats_never_overbooks(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    people = ["p-alice", "p-bob", "p-carol", "p-dave"]  # four people, three seats
    answers = await asyncio.gather(*(reserve(http, svc, "ws-101", p, f"k-{p}") for p in people))
    assert sorted(a.status for a in answers) == [200, 200, 200, 409]
    assert [a.body["error"]["code"] for a in answers if a.status == 409] == ["no_seats"]
    after = await workshop(http, svc, "ws-101")
    assert (after["seats_left"], len(after["participants"])) == (0, 3)
    assert svc.records()["reservations"] == 3


@pytest.mark.parametrize(
    ("ws", "participant"), [("ws-101", "p-bob"), ("ws-103", "p-alice"), ("ws-102", "p-alice")]
)
async def test_same_key_for_another_request_is_refused(
    svc: ExampleService, http: aiohttp.ClientSession, ws: str, participant: str
) -> None:
    await reserve(http, svc, "ws-101", "p-alice", "key-1")
    answer = await reserve(http, svc, ws, participant, "key-1")
    assert answer.status == 409
    assert answer.body["error"]["code"] == "idempotency_key_reused"
    assert svc.records()["reservations"] == 1


@pytest.mark.parametrize(
    ("ws", "participant", "status", "code"),
    [
        ("ws-102", "p-alice", 409, "no_seats"),
        ("ws-102", "p-dave", 409, "already_booked"),
        ("ws-103", "p-alice", 422, "not_eligible"),
        ("ws-101", "p-nobody", 422, "not_eligible"),
        ("ws-999", "p-alice", 404, "not_found"),
    ],
)
async def test_refusals_are_recorded_under_the_key(
    svc: ExampleService,
    http: aiohttp.ClientSession,
    ws: str,
    participant: str,
    status: int,
    code: str,
) -> None:
    refused = await reserve(http, svc, ws, participant, "key-no")
    assert (refused.status, refused.body["error"]["code"], refused.replay) == (status, code, False)
    again = await reserve(http, svc, ws, participant, "key-no")
    assert (again.status, again.body, again.replay) == (status, refused.body, True)
    found = await lookup(http, svc, "workshops", "key-no")
    assert found.status == 200
    assert found.body == {
        "operation_id": "key-no",
        "state": "refused",
        "status": status,
        "error": refused.body["error"],
        "fingerprint": request_fingerprint({"workshop_id": ws, "participant_id": participant}),
    }
    assert svc.records()["reservations"] == 0


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ({"participant_id": "p-alice"}, None),
        ({"participant_id": "p-alice"}, "  "),
        ({"participant_id": "p-alice"}, "k" * 256),
        ({"participant_id": "p-alice", "seats": 2}, "key-bad"),
        ({"participant_id": 7}, "key-bad"),
        ({}, "key-bad"),
        ([1], "key-bad"),
    ],
)
async def test_malformed_reservations_are_invalid_and_not_recorded(
    svc: ExampleService, http: aiohttp.ClientSession, body: Any, key: str | None
) -> None:
    url = f"{svc.base_url}/workshops/ws-101/reservations"
    answer = await send(http, "POST", url, body, key=key)
    assert answer.status == 400
    assert answer.body["error"]["code"] == "invalid_argument"
    assert svc.records()["reservations"] == 0
    assert (await lookup(http, svc, "workshops", "key-bad")).status == 404


async def test_lookup_of_a_key_never_used_is_404(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    answer = await lookup(http, svc, "workshops", "never-used")
    assert answer.status == 404
    assert answer.body["error"]["code"] == "not_found"


async def test_keys_with_slashes_and_spaces_round_trip(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    key = "run 7/call_1:a%b"  # the runner's keys are "<workflow id>/<call id>"
    created = await reserve(http, svc, "ws-101", "p-alice", key)
    found = await lookup(http, svc, "workshops", key)
    assert found.body["record"] == created.body
    assert created.body["operation_id"] == key


async def test_state_survives_restart_and_seeds_are_not_duplicated(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    db_path = tmp_path / "service.db"
    async with ExampleService(db_path) as first:
        created = await reserve(http, first, "ws-101", "p-alice", "key-1")
        records = first.records()
    async with ExampleService(db_path) as second:
        assert second.records() == records
        assert (await workshop(http, second, "ws-101"))["seats_left"] == 2
        again = await reserve(http, second, "ws-101", "p-alice", "key-1")
        assert (again.body, again.replay) == (created.body, True)


async def test_reset_restores_the_seed(svc: ExampleService, http: aiohttp.ClientSession) -> None:
    seed = svc.records()
    await reserve(http, svc, "ws-101", "p-alice", "key-1")
    answer = await send(http, "POST", f"{svc.base_url}/_control/reset")
    assert answer.status == 200
    assert svc.records() == seed
    assert (await workshop(http, svc, "ws-101"))["participants"] == []
    assert (await lookup(http, svc, "workshops", "key-1")).status == 404
    # The key is free again: the world it was used in is gone.
    assert (await reserve(http, svc, "ws-101", "p-alice", "key-1")).replay is False


async def test_requests_are_logged_per_endpoint(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    await workshop(http, svc, "ws-101")
    await send(http, "GET", f"{svc.base_url}/workshops/ws-101/eligibility/p-alice")
    await reserve(http, svc, "ws-101", "p-alice", "key-1")
    await lookup(http, svc, "workshops", "key-1")
    counts = svc.stats()["counts"]
    assert {k: v for k, v in counts.items() if k.startswith("workshops.")} == {
        "workshops.get": 1,
        "workshops.eligibility": 1,
        "workshops.reserve": 1,
        "workshops.operation": 1,
    }
