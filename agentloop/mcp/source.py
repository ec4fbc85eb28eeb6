"""A worker's MCP servers as one tool source (`agentloop.tools.source.ToolSource`): the tool
`SERVER_TOOL` is the tool `TOOL` of the configured server `SERVER`. Imports nothing of the MCP
SDK: a worker without MCP servers never loads it, and one with them is handed its connections
(`agentloop.mcp.tools.McpTools`) ready made."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from agentloop.mcp.listing import McpToolsError, server_of
from agentloop.runtime.mcp_config import McpServerConfig
from agentloop.tools.contract import Tool
from agentloop.tools.source import NO_LOOKUP, Offer, ToolLine

if TYPE_CHECKING:
    from agentloop.mcp.tools import McpTools


class McpServers:
    """`servers`, as configured, and `tools`, the worker's connections to them (None: none is
    needed, to say what the servers are, or there are no servers)."""

    name = "mcp"

    def __init__(
        self, servers: Mapping[str, McpServerConfig], tools: McpTools | None = None
    ) -> None:
        self._servers = dict(servers)
        self._tools = tools

    def owns(self, name: str) -> bool:
        return server_of(name, self._servers) is not None

    async def offer(self, names: Sequence[str]) -> Offer:
        """The MCP tools' specs from a fresh listing: what the run keeps, whatever the servers
        list later. A server that cannot be listed fails the run at once, naming it (an
        optional one's tools are left out of the run)."""
        try:
            specs, absent = await self._connections().specs(names)
        except McpToolsError:
            raise
        except Exception as exc:
            raise McpToolsError(
                f"tools: the MCP tools could not be listed: {type(exc).__name__}: {exc}"
            ) from None
        return Offer(specs, absent)

    def tool(self, name: str, *, write: bool) -> Tool:
        return self._connections().tool(name, write=write)

    def describe(self) -> list[ToolLine]:
        """One line a server: its tools are listed when a run first names them."""
        lines = []
        for server, config in sorted(self._servers.items()):
            lookup = f"looked up with {config.lookup_tool}" if config.lookup_tool else NO_LOOKUP
            reads = "configured as reads" + (
                " or hinted read-only" if config.reads_from_hints else ""
            )
            listed = f"MCP server {server}: listed when a run names them, writes unless {reads}"
            lines.append(ToolLine(f"{server}_*", "write", f"{lookup} ({listed})"))
        return lines

    def not_found(self, name: str) -> str:
        """The MCP servers this worker has; for a name shaped `SERVER_TOOL`, that it has no
        such server (a run names an MCP tool only a worker configured with its server has)."""
        servers = sorted(self._servers)
        has = f"MCP servers: {', '.join(servers)}" if servers else "no MCP servers"
        server, sep, tool = name.partition("_")
        if not (sep and tool):
            return f"; {has}"
        return (
            f"; if it is the tool {tool!r} of an MCP server {server!r}: this worker has no MCP"
            f" server {server!r} configured ({has}; AGENTLOOP_MCP_SERVERS or [mcp_servers.NAME]"
            " in AGENTLOOP_CONFIG's file, on the worker)"
        )

    async def close(self) -> None:
        if self._tools is not None:
            await self._tools.close()

    def _connections(self) -> McpTools:
        if self._tools is None:
            raise McpToolsError("tools: this worker has no connections to its MCP servers")
        return self._tools
