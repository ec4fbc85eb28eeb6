"""`verify_completion`: a final answer is only a candidate until the world agrees.

Verifiers are registered by name; a run names one in `completion_check`. Each looks at the
systems of record, never at the model's text alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentloop.activity_io import Verdict, VerifyInput
from agentloop.contract import CallRecord
from agentloop.tools.contract import ToolContext, ToolError
from agentloop.tools.registry import ToolRegistry, UnknownToolError

Verifier = Callable[[VerifyInput], Awaitable[Verdict]]

DONE = ("succeeded", "confirmed_after_query")


class VerifierActivities:
    def __init__(self, registry: ToolRegistry, services: Any) -> None:
        self._registry = registry
        self._services = services
        self._verifiers: dict[str, Verifier] = {"writes_applied": self._writes_applied}

    @activity.defn(name="verify_completion")
    async def verify_completion(self, request: VerifyInput) -> Verdict:
        verifier = self._verifiers.get(request.check)
        if verifier is None:
            raise ApplicationError(
                f"completion_check: no verifier {request.check!r}; this worker has: "
                + ", ".join(sorted(self._verifiers)),
                type="InvalidInput",
                non_retryable=True,
            )
        return await verifier(request)

    async def _writes_applied(self, request: VerifyInput) -> Verdict:
        """At least one write happened, and every write the run counts as done is found by
        its system of record under its idempotency key."""
        writes = [c for c in request.calls if c.idempotency_key and c.status in DONE]
        if not writes:
            return Verdict(passed=False, reason="no write was made: there is no evidence")
        for call in writes:
            state = await self._outcome(call, request.workflow_id)
            if state != "applied":
                return Verdict(
                    passed=False,
                    reason=f"{call.tool} {call.call_id} is {state} at its system of record",
                )
        done = ", ".join(f"{c.tool} {c.call_id}" for c in writes)
        return Verdict(passed=True, reason=f"confirmed by the systems of record: {done}")

    async def _outcome(self, call: CallRecord, workflow_id: str) -> str:
        try:
            tool = self._registry.get(call.tool)
        except UnknownToolError:
            return "unknown"
        if tool.lookup_outcome is None:
            return "unknown"
        context = ToolContext(call.call_id, workflow_id, call.idempotency_key, self._services)
        try:
            return (await tool.lookup_outcome(call.idempotency_key, context)).state
        except ToolError as exc:
            # Retried by the activity's policy; a check that cannot be made does not pass.
            raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc
