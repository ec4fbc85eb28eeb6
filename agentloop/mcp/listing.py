"""What a server's tool listing becomes: each tool's `ToolSpec` under the name a run knows it
by (`SERVER_TOOL`), its effect and why, or why it is left out.

A server is untrusted: its names, descriptions, schemas and annotations are checked and
bounded here, and an annotation is a hint the configuration decides whether to believe
(`reads_from_hints`). Pure: the same listing and configuration give the same specs, and
the schema's hash is the tool's version, so a run's frozen specs say which listing it had.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import pydantic_core
from pydantic import ValidationError

from agentloop.contract import describe_validation_error
from agentloop.policies.schema_cost import schema_cost_problem
from agentloop.policies.validation import schema_problem as checkable_problem
from agentloop.runtime.mcp_config import McpServerConfig
from agentloop.tool_spec import Effect, ToolSpec, tool_name_problem
from agentloop.tools.source import ToolSourceError

MAX_TOOLS_PER_SERVER = 256
MAX_SCHEMA_BYTES = 64_000
MAX_DESCRIPTION_CHARS = 4_000
MAX_NESTING = 32
READ_DEPTH = 64
"""How deep a tools/list answer is read (`readable`): its own four levels above a tool's
schema, and well past the `MAX_NESTING` a schema may have, well within the 200 levels the
SDK's JSON parser reads."""
TOO_DEEP = "(nested too deep to read)"
_JSON_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
"""A JSON string (whatever brackets it holds), or a bracket."""


class McpToolsError(ToolSourceError):
    """A run cannot have the MCP tools it names; the message names the server and why."""


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server listed it, already parsed from the wire."""

    name: str
    description: str | None
    input_schema: Any
    read_only_hint: bool | None


@dataclass(frozen=True)
class OfferedTool:
    server: str
    tool: str
    """The server's own name for it."""
    name: str
    """The name a run gives it: `SERVER_TOOL`."""
    spec: ToolSpec | None
    """None when it is left out (`problem` says why)."""
    effect_reason: str = ""
    problem: str | None = None


def exposed_name(server: str, tool: str) -> str:
    return f"{server}_{tool}"


def server_of(name: str, servers: Any) -> tuple[str, str] | None:
    """`(server, tool)` of a run's tool name, when its prefix names a configured server."""
    server, sep, tool = name.partition("_")
    return (server, tool) if sep and tool and server in servers else None


def name_clashes(tool_names: Any, servers: Any) -> list[str]:
    """The worker's own tools whose names an MCP server's prefix would claim."""
    return [
        f"tool {name!r} is named like a tool of MCP server {found[0]!r}"
        for name in tool_names
        if (found := server_of(name, servers)) is not None
    ]


def offered(server: str, config: McpServerConfig, listed: list[ListedTool]) -> list[OfferedTool]:
    """Every tool the configuration lets runs have, in the server's order; then each tool
    the configuration names that the server does not list, left out saying so: a mistyped
    override would otherwise be dropped unseen, and the write it was for go without the
    approval it set."""
    listed = listed[:MAX_TOOLS_PER_SERVER]
    names = {tool.name for tool in listed}
    lookup_listed = config.lookup_tool in names
    result: list[OfferedTool] = []
    for tool in listed:
        if config.offers(tool.name):
            result.append(offer(server, config, tool, lookup_listed=lookup_listed))
    for name, where in _configured_names(config):
        if name not in names:
            problem = f"the configuration names it ({where}), but the server does not list it"
            result.append(
                OfferedTool(server, name, exposed_name(server, name), None, problem=problem)
            )
    return result


def _configured_names(config: McpServerConfig) -> list[tuple[str, str]]:
    named = [(name, "tools") for name in config.tools]
    named += [
        (override.compensate, "compensate")
        for override in config.tools.values()
        if override.compensate is not None and override.compensate not in config.tools
    ]
    named += [(name, "include") for name in config.include or () if name not in config.tools]
    if config.lookup_tool is not None:
        named.append((config.lookup_tool, "lookup_tool"))
    return named


