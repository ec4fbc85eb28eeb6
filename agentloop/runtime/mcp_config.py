"""Which MCP servers a worker offers tools from: `AGENTLOOP_MCP_SERVERS` (a JSON object) or
the `[mcp_servers.NAME]` tables of the TOML file.

```toml
[mcp_servers.tickets]
url = "https://tickets.internal/mcp"
bearer_token_env = "TICKETS_MCP_TOKEN"     # the token itself never sits in the file
reads_from_hints = true                    # this server may declare reads (readOnlyHint)
lookup_tool = "lookup_note"                # finds a write by our idempotency key
exclude = ["delete_ticket"]

[mcp_servers.tickets.tools.add_note]
needs_approval = true
scopes = ["tickets:write"]
compensate = "delete_note"                 # the write's undo, another tool of this server
```

A server is `url` (streamable HTTP, with `headers` and a bearer token read from the
environment) or `command` (stdio: the argv of a process the worker starts and keeps). Its
name prefixes its tools (`tickets_add_note`). Everything here is the team's configuration,
checked when the worker starts; what the server itself says (its tools, their annotations) is
checked when it is listed (`agentloop.mcp.listing`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentloop.contract import describe_validation_error
from agentloop.redaction import PATTERNS, unknown_redactors
from agentloop.tool_spec import Effect

SERVER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,23}$")
"""Lower case, no `_`: the first `_` of a tool's name ends its server's prefix."""
IDEMPOTENCY_META_KEY = "io.agentloop/idempotency-key"
"""Where a write's idempotency key travels in the request's `_meta`."""
MAX_TIMEOUT_SECONDS = 600.0
MAX_START_BUDGET_SECONDS = 300.0
"""The most a run's start may wait for a server's listing: the worker's `describe_run`
activity, which waits for it, has a timeout past this (`agentloop.workflows.startup`)."""


class McpConfigError(ValueError):
    """The MCP configuration is unusable; the message names the server and the problem."""


class ToolOverride(BaseModel):
    """The team's word on one of a server's tools, over what the server says."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    effect: Effect | None = None
    scopes: list[str] | None = None
    needs_approval: bool | str | None = None
    approvers: list[str] | None = None
    max_result_chars: int | None = Field(default=None, ge=200, le=1_000_000)
    timeout_seconds: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_SECONDS)
    compensate: str | None = None
    """A write's undo: another tool of this server (its own name, unprefixed), offered when a
    run ends without delivering (docs/concepts/compensation.md)."""


class McpServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None
    """Streamable HTTP endpoint, e.g. `https://tickets.internal/mcp`."""
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token_env: str | None = None
    """The environment variable holding a bearer token, sent as `Authorization`."""
    command: list[str] | None = None
    """stdio: the server's argv; the worker starts it once and keeps it."""
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    include: list[str] | None = None
    """Only these of the server's tools (default: all)."""
    exclude: list[str] = Field(default_factory=list)
    reads_from_hints: bool = False
    """Let this server's `readOnlyHint: true` make a tool a read. Off, every tool is a write
    unless a tool override says otherwise: a hint from a server is not a guarantee."""
    optional: bool = False
    """Down when a run starts: its tools are absent from the run instead of failing it."""
    lookup_tool: str | None = None
    """A tool of this server that answers, by idempotency key, whether a write happened:
    `{"state": "applied" | "not_applied" | "unknown", "record": ...}`."""
    timeout_seconds: float = Field(default=30.0, gt=0, le=MAX_TIMEOUT_SECONDS)
    """A call's timeout; a write that gets no answer in time has an unknown outcome."""
    connect_timeout_seconds: float = Field(default=5.0, gt=0, le=30)
    """How long a call waits for a connection opened for it (the last one broke)."""
    start_budget_seconds: float = Field(default=60.0, gt=0, le=MAX_START_BUDGET_SECONDS)
    """How long a run's start waits for the server to list its tools (connecting first if
    need be): a server not up yet, or still starting (a command run through a package runner
    fetches it on its first start), is asked again until it answers or this is spent; then
    the run fails naming the server and this budget. An optional server is asked once, that
    once within this budget, and its tools are left out when it fails."""
    tools: dict[str, ToolOverride] = Field(default_factory=dict)
    trusted: bool = False
    """This server's output reaches the model as it came, without the envelope that marks
    tool output as data, not instructions (only for a server no outsider writes through)."""
    redact: list[str] = Field(default_factory=list)
    """Redactors its tools' output passes through beside the worker's (`AGENTLOOP_REDACT`)."""
    keep_redacted: Literal["approvers", "nobody"] = "approvers"
    """Where an output as it was before redaction goes: its tool's approvers only, or nowhere."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if unknown := unknown_redactors(self.redact):
            raise ValueError(f"no redactor {', '.join(unknown)} (known: {', '.join(PATTERNS)})")
        if (self.url is None) == (self.command is None):
            raise ValueError("give `url` (streamable HTTP) or `command` (stdio), exactly one")
        if self.url is not None and not re.match(r"^https?://[^\s/]+", self.url):
            raise ValueError(f"url {self.url!r} is not an http(s) URL")
        if self.command is not None and not (self.command and all(self.command)):
            raise ValueError("command must be a non-empty array of non-empty strings")
        if self.include is not None and set(self.include) & set(self.exclude):
            raise ValueError("a tool is both in include and in exclude")
        return self

    @property
    def transport(self) -> Literal["http", "stdio"]:
        return "http" if self.url is not None else "stdio"

    def offers(self, tool: str) -> bool:
        """Whether the configuration lets a run have this server tool at all."""
        return tool not in self.exclude and (self.include is None or tool in self.include)


def parse_servers(value: str | dict[str, Any] | None) -> dict[str, McpServerConfig]:
    """The servers of `AGENTLOOP_MCP_SERVERS` (JSON text) or of the file's table; raises
    `McpConfigError` naming the server and what is wrong."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise McpConfigError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise McpConfigError("must be an object of server name -> server")
    servers: dict[str, McpServerConfig] = {}
    for name, server in value.items():
        if not SERVER_NAME.match(name):
            raise McpConfigError(
                f"server {name!r}: a name is 1-24 lower-case letters, digits and '-',"
                " starting with a letter (it prefixes the server's tools)"
            )
        try:
            servers[name] = McpServerConfig.model_validate(server)
        except ValidationError as exc:
            raise McpConfigError(f"server {name!r}: {describe_validation_error(exc)}") from None
    return servers


def mask_servers(value: str) -> str:
    """`AGENTLOOP_MCP_SERVERS` as it may be printed: header and environment values hidden
    (they may hold credentials)."""
    try:
        servers = json.loads(value)
    except json.JSONDecodeError:
        return "***"
    if not isinstance(servers, dict):
        return "***"
    shown: dict[str, Any] = {}
    for name, server in servers.items():
        if isinstance(server, dict):
            server = {
                key: {k: "***" for k in item}
                if key in ("headers", "env") and isinstance(item, dict)
                else item
                for key, item in server.items()
            }
        shown[name] = server
    return json.dumps(shown)


def check_servers(value: str) -> str | None:
    """A settings check (`agentloop.runtime.config`): None, or what is wrong."""
    try:
        parse_servers(value)
    except McpConfigError as exc:
        return str(exc)
    return None
