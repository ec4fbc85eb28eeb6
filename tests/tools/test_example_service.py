"""The example service over real HTTP: deterministic travel answers, storage, errors, control."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentloop.demo.services import ExampleService

TRAIN_KEYS = {
    "train_number",
    "date",
    "status",
    "delay_minutes",
    "origin",
    "destination",
    "scheduled_departure",
    "platform",
}
WEATHER_KEYS = {"city", "date", "condition", "high_c", "low_c", "precipitation_chance"}
DATE_MESSAGE = "date must be an ISO date YYYY-MM-DD"


async def call(
    http: aiohttp.ClientSession, method: str, url: str, body: Any = None
) -> tuple[int, Any]:
    async with http.request(method, url, json=body) as resp:
        return resp.status, await resp.json()


async def get(http: aiohttp.ClientSession, url: str) -> Any:
    status, body = await call(http, "GET", url)
    assert status == 200, body
    return body


def derived(body: dict[str, Any]) -> tuple[Any, ...]:
    """The synthetic part of an answer, without the fields that merely echo the question."""
    return tuple(v for k, v in sorted(body.items()) if k not in {"train_number", "city", "date"})


async def test_train_answer_has_the_documented_shape(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    body = await get(http, f"{svc.base_url}/travel/trains/IC123?date=2026-03-01")
    assert set(body) == TRAIN_KEYS
    assert (body["train_number"], body["date"]) == ("IC123", "2026-03-01")
    assert body["status"] in {"on_time", "delayed", "cancelled"}
    assert isinstance(body["delay_minutes"], int)
    assert (body["delay_minutes"] > 0) == (body["status"] == "delayed")
    assert re.fullmatch(r"[0-2][0-9]:[0-5][0-9]", body["scheduled_departure"])
    assert body["origin"] != body["destination"]


async def test_weather_answer_has_the_documented_shape(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    body = await get(http, f"{svc.base_url}/travel/weather/São Paulo?date=2026-01-15")
    assert set(body) == WEATHER_KEYS
    assert (body["city"], body["date"]) == ("São Paulo", "2026-01-15")
    assert body["condition"] in {"sunny", "cloudy", "rain", "snow", "fog"}
    assert body["low_c"] <= body["high_c"]
    assert 0 <= body["precipitation_chance"] <= 100


async def test_answers_are_deterministic_across_calls_and_fresh_databases(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    paths = ["/travel/trains/7?date=2026-05-05", "/travel/weather/Oslo?date=2026-12-24"]
    answers = []
    for name in ("a.db", "b.db"):
        async with ExampleService(tmp_path / name) as service:
            for path in paths:
                first = await get(http, service.base_url + path)
                assert await get(http, service.base_url + path) == first
                answers.append(first)
    assert answers[:2] == answers[2:]


async def test_different_inputs_get_different_answers(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    trains = [
        await get(http, f"{svc.base_url}/travel/trains/{n}?date=2026-03-01")
        for n in ("1", "A1", "AB12345", "99")
    ]
    assert len({derived(t) for t in trains}) == len(trains)
    days = [
        await get(http, f"{svc.base_url}/travel/weather/Lisbon?date=2026-03-0{d}")
        for d in range(1, 6)
    ]
    assert len({derived(d) for d in days}) > 1


async def test_stored_answer_is_the_record_across_restarts(
    tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    db_path = tmp_path / "service.db"
    path = "/travel/trains/EC42?date=2026-06-01"
    async with ExampleService(db_path) as service:
        before = await get(http, service.base_url + path)
    async with ExampleService(db_path) as service:
        assert await get(http, service.base_url + path) == before
    # Once stored, the row is the answer: an edit to it wins over re-synthesis.
    with closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute("UPDATE train_status SET platform = 'X9' WHERE train_number = 'EC42'")
    async with ExampleService(db_path) as service:
        assert (await get(http, service.base_url + path))["platform"] == "X9"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/travel/trains/IC1?date=2026-13-01", DATE_MESSAGE),
        ("/travel/trains/IC1?date=2026-02-30", DATE_MESSAGE),
        ("/travel/trains/IC1?date=20260301", DATE_MESSAGE),
        ("/travel/trains/IC1?date=tomorrow", DATE_MESSAGE),
        ("/travel/trains/IC1", DATE_MESSAGE),
        ("/travel/weather/Paris?date=2026-2-3", DATE_MESSAGE),
        ("/travel/trains/ICE1?date=2026-03-01", None),
        ("/travel/trains/ic1?date=2026-03-01", None),
        ("/travel/trains/123456?date=2026-03-01", None),
        ("/travel/weather/R2D2?date=2026-03-01", None),
        (f"/travel/weather/{'a' * 65}?date=2026-03-01", None),
    ],
)
async def test_malformed_input_is_invalid_argument(
    svc: ExampleService, http: aiohttp.ClientSession, path: str, message: str | None
) -> None:
    status, body = await call(http, "GET", svc.base_url + path)
    assert status == 400
    assert body["error"]["code"] == "invalid_argument"
    if message is not None:
        assert body["error"]["message"] == message


async def test_unknown_route_is_a_json_404(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    status, body = await call(http, "GET", f"{svc.base_url}/travel/ferries/1")
    assert status == 404
    assert body["error"]["code"] == "not_found"


async def test_stats_count_business_requests_per_endpoint(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    for n in ("1", "2", "bad"):
        await call(http, "GET", f"{svc.base_url}/travel/trains/{n}?date=2026-03-01")
    await get(http, f"{svc.base_url}/travel/weather/Rome?date=2026-03-01")
    await call(http, "GET", f"{svc.base_url}/nowhere")  # not a business route: not logged

    stats = await get(http, f"{svc.base_url}/_control/stats")
    # Every business endpoint is counted, the idle ones at zero.
    assert {k: v for k, v in stats["counts"].items() if v} == {"trains": 3, "weather": 1}
    assert set(stats["counts"]) >= {"trains", "weather", "workshops.reserve", "support.reply"}
    assert [(r["endpoint"], r["status"]) for r in stats["requests"]] == [
        ("trains", 200),
        ("trains", 200),
        ("trains", 400),
        ("weather", 200),
    ]
    assert stats["requests"][0]["path"] == "/travel/trains/1"
    assert svc.stats() == await get(http, f"{svc.base_url}/_control/stats")


async def wait_until_in_flight(svc: ExampleService, endpoint: str) -> None:
    for _ in range(400):
        if any(
            r["endpoint"] == endpoint and r["finished_seq"] is None for r in svc.stats()["requests"]
        ):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"no {endpoint} request in flight")


async def test_delay_knob_lets_a_later_request_finish_first(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    status, _ = await call(
        http, "POST", f"{svc.base_url}/_control/delay", {"endpoint": "trains", "ms": 300}
    )
    assert status == 200
    slow = asyncio.create_task(get(http, f"{svc.base_url}/travel/trains/9?date=2026-03-01"))
    await wait_until_in_flight(svc, "trains")
    await get(http, f"{svc.base_url}/travel/weather/Bern?date=2026-03-01")
    await slow

    trains, weather = svc.stats()["requests"]
    assert trains["endpoint"] == "trains"
    assert trains["started_seq"] < weather["started_seq"]
    assert weather["finished_seq"] < trains["finished_seq"]

    await call(http, "POST", f"{svc.base_url}/_control/delay", {"endpoint": "trains", "ms": 0})
    assert svc.stats()["delays"] == {}


@pytest.mark.parametrize(
    "body",
    [{"endpoint": "ferries", "ms": 10}, {"endpoint": "trains", "ms": -1}, {"ms": "10"}, [1]],
)
async def test_delay_rejects_bad_settings(
    svc: ExampleService, http: aiohttp.ClientSession, body: Any
) -> None:
    status, answer = await call(http, "POST", f"{svc.base_url}/_control/delay", body)
    assert status == 400
    assert answer["error"]["code"] == "invalid_argument"


async def test_reset_clears_log_and_delays_but_keeps_data(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    answer = await get(http, f"{svc.base_url}/travel/weather/Riga?date=2026-03-01")
    svc.set_delay("weather", 50)

    status, _ = await call(http, "POST", f"{svc.base_url}/_control/reset")
    assert status == 200
    stats = svc.stats()
    assert not any(stats["counts"].values())
    assert (stats["requests"], stats["delays"], stats["faults"]) == ([], {}, {})
    with closing(sqlite3.connect(svc.db_path)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM weather_report").fetchone() == (1,)
    assert await get(http, f"{svc.base_url}/travel/weather/Riga?date=2026-03-01") == answer


async def test_concurrent_first_requests_agree_on_one_record(
    svc: ExampleService, http: aiohttp.ClientSession
) -> None:
    url = f"{svc.base_url}/travel/weather/Saint-Étienne?date=2026-07-14"
    answers = await asyncio.gather(*(get(http, url) for _ in range(20)))
    assert all(a == answers[0] for a in answers)
    with closing(sqlite3.connect(svc.db_path)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM weather_report").fetchone() == (1,)
    assert svc.stats()["counts"]["weather"] == 20
