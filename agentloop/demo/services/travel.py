"""Travel: train status and weather, public data, no auth; and train bookings, which can be
paid and cancelled (idempotent writes, looked up by key at `/travel/operations/{key}`).

Any well-formed question gets an answer. The first answer for a key is synthesized from a
sha256 of the inputs (never `random`, so every fresh database agrees) and stored; from then on
the stored row is the answer, as with a real system of record. A payment with the token
`pm-declined` is refused for good (the card is declined): what a booking's undo is for.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
import unicodedata
import uuid
from datetime import date
from typing import Any

from aiohttp import web

from agentloop.demo.services.control import (
    ApiError,
    Apply,
    forget_operations,
    idempotency_key,
    invalid_argument,
    operation_handler,
    read_json_object,
    utc_now_iso,
    write_once,
)
from agentloop.demo.services.db import DB_KEY, Database

DOMAIN = "travel"

SCHEMA = """
CREATE TABLE IF NOT EXISTS train_status (
    train_number        TEXT NOT NULL,
    date                TEXT NOT NULL,
    status              TEXT NOT NULL,
    delay_minutes       INTEGER NOT NULL,
    origin              TEXT NOT NULL,
    destination         TEXT NOT NULL,
    scheduled_departure TEXT NOT NULL,
    platform            TEXT NOT NULL,
    created_at          REAL NOT NULL,
    PRIMARY KEY (train_number, date)
);
CREATE TABLE IF NOT EXISTS weather_report (
    city_key             TEXT NOT NULL,
    date                 TEXT NOT NULL,
    city                 TEXT NOT NULL,
    condition            TEXT NOT NULL,
    high_c               INTEGER NOT NULL,
    low_c                INTEGER NOT NULL,
    precipitation_chance INTEGER NOT NULL,
    created_at           REAL NOT NULL,
    PRIMARY KEY (city_key, date)
);
CREATE TABLE IF NOT EXISTS bookings (
    booking_id   TEXT PRIMARY KEY,
    operation_id TEXT NOT NULL,
    train_number TEXT NOT NULL,
    date         TEXT NOT NULL,
    traveller    TEXT NOT NULL,
    status       TEXT NOT NULL,
    paid         INTEGER NOT NULL DEFAULT 0,
    created_at   TEXT NOT NULL
);
"""

DECLINED_TOKEN = "pm-declined"
"""The payment token whose card is always declined."""
_TRAVELLER_RE = re.compile(r"[A-Za-z][A-Za-z0-9 .'-]{0,63}")

TRAIN_FIELDS = (
    "train_number",
    "date",
    "status",
    "delay_minutes",
    "origin",
    "destination",
    "scheduled_departure",
    "platform",
)
WEATHER_FIELDS = ("city", "date", "condition", "high_c", "low_c", "precipitation_chance")

STATIONS = (
    "Amsterdam Centraal",
    "Berlin Hbf",
    "Bruxelles-Midi",
    "Frankfurt Hbf",
    "Köln Hbf",
    "London St Pancras",
    "Lyon Part-Dieu",
    "Marseille Saint-Charles",
    "Milano Centrale",
    "München Hbf",
    "Paris Gare de Lyon",
    "Paris Nord",
    "Rotterdam Centraal",
    "Torino Porta Nuova",
    "Wien Hbf",
    "Zürich HB",
)

# Offset of the typical daily high by month (northern-hemisphere seasons), so a city's
# synthetic January is colder than its July.
SEASONAL_OFFSET_C = (-8, -7, -4, 0, 4, 7, 8, 7, 4, 0, -4, -7)

# --- validation ----------------------------------------------------------------------------

_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TRAIN_RE = re.compile(r"[A-Z]{0,2}[0-9]{1,5}")
_CITY_PUNCTUATION = frozenset(" -'\u2019")
MAX_CITY_LEN = 64


def parse_date(raw: str | None) -> date:
    # fromisoformat alone also accepts "20260101" and week dates; the API promises YYYY-MM-DD.
    message = "date must be an ISO date YYYY-MM-DD"
    if raw is None or not _DATE_RE.fullmatch(raw):
        raise invalid_argument(message)
    try:
        return date.fromisoformat(raw)
    except ValueError as exc:  # well-formed but impossible, e.g. 2026-02-30
        raise invalid_argument(message) from exc


def parse_train_number(raw: str) -> str:
    if not _TRAIN_RE.fullmatch(raw):
        raise invalid_argument(
            "train_number must be up to 2 uppercase letters followed by 1-5 digits"
        )
    return raw


def parse_city(raw: str) -> str:
    """Returns the display name (NFC, single spaces); its casefold is the storage key."""
    # NFC first: a decomposed "é" is "e" + a combining mark, which is not a letter by itself.
    city = re.sub(" +", " ", unicodedata.normalize("NFC", raw).strip(" "))
    valid = (
        0 < len(city) <= MAX_CITY_LEN
        and all(ch.isalpha() or ch in _CITY_PUNCTUATION for ch in city)
        and any(ch.isalpha() for ch in city)
    )
    if not valid:
        raise invalid_argument(
            f"city must be 1-{MAX_CITY_LEN} letters, spaces, hyphens or apostrophes"
        )
    return city


# --- synthetic answers ---------------------------------------------------------------------


def _draw(n: int, *parts: str) -> int:
    """A deterministic integer in [0, n) derived from `parts`."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


