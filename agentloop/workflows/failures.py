"""What a failed activity means to the loop: its message, and the error class of a tool's
failure. Workflow code (deterministic), used by every step that runs activities."""

from __future__ import annotations

from typing import cast, get_args

from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

from agentloop.contract import RUN_FAILED, AgentRunResult
from agentloop.events import ErrorClass


def _cause(exc: ActivityError) -> BaseException | None:
    return exc.cause


def describe_failure(exc: ActivityError) -> str:
    cause = _cause(exc)
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or exc)


def never_started(exc: ActivityError) -> bool:
    """Whether the activity failed waiting for a worker to take it: none of it ran."""
    cause = _cause(exc)
    return isinstance(cause, ActivityTimeout) and cause.type == TimeoutType.SCHEDULE_TO_START


PROVIDER_ERROR_PREFIX = "Provider:"
"""How the model activity types a provider's classified failure (`activities.model`)."""


def model_failure_class(exc: ActivityError) -> str:
    """The class of a model call's failure, as `policies.fallback` reads it: the provider's
    (`policies.errors`), `timeout` when its attempts ran out of time, else the failure's
    type (an unclassified exception, the store)."""
    cause = _cause(exc)
    if isinstance(cause, ActivityTimeout):
        return "timeout"
    if isinstance(cause, ApplicationError):
        return (cause.type or "").removeprefix(PROVIDER_ERROR_PREFIX)
    return type(cause).__name__


REMOTE_ERROR_TYPES: dict[str, ErrorClass] = {
    "InvalidArguments": "invalid_arguments",
    "BusinessRefusal": "business",
    "PermissionDenied": "permission",
    "TransientError": "transient",
    "OutcomeUnknown": "transient",
}
"""The error types an activity tool raises (its exception's class name, or the type of an
`ApplicationError`) and their classes (`agentloop.tools.activity_tools`)."""


def tool_failure_class(exc: ActivityError, *, remote: bool = False) -> ErrorClass:
    """A tool's own `ToolError` keeps its class (`Tool:<class>`), and so does an activity
    tool's (`remote`) error of a type in `REMOTE_ERROR_TYPES`; any other exception the
    handler raised is a bug in the tool (`internal`); a timeout or a lost worker is
    `transient`."""
    cause = _cause(exc)
    if not isinstance(cause, ApplicationError):
        return "transient"
    kind = cause.type or ""
    if remote and kind in REMOTE_ERROR_TYPES:
        return REMOTE_ERROR_TYPES[kind]
    named = kind.removeprefix("Tool:")
    if kind.startswith("Tool:") and named in get_args(ErrorClass):
        return cast(ErrorClass, named)
    return "internal"


def attempts_made(exc: ActivityError, maximum_attempts: int) -> int:
    """How many attempts an activity that failed for good made: all its retry policy allowed
    when it ran out of them, else (a failure Temporal would not retry) at least the one."""
    return maximum_attempts if exc.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED else 1


def invalid_input(problem: str) -> ApplicationError:
    """Bad input ends the run at once, as its own failure, never a retried workflow task."""
    return ApplicationError(
        f"invalid AgentRunInput: {problem}", type="InvalidInput", non_retryable=True
    )


def run_failed(result: AgentRunResult, task: str) -> ApplicationError:
    """What a run that ends `failed` fails its workflow with, so Temporal (its UI, `temporal
    workflow list`) shows it failed: how it ended and its task in the message, the whole
    result in the details. Never retried: the run has ended."""
    shown = task if len(task) <= 80 else task[:77] + "..."
    return ApplicationError(
        f"{result.stop_reason} (task: {shown})",
        result,
        type=RUN_FAILED,
        non_retryable=True,
    )
