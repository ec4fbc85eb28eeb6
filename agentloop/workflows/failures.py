"""What a failed activity means to the loop: its message, and the error class of a tool's
failure. Workflow code (deterministic), used by every step that runs activities."""

from __future__ import annotations

from typing import cast, get_args

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, RetryState, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

from agentloop.events import ErrorClass

ActivityFailure = ActivityError | ApplicationError | ActivityTimeout
"""What awaiting an activity raises when it failed for good. A local activity's failure is not
always wrapped in `ActivityError`: the SDK raises the handler's `ApplicationError` itself once
its retries ran out, and a history replays a local activity's timeout as the bare timeout
(where the live run had it wrapped). Each step awaiting a local activity catches all three
(`LOCAL_FAILURES`) and reads them alike."""
LOCAL_FAILURES = (ActivityError, ApplicationError, ActivityTimeout)
LOCAL_FAILURES_HANDLED = "local-activity-failures-handled"
"""Patch id: a local activity's bare `ApplicationError` is handled like any activity failure
(before it, it failed the run). Asked only where one arrives, so no other run records it."""


def local_failure(exc: ActivityFailure) -> ActivityFailure:
    """`exc` when the step handles it; re-raised where a run from before handled it not (its
    history then shows the run failing here). A bare timeout was wrapped when the run was
    live: it is always handled."""
    if isinstance(exc, ApplicationError) and not workflow.patched(LOCAL_FAILURES_HANDLED):
        raise exc
    return exc


def _cause(exc: ActivityFailure) -> BaseException | None:
    return exc.cause if isinstance(exc, ActivityError) else exc


def describe_failure(exc: ActivityFailure) -> str:
    cause = _cause(exc)
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}"
    return str(cause or exc)


def never_started(exc: ActivityFailure) -> bool:
    """Whether the activity failed waiting for a worker to take it: none of it ran."""
    cause = _cause(exc)
    return isinstance(cause, ActivityTimeout) and cause.type == TimeoutType.SCHEDULE_TO_START


REMOTE_ERROR_TYPES: dict[str, ErrorClass] = {
    "InvalidArguments": "invalid_arguments",
    "BusinessRefusal": "business",
    "PermissionDenied": "permission",
    "TransientError": "transient",
    "OutcomeUnknown": "transient",
}
"""The error types an activity tool raises (its exception's class name, or the type of an
`ApplicationError`) and their classes (`agentloop.tools.activity_tools`)."""


def tool_failure_class(exc: ActivityFailure, *, remote: bool = False) -> ErrorClass:
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


def attempts_made(exc: ActivityFailure, maximum_attempts: int) -> int:
    """How many attempts an activity that failed for good made: all its retry policy allowed
    when it ran out of them, else (a failure Temporal would not retry) at least the one. A
    local activity's bare failure came once its retries ran out, unless it was final."""
    if isinstance(exc, ActivityError):
        return maximum_attempts if exc.retry_state == RetryState.MAXIMUM_ATTEMPTS_REACHED else 1
    final = isinstance(exc, ApplicationError) and exc.non_retryable
    return 1 if final else maximum_attempts


def invalid_input(problem: str) -> ApplicationError:
    """Bad input ends the run at once, as its own failure, never a retried workflow task."""
    return ApplicationError(
        f"invalid AgentRunInput: {problem}", type="InvalidInput", non_retryable=True
    )
