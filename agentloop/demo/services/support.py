"""Support desk: seeded tickets and policies, and replies to customers (an idempotent write).

A reply is an email to a person: sending it twice is the harm the idempotency key prevents, so
the number of replies per ticket is exposed through `records` for tests to count.
"""

from __future__ import annotations

import re
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

DOMAIN = "support"

SCHEMA = """
CREATE TABLE IF NOT EXISTS tickets (
    ticket_id      TEXT PRIMARY KEY,
    customer_email TEXT NOT NULL,
    subject        TEXT NOT NULL,
    body           TEXT NOT NULL,
    status         TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS replies (
    reply_id     TEXT PRIMARY KEY,
    operation_id TEXT NOT NULL,
    ticket_id    TEXT NOT NULL REFERENCES tickets (ticket_id),
    recipient    TEXT NOT NULL,
    body         TEXT NOT NULL,
    sent_at      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS replies_by_ticket ON replies (ticket_id);
CREATE TABLE IF NOT EXISTS policies (
    policy_id TEXT PRIMARY KEY,
    title     TEXT NOT NULL,
    text      TEXT NOT NULL
);
"""

SEED_TICKETS = (
    (
        "T-1001",
        "dana@example.com",
        "Refund still not received",
        "I returned order A-5521 three weeks ago and the refund has still not arrived. "
        "When will I get my money back?",
        "open",
    ),
    (
        "T-1002",
        "erik@example.com",
        "Mug arrived damaged",
        "The ceramic mug from order B-7730 arrived with a cracked handle. Can I get a replacement?",
        "open",
    ),
    (
        "T-1003",
        "fatima@example.com",
        "Change of delivery address",
        "Please deliver order C-1180 to my office instead. (Resolved by phone.)",
        "closed",
    ),
)
SEED_POLICIES = (
    (
        "POL-REFUND",
        "Refund policy",
        "Refunds go to the original payment method within 14 days of the returned item "
        "arriving at our warehouse. If a refund is late, confirm the date the return arrived, "
        "apologise, and escalate to billing; the customer gets an answer within one business day.",
    ),
    (
        "POL-DAMAGED",
        "Damaged goods policy",
        "If an item arrives damaged, the customer chooses a free replacement or a full refund. "
        "Ask for a photo of the damage; items under 50 EUR need not be sent back.",
    ),
    (
        "POL-SHIPPING",
        "Shipping delays",
        "Orders ship within 2 business days. A parcel that has not arrived 10 days after "
        "shipping is treated as lost: offer a replacement shipped express at no cost.",
    ),
    (
        "POL-PRIVACY",
        "Customer data in replies",
        "Reply only to the email address on the ticket. Never include payment details or "
        "another customer's order information in a reply.",
    ),
)

EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
MAX_EMAIL_LEN = 254
MAX_REPLY_LEN = 5_000
MAX_QUERY_LEN = 200
MAX_POLICY_RESULTS = 5


# --- seed and reset ------------------------------------------------------------------------


def seed(db: Database) -> None:
    """Insert the seed rows that are missing: a database that already has them keeps its state."""
    with db.transaction() as conn:
        _insert_seed(conn)


def reset(db: Database) -> None:
    """Back to the seed state: replies, ticket status changes and recorded operations go."""
    with db.transaction() as conn:
        for table in ("replies", "tickets", "policies"):  # children first
            conn.execute(f"DELETE FROM {table}")
        forget_operations(conn, DOMAIN)
        _insert_seed(conn)


def _insert_seed(conn: sqlite3.Connection) -> None:
    conn.executemany("INSERT OR IGNORE INTO tickets VALUES (?, ?, ?, ?, ?)", SEED_TICKETS)
    conn.executemany("INSERT OR IGNORE INTO policies VALUES (?, ?, ?)", SEED_POLICIES)


def records(db: Database) -> dict[str, Any]:
    """How many replies were sent, in total and per ticket."""
    by_ticket = {
        row["ticket_id"]: row["n"]
        for row in db.fetch_all(
            "SELECT ticket_id, COUNT(*) AS n FROM replies GROUP BY ticket_id ORDER BY ticket_id"
        )
    }
    return {"replies": sum(by_ticket.values()), "replies_by_ticket": by_ticket}


# --- queries -------------------------------------------------------------------------------

REPLY_FIELDS = ("reply_id", "operation_id", "ticket_id", "recipient", "body", "sent_at")


