"""HTTP plumbing shared by every domain: JSON errors, the request log, the delay knob, and the
`/_control/*` routes that tests and the demo use to observe and steer the service.

A request is a *business* request iff its route is named: the route name is the endpoint name
used by the log, the counts and the delay knob. Control routes are deliberately unnamed, so
observing the service never changes what is observed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Iterable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from .db import Database

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
"""

MAX_DELAY_MS = 60_000

# --- JSON errors ---------------------------------------------------------------------------


class ApiError(Exception):
    """A failure the client should see; `error_middleware` renders it in the JSON error shape."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def json_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


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


# --- request log and delay knob ------------------------------------------------------------


class Control:
    """The request log, its sequence numbers and the per-endpoint delays of one app."""

    def __init__(self, db: Database, endpoints: Iterable[str]) -> None:
        self._db = db
        self.endpoints = frozenset(endpoints)
        self._delays_ms: dict[str, int] = {}
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
        return {"counts": counts, "requests": requests, "delays": self.delays()}

    def reset(self) -> None:
        """Forget delays and the log; stored business data is kept (it is the record)."""
        self._delays_ms.clear()
        self._db.execute("DELETE FROM request_log")


CONTROL_KEY = web.AppKey("example_service.control", Control)


def business_endpoints(app: web.Application) -> set[str]:
    return {route.name for route in app.router.routes() if route.name}


@web.middleware
async def request_log_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Log business requests and apply the delay knob before they are answered.

    Must sit outside `error_middleware` so it sees the status of the rendered error."""
    endpoint = request.match_info.route.name
    if endpoint is None:  # control routes and unmatched paths are not business requests
        return await handler(request)
    control = request.app[CONTROL_KEY]
    seq = control.begin(endpoint, request.method, request.path, request.query_string)
    status: int | None = None
    try:
        delay = control.delay_seconds(endpoint)
        if delay:
            await asyncio.sleep(delay)
        response = await handler(request)
        status = response.status
        return response
    finally:
        control.finish(seq, status)


# --- /_control routes ----------------------------------------------------------------------


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[CONTROL_KEY].stats())


async def _set_delay(request: web.Request) -> web.Response:
    body = await read_json_object(request)
    endpoint = body.get("endpoint")
    if endpoint is not None and not isinstance(endpoint, str):
        raise invalid_argument("endpoint must be a string")
    control = request.app[CONTROL_KEY]
    try:
        control.set_delay(endpoint, body.get("ms", 0))
    except ValueError as exc:
        raise invalid_argument(str(exc)) from exc
    return web.json_response({"delays": control.delays()})


async def _reset(request: web.Request) -> web.Response:
    request.app[CONTROL_KEY].reset()
    return web.json_response({"ok": True})


def add_routes(app: web.Application) -> None:
    # No `name=`: see the module docstring.
    app.router.add_get("/_control/health", _health)
    app.router.add_get("/_control/stats", _stats)
    app.router.add_post("/_control/delay", _set_delay)
    app.router.add_post("/_control/reset", _reset)
