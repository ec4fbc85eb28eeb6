"""MCP servers' tools as agentloop tools, activity side: the tool source.

- `McpTools.specs(names)`: at a run's start (`describe_tools`), the named tools' specs from
  a fresh listing of their servers. They go into the run's history: the run keeps them
  whatever the server lists later, and its replay never asks the server.
- `McpTools.tool(name, write=...)`: what `run_tool` and `lookup_outcome` run: a call to the
  server through the worker's connection (`agentloop.mcp.calls`). Whether it is a write is
  the run's word (its frozen spec gave it an idempotency key), never the server's current one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

import mcp_types as types
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from pydantic import ValidationError

from agentloop.mcp.calls import McpCall
from agentloop.mcp.listing import ListedTool, McpToolsError, OfferedTool, offered, server_of
from agentloop.mcp.pool import (
    McpConnection,
    McpPool,
    ServerUnreachable,
    TokenNotSet,
    session_terminated,
)
from agentloop.policies.bounds import clipped
from agentloop.runtime.mcp_config import McpServerConfig
from agentloop.store import Store
from agentloop.tool_spec import DEFAULT_MAX_RESULT_CHARS, ToolSpec
from agentloop.tools.contract import (
    Tool,
)

LISTING_MAX_AGE_SECONDS = 2.0
"""Runs starting together share one listing of a server; a change shows within this."""
FIRST_RETRY_PAUSE_SECONDS = 0.5
MAX_RETRY_PAUSE_SECONDS = 5.0
"""Between tries at a server's listing, within its start budget: doubling from the first."""
FAILED_LISTING_SECONDS = 5.0
"""How long runs starting meanwhile are told a server's failed listing instead of each
waiting out one of their own, one after the other."""
MAX_LISTING_PAGES = 16


@dataclass
class _Listing:
    at: float
    tools: dict[str, OfferedTool]


