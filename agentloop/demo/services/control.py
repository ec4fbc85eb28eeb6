"""HTTP plumbing shared by every domain: JSON errors, the request log, the delay knob, fault
injection, the padding knob, idempotent writes, and the `/_control/*` routes that tests and the
demo use to observe and steer the service.

A request is a *business* request iff its route is named: the route name is the endpoint name
used by the log, the counts, the delay knob and the faults. Control routes are deliberately
unnamed, so observing the service never changes what is observed.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from agentloop.demo.services import faults
from agentloop.demo.services.db import DB_KEY, Database
from agentloop.demo.services.faults import Faults

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS request_log (
    started_seq  INTEGER PRIMARY KEY,
    endpoint     TEXT NOT NULL,
    method       TEXT NOT NULL,
    path         TEXT NOT NULL,
    query        TEXT NOT NULL,
    started_at   REAL NOT NULL,
    finished_at  REAL,
    finished_seq INTEGER,
    status       INTEGER
);
CREATE TABLE IF NOT EXISTS operations (
    domain      TEXT NOT NULL,
    key         TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    outcome     TEXT NOT NULL CHECK (outcome IN ('applied', 'refused')),
    status      INTEGER NOT NULL,
    body        TEXT NOT NULL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (domain, key)
);
"""

MAX_DELAY_MS = 60_000
MAX_PADDING_CHARS = 8_000_000

# --- JSON errors ---------------------------------------------------------------------------


