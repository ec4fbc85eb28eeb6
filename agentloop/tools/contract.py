"""The tool contract, activity side: a `ToolSpec` (`agentloop.tool_spec`) plus the handler,
precondition and outcome lookup only activities ever call, and the errors a handler raises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agentloop.tool_spec import Outcome, ToolSpec


class ToolError(Exception):
    """A failure the tool understands: reported to the model as a result, not raised further.

    `error_class` says which recovery applies (`business`: the system of record said no;
    `transient`: worth retrying; `invalid_arguments`: the model should fix its call)."""

    def __init__(self, message: str, *, error_class: str = "business", retryable: bool = False):
        super().__init__(message)
        self.error_class = error_class
        self.retryable = retryable


class OutcomeUnknown(ToolError):
    """A write was sent but no usable answer came back: it may or may not have been applied.

    Never retried blindly: sending it again could apply it twice. The runner asks the tool's
    `lookup_outcome` with the same idempotency key instead."""

    def __init__(self, message: str) -> None:
        super().__init__(message, error_class="outcome_unknown", retryable=False)


ToolHandler = Callable[[dict[str, Any], "ToolContext"], Awaitable[Any]]
Precondition = Callable[[dict[str, Any], "ToolContext"], Awaitable[None]]
"""Raises `ToolError` (class `business`) when the call must not go ahead."""


OutcomeLookup = Callable[[str, "ToolContext"], Awaitable[Outcome]]


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
    precondition: Precondition | None = None
    lookup_outcome: OutcomeLookup | None = None


def define_tool(
    name: str,
    args_model: type[BaseModel],
    handler: ToolHandler,
    *,
    precondition: Precondition | None = None,
    lookup_outcome: OutcomeLookup | None = None,
    **spec: Any,
) -> Tool:
    """A tool whose argument schema is generated from its pydantic model."""
    return Tool(
        spec=ToolSpec(
            name=name,
            parameters=args_model.model_json_schema(),
            has_precondition=precondition is not None,
            has_outcome_lookup=lookup_outcome is not None,
            **spec,
        ),
        handler=handler,
        precondition=precondition,
        lookup_outcome=lookup_outcome,
    )
