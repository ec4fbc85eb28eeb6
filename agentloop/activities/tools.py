"""`describe_tools` and `run_tool`: the only place where tools touch the outside world."""

from __future__ import annotations

import json
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentloop.activities.heartbeat import keep_heartbeating
from agentloop.activities.messages import DescribeToolsInput, PreconditionResult, RunToolInput
from agentloop.events import ToolResult
from agentloop.tools.contract import Outcome, OutcomeUnknown, ToolContext, ToolError, ToolSpec
from agentloop.tools.registry import ToolRegistry, UnknownToolError


class ToolActivities:
    def __init__(self, registry: ToolRegistry, services: Any) -> None:
        self._registry = registry
        self._services = services

    @activity.defn(name="describe_tools")
    async def describe_tools(self, request: DescribeToolsInput) -> list[ToolSpec]:
        """The specs in force when the run starts; recorded in history, so replay is stable."""
        try:
            return self._registry.specs(request.names)
        except UnknownToolError as exc:
            known = ", ".join(self._registry.names())
            raise ApplicationError(
                f"tools: unknown tool {exc.args[0]!r}; this worker has: {known}",
                type="InvalidInput",
                non_retryable=True,
            ) from None

    @activity.defn(name="check_precondition")
    async def check_precondition(self, request: RunToolInput) -> PreconditionResult:
        """A business check against the system of record, before approval or execution."""
        tool = self._registry.get(request.tool)
        if tool.precondition is None:
            return PreconditionResult()
        try:
            await tool.precondition(request.arguments, self._context(request))
        except ToolError as exc:
            if exc.retryable:
                raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc
            return PreconditionResult(problem=str(exc))
        return PreconditionResult()

    def _context(self, request: RunToolInput) -> ToolContext:
        return ToolContext(
            call_id=request.call_id,
            workflow_id=request.workflow_id,
            idempotency_key=request.idempotency_key,
            services=self._services,
        )

    @activity.defn(name="lookup_outcome")
    async def lookup_outcome(self, request: RunToolInput) -> Outcome:
        """Ask the system of record whether the write with this idempotency key happened."""
        tool = self._registry.get(request.tool)
        if tool.lookup_outcome is None:
            return Outcome(state="unknown", record=f"{request.tool} has no outcome lookup")
        try:
            return await tool.lookup_outcome(request.idempotency_key, self._context(request))
        except ToolError as exc:
            # Retried by LOOKUP_RETRY; when attempts run out the runner records `unknown`.
            raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc

    @activity.defn(name="run_tool")
    async def run_tool(self, request: RunToolInput) -> ToolResult:
        tool = self._registry.get(request.tool)
        try:
            async with keep_heartbeating():
                value = await tool.handler(request.arguments, self._context(request))
        except ToolError as exc:
            if tool.spec.effect == "write" and (isinstance(exc, OutcomeUnknown) or exc.retryable):
                # It may have happened: the runner asks the system of record, never resends.
                return _unknown(request, str(exc))
            if exc.retryable:
                # Raised so Temporal retries it (reads only; writes get one attempt).
                raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc
            return _failure(request, tool.spec, exc.error_class, str(exc))
        content, artifact = await self._bounded(request, _to_text(value), tool.spec)
        return ToolResult(
            call_id=request.call_id,
            tool=request.tool,
            status="succeeded",
            content=content,
            artifact_ref=artifact,
            side_effect=tool.spec.effect == "write",
        )

    async def _bounded(
        self, request: RunToolInput, text: str, spec: ToolSpec
    ) -> tuple[str, str | None]:
        """Output over the tool's cap goes to the store whole; the model sees a preview, the
        size and the reference to page through with `read_artifact`."""
        if len(text) <= spec.max_result_chars:
            return text, None
        ref = await self._services.store.put_artifact(text.encode("utf-8"), "text/plain")
        frame = {
            "truncated": True,
            "source": {"tool": request.tool, "call_id": request.call_id},
            "total_chars": len(text),
            "artifact": ref,
            "read_more": f'read_artifact(ref="{ref}", offset=<n>, limit=<up to 4000>)',
        }
        room = spec.max_result_chars - len(json.dumps(frame)) - 20
        while True:  # escaping can lengthen the preview: shrink until the frame fits
            framed = json.dumps({**frame, "preview": text[: max(0, room)]}, ensure_ascii=False)
            if len(framed) <= spec.max_result_chars or room <= 0:
                return framed, ref
            room -= len(framed) - spec.max_result_chars


def _unknown(request: RunToolInput, message: str) -> ToolResult:
    return ToolResult(
        call_id=request.call_id,
        tool=request.tool,
        status="unknown",
        content=json.dumps({"error": {"class": "outcome_unknown", "message": message}}),
        error_class="transient",
        side_effect=True,
    )


def _failure(request: RunToolInput, spec: ToolSpec, error_class: str, message: str) -> ToolResult:
    return ToolResult(
        call_id=request.call_id,
        tool=request.tool,
        status="failed",
        content=bounded(
            json.dumps({"error": {"class": error_class, "message": message}}), spec.max_result_chars
        ),
        error_class=error_class,
    )


def _to_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def bounded(text: str, limit: int) -> str:
    """Tool output the model sees never exceeds the tool's cap."""
    if len(text) <= limit:
        return text
    marker = f"\n[truncated: showing {limit} of {len(text)} characters]"
    return text[: max(0, limit - len(marker))] + marker