class ApiError(Exception):
    """A failure the client should see; `error_middleware` renders it in the JSON error shape."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def json_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(error_body(code, message), status=status)


def invalid_argument(message: str) -> ApiError:
    return ApiError(400, "invalid_argument", message)


_HTTP_ERROR_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as `{"error": {"code", "message"}}`, never as aiohttp's HTML/text."""
    try:
        return await handler(request)
    except ApiError as exc:
        return json_error(exc.status, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:  # redirects are not errors
            raise
        code = _HTTP_ERROR_CODES.get(exc.status, "http_error")
        return json_error(exc.status, code, f"{exc.reason} ({request.method} {request.path})")
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return json_error(500, "internal", "internal error")


async def read_json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid_argument("body must be a JSON object") from exc
    if not isinstance(body, dict):
        raise invalid_argument("body must be a JSON object")
    return body


# --- request log, delay and padding knobs -------------------------------------------------
#
# The padding knob is a test affordance: it makes a real read answer with a large body (a
# `padding` field of deterministic text added to the JSON object of every 200 answer), without
# changing any tool or endpoint schema. Tests use it for "a 1 MB tool output" end to end.

PADDING_FIELD = "padding"


def padding_text(chars: int) -> str:
    """Exactly `chars` characters of distinct numbered lines, deterministic. Each line has
    quotes and a non-ASCII letter, so JSON escaping and UTF-8 paging are both exercised."""
    line_chars = len(_padding_line(0))
    lines = (_padding_line(i) for i in range(chars // line_chars + 1))
    return "".join(lines)[:chars]


def _padding_line(i: int) -> str:
    return f'pad {i:07d} "é"\n'


class Control:
    """The request log, its sequence numbers, the per-endpoint delays and faults of one app.

    `reset_data` puts the seeded domains back to their seed state; `records` counts what the
    writes created, so a test can check "exactly one write" against the system of record."""

    def __init__(
        self,
        db: Database,
        endpoints: Iterable[str],
        *,
        reset_data: Callable[[], None] | None = None,
        records: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._db = db
        self.endpoints = frozenset(endpoints)
        self._delays_ms: dict[str, int] = {}
        self._padding_chars: dict[str, int] = {}
        self.faults = Faults(self.endpoints)
        self._reset_data = reset_data
        self._records = records
        # One counter for starts and finishes, so "A finished before B" is a plain comparison;
        # it continues from the log so a restarted service never reuses a number.
        self._seq = itertools.count(self._last_seq() + 1)

    def _last_seq(self) -> int:
        row = self._db.fetch_one(
            "SELECT COALESCE(MAX(started_seq), 0) AS s, COALESCE(MAX(finished_seq), 0) AS f"
            " FROM request_log"
        )
        assert row is not None  # an aggregate always yields a row
        return max(int(row["s"]), int(row["f"]))

    def begin(self, endpoint: str, method: str, path: str, query: str) -> int:
        """Log a request as started (visible in stats while in flight); returns its seq."""
        seq = next(self._seq)
        self._db.execute(
            "INSERT INTO request_log (started_seq, endpoint, method, path, query, started_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (seq, endpoint, method, path, query, time.time()),
        )
        return seq

    def finish(self, started_seq: int, status: int | None) -> None:
        """`status` is None when no response was produced (the request was cancelled)."""
        self._db.execute(
            "UPDATE request_log SET finished_at = ?, finished_seq = ?, status = ?"
            " WHERE started_seq = ?",
            (time.time(), next(self._seq), status, started_seq),
        )

    def set_delay(self, endpoint: str | None, ms: int) -> None:
        """Delay later requests to `endpoint` (all endpoints if None); `ms=0` clears."""
        if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= MAX_DELAY_MS:
            raise ValueError(f"ms must be an integer between 0 and {MAX_DELAY_MS}")
        if endpoint is not None and endpoint not in self.endpoints:
            known = ", ".join(sorted(self.endpoints))
            raise ValueError(f"unknown endpoint {endpoint!r}; known: {known}")
        for name in self.endpoints if endpoint is None else (endpoint,):
            if ms:
                self._delays_ms[name] = ms
            else:
                self._delays_ms.pop(name, None)

    def delay_seconds(self, endpoint: str) -> float:
        return self._delays_ms.get(endpoint, 0) / 1000

    def delays(self) -> dict[str, int]:
        return dict(self._delays_ms)

    def set_padding(self, endpoint: str | None, chars: int) -> None:
        """Later 200 answers of `endpoint` (all endpoints if None) carry a `padding` field of
        `chars` characters (`padding_text`); `chars=0` clears. A test affordance."""
        high = MAX_PADDING_CHARS
        if isinstance(chars, bool) or not isinstance(chars, int) or not 0 <= chars <= high:
            raise ValueError(f"chars must be an integer between 0 and {high}")
        if endpoint is not None and endpoint not in self.endpoints:
            known = ", ".join(sorted(self.endpoints))
            raise ValueError(f"unknown endpoint {endpoint!r}; known: {known}")
        for name in self.endpoints if endpoint is None else (endpoint,):
            if chars:
                self._padding_chars[name] = chars
            else:
                self._padding_chars.pop(name, None)

    def padding(self) -> dict[str, int]:
        return dict(self._padding_chars)

    def padded(self, endpoint: str, response: web.StreamResponse) -> web.StreamResponse:
        """`response` with the padding knob applied (only a 200 JSON object is padded)."""
        chars = self._padding_chars.get(endpoint, 0)
        if not chars or not isinstance(response, web.Response) or response.status != 200:
            return response
        if response.content_type != "application/json" or response.text is None:
            return response
        body = json.loads(response.text)
        if not isinstance(body, dict):
            return response
        kept = {k: v for k, v in response.headers.items() if k.lower() not in _BODY_HEADERS}
        return web.json_response({**body, PADDING_FIELD: padding_text(chars)}, headers=kept)

    def stats(self) -> dict[str, Any]:
        counts = dict.fromkeys(sorted(self.endpoints), 0)
        for row in self._db.fetch_all(
            "SELECT endpoint, COUNT(*) AS n FROM request_log GROUP BY endpoint"
        ):
            counts[row["endpoint"]] = row["n"]
        requests = self._db.fetch_all(
            "SELECT endpoint, method, path, query, status, started_seq, finished_seq"
            " FROM request_log ORDER BY started_seq"
        )
        return {
            "counts": counts,
            "requests": requests,
            "delays": self.delays(),
            "padding": self.padding(),
            "faults": self.faults.pending(),
            "records": self.records(),
        }

    def records(self) -> dict[str, Any]:
        return {} if self._records is None else self._records()

    def reset(self) -> None:
        """Forget delays, padding, faults and the log, and put the seeded domains back to their
        seed.

        Travel answers are kept (they are deterministic, so keeping them changes nothing);
        travel bookings are not."""
        self._delays_ms.clear()
        self._padding_chars.clear()
        self.faults.clear()
        self._db.execute("DELETE FROM request_log")
        if self._reset_data is not None:
            self._reset_data()


_BODY_HEADERS = frozenset({"content-type", "content-length"})

CONTROL_KEY = web.AppKey("example_service.control", Control)


def business_endpoints(app: web.Application) -> set[str]:
    return {route.name for route in app.router.routes() if route.name}


@web.middleware
async def request_log_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Log business requests, and apply the delay knob and any injected fault.

    Must sit outside `error_middleware` so it sees the status of the rendered error. A request
    whose connection was dropped or abandoned is logged with status None: no answer arrived."""
    endpoint = request.match_info.route.name
    if endpoint is None:  # control routes and unmatched paths are not business requests
        return await handler(request)
    control = request.app[CONTROL_KEY]
    seq = control.begin(endpoint, request.method, request.path, request.query_string)
    # Taken on arrival, so N concurrent requests consume exactly N scheduled faults.
    fault = control.faults.take(endpoint)
    status: int | None = None
    try:
        delay = control.delay_seconds(endpoint)
        if delay:
            await asyncio.sleep(delay)
        if fault is not None and fault.mode.before_commit:
            response: web.StreamResponse = json_error(
                503, "unavailable", f"service unavailable (injected fault: {fault.mode})"
            )
        else:
            response = control.padded(endpoint, await handler(request))
            if fault is not None and not await faults.after_commit(request, fault):
                return response  # the connection is gone: nothing will be delivered
        status = response.status
        return response
    finally:
        control.finish(seq, status)


# --- idempotent writes ---------------------------------------------------------------------
#
# Every write endpoint takes an `Idempotency-Key` and records its outcome under it, in the same
# transaction as the write: the record is what `GET /<domain>/operations/{key}` answers, so a
# caller that lost the response can ask whether the write happened. Business refusals are
# recorded too, so a retry with the same key gets the same answer even if the world changed.

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAY_HEADER = "Idempotent-Replay"
MAX_IDEMPOTENCY_KEY_LEN = 255

Apply = Callable[[sqlite3.Connection], dict[str, Any]]
"""Performs a write inside the caller's transaction and returns the record it created, or
raises `ApiError` to refuse it (the refusal is then recorded under the key)."""


def utc_now_iso() -> str:
    """A record's timestamp: UTC, milliseconds, `Z` suffix."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def idempotency_key(request: web.Request) -> str:
    key = request.headers.get(IDEMPOTENCY_HEADER, "")
    if not key.strip():
        raise invalid_argument(f"the {IDEMPOTENCY_HEADER} header is required for this write")
    if len(key) > MAX_IDEMPOTENCY_KEY_LEN:
        raise invalid_argument(
            f"{IDEMPOTENCY_HEADER} must be at most {MAX_IDEMPOTENCY_KEY_LEN} characters"
        )
    return key


def write_once(
    db: Database, domain: str, key: str, request_fields: dict[str, Any], apply: Apply
) -> web.Response:
    """Run `apply` at most once per (`domain`, `key`); later requests get the first answer.

    The lookup, the write and its record share one `BEGIN IMMEDIATE` transaction, so requests
    racing with the same key serialize: exactly one applies, the others replay its answer.

    Raises:
        ApiError: 409 `idempotency_key_reused` when the key was used for a different request.
    """
    fingerprint = request_fingerprint(request_fields)
    with db.transaction() as conn:
        known = conn.execute(
            "SELECT fingerprint, status, body FROM operations WHERE domain = ? AND key = ?",
            (domain, key),
        ).fetchone()
        if known is None:
            status, body = _apply_or_refuse(conn, apply)
            conn.execute(
                "INSERT INTO operations (domain, key, fingerprint, outcome, status, body,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (domain, key, fingerprint, _outcome(status), status, json.dumps(body), time.time()),
            )
            return web.json_response(body, status=status)
    if known["fingerprint"] != fingerprint:
        raise ApiError(
            409,
            "idempotency_key_reused",
            f"{IDEMPOTENCY_HEADER} {key!r} was already used for a different request",
        )
    return web.json_response(
        json.loads(known["body"]), status=known["status"], headers={REPLAY_HEADER: "true"}
    )


def _apply_or_refuse(conn: sqlite3.Connection, apply: Apply) -> tuple[int, dict[str, Any]]:
    # A savepoint so a refusal raised after a partial write leaves only the refusal behind.
    conn.execute("SAVEPOINT apply_write")
    try:
        record = apply(conn)
    except ApiError as refusal:
        conn.execute("ROLLBACK TO apply_write")
        conn.execute("RELEASE apply_write")
        return refusal.status, error_body(refusal.code, refusal.message)
    conn.execute("RELEASE apply_write")
    return 200, record


def _outcome(status: int) -> str:
    return "applied" if status < 400 else "refused"


def request_fingerprint(request_fields: dict[str, Any]) -> str:
    """What a write's key was used for: a lookup by key compares it with the request it asks
    about (a key is never the only proof)."""
    canonical = json.dumps(request_fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def forget_operations(conn: sqlite3.Connection, domain: str) -> None:
    """For a domain's reset to its seed: its recorded operations go with its data."""
    conn.execute("DELETE FROM operations WHERE domain = ?", (domain,))


def operation_handler(domain: str) -> Handler:
    """`GET /<domain>/operations/{key}`: the recorded outcome, or 404 if none ever committed."""

    async def handler(request: web.Request) -> web.Response:
        key = request.match_info["key"]
        row = request.app[DB_KEY].fetch_one(
            "SELECT outcome, status, body, fingerprint FROM operations"
            " WHERE domain = ? AND key = ?",
            (domain, key),
        )
        if row is None:
            raise ApiError(404, "not_found", f"no {domain} operation with key {key!r}")
        body = json.loads(row["body"])
        view: dict[str, Any] = {
            "operation_id": key,
            "state": row["outcome"],
            "fingerprint": row["fingerprint"],
        }
        if row["outcome"] == "applied":
            view["record"] = body
        else:
            view["status"] = row["status"]
            view["error"] = body["error"]
        return web.json_response(view)

    return handler


# --- /_control routes ----------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONTROL_KEY].stats())


async def _set_delay(request: web.Request) -> web.Response:
    control = request.app[CONTROL_KEY]
    await _set_per_endpoint(request, "ms", control.set_delay)
    return web.json_response({"delays": control.delays()})


async def _set_padding(request: web.Request) -> web.Response:
    control = request.app[CONTROL_KEY]
    await _set_per_endpoint(request, "chars", control.set_padding)
    return web.json_response({"padding": control.padding()})


async def _set_per_endpoint(
    request: web.Request, amount: str, setter: Callable[[str | None, Any], None]
) -> None:
    """`{endpoint?, <amount>}`: one knob for one endpoint (or all of them), checked."""
    body = await read_json_object(request)
    endpoint = body.get("endpoint")
    if endpoint is not None and not isinstance(endpoint, str):
        raise invalid_argument("endpoint must be a string")
    try:
        setter(endpoint, body.get(amount, 0))
    except ValueError as exc:
        raise invalid_argument(str(exc)) from exc


async def _reset(request: web.Request) -> web.Response:
    request.app[CONTROL_KEY].reset()
    return web.json_response({"ok": True})


async def _inject_fault(request: web.Request) -> web.Response:
    body = await read_json_object(request)
    endpoint, mode = body.get("endpoint"), body.get("mode")
    if not isinstance(endpoint, str) or not isinstance(mode, str):
        raise invalid_argument("endpoint and mode must be strings")
    control = request.app[CONTROL_KEY]
    try:
        control.faults.inject(endpoint, mode, body.get("count", 1), body.get("hang_ms"))
    except ValueError as exc:
        raise invalid_argument(str(exc)) from exc
    return web.json_response({"faults": control.faults.pending()})


async def _list_faults(request: web.Request) -> web.Response:
    return web.json_response({"faults": request.app[CONTROL_KEY].faults.pending()})


async def _clear_faults(request: web.Request) -> web.Response:
    request.app[CONTROL_KEY].faults.clear()
    return web.json_response({"faults": {}})


def add_routes(app: web.Application) -> None:
    # No `name=`: see the module docstring.
    app.router.add_get("/_control/health", _health)
    app.router.add_get("/_control/stats", _stats)
    app.router.add_post("/_control/delay", _set_delay)
    app.router.add_post("/_control/padding", _set_padding)
    app.router.add_post("/_control/reset", _reset)
    app.router.add_get("/_control/faults", _list_faults)
    app.router.add_post("/_control/faults", _inject_fault)
    app.router.add_delete("/_control/faults", _clear_faults)
