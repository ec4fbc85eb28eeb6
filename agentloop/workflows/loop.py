"""The loop as a pure state machine: `decide(state, now) -> NextStep`.

This is DESIGN.md §3 "The loop, one turn" written as code with no Temporal in it, so every rule
is unit-tested without a server and the workflow shell only carries out what is decided here.
The `record_*` functions fold what an operation returned back into the state.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from agentloop.contract import AgentRunInput, CallRecord, Phase, RunStatus, Usage
from agentloop.events import (
    Event,
    Instruction,
    ModelOutput,
    StateUpdate,
    ToolCall,
    ToolResult,
    UserInput,
)
from agentloop.policies import budgets
from agentloop.policies.validation import Allowed, schema_problems, validate_call
from agentloop.store.transcript import ROOT
from agentloop.tools.contract import ToolSpec

MAX_OUTPUT_CORRECTIONS = 2
"""How many times a final answer that breaks `output_schema` goes back to the model."""

SUMMARY_CHARS = 200


class LoopState(BaseModel):
    """Run state (DESIGN.md §1): everything the runner decides from, nothing the model reads."""

    run_input: AgentRunInput
    tools: dict[str, ToolSpec] = Field(default_factory=dict)
    started_at: datetime
    phase: Phase = "calling_model"
    turn: int = 0
    head: str = ROOT
    """Key of the last transcript node the store holds for this run."""
    outbox: list[Event] = Field(default_factory=list)
    """Events the model has not seen yet; they ride inline in the next model call."""
    last_output: ModelOutput | None = None
    """The model output not yet acted on; None when the next step is a model call."""
    usage: Usage = Field(default_factory=Usage)
    calls: dict[str, CallRecord] = Field(default_factory=dict)
    output_corrections: int = 0
    cancel_reason: str | None = None
    failure: str | None = None
    """Set when an operation failed in a way that ends the run (its error class first)."""
    stop_reason: str | None = None

    @classmethod
    def start(cls, run_input: AgentRunInput, tools: list[ToolSpec], now: datetime) -> LoopState:
        outbox: list[Event] = []
        if run_input.instructions:
            outbox.append(Instruction(text=run_input.instructions))
        outbox.append(UserInput(text=run_input.task, sender=run_input.principal.subject))
        return cls(
            run_input=run_input,
            tools={spec.name: spec for spec in tools},
            started_at=now,
            outbox=outbox,
        )

    def used_per_tool(self) -> Counter[str]:
        return Counter(r.tool for r in self.calls.values() if r.attempts > 0)


@dataclass(frozen=True)
class CallModel:
    turn: int


@dataclass(frozen=True)
class RunTools:
    """One batch: reads may run in parallel, writes one at a time in the model's order."""

    reads: list[tuple[ToolCall, ToolSpec]]
    writes: list[tuple[ToolCall, ToolSpec]]
    refused: list[ToolResult] = field(default_factory=list)
    """Structured errors for calls that will not run; they go back to the model."""


@dataclass(frozen=True)
class Finish:
    status: RunStatus
    stop_reason: str
    output: str | dict[str, Any] | list[Any] | None = None


NextStep = CallModel | RunTools | Finish


def decide(state: LoopState, now: datetime) -> NextStep:
    limits = state.run_input.limits
    if state.failure is not None:
        return Finish(*_failure_status(state))
    if state.cancel_reason is not None:
        return Finish("cancelled", f"cancelled: {state.cancel_reason or 'no reason given'}")
    if budgets.deadline_passed(limits, state.started_at, now):
        return Finish("limit_reached", f"deadline: {limits.deadline_seconds} s passed")
    output = state.last_output
    if output is None:
        blocked = budgets.model_call_blocked(limits, state.usage)
        if blocked:
            return Finish("limit_reached", blocked)
        return CallModel(turn=state.turn + 1)
    match output.stop:
        case "final":
            return _final_candidate(state, output)
        case "tool_calls":
            return _plan_batch(state, output)
        case "refused":
            return Finish("refused", f"refused: {output.stop_detail or output.text}"[:500])
        case "content_filtered":
            return Finish("refused", f"content_filtered: {output.stop_detail}")
        case "truncated":
            return Finish("incomplete", f"truncated: {output.stop_detail}")


def _final_candidate(state: LoopState, output: ModelOutput) -> Finish:
    schema = state.run_input.output_schema
    if schema is None:
        return Finish("completed", "final answer", output.text)
    parsed, problems = check_output(schema, output.text)
    if problems:
        # Only reached once the corrections are used up (see `record_model_output`).
        return Finish(
            "failed", "verification: final answer breaks output_schema: " + "; ".join(problems)
        )
    return Finish("completed", "final answer matches output_schema", parsed)


