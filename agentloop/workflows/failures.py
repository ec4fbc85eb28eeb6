"""What a failed activity means to the loop: its message, and the error class of a tool's
failure. Workflow code (deterministic), used by every step that runs activities."""

from __future__ import annotations

from typing import cast, get_args

from temporalio.exceptions import ActivityError, ApplicationError

from agentloop.events import ErrorClass


def describe_failure(exc: ActivityError) -> str:
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or exc)


def tool_failure_class(exc: ActivityError) -> ErrorClass:
    """A tool's own `ToolError` keeps its class (`Tool:<class>`); any other exception the
    handler raised is a bug in the tool (`internal`); a timeout or a lost worker is
    `transient`."""
    cause = exc.cause
    if not isinstance(cause, ApplicationError):
        return "transient"
    named = (cause.type or "").removeprefix("Tool:")
    if cause.type and cause.type.startswith("Tool:") and named in get_args(ErrorClass):
        return cast(ErrorClass, named)
    return "internal"


def invalid_input(problem: str) -> ApplicationError:
    """Bad input ends the run at once, as its own failure, never a retried workflow task."""
    return ApplicationError(
        f"invalid AgentRunInput: {problem}", type="InvalidInput", non_retryable=True
    )
