"""One connection per MCP server, kept by the worker and shared by every call (the SDK's
session multiplexes requests): no session per call, and a stdio server is one process per
worker, not one per call.

A connection is opened on first use and held open by a task of its own (the SDK's client is
an anyio context that must be entered and left in one task). When it breaks (the server went
away, the stdio process exited), the calls on it fail and the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentloop.mcp.tasks import TasksExtension
from agentloop.runtime.mcp_config import McpServerConfig

log = logging.getLogger(__name__)


async def _declined_mid_call(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    """An older (2025-11-25) server asks mid-call, inside the activity, where no person can
    answer: declined, so its tool says no to the model. A 2026-07-28 server never calls this:
    its questions come back as `input_required`."""
    return types.ElicitResult(action="decline")


class ServerUnreachable(Exception):
    """No connection to the server could be made: nothing was sent."""


class McpConnection:
    def __init__(
        self, name: str, config: McpServerConfig, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.config = config
        self._env = os.environ if env is None else env
        self._client: Client | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None

    async def client(self) -> Client:
        """The open connection, opened now if there is none (or the last one broke); raises
        `ServerUnreachable`."""
        if self._client is not None and self._holder is not None and not self._holder.done():
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None or self._holder is None or self._holder.done():
                await self._open()
            assert self._client is not None
            return self._client

    async def broken(self, client: Client) -> None:
        """The connection `client` is no longer usable: the next call opens a new one."""
        if client is self._client:
            await self.close()

    async def close(self) -> None:
        holder, stop = self._holder, self._stop
        self._client = self._holder = self._stop = None
        if holder is None or stop is None:
            return
        stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(holder), 5)
        except (TimeoutError, Exception):
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder

    async def _open(self) -> None:
        await self.close()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        holder = asyncio.create_task(self._hold(ready, stop), name=f"mcp:{self.name}")
        try:
            client = await asyncio.wait_for(
                asyncio.shield(ready), self.config.connect_timeout_seconds
            )
        except TimeoutError:
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
            raise ServerUnreachable(
                f"no answer in {self.config.connect_timeout_seconds:g} s"
            ) from None
        except Exception as exc:
            with contextlib.suppress(BaseException):
                await holder
            raise ServerUnreachable(reason_of(exc)) from None
        self._client, self._holder, self._stop = client, holder, stop

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._connect(stack))
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError())
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP server %s: connection lost: %s", self.name, reason_of(exc))

    def _connect(self, stack: AsyncExitStack) -> Client:
        config = self.config
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command[0],
                args=config.command[1:],
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            return Client(params, **self._client_options())
        assert config.url is not None
        http = httpx2.AsyncClient(
            headers=self.headers(),
            timeout=httpx2.Timeout(
                config.timeout_seconds + 5, connect=config.connect_timeout_seconds
            ),
        )
        stack.push_async_callback(http.aclose)
        transport = streamable_http_client(config.url, http_client=http)
        return Client(transport, **self._client_options())

    def _client_options(self) -> dict[str, Any]:
        """The worker's client takes tasks, and says it can ask a person (elicitation): a
        2026-07-28 server then answers a call that needs input with `input_required`, which
        the run asks (`agentloop.mcp.input`), instead of refusing the call."""
        return {
            "read_timeout_seconds": self.config.timeout_seconds,
            "extensions": [TasksExtension()],
            "elicitation_callback": _declined_mid_call,
        }

    def headers(self) -> dict[str, str]:
        headers = dict(self.config.headers)
        variable = self.config.bearer_token_env
        if variable:
            token = self._env.get(variable, "")
            if not token:
                raise ServerUnreachable(f"{variable} (its bearer token) is not set")
            headers["Authorization"] = f"Bearer {token}"
        return headers


class McpPool:
    """Every configured server's connection, for one worker."""

    def __init__(
        self, servers: Mapping[str, McpServerConfig], env: Mapping[str, str] | None = None
    ) -> None:
        self.servers = dict(servers)
        self._connections = {name: McpConnection(name, c, env) for name, c in servers.items()}

    def connection(self, server: str) -> McpConnection:
        return self._connections[server]

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._connections.values()))


def reason_of(exc: BaseException) -> str:
    """The innermost message of an exception (the SDK wraps them in task-group groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