def synth_train(train_number: str, day: date) -> dict[str, Any]:
    # Route, departure time and platform belong to the train; the status belongs to the day.
    origin = _draw(len(STATIONS), "train", train_number, "origin")
    # Offset from the origin by 1..len-1 so a train never terminates where it starts.
    destination = (origin + 1 + _draw(len(STATIONS) - 1, "train", train_number, "dest")) % len(
        STATIONS
    )
    departure = 5 * 60 + 5 * _draw(18 * 12, "train", train_number, "departure")  # 05:00-22:55
    roll = _draw(100, "train", train_number, day.isoformat(), "status")
    status = "on_time" if roll < 70 else "delayed" if roll < 93 else "cancelled"
    delay = 5 + _draw(116, "train", train_number, day.isoformat(), "delay")
    return {
        "train_number": train_number,
        "date": day.isoformat(),
        "status": status,
        "delay_minutes": delay if status == "delayed" else 0,
        "origin": STATIONS[origin],
        "destination": STATIONS[destination],
        "scheduled_departure": f"{departure // 60:02d}:{departure % 60:02d}",
        "platform": str(1 + _draw(24, "train", train_number, "platform")),
    }


_PRECIPITATION_RANGE = {
    "sunny": (0, 10),
    "cloudy": (10, 40),
    "fog": (5, 30),
    "rain": (60, 100),
    "snow": (60, 100),
}


def synth_weather(city: str, day: date) -> dict[str, Any]:
    key, iso = city.casefold(), day.isoformat()
    typical_high = _draw(31, "weather", key, "climate") - 3  # the city's climate: -3..27
    high = typical_high + SEASONAL_OFFSET_C[day.month - 1] + _draw(7, "weather", key, iso, "hi") - 3
    low = high - 3 - _draw(8, "weather", key, iso, "spread")
    roll = _draw(100, "weather", key, iso, "condition")
    if roll < 35:
        condition = "sunny"
    elif roll < 62:
        condition = "cloudy"
    elif roll < 90:
        condition = "snow" if high <= 2 else "rain"  # keep the answer physically plausible
    else:
        condition = "fog"
    lo, hi = _PRECIPITATION_RANGE[condition]
    return {
        "city": city,
        "date": iso,
        "condition": condition,
        "high_c": high,
        "low_c": low,
        "precipitation_chance": lo + _draw(hi - lo + 1, "weather", key, iso, "precip"),
    }


# --- storage -------------------------------------------------------------------------------


def _insert_if_absent(db: Database, table: str, row: dict[str, Any]) -> None:
    # INSERT OR IGNORE makes concurrent first requests race-free: whichever lands first is the
    # record and every later read returns it.
    columns = [*row, "created_at"]
    placeholders = ", ".join("?" for _ in columns)
    db.execute(
        f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES ({placeholders})",
        (*row.values(), time.time()),
    )


def train_status(db: Database, train_number: str, day: date) -> dict[str, Any]:
    select = f"SELECT {', '.join(TRAIN_FIELDS)} FROM train_status WHERE train_number=? AND date=?"
    params = (train_number, day.isoformat())
    row = db.fetch_one(select, params)
    if row is None:
        _insert_if_absent(db, "train_status", synth_train(train_number, day))
        row = db.fetch_one(select, params)
    assert row is not None
    return row


def weather_report(db: Database, city: str, day: date) -> dict[str, Any]:
    select = f"SELECT {', '.join(WEATHER_FIELDS)} FROM weather_report WHERE city_key=? AND date=?"
    params = (city.casefold(), day.isoformat())
    row = db.fetch_one(select, params)
    if row is None:
        _insert_if_absent(
            db, "weather_report", {"city_key": city.casefold(), **synth_weather(city, day)}
        )
        row = db.fetch_one(select, params)
    assert row is not None
    return row


# --- bookings (idempotent writes) -----------------------------------------------------------


def seed(db: Database) -> None:
    """Nothing is seeded: bookings exist only once made."""


def reset(db: Database) -> None:
    """Bookings and their recorded operations are gone (train and weather answers stay)."""
    with db.transaction() as conn:
        conn.execute("DELETE FROM bookings")
        forget_operations(conn, DOMAIN)


def records(db: Database) -> dict[str, Any]:
    """Bookings made through the API, and how many of them are cancelled."""
    rows = db.fetch_all("SELECT status, COUNT(*) AS n FROM bookings GROUP BY status")
    by_status = {row["status"]: row["n"] for row in rows}
    return {
        "bookings": sum(by_status.values()),
        "bookings_cancelled": by_status.get("cancelled", 0),
    }


