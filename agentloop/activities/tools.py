"""The tool-side activities: `check_precondition`, `run_tool` and `lookup_outcome` (with the
reading of a team's answers), the only places where tools touch the outside world. The
team's code (its tools, preconditions, lookups and approval rules) runs here, never in the
workflow."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from agentloop.activities.heartbeat import keep_heartbeating
from agentloop.activities.tool_audit import (
    attempt_failed,
    audit_lookup,
    audit_precondition,
    executed,
    outcome_looked_up,
    precondition_checked,
    redacted,
    state_refused,
)
from agentloop.activity_io import (
    APPROVAL_RULE_FAILED,
    CHECK_PRECONDITION,
    FRAME_TEAM_ANSWER,
    LOOKUP_OUTCOME,
    READ_TEAM_OUTCOME,
    RUN_TOOL,
    PreconditionResult,
    RunToolInput,
    ToolOutput,
    UnreadableJSON,
    outcome_from_answer,
)
from agentloop.contract import Principal
from agentloop.events import InputRequest, ToolResult
from agentloop.policies import task_state
from agentloop.policies.bounds import as_text
from agentloop.redaction import DEFAULT_REDACT, ORIGINAL_MEDIA_TYPE, original_record, redact
from agentloop.store import Store, stored_by_reference
from agentloop.tool_spec import Outcome, ToolSpec, bounded, record_within
from agentloop.tools.activity_results import read_answer
from agentloop.tools.contract import (
    Artifacts,
    InputNeeded,
    OutcomeUnknown,
    Reply,
    Tool,
    ToolContext,
    ToolError,
    WithState,
)
from agentloop.tools.plugins import OpenedToolbox
from agentloop.tools.source import ToolSource

MAX_QUESTION_CHARS = 2_000
"""The most of a tool's question a run asks (and shows in `status`)."""

ANONYMOUS = Principal(subject="anonymous")
"""The principal of a call from a run started before calls carried theirs."""


def context_fields(
    toolbox: OpenedToolbox,
    store: Store,
    *,
    tool: str,
    call_id: str,
    workflow_id: str,
    idempotency_key: str,
    principal: Principal | None,
    deps_of: str = "tool",
) -> dict[str, Any]:
    """What a tool's code (or a verifier's) is told about the call, inside an activity: the
    fields of its `ToolContext`."""
    info = activity.info()
    return {
        "call_id": call_id,
        "idempotency_key": idempotency_key,
        "workflow_id": workflow_id,
        "run_id": info.workflow_run_id or "",
        "attempt": info.attempt,
        "principal": principal or ANONYMOUS,
        "deps": toolbox.deps_of(deps_of, tool),
        "artifacts": Artifacts(store),
        "tool": tool,
    }


