"""Fault injection over real HTTP: writes whose outcome the caller cannot see, and outages.

Each write fault is checked from both sides: what the client saw, and what the system of
record (records, operation lookup, request log) says actually happened."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from agentloop.demo.services import ExampleService
from tests.tools.test_example_service_workshops import Answer, lookup, send


@dataclass(frozen=True)
class Write:
    endpoint: str
    domain: str
    path: str
    body: dict[str, str]
    count: Callable[[dict[str, Any]], int]
    """How many records this write has created, from `ExampleService.records()`."""


RESERVE = Write(
    "workshops.reserve",
    "workshops",
    "/workshops/ws-101/reservations",
    {"participant_id": "p-alice"},
    lambda records: records["reservations_by_workshop"].get("ws-101", {}).get("p-alice", 0),
)
REPLY = Write(
    "support.reply",
    "support",
    "/support/tickets/T-1001/replies",
    {"recipient": "dana@example.com", "body": "Your refund was issued today."},
    lambda records: records["replies_by_ticket"].get("T-1001", 0),
)
WRITES = pytest.mark.parametrize("write", [RESERVE, REPLY], ids=lambda w: w.endpoint)


async def post(
    http: aiohttp.ClientSession, svc: ExampleService, write: Write, key: str, **kw: Any
) -> Answer:
    return await send(http, "POST", svc.base_url + write.path, write.body, key=key, **kw)


def logged(svc: ExampleService, endpoint: str) -> list[int | None]:
    return [r["status"] for r in svc.stats()["requests"] if r["endpoint"] == endpoint]


async def eventually(check: Callable[[], bool]) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


@WRITES
async def test_commit_then_drop_commits_but_the_client_sees_a_dropped_connection(
    svc: ExampleService, http: aiohttp.ClientSession, write: Write
) -> None:
    svc.inject_fault(write.endpoint, "commit_then_drop")
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await post(http, svc, write, "key-1")

    assert write.count(svc.records()) == 1
    found = await lookup(http, svc, write.domain, "key-1")
    assert (found.status, found.body["state"]) == (200, "applied")
    assert logged(svc, write.endpoint) == [None]
    # Retrying with the same key is safe: the first result comes back, nothing is written.
    again = await post(http, svc, write, "key-1")
    assert (again.status, again.body, again.replay) == (200, found.body["record"], True)
    assert write.count(svc.records()) == 1


@WRITES
async def test_commit_then_hang_commits_and_the_client_times_out(
    svc: ExampleService, http: aiohttp.ClientSession, write: Write
) -> None:
    svc.inject_fault(write.endpoint, "commit_then_hang", hang_ms=5_000)
    with pytest.raises(TimeoutError):
        await post(http, svc, write, "key-1", timeout=0.5)

    assert write.count(svc.records()) == 1
    assert (await lookup(http, svc, write.domain, "key-1")).body["state"] == "applied"
    # The abandoned request ends when its client leaves, logged without a status.
    await eventually(lambda: svc.stats()["requests"][0]["finished_seq"] is not None)
    assert logged(svc, write.endpoint) == [None]


async def test_a_hang_shorter_than_the_client_timeout_still_answers(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    svc.inject_fault("workshops.reserve", "commit_then_hang", hang_ms=100)
    answer = await post(http, svc, RESERVE, "key-1", timeout=5)
    assert (answer.status, answer.replay) == (200, False)
    assert logged(svc, "workshops.reserve") == [200]


@WRITES
async def test_fail_before_commit_writes_nothing(
    svc: ExampleService, http: aiohttp.ClientSession, write: Write
) -> None:
    svc.inject_fault(write.endpoint, "fail_before_commit")
    failed = await post(http, svc, write, "key-1")
    assert (failed.status, failed.body["error"]["code"]) == (503, "unavailable")
    assert write.count(svc.records()) == 0
    assert (await lookup(http, svc, write.domain, "key-1")).status == 404
    # The fault is used up: the same key now applies, for the first time.
    applied = await post(http, svc, write, "key-1")
    assert (applied.status, applied.replay) == (200, False)
    assert logged(svc, write.endpoint) == [503, 200]


async def test_unavailable_lookup(svc: ExampleService, http: aiohttp.ClientSession) -> None:
    svc.inject_fault("workshops.operation", "unavailable")
    down = await lookup(http, svc, "workshops", "key-1")
    assert (down.status, down.body["error"]["code"]) == (503, "unavailable")
    assert (await lookup(http, svc, "workshops", "key-1")).status == 404


async def test_faults_apply_to_the_next_n_requests_of_their_endpoint_only(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    svc.inject_fault("support.ticket", "unavailable", count=2)
    ticket, policies = "/support/tickets/T-1001", "/support/policies?query=refund"
    statuses = [(await send(http, "GET", svc.base_url + ticket)).status for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert (await send(http, "GET", svc.base_url + policies)).status == 200
    assert svc.stats()["faults"] == {}


async def test_queued_faults_apply_in_order(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    svc.inject_fault("workshops.reserve", "fail_before_commit")
    svc.inject_fault("workshops.reserve", "commit_then_drop")
    assert svc.stats()["faults"] == {
        "workshops.reserve": [
            {"mode": "fail_before_commit", "remaining": 1},
            {"mode": "commit_then_drop", "remaining": 1},
        ]
    }
    assert (await post(http, svc, RESERVE, "key-1")).status == 503
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await post(http, svc, RESERVE, "key-1")
    assert RESERVE.count(svc.records()) == 1


async def test_concurrent_requests_consume_exactly_count_faults(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    svc.inject_fault("workshops.get", "unavailable", count=3)
    answers = await asyncio.gather(
        *(send(http, "GET", f"{svc.base_url}/workshops/ws-101") for _ in range(8))
    )
    assert sorted(a.status for a in answers) == [200] * 5 + [503] * 3


async def test_faults_over_http(svc: ExampleService, http: aiohttp.ClientSession) -> None:
    url = f"{svc.base_url}/_control/faults"
    setting = {"endpoint": "workshops.reserve", "mode": "commit_then_hang", "hang_ms": 10}
    added = await send(http, "POST", url, {**setting, "count": 2})
    assert added.status == 200
    expected = {"workshops.reserve": [{"mode": "commit_then_hang", "remaining": 2, "hang_ms": 10}]}
    assert added.body == {"faults": expected}
    assert (await send(http, "GET", url)).body == {"faults": expected}
    assert svc.stats()["faults"] == expected

    cleared = await send(http, "DELETE", url)
    assert (cleared.status, cleared.body) == (200, {"faults": {}})
    assert (await post(http, svc, RESERVE, "key-1")).status == 200

    await send(http, "POST", url, {"endpoint": "workshops.get", "mode": "unavailable"})
    await send(http, "POST", f"{svc.base_url}/_control/reset")
    assert svc.stats()["faults"] == {}


@pytest.mark.parametrize(
    "body",
    [
        {"endpoint": "ferries", "mode": "unavailable"},
        {"endpoint": "workshops.get", "mode": "explode"},
        {"endpoint": "workshops.get", "mode": "unavailable", "count": 0},
        {"endpoint": "workshops.get", "mode": "unavailable", "count": True},
        {"endpoint": "workshops.get", "mode": "commit_then_drop", "hang_ms": 10},
        {"endpoint": "workshops.get", "mode": "commit_then_hang", "hang_ms": -1},
        {"mode": "unavailable"},
        [1],
    ],
)
async def test_bad_fault_settings_are_invalid(
    svc: ExampleService, http: aiohttp.ClientSession, body: Any
) -> None:
    answer = await send(http, "POST", f"{svc.base_url}/_control/faults", body)
    assert (answer.status, answer.body["error"]["code"]) == (400, "invalid_argument")
    assert svc.stats()["faults"] == {}


async def test_in_process_settings_are_checked_too(svc: ExampleService) -> None:
    with pytest.raises(ValueError, match="unknown endpoint"):
        svc.inject_fault("nowhere", "unavailable")
    with pytest.raises(ValueError, match="count"):
        svc.inject_fault("workshops.get", "unavailable", count=-1)
