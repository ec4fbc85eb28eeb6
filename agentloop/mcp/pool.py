"""One connection per MCP server, kept by the worker and shared by every call (the SDK's
session multiplexes requests): no session per call, and a stdio server is one process per
worker, not one per call.

A connection is opened on first use and held open by a task of its own (the SDK's client is
an anyio context that must be entered and left in one task). When it breaks (the server went
away, the stdio process exited), the calls on it fail and the next call opens a new one; a
stdio server that exited while idle is started again before the next call.

A line from a stdio server that cannot be read while a call is in flight closes the
connection too: it names no request, so it may be the answer any call is waiting for, and
none would get another (each would wait out its timeout instead). Every call on it ends cut
off, saying why (`McpConnection.unreadable`). With no call in flight (a banner printed at
start) such a line is only logged. Over HTTP an answer that cannot be read fails its own
request, and one that times out does too; a server that forgot the session (restarted: HTTP
404) ran nothing, and the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.context import ClientRequestContext
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR
from pydantic import ValidationError

from agentloop.mcp.http import REQUEST_HEADERS, bound_response
from agentloop.mcp.listing import readable
from agentloop.mcp.tasks import TasksExtension
from agentloop.policies.bounds import clipped
from agentloop.runtime.mcp_config import McpServerConfig

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 300
UNREADABLE = "it sent a message that cannot be read"


async def _declined_mid_call(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult:
    """An older (2025-11-25) server asks mid-call, inside the activity, where no person can
    answer: declined, so its tool says no to the model. A 2026-07-28 server never calls this:
    its questions come back as `input_required`."""
    return types.ElicitResult(action="decline")


class ServerUnreachable(Exception):
    """No connection to the server could be made: nothing was sent."""


class TokenNotSet(ServerUnreachable):
    """The variable the server's bearer token is read from is not set on the worker: no wait
    for the server mends that."""


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
        self.unreadable: str | None = None
        """Set when the connection was closed for a message from the server that could not be
        read: what was wrong with it (cleared when a new connection opens)."""
        self.in_flight = 0
        """Requests sent on the connection and not yet answered (`sending`)."""
        self.answered_at = 0.0
        """When a request on it was last answered (the event loop's clock)."""

    @contextlib.contextmanager
    def sending(self) -> Iterator[float]:
        """Around one request, giving when it was sent: the connection knows what else it
        would cut off, and whether it still answers."""
        self.in_flight += 1
        try:
            yield asyncio.get_running_loop().time()
            self.answered_at = asyncio.get_running_loop().time()
        except MCPError:  # an error answer is an answer
            self.answered_at = asyncio.get_running_loop().time()
            raise
        finally:
            self.in_flight -= 1

    def restart_on_timeout(self, sent_at: float) -> bool:
        """Whether a request sent at `sent_at` that went unanswered should close the
        connection. A stdio server that answers nothing may be hung, and only a new process
        helps; but not while other requests are in flight on it and it answered any since
        (closing would cut them off, a write's outcome with them). Over HTTP each request
        stands alone: one slow answer says nothing of the rest."""
        if self.config.command is None:
            return False
        return self.in_flight == 0 or self.answered_at < sent_at

    async def client(self, wait: float | None = None) -> Client:
        """The open connection, opened now if there is none (or the last one broke), waiting
        `wait` seconds for the server's answer (default: `connect_timeout_seconds`); raises
        `ServerUnreachable`."""
        if self._open_and_alive():
            assert self._client is not None
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if not self._open_and_alive():
                await self._open(self.config.connect_timeout_seconds if wait is None else wait)
            assert self._client is not None
            return self._client

    def _open_and_alive(self) -> bool:
        """A connection is open and its transport still reads: a stdio server that exited
        while nothing was asked of it leaves a client whose every request would end
        "connection closed" after it was handed over (a write's outcome then unknown, though
        it was never sent). The SDK keeps that state private; without it, the connection is
        taken for alive, as before."""
        if self._client is None or self._holder is None or self._holder.done():
            return False
        dispatcher = getattr(self._client.session, "_dispatcher", None)
        return getattr(dispatcher, "_closed", False) is not True

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

    async def _open(self, wait: float) -> None:
        await self.close()
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        holder = asyncio.create_task(self._hold(ready, stop), name=f"mcp:{self.name}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), wait)
        except TimeoutError:
            ready.cancel()  # no one waits for it now: what the holder ends with is not news
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
            raise ServerUnreachable(f"no answer in {wait:g} s") from None
        except Exception as exc:
            with contextlib.suppress(BaseException):
                await holder
            if isinstance(exc, TokenNotSet):
                raise exc from None
            raise ServerUnreachable(reason_of(exc)) from None
        except BaseException:
            # Cancelled while connecting (a listing's deadline): the holder must not outlive
            # it, nor the session or process it holds.
            ready.cancel()
            holder.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.shield(holder)
            raise
        self._client, self._holder, self._stop = client, holder, stop
        self.unreadable = None

    def lost(self, exc: BaseException) -> str:
        """Why a request failed when its connection went: the unreadable message that closed
        it, if one did, else the exception's own message."""
        return self.unreadable or reason_of(exc)

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(self._connect(stack, stop))
                client.session.validate_tool_result = _results_not_checked  # type: ignore[method-assign]
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError())
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("MCP server %s: connection lost: %s", self.name, reason_of(exc))

    def _connect(self, stack: AsyncExitStack, stop: asyncio.Event) -> Client:
        config = self.config
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command[0],
                args=config.command[1:],
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            return Client(_stdio_listings_readable(params), **self._client_options(stop))
        assert config.url is not None
        http = httpx2.AsyncClient(
            headers={**REQUEST_HEADERS, **self.headers()},
            event_hooks={"response": [bound_response]},
            timeout=httpx2.Timeout(
                config.timeout_seconds + 5, connect=config.connect_timeout_seconds
            ),
        )
        stack.push_async_callback(http.aclose)
        transport = streamable_http_client(config.url, http_client=http)
        return Client(transport, **self._client_options(stop))

    def _client_options(self, stop: asyncio.Event) -> dict[str, Any]:
        """The worker's client takes tasks, and says it can ask a person (elicitation): a
        2026-07-28 server then answers a call that needs input with `input_required`, which
        the run asks (`agentloop.mcp.input`), instead of refusing the call. Over stdio, a line
        the SDK cannot read closes the connection (`stop`), as the module says why."""
        stdio = self.config.command is not None

        async def on_message(message: object) -> None:
            # The SDK hands over what its transport could not read as an exception.
            if not (stdio and isinstance(message, Exception)) or stop.is_set():
                return
            if self.in_flight == 0:
                # No call waits for an answer it could be (a banner printed at start, say).
                log.warning("MCP server %s: ignored: %s", self.name, unreadable(message))
                return
            self.unreadable = unreadable(message)
            log.warning("MCP server %s: %s; reconnecting", self.name, self.unreadable)
            stop.set()

        return {
            # A call gives each request its own timeout; those that give none (the handshake,
            # a listing) may take a start budget, ended by the deadline of whoever waits.
            "read_timeout_seconds": max(
                self.config.timeout_seconds, self.config.start_budget_seconds
            ),
            "extensions": [TasksExtension()],
            "elicitation_callback": _declined_mid_call,
            "message_handler": on_message,
        }

    def headers(self) -> dict[str, str]:
        headers = dict(self.config.headers)
        variable = self.config.bearer_token_env
        if variable:
            token = self._env.get(variable, "")
            if not token:
                raise TokenNotSet(f"{variable} (its bearer token) is not set")
            headers["Authorization"] = f"Bearer {token}"
        return headers


@asynccontextmanager
async def _stdio_listings_readable(
    params: StdioServerParameters,
) -> AsyncIterator[TransportStreams]:
    """The SDK's stdio transport, reading a tools/list answer nested too deep for its parser
    with what lies too deep cut (`listing.readable`): one tool is left out, not the listing."""
    async with stdio_client(params) as (read, write):
        yield _ListingsReadable(read), write


class _ListingsReadable:
    """A transport's read stream, on which a line the SDK could not parse for its depth comes
    as that line's tools/list answer, cut (`listing.readable`), when it is one."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception]) -> None:
        self._inner = inner

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return _read_if_cut(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _ListingsReadable:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return _read_if_cut(await self._inner.__anext__())

    async def __aenter__(self) -> _ListingsReadable:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


def _read_if_cut(item: SessionMessage | Exception) -> SessionMessage | Exception:
    if not isinstance(item, ValidationError) or item.error_count() != 1:
        return item
    [error] = item.errors()
    line = error.get("input")
    if error["type"] != "json_invalid" or not isinstance(line, str):
        return item
    shortened = readable(line)
    if shortened is None:
        return item
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(shortened, by_name=False))
    except ValidationError:  # cut, it is still no message: said as the line it was
        return item


async def _results_not_checked(name: str, result: types.CallToolResult) -> None:
    """In place of the SDK's check of a result against the tool's `outputSchema`: that check
    runs jsonschema on the worker's event loop at whatever cost the server's schema sets (a
    `$ref` chain that fans out takes hours, and stops every call and heartbeat meanwhile), and
    a mismatch is raised like a broken connection. agentloop checks nothing against it: the
    result goes to the model bounded and framed like any tool's."""


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


def unreadable(exc: Exception) -> str:
    """Why a message from the server could not be read, in one line: pydantic's own message
    quotes the message and adds a link."""
    if isinstance(exc, ValidationError) and exc.error_count():
        detail = str(exc.errors()[0]["msg"])
    else:
        detail = reason_of(exc)
    return clipped(f"{UNREADABLE}: {detail}", MAX_REASON_CHARS)


def session_terminated(exc: MCPError) -> bool:
    """A server that no longer knows the session (HTTP 404 before the 2026-07-28 protocol: it
    restarted), in its own words ("Session not found") or the SDK's ("Session terminated"): it
    answers nothing on it again. A request refused as invalid was not run."""
    return exc.code == INVALID_REQUEST and "session" in exc.message.lower()


def error_text(exc: MCPError) -> str:
    """A JSON-RPC error in words. The HTTP transport answers a request whose response it
    could not read with a `PARSE_ERROR` holding pydantic's message: told like the same fault
    over stdio."""
    if exc.code == PARSE_ERROR:
        lines = [line.strip() for line in exc.message.splitlines() if line.strip()]
        problem = lines[1] if len(lines) > 1 else exc.message
        return clipped(f"{UNREADABLE}: {problem.split(' [type=')[0]}", MAX_REASON_CHARS)
    return clipped(f"{exc.message} (code {exc.code})", MAX_REASON_CHARS)


def reason_of(exc: BaseException) -> str:
    """The innermost message of an exception (the SDK wraps them in task-group groups), at
    most `MAX_REASON_CHARS`: a server's words may be in it, and a server may say a lot."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return error_text(exc)
    text = str(exc).strip()
    return clipped(
        f"{type(exc).__name__}: {text}" if text else type(exc).__name__, MAX_REASON_CHARS
    )
