"""The example service: a small HTTP JSON system of record that the example tools call.

Each domain module contributes a `SCHEMA` and an `add_routes(app)`; the shared pieces (database,
request log, delay knob, JSON errors, `/_control/*`) live in `db` and `control`.

Standalone: `python -m agentloop.demo.services.app --port 8787 --db PATH` (runs until SIGINT).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from . import control, travel
from .control import CONTROL_KEY, Control
from .db import DB_KEY, open_database

DOMAIN_SCHEMAS = (travel.SCHEMA,)


def build_app(db_path: str | Path) -> web.Application:
    db = open_database(db_path, (control.SCHEMA, *DOMAIN_SCHEMAS))
    # Order matters: the request log is outermost so it records the status of rendered errors.
    app = web.Application(middlewares=[control.request_log_middleware, control.error_middleware])
    app[DB_KEY] = db
    travel.add_routes(app)
    control.add_routes(app)
    app[CONTROL_KEY] = Control(db, endpoints=control.business_endpoints(app))
    app.on_cleanup.append(_close_db)
    return app


async def _close_db(app: web.Application) -> None:
    app[DB_KEY].close()


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
        runner = web.AppRunner(build_app(self.db_path), shutdown_timeout=1.0)
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

    def stats(self) -> dict[str, Any]:
        """The same document as `GET /_control/stats`."""
        return self._control().stats()

    def reset(self) -> None:
        """Clear delays and the request log; stored business data stays."""
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
        description="Run the example service (travel data over HTTP, stored in SQLite).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8787)
    parser.add_argument("--db", default="example_service.sqlite3", help="SQLite file path")
    args = parser.parse_args(argv)
    web.run_app(build_app(args.db), host=args.host, port=args.port)


if __name__ == "__main__":
    main()