def offer(
    server: str, config: McpServerConfig, tool: ListedTool, *, lookup_listed: bool = True
) -> OfferedTool:
    """`lookup_listed`: whether the server lists the configuration's `lookup_tool` (a write
    has an outcome lookup only then)."""
    name = exposed_name(server, tool.name)

    def left_out(problem: str) -> OfferedTool:
        return OfferedTool(server, tool.name, name, None, problem=problem)

    problem = tool_name_problem(name) or schema_problem(tool.input_schema)
    if problem:
        return left_out(problem)
    override = config.tools.get(tool.name)
    effect, reason = decide_effect(config, tool)
    fields: dict[str, Any] = {
        "name": name,
        "version": version_of(tool, effect),
        "description": (tool.description or "")[:MAX_DESCRIPTION_CHARS],
        "parameters": tool.input_schema,
        "effect": effect,
        "timeout_seconds": config.timeout_seconds,
        "has_outcome_lookup": effect == "write"
        and config.lookup_tool is not None
        and lookup_listed,
        "trusted": config.trusted,
        "redact": list(config.redact),
        "keep_redacted": config.keep_redacted,
    }
    if override is not None:
        fields["required_scopes"] = override.scopes or []
        for key in ("needs_approval", "approvers", "max_result_chars", "timeout_seconds"):
            value = getattr(override, key)
            if value is not None:
                fields[key] = value
        if override.compensate is not None:
            fields["compensate"] = exposed_name(server, override.compensate)
    try:
        spec = ToolSpec(**fields)
    except ValidationError as exc:
        return left_out(describe_validation_error(exc))
    return OfferedTool(server, tool.name, name, spec, effect_reason=reason)


def decide_effect(config: McpServerConfig, tool: ListedTool) -> tuple[Effect, str]:
    """A tool is a write unless the team says it is a read, or lets the server say so."""
    override = config.tools.get(tool.name)
    if override is not None and override.effect is not None:
        return override.effect, f"{override.effect}: set in the configuration"
    if tool.read_only_hint is True:
        if config.reads_from_hints:
            return "read", "read: the server's readOnlyHint, believed (reads_from_hints)"
        return "write", "write: the server says readOnlyHint, but reads_from_hints is off"
    return "write", "write: the server gives no readOnlyHint"


def schema_problem(schema: Any) -> str | None:
    """Why `schema` cannot be a tool's parameters: not an object schema, too large or too
    deep to check under our bounds, or no valid JSON Schema."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return 'its inputSchema is not a JSON Schema of type "object"'
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        return f"its inputSchema is {size:,} bytes (at most {MAX_SCHEMA_BYTES:,})"
    if _depth(schema) > MAX_NESTING:
        return f"its inputSchema nests deeper than {MAX_NESTING} levels"
    # As the run will check arguments: on RE2, every $ref within it, at a bounded cost.
    problem = checkable_problem(schema) or schema_cost_problem(schema)
    return f"its inputSchema: {problem}" if problem else None


def readable(answer: str) -> str | None:
    """`answer`, a tools/list answer nested deeper than the SDK's JSON parser reads, with
    each array or object deeper than `READ_DEPTH` cut to the string `TOO_DEEP`: the tool
    whose schema held it is then left out (it nests deeper than `MAX_NESTING`), not the
    whole listing with it. None for any other answer (it reads as it is, is broken in some
    other way, or is no tools/list result): the SDK tells of it as before."""
    try:
        pydantic_core.from_json(answer)
        return None
    except ValueError as exc:
        if "recursion limit exceeded" not in str(exc):
            return None
    kept: list[str] = []
    depth, start, cut = 0, 0, 0
    for token in _JSON_STRUCTURE.finditer(answer):
        mark = token.group()
        if mark.startswith('"'):
            continue
        if mark in "[{":
            depth += 1
            if depth == READ_DEPTH + 1:
                cut = token.start()
            continue
        if depth == READ_DEPTH + 1:
            kept += [answer[start:cut], json.dumps(TOO_DEEP)]
            start = token.end()
        depth -= 1
    kept.append(answer[start:])
    shortened = "".join(kept)
    try:
        message = json.loads(shortened)
    except ValueError:
        return None
    result = message.get("result") if isinstance(message, dict) else None
    return shortened if isinstance(result, dict) and isinstance(result.get("tools"), list) else None


def version_of(tool: ListedTool, effect: Effect) -> str:
    """The hash of what the model and the runner see of the tool: a changed schema is a new
    version."""
    seen = {
        "name": tool.name,
        "description": tool.description,
        "schema": tool.input_schema,
        "effect": effect,
    }
    digest = hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()
    return f"mcp-{digest[:16]}"


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_NESTING:
            return depth
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest
