"""Workshops: seeded workshops and participants, and seat reservations (an idempotent write).

Seats left are computed from the reservations that exist, inside the same transaction as a
reservation, so the count can never drift from the record. Two seeded bookings fill `ws-102`
(p-dave, p-erin), so "full" and "already booked" exist from the start; `ws-101` starts empty.
"""

from __future__ import annotations

import sqlite3
import uuid
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

DOMAIN = "workshops"

SCHEMA = """
CREATE TABLE IF NOT EXISTS workshops (
    workshop_id  TEXT PRIMARY KEY,
    title        TEXT NOT NULL,
    date         TEXT NOT NULL,
    capacity     INTEGER NOT NULL,
    members_only INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS participants (
    participant_id TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    member         INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS reservations (
    reservation_id TEXT PRIMARY KEY,
    operation_id   TEXT,
    workshop_id    TEXT NOT NULL REFERENCES workshops (workshop_id),
    participant_id TEXT NOT NULL REFERENCES participants (participant_id),
    created_at     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reservations_by_workshop ON reservations (workshop_id);
"""

SEED_WORKSHOPS = (
    ("ws-101", "Intro to Temporal", "2026-12-03", 3, False),
    ("ws-102", "Durable Agents Deep Dive", "2026-12-10", 2, False),
    ("ws-103", "Members' Lab: Agents in Production", "2026-12-17", 10, True),
)
SEED_PARTICIPANTS = (
    ("p-alice", "Alice Martin", False),
    ("p-bob", "Bob Chen", True),
    ("p-carol", "Carol Diaz", False),
    ("p-dave", "Dave Okafor", True),
    ("p-erin", "Erin Novak", False),
)
# (reservation_id, workshop_id, participant_id); seeded rows have no operation id, which is
# how `records` tells them from the writes made through the API.
SEED_RESERVATIONS = (
    ("r-seed-1", "ws-102", "p-dave"),
    ("r-seed-2", "ws-102", "p-erin"),
)
SEED_TIME = "2026-11-01T09:00:00.000Z"

MAX_ID_LEN = 64

# Refusal code -> HTTP status: 409 when the current state says no, 422 when the participant
# can never book this workshop.
REFUSAL_STATUS = {"no_seats": 409, "already_booked": 409, "not_eligible": 422}


# --- seed and reset ------------------------------------------------------------------------


def seed(db: Database) -> None:
    """Insert the seed rows that are missing: a database that already has them keeps its state."""
    with db.transaction() as conn:
        _insert_seed(conn)


def reset(db: Database) -> None:
    """Back to the seed state: reservations and recorded operations made since are gone."""
    with db.transaction() as conn:
        # Children first: the foreign keys are enforced.
        for table in ("reservations", "participants", "workshops"):
            conn.execute(f"DELETE FROM {table}")
        forget_operations(conn, DOMAIN)
        _insert_seed(conn)


def _insert_seed(conn: sqlite3.Connection) -> None:
    conn.executemany("INSERT OR IGNORE INTO workshops VALUES (?, ?, ?, ?, ?)", SEED_WORKSHOPS)
    conn.executemany("INSERT OR IGNORE INTO participants VALUES (?, ?, ?)", SEED_PARTICIPANTS)
    conn.executemany(
        "INSERT OR IGNORE INTO reservations VALUES (?, NULL, ?, ?, ?)",
        [(*row, SEED_TIME) for row in SEED_RESERVATIONS],
    )


def records(db: Database) -> dict[str, Any]:
    """How many reservations were written through the API and exist now, in total and per
    (workshop, participant); the seeded bookings are not counted, so a fresh world has 0."""
    by_workshop: dict[str, dict[str, int]] = {}
    for row in db.fetch_all(
        "SELECT workshop_id, participant_id, COUNT(*) AS n FROM reservations"
        " WHERE operation_id IS NOT NULL"
        " GROUP BY workshop_id, participant_id ORDER BY workshop_id, participant_id"
    ):
        by_workshop.setdefault(row["workshop_id"], {})[row["participant_id"]] = row["n"]
    total = sum(n for per in by_workshop.values() for n in per.values())
    return {"reservations": total, "reservations_by_workshop": by_workshop}


# --- queries -------------------------------------------------------------------------------


