"""`agentloop mcp list [SERVER]`: what this worker's configuration would offer runs from its
MCP servers, listed now: each tool under the name a run gives it, its effect and why, or why
it is left out, with its description and the schema of its arguments (`--json`: all of it).
Exit 1 when a server cannot be listed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import BaseModel

from agentloop.cli.output import ExitCode, print_json
from agentloop.mcp.listing import McpToolsError, OfferedTool
from agentloop.runtime.config import Settings


class OfferedView(BaseModel):
    server: str
    tool: str
    name: str
    effect: str | None
    why: str
    version: str | None
    needs_approval: bool | str = False
    scopes: list[str] = []
    description: str = ""
    """What the model is told the tool does."""
    input_schema: dict[str, Any] | None = None
    """The JSON Schema of its arguments, as the model is given it (None: left out)."""


class ServerView(BaseModel):
    server: str
    transport: str
    error: str | None = None
    tools: list[OfferedView] = []


async def mcp_command(settings: Settings, args: argparse.Namespace) -> int:
    from agentloop.mcp.pool import McpPool
    from agentloop.mcp.tools import McpTools

    servers = settings.mcp_server_configs()
    if args.server is not None and args.server not in servers:
        known = ", ".join(sorted(servers)) or "none (set AGENTLOOP_MCP_SERVERS)"
        print(f"agentloop mcp: no MCP server {args.server!r}; configured: {known}", file=sys.stderr)
        return ExitCode.USAGE
    names = [args.server] if args.server else sorted(servers)
    tools = McpTools(McpPool({name: servers[name] for name in names}))
    views: list[ServerView] = []
    try:
        for name in names:
            view = ServerView(server=name, transport=servers[name].transport)
            try:
                view.tools = [_view(o) for o in await tools.listing(name)]
            except McpToolsError as exc:
                view.error = str(exc)
            views.append(view)
    finally:
        await tools.close()
    if args.json:
        print_json(views)
    else:
        print("\n".join(_lines(views)) if views else "no MCP servers configured")
    return ExitCode.FAILED if any(v.error for v in views) else ExitCode.OK


def _view(offer: OfferedTool) -> OfferedView:
    spec = offer.spec
    return OfferedView(
        server=offer.server,
        tool=offer.tool,
        name=offer.name,
        effect=spec.effect if spec else None,
        why=offer.effect_reason if spec else f"left out: {offer.problem}",
        version=spec.version if spec else None,
        needs_approval=spec.needs_approval if spec else False,
        scopes=list(spec.required_scopes) if spec else [],
        description=spec.description if spec else "",
        input_schema=spec.parameters if spec else None,
    )


def _lines(views: list[ServerView]) -> list[str]:
    lines: list[str] = []
    for view in views:
        lines.append(f"{view.server} ({view.transport})")
        if view.error:
            lines.append(f"  error: {view.error}")
        for tool in view.tools:
            approval = f", approval: {tool.needs_approval}" if tool.needs_approval else ""
            effect = tool.effect or "-"
            lines.append(f"  {tool.name:<32} {effect:<6} {tool.why}{approval}")
            if tool.description:
                lines.append(f"      {' '.join(tool.description.split())}")
            if tool.input_schema is not None:
                lines.append(f"      arguments: {_arguments(tool.input_schema)}")
        if not view.error and not view.tools:
            lines.append("  (no tools offered)")
    return lines


def _arguments(schema: dict[str, Any]) -> str:
    """`name (type, required), ...` of a JSON Schema's properties (`--json` has all of it)."""
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "none"
    required = schema.get("required") or []
    parts = []
    for name, prop in properties.items():
        kind = prop.get("type", "any") if isinstance(prop, dict) else "any"
        parts.append(f"{name} ({kind}{', required' if name in required else ''})")
    return ", ".join(parts)