class McpTools:
    def __init__(self, pool: McpPool, store: Store | None = None) -> None:
        """`store`: where a write's task handle is kept (without one, no write is made a
        task: `agentloop mcp list` lists, it never calls)."""
        self._pool = pool
        self._store = store
        self._listings: dict[str, _Listing] = {}
        self._failed: dict[str, tuple[float, McpToolsError]] = {}
        self._listing_locks: dict[str, asyncio.Lock] = {}

    async def close(self) -> None:
        await self._pool.close()

    def owns(self, name: str) -> bool:
        return server_of(name, self._pool.servers) is not None

    @property
    def servers(self) -> list[str]:
        return sorted(self._pool.servers)

    async def listing(self, server: str, max_age: float = 0.0) -> list[OfferedTool]:
        """What `server` offers now (at most `max_age` seconds old); raises `McpToolsError`
        when it cannot be listed."""
        kept = self._listings.get(server)
        if kept is not None and time.monotonic() - kept.at <= max_age:
            return list(kept.tools.values())
        lock = self._listing_locks.setdefault(server, asyncio.Lock())
        async with lock:
            failed = self._failed.get(server)
            if failed is not None and time.monotonic() - failed[0] <= FAILED_LISTING_SECONDS:
                # A copy: raising the one exception again would keep each raiser's frames.
                raise McpToolsError(str(failed[1]))
            kept = self._listings.get(server)
            if kept is None or time.monotonic() - kept.at > max_age:
                try:
                    tools = await self._list(server)
                except McpToolsError as exc:
                    self._failed[server] = (time.monotonic(), exc)
                    raise
                self._failed.pop(server, None)
                kept = _Listing(time.monotonic(), {t.tool: t for t in tools})
                self._listings[server] = kept
        return list(kept.tools.values())

    async def specs(self, names: Iterable[str]) -> tuple[list[ToolSpec], list[str]]:
        """The specs of the MCP tools among `names`, and a note for each tool of an optional
        server that is down (absent from the run). Raises `McpToolsError`."""
        wanted: dict[str, list[tuple[str, str]]] = {}
        for name in names:
            found = server_of(name, self._pool.servers)
            if found is not None:
                wanted.setdefault(found[0], []).append((name, found[1]))
        listings = await asyncio.gather(*(self._listed_or_error(s) for s in wanted))
        specs: list[ToolSpec] = []
        absent: list[str] = []
        for (server, asked), listing in zip(wanted.items(), listings, strict=True):
            if isinstance(listing, McpToolsError):
                if not self._pool.servers[server].optional:
                    raise listing
                absent += [f"{name}: {listing}" for name, _ in asked]
                continue
            for name, tool in asked:
                offer = listing.get(tool)
                if offer is None:
                    have = ", ".join(o.name for o in listing.values() if o.spec) or "none"
                    raise McpToolsError(
                        f"tools: MCP server {server!r} offers no tool {tool!r} ({name});"
                        f" it offers: {have}"
                    )
                if offer.spec is None:
                    raise McpToolsError(
                        f"tools: {name} of MCP server {server!r} cannot be used: {offer.problem}"
                    )
                specs.append(offer.spec)
        return specs, absent

    async def _listed_or_error(self, server: str) -> dict[str, OfferedTool] | McpToolsError:
        try:
            offers = await self.listing(server, LISTING_MAX_AGE_SECONDS)
        except McpToolsError as exc:
            return exc
        return {offer.tool: offer for offer in offers}

    def tool(self, name: str, *, write: bool) -> Tool:
        """The tool `name` as the worker runs it. Its spec is the worker's last listing of it
        (or a bare one when the server no longer lists it: the call tells the model what the
        server says), with the run's effect."""
        found = server_of(name, self._pool.servers)
        if found is None:
            raise KeyError(name)
        server, tool = found
        config = self._pool.servers[server]
        kept = self._listings.get(server)
        offer = kept.tools.get(tool) if kept is not None else None
        spec = offer.spec if offer is not None and offer.spec is not None else None
        if spec is None:  # not listed by this worker (yet, or any more): the configuration's
            override = config.tools.get(tool)
            spec = ToolSpec(
                name=name,
                timeout_seconds=(override and override.timeout_seconds) or config.timeout_seconds,
                max_result_chars=(override and override.max_result_chars)
                or DEFAULT_MAX_RESULT_CHARS,
            )
        spec = spec.model_copy(update={"effect": "write" if write else "read"})
        call = McpCall(self._pool.connection(server), tool, spec, self._store)
        return Tool(spec=spec, handler=call.run, lookup_outcome=call.lookup if write else None)

    async def _list(self, server: str) -> list[OfferedTool]:
        """The server's listing, waited for within its `start_budget_seconds`: a server that
        is not up yet, or still starting (a package runner fetching it), is asked again until
        the budget is spent; one that answers what cannot be used fails at once. An optional
        server is asked once (a run goes on without it), though that once within its budget."""
        config = self._pool.servers[server]
        clock = asyncio.get_running_loop()
        deadline = clock.time() + config.start_budget_seconds
        pause, tries = FIRST_RETRY_PAUSE_SECONDS, 0
        while True:
            tries += 1
            try:
                listed = await self._list_once(server, deadline)
                break
            except _NotYet as exc:
                left = deadline - clock.time()
                if config.optional or left <= 0:
                    raise McpToolsError(
                        f"MCP server {server!r} {exc}" + _spent(config, left, tries)
                    ) from None
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, MAX_RETRY_PAUSE_SECONDS)
        # Off the event loop: checking each schema (its cost counted) is work that depends
        # on what the server listed, and every call on the worker waits on the loop.
        return await asyncio.to_thread(offered, server, config, listed)

    async def _list_once(self, server: str, deadline: float) -> list[ListedTool]:
        """One try at connecting (if need be) and listing, both by `deadline`; raises
        `_NotYet` for what another try may mend, `McpToolsError` for an answer that is wrong."""
        connection = self._pool.connection(server)
        try:
            async with asyncio.timeout_at(deadline):
                # A server still starting is waited for, not started again: this one wait
                # may take the whole budget (it ends at the deadline all the same).
                client = await connection.client(wait=connection.config.start_budget_seconds)
        except TokenNotSet as exc:
            raise McpToolsError(f"MCP server {server!r} is unreachable: {exc}") from None
        except ServerUnreachable as exc:
            raise _NotYet(f"is unreachable: {exc}") from None
        except TimeoutError:
            raise _NotYet("is unreachable: no answer") from None
        listed: list[ListedTool] = []
        cursor: str | None = None
        try:
            with connection.sending() as sent_at:
                async with asyncio.timeout_at(deadline):
                    for _ in range(MAX_LISTING_PAGES):
                        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                        listed += [_listed(t) for t in page.tools]
                        cursor = page.next_cursor
                        if cursor is None:
                            break
        except TimeoutError:
            if connection.restart_on_timeout(sent_at):
                await connection.broken(client)
            raise _NotYet("did not list its tools") from None
        except ValidationError as exc:
            # An answer that is no tools/list result: the connection itself is fine.
            raise McpToolsError(
                f"MCP server {server!r} could not list its tools: its answer is no tools/list"
                f" result ({exc.error_count()} problems; the first: {_first(exc)})"
            ) from None
        except MCPError as exc:
            if not (session_terminated(exc) or exc.code == CONNECTION_CLOSED):
                # An error answer is the server's word on its listing: asking again won't change it.
                raise McpToolsError(
                    f"MCP server {server!r} could not list its tools: {connection.lost(exc)}"
                ) from None
            await self._listing_lost(connection, client, exc)
        except Exception as exc:  # whatever the server or its transport did: it is named
            await self._listing_lost(connection, client, exc)
        return listed

    @staticmethod
    async def _listing_lost(connection: McpConnection, client: Client, exc: Exception) -> NoReturn:
        """The connection went during the listing: a server that answered what cannot be read
        (its unreadable line closed the connection) fails at once, as a wrong answer does;
        any other loss is what another try may mend."""
        unreadable = connection.unreadable
        lost = connection.lost(exc)
        await connection.broken(client)
        if unreadable is not None:
            raise McpToolsError(
                f"MCP server {connection.name!r} could not list its tools: {unreadable}"
            ) from None
        raise _NotYet(f"could not list its tools: {lost}") from None


class _NotYet(Exception):
    """A listing that failed the way a server not up yet, or still starting, fails: what
    another try may mend (its message says what, after the server's name)."""


def _spent(config: McpServerConfig, left: float, tries: int) -> str:
    """What a failed listing says of the budget: that it was spent, when it was (an optional
    server is not waited for past its first failure)."""
    if left > 0:
        return ""
    counted = "1 try" if tries == 1 else f"{tries} tries"
    return (
        f"; its start budget of {config.start_budget_seconds:g} s is spent"
        f" (start_budget_seconds; {counted})"
    )


def _first(exc: ValidationError) -> str:
    [first] = exc.errors(include_url=False)[:1]
    where = ".".join(str(part) for part in first["loc"])
    return clipped(f"{where}: {first['msg']}", 200)


def _listed(tool: types.Tool) -> ListedTool:
    hint = tool.annotations.read_only_hint if tool.annotations is not None else None
    return ListedTool(tool.name, tool.description, tool.input_schema, hint)