def ticket_view(conn: sqlite3.Connection, ticket_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT ticket_id, customer_email, subject, body, status FROM tickets WHERE ticket_id = ?",
        (ticket_id,),
    ).fetchone()
    if row is None:
        raise ApiError(404, "not_found", f"ticket {ticket_id!r} not found")
    replies = conn.execute(
        f"SELECT {', '.join(REPLY_FIELDS)} FROM replies WHERE ticket_id = ? ORDER BY rowid",
        (ticket_id,),
    ).fetchall()
    return {**dict(row), "replies": [dict(reply) for reply in replies]}


def search_policies(db: Database, query: str) -> list[dict[str, Any]]:
    """Policies containing any keyword of `query` (case-insensitive), best match first: a
    keyword in the title counts twice, so "refund" finds the refund policy before the policies
    that merely mention refunds."""
    # Words under 3 letters ("a", "to", "my") would match nearly everything.
    keywords = {word for word in re.findall(r"\w+", query.casefold()) if len(word) >= 3}
    if not keywords:
        raise invalid_argument("query must contain a keyword of at least 3 letters")
    scored = []
    for policy in db.fetch_all("SELECT policy_id, title, text FROM policies ORDER BY policy_id"):
        title, text = policy["title"].casefold(), policy["text"].casefold()
        score = sum(2 if word in title else 1 if word in text else 0 for word in keywords)
        if score:
            scored.append((-score, policy["policy_id"], policy))
    return [policy for *_, policy in sorted(scored, key=lambda s: s[:2])][:MAX_POLICY_RESULTS]


def _reply(ticket_id: str, recipient: str, body: str, operation_id: str) -> Apply:
    def apply(conn: sqlite3.Connection) -> dict[str, Any]:
        ticket = ticket_view(conn, ticket_id)
        if ticket["status"] == "closed":
            raise ApiError(409, "ticket_closed", f"ticket {ticket_id} is closed")
        record = {
            "reply_id": f"rep-{uuid.uuid4().hex[:12]}",
            "operation_id": operation_id,
            "ticket_id": ticket_id,
            "recipient": recipient,
            "body": body,
            "sent_at": utc_now_iso(),
        }
        conn.execute(
            f"INSERT INTO replies ({', '.join(REPLY_FIELDS)})"
            f" VALUES ({', '.join(':' + f for f in REPLY_FIELDS)})",
            record,
        )
        conn.execute("UPDATE tickets SET status = 'answered' WHERE ticket_id = ?", (ticket_id,))
        return record

    return apply


def _parse_reply(body: dict[str, Any]) -> tuple[str, str]:
    if set(body) != {"recipient", "body"}:
        raise invalid_argument("body must be {recipient, body} and nothing else")
    recipient, text = body["recipient"], body["body"]
    if (
        not isinstance(recipient, str)
        or len(recipient) > MAX_EMAIL_LEN
        or not EMAIL.fullmatch(recipient)
    ):
        raise invalid_argument("recipient must be an email address")
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_REPLY_LEN:
        raise invalid_argument(f"body must be non-blank text of at most {MAX_REPLY_LEN} chars")
    return recipient, text


# --- routes --------------------------------------------------------------------------------


async def _ticket(request: web.Request) -> web.Response:
    # A transaction for a read too: the ticket and its replies come from one snapshot.
    with request.app[DB_KEY].transaction() as conn:
        return web.json_response(ticket_view(conn, request.match_info["ticket_id"]))


async def _policies(request: web.Request) -> web.Response:
    query = request.query.get("query", "")
    if len(query) > MAX_QUERY_LEN:
        raise invalid_argument(f"query must be at most {MAX_QUERY_LEN} characters")
    return web.json_response({"results": search_policies(request.app[DB_KEY], query)})


async def _send_reply(request: web.Request) -> web.Response:
    key = idempotency_key(request)
    recipient, text = _parse_reply(await read_json_object(request))
    ticket_id = request.match_info["ticket_id"]
    return write_once(
        request.app[DB_KEY],
        DOMAIN,
        key,
        {"ticket_id": ticket_id, "recipient": recipient, "body": text},
        _reply(ticket_id, recipient, text, key),
    )


def add_routes(app: web.Application) -> None:
    # The route names are the endpoint names of the request log, the delay knob and the faults.
    app.router.add_get(
        "/support/operations/{key}", operation_handler(DOMAIN), name="support.operation"
    )
    app.router.add_get("/support/tickets/{ticket_id}", _ticket, name="support.ticket")
    app.router.add_get("/support/policies", _policies, name="support.policies")
    app.router.add_post("/support/tickets/{ticket_id}/replies", _send_reply, name="support.reply")
