"""Serving the inbox with uvicorn, in the caller's event loop (the CLI's, or a test's)."""

from __future__ import annotations

import asyncio
import contextlib

import uvicorn
from temporalio.client import Client
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentloop.inbox.app import LOCAL_HOSTS, InboxOptions, inbox_app
from agentloop.inbox.listed import WaitingList
from agentloop.inbox.live import LiveRuns

GRACEFUL_SHUTDOWN_SECONDS = 5


class AnsweredOnce(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, but when it answers a request itself (400: the body's
    framing broke after the headers were read) the request's handler, already running, is
    told its client is gone: its own answer is then dropped, instead of failing in h11 (and
    being logged as the app's exception, with a traceback)."""

    def send_400_response(self, msg: str) -> None:
        super().send_400_response(msg)
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()


class InboxUnsafe(ValueError):
    """The inbox would be reachable beyond this machine with nobody vouching for its users."""


def check_exposure(host: str, options: InboxOptions) -> None:
    """Without an authenticating proxy (`auth_header`) the inbox listens on 127.0.0.1 only:
    anyone who reaches it could act under any name."""
    if options.auth_header is None and host not in LOCAL_HOSTS:
        raise InboxUnsafe(
            f"the inbox listens on {host} only behind an authenticating proxy: pass "
            "--auth-header HEADER (the header the proxy names the user in), or --host 127.0.0.1"
        )


class InboxServer:
    """`async with InboxServer(...) as server`: listening on `server.port` until the block
    ends. Raises `InboxUnsafe` (see `check_exposure`) and OSError (the port is taken)."""

    def __init__(self, client: Client, options: InboxOptions, host: str, port: int) -> None:
        check_exposure(host, options)
        app = inbox_app(client, options)
        self.live: LiveRuns = app.state.live
        """The run pages' live feeds (one subscription per watched run)."""
        self.waiting: WaitingList = app.state.inbox.waiting
        """The list of waiting runs the views answer from."""
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            lifespan="off",
            http=AnsweredOnce,
            log_level="warning",
            access_log=False,
            server_header=False,
            # A browser's live stream ends when the feeds close; this bounds the rest.
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        )
        self.server = uvicorn.Server(config)
        self.host = host
        self.port = port
        self._serving: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def __aenter__(self) -> InboxServer:
        self.server.config.load()
        self.server.lifespan = self.server.config.lifespan_class(self.server.config)
        try:
            await self.server.startup()
        except SystemExit:  # uvicorn's way of saying it could not bind (it logged why)
            raise OSError(f"cannot listen on {self.host}:{self.port}") from None
        [listening] = self.server.servers
        self.port = listening.sockets[0].getsockname()[1]
        self._serving = asyncio.create_task(self.server.main_loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.live.close()  # else each open run page would hold the shutdown
        await self.waiting.close()
        self.server.should_exit = True
        if self._serving is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving
        await self.server.shutdown()