class ToolActivities:
    def __init__(
        self,
        toolbox: OpenedToolbox,
        store: Store,
        *,
        sources: Sequence[ToolSource] = (),
        redact: Sequence[str] = DEFAULT_REDACT,
    ) -> None:
        """`sources`: the tool sources of this worker beside its toolbox's (its MCP servers),
        each tool name routed by the registry. `redact`: the redactors every tool's output
        passes through here (`AGENTLOOP_REDACT`), beside each tool's own."""
        self._redact = tuple(redact)
        self._toolbox = toolbox
        self._registry = toolbox.registry
        self._tools = toolbox.registry.routing(*sources)
        self._store = store

    def _tool(self, request: RunToolInput) -> Tool:
        """The tool a call runs, from the source its name is routed to; a write when the
        run's own spec made it one (it then has an idempotency key)."""
        return self._tools.tool(request.tool, write=bool(request.idempotency_key))

    @activity.defn(name=CHECK_PRECONDITION)
    async def check_precondition(self, request: RunToolInput) -> PreconditionResult:
        """A business check against the system of record, before approval or execution; and
        the tool's approval rule, when the run asks for its verdict."""
        tool = self._tool(request)
        needs_approval = await self._approval_verdict(request)
        if tool.precondition is None:
            return precondition_checked(request, PreconditionResult(needs_approval=needs_approval))
        try:
            async with keep_heartbeating():
                await tool.precondition(request.arguments, self._context(request))
        except ToolError as exc:
            if exc.retryable:
                audit_precondition(request, ok=None, error_class=exc.error_class)
                raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc
            refused = PreconditionResult(
                problem=str(exc),
                error_class="permission" if exc.error_class == "permission" else None,
                needs_approval=needs_approval,
            )
            return precondition_checked(request, refused)
        return precondition_checked(request, PreconditionResult(needs_approval=needs_approval))

    async def _approval_verdict(self, request: RunToolInput) -> bool | None:
        name = request.approval_rule
        if name is None:
            return None
        rule = self._toolbox.box.rules.get(name)
        if rule is None:
            # A rule this worker does not know must not silently let a call through.
            return True
        try:
            return await rule.evaluate(request.arguments, request.principal or ANONYMOUS)
        except Exception as exc:
            # The team's rule, not the tool's precondition, broke: said so (retried, like any
            # activity failure, in case what it reads was briefly away).
            raise ApplicationError(
                f"approval rule {name!r} raised {type(exc).__name__}: {exc}",
                type=APPROVAL_RULE_FAILED,
            ) from None

    def _context(self, request: RunToolInput, reply: Reply | None = None) -> ToolContext[Any]:
        return ToolContext(
            **context_fields(
                self._toolbox,
                self._store,
                tool=request.tool,
                call_id=request.call_id,
                workflow_id=request.workflow_id,
                idempotency_key=request.idempotency_key,
                principal=request.principal,
            ),
            reply=reply,
        )

    @activity.defn(name=LOOKUP_OUTCOME)
    async def lookup_outcome(self, request: RunToolInput) -> Outcome:
        """Ask the system of record whether the write with this idempotency key happened."""
        tool = self._tool(request)
        if tool.lookup_outcome is None:
            outcome = Outcome(state="unknown", record=f"{request.tool} has no outcome lookup")
            return outcome_looked_up(request, outcome)
        try:
            async with keep_heartbeating():
                outcome = await tool.lookup_outcome(request.arguments, self._context(request))
        except ToolError as exc:
            # Retried by LOOKUP_RETRY; when attempts run out the runner records `unknown`.
            audit_lookup(request, outcome=None, error_class=exc.error_class)
            raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc
        # Cut here, not only where the run keeps it: the whole record would cross in the
        # activity's result, and one past Temporal's 2 MiB is never delivered (the answer
        # lost, the write recorded unknown when the retries run out).
        record = record_within(outcome.record, tool.spec.max_result_chars)
        return outcome_looked_up(request, outcome.model_copy(update={"record": record}))

    @activity.defn(name=RUN_TOOL)
    async def run_tool(self, request: RunToolInput) -> ToolResult:
        result = await self._run_tool(request)
        # The attempt that answered, Temporal's retries included (`Usage.tool_attempts`).
        return result.model_copy(update={"attempts": activity.info().attempt})

    async def _run_tool(self, request: RunToolInput) -> ToolResult:
        tool = self._tool(request)
        try:
            context = self._context(request, await self._reply(request))
            async with keep_heartbeating():
                value = await tool.handler(request.arguments, context)
        except InputNeeded as asked:
            return executed(request, tool.spec, await self._asking(request, tool.spec, asked))
        except ToolError as exc:
            if exc.retryable and tool.spec.effect != "write":
                # Raised so Temporal retries it (reads only; writes get one attempt).
                attempt_failed(request, tool.spec, exc.error_class)
                raise ApplicationError(str(exc), type=f"Tool:{exc.error_class}") from exc
            # What the tool said reaches the model: screened like its output.
            message, screened = await self._screened(request, tool, str(exc))
            if tool.spec.effect == "write" and (isinstance(exc, OutcomeUnknown) or exc.retryable):
                # It may have happened: the runner asks the system of record, never resends.
                unknown = _unknown(request, tool.spec, message)
                return executed(request, tool.spec, unknown.model_copy(update=screened))
            failure = _failure(request, tool.spec, exc.error_class, message)
            return executed(request, tool.spec, failure.model_copy(update=screened))
        except Exception as exc:
            # A crash in the handler: Temporal retries it (a write's outcome is looked up).
            attempt_failed(request, tool.spec, type(exc).__name__)
            raise
        return await self._succeeded(request, tool, value)

    async def _reply(self, request: RunToolInput) -> Reply | None:
        """The person's reply to what the call's tool asked when it last ran, with what the
        tool kept (empty when the store no longer has it: the tool then says it cannot go on)."""
        if request.reply is None:
            return None
        kept = await self._store.get_artifact(request.reply.pending_ref)
        pending = json.loads(kept[0]) if kept is not None else {}
        return Reply(request.reply.text, request.reply.sender, pending)

    async def _asking(
        self, request: RunToolInput, spec: ToolSpec, asked: InputNeeded
    ) -> ToolResult:
        """What the tool asks, for the run to ask a person; what it kept goes to the store.
        Its result is what the model is told when the run does not ask (a call that asked
        `MAX_INPUT_ROUNDS` times already)."""
        try:
            pending = _to_text(asked.pending).encode("utf-8")
        except Exception as exc:
            # Nothing was done (it asks before it acts): a bug in the tool, failed once
            # (another attempt would fail alike).
            problem = (
                f"{request.tool}: its InputNeeded.pending (a {type(asked.pending).__name__}) "
                f"cannot be written as JSON: {_unwritable(exc)}"
            )
            return _failure(request, spec, "internal", problem)
        ref = await self._store.put_artifact(pending, "application/json")
        question = asked.question[:MAX_QUESTION_CHARS]
        told = _failure(
            request, spec, "business", f"{request.tool} needs a person's answer first: {question}"
        )
        return told.model_copy(
            update={"input_request": InputRequest(question=question, pending_ref=ref)}
        )

    async def _frame(self, request: ToolOutput) -> ToolResult:
        """An activity tool's output, bounded like any tool's."""
        tool = self._registry.get(request.tool)
        as_run = RunToolInput(
            workflow_id=request.workflow_id, call_id=request.call_id, tool=request.tool
        )
        return await self._succeeded(as_run, tool, request.output)

    @activity.defn(name=FRAME_TEAM_ANSWER)
    async def frame_team_answer(self, request: ToolOutput, answer: RawValue) -> ToolResult:
        """An activity tool's answer as it came (any payload, or one the team's worker put in
        the store), read and bounded like any tool's output. Never fails for what it holds:
        the call ran, and a write's effect exists."""
        value = await read_answer(answer.payload, self._store)
        if isinstance(value, UnreadableJSON):
            value = value.told()
        return await self._frame(request.model_copy(update={"output": value}))

    @activity.defn(name=READ_TEAM_OUTCOME)
    async def read_team_outcome(self, request: ToolOutput, answer: RawValue) -> Outcome:
        """An activity tool's lookup answer as it came, as an outcome, its record cut to the
        tool's result cap."""
        spec = self._registry.get(request.tool).spec
        outcome = outcome_from_answer(await read_answer(answer.payload, self._store))
        record = record_within(outcome.record, spec.max_result_chars)
        return outcome.model_copy(update={"record": record})

    async def _succeeded(self, request: RunToolInput, tool: Tool, value: Any) -> ToolResult:
        """A tool's output as its result: kept whole as an artifact when over the tool's cap,
        stored once, referred to by the next model call."""
        spec = tool.spec
        state: dict[str, Any] = {}
        if isinstance(value, WithState):
            problem = task_state.update_problem(value.state)
            if problem is None:
                state = dict(value.state)
            else:
                # The output stands (a write happened); only the update is refused.
                state_refused(request, problem)
            value = value.output
        try:
            # A lone surrogate (a JSON `\ud800` escape) has no encoding: no result could hold it.
            text = as_text(_to_text(value))
        except Exception as exc:
            why = (
                f"{request.tool} returned a {type(value).__name__} that cannot be written as "
                f"JSON: {_unwritable(exc)}"
            )
            if spec.effect != "write":
                # A bug in the tool, and the same on every attempt: failed once, not retried.
                return executed(request, spec, _failure(request, spec, "internal", why))
            # The write happened and answered: it succeeded, only its answer cannot be shown.
            # (Raising would leave it an unknown outcome, looked up or waiting on a person.)
            text = json.dumps({"done": True, "not_shown": why}, ensure_ascii=False)
        output_chars = len(text)
        text, screened = await self._screened(request, tool, text)
        content, artifact = await self._bounded(request, text, spec)
        result = ToolResult(
            call_id=request.call_id,
            tool=request.tool,
            status="succeeded",
            content=content,
            artifact_ref=artifact,
            side_effect=spec.effect == "write",
            state=state,
            **screened,
        )
        result = await stored_by_reference(self._store, result)
        return executed(request, spec, result, output_chars=output_chars)

    async def _screened(
        self, request: RunToolInput, tool: Tool, text: str
    ) -> tuple[str, dict[str, Any]]:
        """`text` with the sensitive values the worker's and the tool's redactors find
        replaced, before the model or the store sees it; and what the result records of it
        (its trust, the counts, where the original is kept for the tool's approvers)."""
        spec = tool.spec
        found = redact(text, [*self._redact, *spec.redact], tool.redactors)
        screened: dict[str, Any] = {"trusted": spec.trusted}
        if not found.counts:
            return text, screened
        screened["redacted"] = found.counts
        if spec.keep_redacted == "approvers" and spec.approvers:
            original = original_record(
                text,
                workflow_id=request.workflow_id,
                call_id=request.call_id,
                tool=request.tool,
                readers=spec.approvers,
            )
            screened["original_ref"] = await self._store.put_artifact(original, ORIGINAL_MEDIA_TYPE)
        redacted(request, found.counts, kept=bool(screened.get("original_ref")))
        return found.text, screened

    async def _bounded(
        self, request: RunToolInput, text: str, spec: ToolSpec
    ) -> tuple[str, str | None]:
        """Output over the tool's cap goes to the store whole; the model sees a preview, the
        size and the reference to page through with `read_artifact`."""
        if len(text) <= spec.max_result_chars:
            return text, None
        ref = await self._store.put_artifact(text.encode("utf-8"), "text/plain")
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