def _booking(conn: sqlite3.Connection, booking_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT booking_id, train_number, date, traveller, status, paid FROM bookings"
        " WHERE booking_id = ?",
        (booking_id,),
    ).fetchone()
    if row is None:
        raise ApiError(404, "not_found", f"booking {booking_id!r} not found")
    return {**dict(row), "paid": bool(row["paid"])}


def _book(train_number: str, day: date, traveller: str, operation_id: str) -> Apply:
    def apply(conn: sqlite3.Connection) -> dict[str, Any]:
        record = {
            "booking_id": f"b-{uuid.uuid4().hex[:12]}",
            "operation_id": operation_id,
            "train_number": train_number,
            "date": day.isoformat(),
            "traveller": traveller,
            "status": "booked",
            "created_at": utc_now_iso(),
        }
        conn.execute(
            "INSERT INTO bookings (booking_id, operation_id, train_number, date, traveller,"
            " status, created_at) VALUES (:booking_id, :operation_id, :train_number, :date,"
            " :traveller, :status, :created_at)",
            record,
        )
        return record

    return apply


def _cancel(booking_id: str) -> Apply:
    def apply(conn: sqlite3.Connection) -> dict[str, Any]:
        booking = _booking(conn, booking_id)
        if booking["status"] == "cancelled":
            raise ApiError(409, "already_cancelled", f"booking {booking_id} is already cancelled")
        conn.execute("UPDATE bookings SET status = 'cancelled' WHERE booking_id = ?", (booking_id,))
        return {**booking, "status": "cancelled", "cancelled_at": utc_now_iso()}

    return apply


def _pay(booking_id: str, token: str) -> Apply:
    def apply(conn: sqlite3.Connection) -> dict[str, Any]:
        booking = _booking(conn, booking_id)
        if booking["status"] != "booked" or booking["paid"]:
            raise ApiError(409, "not_payable", f"booking {booking_id} is {booking['status']}")
        if token == DECLINED_TOKEN:
            raise ApiError(402, "card_declined", "the card was declined; it will be declined again")
        conn.execute("UPDATE bookings SET paid = 1 WHERE booking_id = ?", (booking_id,))
        return {**booking, "paid": True, "paid_at": utc_now_iso()}

    return apply


def _text_field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise invalid_argument(f"{name} must be a string")
    return value


async def _create_booking(request: web.Request) -> web.Response:
    key = idempotency_key(request)
    body = await read_json_object(request)
    if set(body) != {"train_number", "date", "traveller"}:
        raise invalid_argument("body must be {train_number, date, traveller} and nothing else")
    train_number = parse_train_number(_text_field(body, "train_number"))
    day = parse_date(_text_field(body, "date"))
    traveller = _text_field(body, "traveller")
    if not _TRAVELLER_RE.fullmatch(traveller):
        raise invalid_argument("traveller must be a name of 1-64 letters, digits, spaces or .'-")
    return write_once(
        request.app[DB_KEY], DOMAIN, key, body, _book(train_number, day, traveller, key)
    )


async def _cancel_booking(request: web.Request) -> web.Response:
    key = idempotency_key(request)
    booking_id = request.match_info["booking_id"]
    fields = {"booking_id": booking_id, "cancel": True}
    return write_once(request.app[DB_KEY], DOMAIN, key, fields, _cancel(booking_id))


async def _pay_booking(request: web.Request) -> web.Response:
    key = idempotency_key(request)
    body = await read_json_object(request)
    if set(body) != {"payment_token"}:
        raise invalid_argument("body must be {payment_token} and nothing else")
    booking_id = request.match_info["booking_id"]
    token = _text_field(body, "payment_token")
    fields = {"booking_id": booking_id, "payment_token": token}
    return write_once(request.app[DB_KEY], DOMAIN, key, fields, _pay(booking_id, token))


# --- routes --------------------------------------------------------------------------------


async def _trains(request: web.Request) -> web.Response:
    train_number = parse_train_number(request.match_info["train_number"])
    day = parse_date(request.query.get("date"))
    return web.json_response(train_status(request.app[DB_KEY], train_number, day))


async def _weather(request: web.Request) -> web.Response:
    city = parse_city(request.match_info["city"])
    day = parse_date(request.query.get("date"))
    return web.json_response(weather_report(request.app[DB_KEY], city, day))


def add_routes(app: web.Application) -> None:
    # The route names are the endpoint names of the request log and the delay knob.
    app.router.add_get("/travel/trains/{train_number}", _trains, name="trains")
    app.router.add_get("/travel/weather/{city}", _weather, name="weather")
    app.router.add_get(
        "/travel/operations/{key}", operation_handler(DOMAIN), name="travel.operation"
    )
    app.router.add_post("/travel/bookings", _create_booking, name="travel.book")
    app.router.add_post(
        "/travel/bookings/{booking_id}/cancellation", _cancel_booking, name="travel.cancel"
    )
    app.router.add_post("/travel/bookings/{booking_id}/payment", _pay_booking, name="travel.pay")
