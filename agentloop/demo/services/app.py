"""The example service: a small HTTP JSON system of record that the example tools call.

Each domain module contributes a `SCHEMA` and an `add_routes(app)`; the seeded domains
(workshops, support) also a `seed`, a `reset` and a `records` count. The shared pieces
(database, request log, delay knob, faults, idempotent writes, JSON errors, `/_control/*`) live
in `db`, `control` and `faults`.

Standalone: `python -m agentloop.demo.services.app --port 8787 --db PATH` (runs until SIGINT).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from agentloop.demo.services import control, support, travel, workshops
from agentloop.demo.services.control import CONTROL_KEY, Control
from agentloop.demo.services.db import DB_KEY, Database, open_database

DOMAIN_SCHEMAS = (travel.SCHEMA, workshops.SCHEMA, support.SCHEMA)
SEEDED_DOMAINS = (workshops, support, travel)


def build_app(db_path: str | Path) -> web.Application:
    db = open_database(db_path, (control.SCHEMA, *DOMAIN_SCHEMAS))
    for domain in SEEDED_DOMAINS:
        domain.seed(db)
    # Order matters: the request log is outermost so it records the status of rendered errors.
    app = web.Application(middlewares=[control.request_log_middleware, control.error_middleware])
    app[DB_KEY] = db
    travel.add_routes(app)
    workshops.add_routes(app)
    support.add_routes(app)
    control.add_routes(app)
    app[CONTROL_KEY] = Control(
        db,
        endpoints=control.business_endpoints(app),
        reset_data=lambda: _reset_seeded(db),
        records=lambda: _records(db),
    )
    app.on_cleanup.append(_close_db)
    return app


def _reset_seeded(db: Database) -> None:
    for domain in SEEDED_DOMAINS:
        domain.reset(db)


def _records(db: Database) -> dict[str, Any]:
    return {key: value for domain in SEEDED_DOMAINS for key, value in domain.records(db).items()}


async def _close_db(app: web.Application) -> None:
    app[DB_KEY].close()


# A request whose client went away is cancelled, as in most servers: an injected hang then
# ends when the caller times out (logged with status None) instead of outliving it. Writes are
# synchronous on the event loop, so a cancellation never lands inside one.
HANDLER_CANCELLATION = True


class ExampleService:
    """The service run in-process, on a real socket: for tests and the demo.

    One instance serves once (`start` then `stop`); to "restart", start a new instance on the
    same `db_path`."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        self._runner: web.AppRunner | None = None
        self._base_url: str | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on `host:port` (0 picks a free port); returns the base URL."""
        if self._runner is not None:
            raise RuntimeError("ExampleService already started")
        # A short shutdown timeout so `stop()` does not wait out a request held by the delay knob.
        runner = web.AppRunner(
            build_app(self.db_path), shutdown_timeout=1.0, handler_cancellation=HANDLER_CANCELLATION
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        bound_port = runner.addresses[0][1]
        url_host = f"[{host}]" if ":" in host else host
        self._runner = runner
        self._base_url = f"http://{url_host}:{bound_port}"
        return self._base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._base_url = None

    @property
    def base_url(self) -> str:
        if self._base_url is None:
            raise RuntimeError("ExampleService is not running")
        return self._base_url

    def _control(self) -> Control:
        if self._runner is None:
            raise RuntimeError("ExampleService is not running")
        return self._runner.app[CONTROL_KEY]

    def set_delay(self, endpoint: str | None, ms: int) -> None:
        """Delay later requests to `endpoint` (None: every endpoint) by `ms`; 0 clears."""
        self._control().set_delay(endpoint, ms)

    def set_padding(self, endpoint: str | None, chars: int) -> None:
        """Later 200 answers of `endpoint` (None: every endpoint) carry a `padding` field of
        `chars` characters of deterministic text; 0 clears. A test affordance (large output)."""
        self._control().set_padding(endpoint, chars)

    def stats(self) -> dict[str, Any]:
        """The same document as `GET /_control/stats`."""
        return self._control().stats()

    def inject_fault(
        self, endpoint: str, mode: str, count: int = 1, hang_ms: int | None = None
    ) -> None:
        """Apply a fault mode (see `faults`) to the next `count` requests to `endpoint`."""
        self._control().faults.inject(endpoint, mode, count, hang_ms)

    def clear_faults(self) -> None:
        self._control().faults.clear()

    def records(self) -> dict[str, Any]:
        """Counts of what the writes created (the `records` of `stats()`)."""
        return self._control().records()

    def reset(self) -> None:
        """Clear delays, padding, faults and the request log; workshops and tickets go back to
        the seed state (travel answers stay: they are deterministic)."""
        self._control().reset()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentloop.demo.services.app",
        description="Run the example service (travel, workshops and support desk over HTTP, "
        "stored in SQLite).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8787)
    parser.add_argument("--db", default="example_service.sqlite3", help="SQLite file path")
    args = parser.parse_args(argv)
    web.run_app(
        build_app(args.db),
        host=args.host,
        port=args.port,
        handler_cancellation=HANDLER_CANCELLATION,
    )


if __name__ == "__main__":
    main()