def _unknown(request: RunToolInput, spec: ToolSpec, message: str) -> ToolResult:
    return ToolResult(
        call_id=request.call_id,
        tool=request.tool,
        status="unknown",
        content=_error_content(spec, "outcome_unknown", message),
        error_class="transient",
        side_effect=True,
    )


def _failure(request: RunToolInput, spec: ToolSpec, error_class: str, message: str) -> ToolResult:
    return ToolResult(
        call_id=request.call_id,
        tool=request.tool,
        status="failed",
        content=_error_content(spec, error_class, message),
        error_class=error_class,
    )


def _error_content(spec: ToolSpec, error_class: str, message: str) -> str:
    """An error as the model is told it, within the tool's result cap."""
    return bounded(
        json.dumps({"error": {"class": error_class, "message": message}}), spec.max_result_chars
    )


def _jsonable(value: Any) -> Any:
    """What a tool gave (its output, or its `InputNeeded.pending`) as JSON values, the way pydantic
    writes them: models, dataclasses, datetimes, sets, enums, UUIDs, decimals. Bytes become
    their UTF-8 text, or base64 when some are not UTF-8 (a pydantic model's own bytes as its
    `ser_json_bytes` says). Raises when some value has no JSON form."""
    try:
        return to_jsonable_python(value, bytes_mode="utf8")
    except UnicodeDecodeError:
        return to_jsonable_python(value, bytes_mode="base64")


def _to_text(value: Any) -> str:
    """A tool's output as the text the model is sent: a string as it is, anything else as JSON
    (`_jsonable`). Raises when it cannot be written."""
    if isinstance(value, str):
        return value
    return json.dumps(_jsonable(value), ensure_ascii=False)


def _unwritable(exc: Exception) -> str:
    """Why a value could not be written as JSON, naming the type it stopped at."""
    return f"{type(exc).__name__}: {exc}"[:500]
