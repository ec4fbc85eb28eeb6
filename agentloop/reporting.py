"""The stop report: what an operator reads when a run ends. Pure, so the workflow writes it
into the result and the CLI prints the same text."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

from agentloop.contract import AgentRunResult, CallRecord, CompensationLine, Usage

CONTINUABLE = frozenset(
    {"limit_reached", "stalled", "incomplete", "input_timeout", "failed", "blocked", "unverified"}
)


def counted(usage: Usage) -> str:
    """The counts kept apart, each in its unit (seed 003)."""
    return (
        f"{usage.model_requests} model requests (retries included), {usage.tool_attempts} tool"
        f" executions (retries included), {usage.steps} loop steps, {usage.human_waits} waits"
        " for people"
    )


def decisions(calls: Iterable[CallRecord]) -> list[str]:
    """What people decided about the calls: who approved or rejected each, who said whether
    an unknown write happened, from the ledger's typed fields."""
    lines = []
    for call in calls:
        said = [r.described() for r in (call.approval, call.resolution) if r is not None]
        if said:
            lines.append(f"{call.tool} {call.call_id}: {'; '.join(said)}")
    return lines


COMPENSATION_SAID = {"undone": "undone", "not_undone": "not undone", "left_as_is": "left as is"}


def compensation_said(line: CompensationLine) -> str:
    """One write of a run that did not deliver, and what became of it."""
    said = f"{line.tool} {line.call_id}: {COMPENSATION_SAID[line.outcome]}"
    if line.undo_call_id:
        said += f" by {line.undo_tool} {line.undo_call_id}"
        if line.undo_status:
            said += f" ({line.undo_status})"
    return f"{said} — {line.why}" if line.why else said


def stop_report(result: AgentRunResult, workflow_id: str) -> str:
    usage = result.usage
    outcomes = Counter(call.status for call in result.calls)
    done = ", ".join(f"{n} {status}" for status, n in sorted(outcomes.items())) or "none"
    lines = [
        f"Stopped: {result.status} — {result.stop_reason}",
        f"Done: {usage.model_calls} model calls, {usage.tool_calls} tool calls run "
        f"(outcomes: {done}); {usage.input_tokens + usage.output_tokens} tokens, "
        f"${usage.cost_usd:.4f}",
        f"Counted: {counted(usage)}",
    ]
    if result.status == "completed":
        lines.append(
            f"Verified: yes, by {result.verified_by} ({result.verification or 'no reason given'})"
            if result.verified
            else "Verified: no (no completion_check configured: the model stopped asking for"
            " tools, nothing checked the task was done)"
        )
    if result.task_state:
        shown = json.dumps(result.task_state, ensure_ascii=False, sort_keys=True)
        lines.append(f"Task state: {shown if len(shown) <= 600 else shown[:597] + '...'}")
    chain = result.chain_usage
    if chain is not None:
        lines.append(
            f"With the runs it continued: {chain.model_calls} model calls, {chain.tool_calls}"
            f" tool calls, {chain.input_tokens + chain.output_tokens} tokens,"
            f" ${chain.cost_usd:.4f}"
        )
    lines += [f"Fell back: {switch.said()}" for switch in result.model_switches]
    decided = decisions(result.calls)
    if decided:
        lines.append("Decisions:")
        lines += [f"  {line}" for line in decided]
    if result.side_effects:
        lines.append("Side effects:")
        lines += [
            f"  {e.tool} {e.call_id}: {e.status}, confirmed by {e.confirmed_by} "
            f"(idempotency key {e.idempotency_key})"
            for e in result.side_effects
        ]
    else:
        lines.append("Side effects: none")
    if result.compensation:
        lines.append("Compensation (newest first):")
        lines += [f"  {compensation_said(line)}" for line in result.compensation]
    if result.pending:
        lines.append(
            "Pending: " + ", ".join(f"{p.tool} {p.call_id} ({p.status})" for p in result.pending)
        )
    if result.status in CONTINUABLE:
        lines.append(
            f"To continue: agentloop continue {workflow_id} --max-model-calls N "
            "(a new run on this transcript, with the budget you grant it)"
        )
    return "\n".join(lines)
