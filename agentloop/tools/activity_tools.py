"""`agentloop.activity_tool`: a tool that is an existing Temporal activity, on any task queue,
served by any worker in any SDK language.

The run schedules the activity itself (model calls stay on agentloop's queue), with one JSON
object as its input (`ActivityToolInput`): the call's arguments, its call id, the write's
idempotency key and the principal. What the activity returns is the result the model is sent
(bounded, and kept as an artifact when large, by agentloop's own worker). To say what went
wrong it raises an error whose type (the exception's class name in most SDKs, or an
`ApplicationError` type) is one of `InvalidArguments`, `BusinessRefusal`, `PermissionDenied`
(nothing happened; the model is told), `TransientError` or `OutcomeUnknown`. A write is run
once and never retried blindly: when its outcome is unknown (it timed out, its worker died)
the `lookup_activity` is asked, by idempotency key, and answers
`{"state": "applied" | "not_applied" | "unknown", "record": ...}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from pydantic import BaseModel

from agentloop.tool_spec import DEFAULT_START_TIMEOUT_SECONDS, ToolSpec
from agentloop.tools.contract import Tool, ToolContext
from agentloop.tools.options import ToolOptions, declared_spec, team_redactors
from agentloop.tools.source import RegisteredTools, ToolLine


async def _scheduled_by_the_run(arguments: dict[str, Any], ctx: ToolContext[Any]) -> Any:
    raise RuntimeError(f"{ctx.tool} is an activity tool: the run schedules it, never run_tool")


class ActivityTools(RegisteredTools):
    """Activity tools as a tool source: known as they are declared, and never run by this
    worker (the run schedules the activity, and its lookup activity, on the tool's queue:
    `workflows.tool_activities`); this worker only frames what they answer."""

    name = "activity_tools"

    def line(self, spec: ToolSpec) -> ToolLine:
        line = super().line(spec)
        where = f"activity {spec.activity} on task queue {spec.task_queue}"
        return ToolLine(line.name, line.effect, f"{line.note} ({where})".lstrip())


def activity_tool(
    name: str,
    *,
    activity: str,
    task_queue: str,
    parameters: type[BaseModel] | Mapping[str, Any],
    description: str,
    heartbeat_seconds: float | None = None,
    start_timeout_seconds: float = DEFAULT_START_TIMEOUT_SECONDS,
    lookup_activity: str | None = None,
    **options: Unpack[ToolOptions],
) -> Tool:
    """Declare a tool that is the activity type `activity` on `task_queue`.

    `parameters`: the arguments' JSON Schema, or a pydantic model to generate it from.
    `heartbeat_seconds`: set it when the activity heartbeats (a lost worker is then noticed
    that fast, not after `timeout_seconds`). `start_timeout_seconds`: how long a call may wait
    for a worker on `task_queue` to take it (past it, it fails as never started: a write is
    then not applied). `lookup_activity`: for a write, the activity
    type (same queue) that finds its outcome by idempotency key. The other options are
    `agentloop.tool`'s (`ToolOptions`): as there, a tool is a write unless it says
    `effect="read"`."""
    schema = (
        parameters.model_json_schema()
        if isinstance(parameters, type) and issubclass(parameters, BaseModel)
        else parameters
    )
    spec = declared_spec(
        "activity tool",
        name,
        named="activity tool",
        description=description,
        parameters=schema,
        has_outcome_lookup=lookup_activity is not None,
        options=options,
        activity=activity,
        task_queue=task_queue,
        lookup_activity=lookup_activity,
        heartbeat_seconds=heartbeat_seconds,
        start_timeout_seconds=start_timeout_seconds,
    )
    return Tool(spec=spec, handler=_scheduled_by_the_run, redactors=team_redactors(options))
