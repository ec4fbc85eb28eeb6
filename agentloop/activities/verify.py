"""`verify_completion`: a final answer is only a candidate until the world agrees.

Verifiers are registered by name (the built-in `writes_applied`, and the team's own
`@agentloop.verifier`s); a run names one in `completion_check`. Each looks at the systems of
record, never at the model's text alone. It runs here, in the worker; the workflow acts on the
verdict recorded in history."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentloop.activities.tools import context_fields
from agentloop.activity_io import VERIFY_COMPLETION, Verdict, VerifyInput
from agentloop.contract import CallRecord
from agentloop.store import Store, StoreError, load_artifact_text
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import ToolContext, ToolError
from agentloop.tools.decorator import VerifyContext
from agentloop.tools.plugins import OpenedToolbox
from agentloop.tools.registry import UnknownToolError

DONE = ("succeeded", "confirmed_after_query")


class VerifierActivities:
    def __init__(self, toolbox: OpenedToolbox, store: Store) -> None:
        self._toolbox = toolbox
        self._store = store

    @activity.defn(name=VERIFY_COMPLETION)
    async def verify_completion(self, request: VerifyInput) -> Verdict:
        if request.check == "writes_applied":
            return await self._writes_applied(request)
        verifier = self._toolbox.box.verifiers.get(request.check)
        if verifier is None:
            raise ApplicationError(
                f"completion_check: no verifier {request.check!r}; this worker has: "
                + ", ".join(self._toolbox.box.verifier_names()),
                type="InvalidInput",
                non_retryable=True,
            )
        fields = context_fields(
            self._toolbox,
            self._store,
            tool=request.check,
            call_id="",
            workflow_id=request.workflow_id,
            idempotency_key="",
            principal=request.principal,
            deps_of="verifier",
        )
        ctx = VerifyContext(
            **fields,
            answer=await self._whole_answer(request),
            calls=tuple(request.calls),
            task_state=dict(request.task_state),
            lookup=lambda call: self._outcome(call, request),
        )
        try:
            return await verifier.evaluate(ctx)
        except ToolError as exc:
            # Retried by the activity's policy; a check that cannot be made does not pass.
            raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc

    async def _whole_answer(self, request: VerifyInput) -> str:
        """The answer the verifier judges: whole, from the store when it came by reference."""
        if not request.answer_ref:
            return request.answer
        try:
            text, _ = await load_artifact_text(self._store, request.answer_ref)
        except StoreError as exc:
            raise ApplicationError(str(exc), type="ArtifactMissing") from exc
        return text

    async def _writes_applied(self, request: VerifyInput) -> Verdict:
        """At least one write happened, and every write the run counts as done is found by
        its system of record under its idempotency key."""
        writes = [c for c in request.calls if c.idempotency_key and c.status in DONE]
        if not writes:
            return Verdict(passed=False, reason="no write was made: there is no evidence")
        for call in writes:
            try:
                state = (await self._outcome(call, request)).state
            except ToolError as exc:
                raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc
            if state != "applied":
                return Verdict(
                    passed=False,
                    reason=f"{call.tool} {call.call_id} is {state} at its system of record",
                )
        done = ", ".join(f"{c.tool} {c.call_id}" for c in writes)
        return Verdict(passed=True, reason=f"confirmed by the systems of record: {done}")

    async def _outcome(self, call: CallRecord, request: VerifyInput) -> Outcome:
        """What a write's own system of record holds under its key (`unknown` when its tool
        has no lookup)."""
        try:
            tool = self._toolbox.registry.get(call.tool)
        except UnknownToolError:
            return Outcome(state="unknown", record=f"{call.tool} is not on this worker")
        if tool.lookup_outcome is None:
            return Outcome(state="unknown", record=f"{call.tool} has no outcome lookup")
        context = ToolContext(
            **context_fields(
                self._toolbox,
                self._store,
                tool=call.tool,
                call_id=call.call_id,
                workflow_id=request.workflow_id,
                idempotency_key=call.idempotency_key,
                principal=request.principal,
            )
        )
        return await tool.lookup_outcome(call.arguments, context)
