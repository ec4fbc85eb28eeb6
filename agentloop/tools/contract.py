"""The tool contract: what a tool is, beyond a description string.

`ToolSpec` is plain data. It travels into the workflow (validation is pure, done there) and
into the model request; `Tool` adds the handler, which only activities ever call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Effect = Literal["read", "write"]

DEFAULT_MAX_RESULT_CHARS = 8_000


class ToolSpec(BaseModel):
    """Everything the runner and the model need to know about a tool."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str = "1"
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    """JSON Schema of the arguments object."""
    effect: Effect = "read"
    required_scopes: list[str] = Field(default_factory=list)
    timeout_seconds: float = 30.0
    max_attempts: int = 3
    """Attempts for a read; a write is never retried blindly and always gets 1."""
    max_calls_per_run: int | None = None
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS


class ToolError(Exception):
    """A failure the tool understands: reported to the model as a result, not raised further.

    `error_class` says which recovery applies (`business`: the system of record said no;
    `transient`: worth retrying; `invalid_arguments`: the model should fix its call)."""

    def __init__(self, message: str, *, error_class: str = "business", retryable: bool = False):
        super().__init__(message)
        self.error_class = error_class
        self.retryable = retryable


ToolHandler = Callable[[dict[str, Any], "ToolContext"], Awaitable[Any]]


@dataclass(frozen=True)
class ToolContext:
    """What a handler may know about the call besides its arguments."""

    call_id: str
    workflow_id: str
    idempotency_key: str
    services: Any
    """Activity-side dependencies (HTTP session, service URLs), see `tools.registry`."""


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    handler: ToolHandler