def workshop_view(conn: sqlite3.Connection, workshop_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT workshop_id, title, date, capacity, members_only FROM workshops"
        " WHERE workshop_id = ?",
        (workshop_id,),
    ).fetchone()
    if row is None:
        raise ApiError(404, "not_found", f"workshop {workshop_id!r} not found")
    participants = [
        r["participant_id"]
        for r in conn.execute(
            "SELECT participant_id FROM reservations WHERE workshop_id = ? ORDER BY rowid",
            (workshop_id,),
        )
    ]
    return {
        "workshop_id": row["workshop_id"],
        "title": row["title"],
        "date": row["date"],
        "capacity": row["capacity"],
        "seats_left": max(0, row["capacity"] - len(participants)),
        "members_only": bool(row["members_only"]),
        "participants": participants,
    }


def eligibility(
    conn: sqlite3.Connection, workshop: dict[str, Any], participant_id: str
) -> tuple[str, str]:
    """(code, reason): `ok`, or the refusal code a reservation would get right now."""
    ws = workshop["workshop_id"]
    participant = conn.execute(
        "SELECT member FROM participants WHERE participant_id = ?", (participant_id,)
    ).fetchone()
    if participant is None:
        return "not_eligible", f"unknown participant {participant_id!r}"
    if participant_id in workshop["participants"]:
        return "already_booked", f"{participant_id} already has a seat in {ws}"
    if workshop["members_only"] and not participant["member"]:
        return "not_eligible", f"{ws} is for members only and {participant_id} is not a member"
    if workshop["seats_left"] <= 0:
        return "no_seats", f"{ws} is full: no seat left for {participant_id}"
    return "ok", f"{participant_id} can reserve a seat in {ws}"


def _reservation(workshop_id: str, participant_id: str, operation_id: str) -> Apply:
    def apply(conn: sqlite3.Connection) -> dict[str, Any]:
        # Re-checked here, in the write's transaction: the eligibility a caller read earlier
        # may be stale, and two writers must not both take the last seat.
        code, reason = eligibility(conn, workshop_view(conn, workshop_id), participant_id)
        if code != "ok":
            raise ApiError(REFUSAL_STATUS[code], code, reason)
        record = {
            "reservation_id": f"r-{uuid.uuid4().hex[:12]}",
            "operation_id": operation_id,
            "workshop_id": workshop_id,
            "participant_id": participant_id,
            "created_at": utc_now_iso(),
        }
        conn.execute(
            "INSERT INTO reservations (reservation_id, operation_id, workshop_id,"
            " participant_id, created_at) VALUES (:reservation_id, :operation_id,"
            " :workshop_id, :participant_id, :created_at)",
            record,
        )
        return record

    return apply


# --- routes --------------------------------------------------------------------------------


async def _get(request: web.Request) -> web.Response:
    # A transaction for a read too: the workshop and its reservations come from one snapshot.
    with request.app[DB_KEY].transaction() as conn:
        return web.json_response(workshop_view(conn, request.match_info["workshop_id"]))


async def _eligibility(request: web.Request) -> web.Response:
    participant_id = request.match_info["participant_id"]
    with request.app[DB_KEY].transaction() as conn:
        workshop = workshop_view(conn, request.match_info["workshop_id"])
        code, reason = eligibility(conn, workshop, participant_id)
    return web.json_response(
        {
            "workshop_id": workshop["workshop_id"],
            "participant_id": participant_id,
            "eligible": code == "ok",
            "code": code,
            "reason": reason,
        }
    )


async def _reserve(request: web.Request) -> web.Response:
    key = idempotency_key(request)
    body = await read_json_object(request)
    if set(body) != {"participant_id"}:
        raise invalid_argument("body must be {participant_id} and nothing else")
    participant_id = body["participant_id"]
    if not isinstance(participant_id, str) or not 0 < len(participant_id) <= MAX_ID_LEN:
        raise invalid_argument(f"participant_id must be a string of 1-{MAX_ID_LEN} characters")
    workshop_id = request.match_info["workshop_id"]
    return write_once(
        request.app[DB_KEY],
        DOMAIN,
        key,
        {"workshop_id": workshop_id, "participant_id": participant_id},
        _reservation(workshop_id, participant_id, key),
    )


def add_routes(app: web.Application) -> None:
    # The route names are the endpoint names of the request log, the delay knob and the faults.
    # The operations route comes first so no workshop id can shadow it.
    app.router.add_get(
        "/workshops/operations/{key}", operation_handler(DOMAIN), name="workshops.operation"
    )
    app.router.add_get("/workshops/{workshop_id}", _get, name="workshops.get")
    app.router.add_get(
        "/workshops/{workshop_id}/eligibility/{participant_id}",
        _eligibility,
        name="workshops.eligibility",
    )
    app.router.add_post("/workshops/{workshop_id}/reservations", _reserve, name="workshops.reserve")