def check_output(schema: dict[str, Any], text: str) -> tuple[Any, list[str]]:
    """A final answer is only a candidate: it must be JSON satisfying `output_schema`."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None, ["the answer is not valid JSON"]
    return parsed, schema_problems(schema, parsed)


def _plan_batch(state: LoopState, output: ModelOutput) -> NextStep:
    ids = [call.call_id for call in output.tool_calls]
    # Results pair with calls by id alone, and a write's idempotency key derives from it: an
    # id that is empty or repeated cannot be trusted (reuse across turns: `record_model_output`).
    if not output.tool_calls or "" in ids or len(set(ids)) != len(ids):
        return Finish("failed", f"protocol: tool calls without unique call ids: {ids}")
    allowed_names = set(state.run_input.tools)
    reads: list[tuple[ToolCall, ToolSpec]] = []
    writes: list[tuple[ToolCall, ToolSpec]] = []
    refused: list[ToolResult] = []
    for call in output.tool_calls:
        verdict = validate_call(call, state.tools, allowed_names)
        if isinstance(verdict, Allowed):
            (reads if verdict.spec.effect == "read" else writes).append((call, verdict.spec))
        else:
            refused.append(_refusal(call, verdict.error_class, verdict.message))
    batch = [call.name for call, _ in reads + writes]
    blocked = budgets.tool_batch_blocked(
        state.run_input.limits, state.usage, state.used_per_tool(), batch
    )
    if blocked:
        return Finish("limit_reached", blocked)
    return RunTools(reads=reads, writes=writes, refused=refused)


def _refusal(call: ToolCall, error_class: str, message: str) -> ToolResult:
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="rejected",
        content=json.dumps({"error": {"class": error_class, "message": message}}),
        error_class="unknown_tool" if error_class == "unknown_tool" else "invalid_arguments",
    )


def _failure_status(state: LoopState) -> tuple[RunStatus, str]:
    unknown = [r.call_id for r in state.calls.values() if r.status == "unknown"]
    if unknown:
        return "unresolved", f"{state.failure}; outcome unknown for {', '.join(unknown)}"
    return "failed", state.failure or ""


def failed_result(call: ToolCall, spec: ToolSpec, message: str) -> ToolResult:
    """The result of a call whose activity failed for good."""
    write = spec.effect == "write"
    return ToolResult(
        call_id=call.call_id,
        tool=call.name,
        status="unknown" if write else "failed",
        content=json.dumps({"error": {"class": "transient", "message": message}}),
        error_class="transient",
        retryable=not write,
        side_effect=write,
    )


# --- folding results back into the state -------------------------------------------------


def record_failure(state: LoopState, reason: str) -> None:
    state.failure = reason


def record_model_call_started(state: LoopState, step: CallModel) -> None:
    state.turn = step.turn
    state.phase = "calling_model"
    state.usage.model_calls += 1


def record_model_output(state: LoopState, output: ModelOutput, head: str) -> None:
    state.head = head
    state.outbox = []
    state.usage.input_tokens += output.usage.input_tokens
    state.usage.output_tokens += output.usage.output_tokens
    state.last_output = output
    state.phase = "validating"
    if output.stop == "tool_calls":
        reused = sorted({c.call_id for c in output.tool_calls} & state.calls.keys())
        if reused:
            record_failure(state, f"protocol: call ids reused from an earlier turn: {reused}")
            return
        for call in output.tool_calls:
            state.calls[call.call_id] = CallRecord(
                call_id=call.call_id,
                tool=call.name,
                tool_version=state.tools[call.name].version if call.name in state.tools else "",
                args_digest=call.args_digest,
                arguments=call.arguments,
                status="proposed",
                turn=state.turn,
            )
    elif output.stop == "final" and state.run_input.output_schema is not None:
        _send_back_if_rejected(state, output, state.run_input.output_schema)


def _send_back_if_rejected(state: LoopState, output: ModelOutput, schema: dict[str, Any]) -> None:
    _, problems = check_output(schema, output.text)
    if not problems or state.output_corrections >= MAX_OUTPUT_CORRECTIONS:
        return
    # Not done: the verdict goes back to the model as an observation, on the same budget.
    state.output_corrections += 1
    state.outbox = [
        StateUpdate(
            kind="verification",
            text="Your final answer was rejected (" + "; ".join(problems) + "). Answer again with "
            f"only JSON matching this schema: {json.dumps(schema, sort_keys=True)}",
        )
    ]
    state.last_output = None


def record_batch_started(state: LoopState, step: RunTools) -> None:
    state.phase = "executing_tools"
    for call, _ in step.reads + step.writes:
        record = state.calls[call.call_id]
        record.decision = "allowed"
        record.status = "running"
        record.attempts = 1
    state.usage.tool_calls += len(step.reads) + len(step.writes)
    for result in step.refused:
        state.calls[result.call_id].decision = result.error_class or "rejected"


def record_tool_results(state: LoopState, results: list[ToolResult]) -> None:
    """Record each result under its call id, then queue them for the model in call order."""
    by_id = {result.call_id: result for result in results}
    assert state.last_output is not None
    order = [call.call_id for call in state.last_output.tool_calls]
    if set(by_id) != set(order):
        raise ValueError(f"results {sorted(by_id)} do not answer the calls {sorted(order)}")
    for call_id in order:
        result = by_id[call_id]
        record = state.calls[call_id]
        record.status = result.status
        record.result_summary = result.content[:SUMMARY_CHARS]
        state.outbox.append(result)
    state.last_output = None
    unknown = [r.call_id for r in results if r.status == "unknown"]
    if unknown:
        # Never retried blindly and never hidden from the operator (DESIGN.md §3 step 7).
        record_failure(state, "write outcome unknown")
