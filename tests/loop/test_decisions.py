"""Decisions as typed fields (issue #34 item 6): who approved or rejected a call, when, why
and whether signed, and who said whether an unknown write happened, are fields of the call
ledger that `status`, the result, the stop report and the transcript read; nothing parses
the ledger's `decision` sentence back."""

from __future__ import annotations

import ast
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import agentloop
from agentloop.cli.transcript import format_transcript
from agentloop.contract import (
    ApprovalRecord,
    Principal,
    RefusedApproval,
    RefusedResolution,
    RefusedSignal,
    ResolutionRecord,
    ResolveRequest,
    SideEffect,
)
from agentloop.events import UserInput
from agentloop.tool_spec import Outcome
from agentloop.workflows import loop
from agentloop.workflows.loop import Finish, LookupOutcome, RunTools
from agentloop.workflows.loop.state import LoopState
from agentloop.workflows.loop.views import facts, side_effects
from tests.cli.test_cli import agentloop as agentloop_cli
from tests.cli.test_cli import process_env
from tests.live import Live, agent_input
from tests.loop.test_blocked_runs import booking
from tests.loop.test_governance import (
    decide,
    decision,
    new_state,
    pass_preconditions,
    reserve,
    resolve,
)
from tests.loop.test_loop import T0, model_turn, run_step, tool_output
from tests.support import result_of, signal_approval, start_run, wait_for_phase

LATER = T0 + timedelta(minutes=5)


def test_an_approval_is_recorded_as_fields_and_the_sentence_is_only_written() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    decided = decision(state, "w1").model_copy(update={"reason": "seat is free"})

    assert decide(state, decided, LATER).accepted

    record = state.calls["w1"]
    assert record.approval == ApprovalRecord(
        approved=True, approver="lead", at=LATER, reason="seat is free", signed=False
    )
    assert record.decision == "approved by lead"  # the ledger's sentence, as it always read
    assert record.resolution is None
    run_step(state)
    assert "reserve_seat w1 was approved by lead" in facts(state)


def test_a_signed_decision_counts_as_signed_only_where_the_worker_checks_signatures() -> None:
    for signing, signed in (("signed", True), ("unsigned", False)):
        state = new_state()
        state.approval_signing = signing
        model_turn(state, tool_output(reserve("w1")))
        pass_preconditions(state)
        decided = decision(state, "w1").model_copy(update={"signature": "c2lnbmVk"})
        held = loop.receive_decision(state, decided, T0)
        assert isinstance(held, loop.DecisionToCheck)
        assert loop.record_checked_decision(state, held, "", signing, LATER).accepted
        approval = state.calls["w1"].approval
        assert approval is not None and (approval.signed, approval.at) == (signed, LATER)


def test_a_rejection_is_in_the_result_and_the_stop_report_as_fields() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    rejected = decision(state, "w1", approved=False).model_copy(update={"reason": "full"})
    decide(state, rejected, LATER)

    step = loop.decide(state, T0)
    assert isinstance(step, Finish) and (step.status, step.cause) == ("rejected", "rejected")
    result = loop.record_finish(state, step)

    [call] = result.calls
    assert call.approval is not None
    assert (call.approval.approved, call.approval.approver, call.approval.reason) == (
        False,
        "lead",
        "full",
    )
    assert result.stop_cause == "rejected"
    line = f"  reserve_seat w1: rejected by lead at {LATER.isoformat()} (unsigned): full"
    assert f"Decisions:\n{line}" in result.report
    # The transcript command prints the same from the ledger, after the conversation.
    text = format_transcript([UserInput(text="book it", sender="p-alice")], result.calls)
    assert text.endswith(f"decisions (from the run's call ledger):\n    {line.strip()}")


def test_an_operators_word_on_an_unknown_write_is_recorded_as_fields() -> None:
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    pass_preconditions(state)
    decide(state, decision(state, "w1"), T0)
    step = loop.decide(state, T0)
    assert isinstance(step, RunTools)
    loop.start_tools(state, step, T0)
    loop.record_tool_results(state, [loop.ToolFailure("w1", "timeout", "transient")])
    assert isinstance(loop.decide(state, T0), LookupOutcome)
    loop.record_outcome(state, "w1", Outcome(state="unknown"), T0)

    request = ResolveRequest(call_id="w1", outcome="applied", operator="ops", note="seen in db")
    assert resolve(state, request, LATER) is None

    record = state.calls["w1"]
    assert record.resolution == ResolutionRecord(
        outcome="applied", operator="ops", at=LATER, note="seen in db"
    )
    assert record.approval is not None and record.approval.approver == "lead"
    [effect] = side_effects(state)
    assert effect.confirmed_by == "operator (ops says applied: seen in db)"
    # The facts restated to the model say it from the fields, in the ledger's words.
    assert record.people_said() == record.decision
    assert record.decision == "approved by lead; resolved: ops says applied: seen in db"
    assert f"reserve_seat w1 was {record.decision}" in facts(state)


def test_no_decision_or_resolution_sentence_is_parsed_back() -> None:
    """A sentence that only looks like a decision is not one: only the fields count."""
    state = new_state()
    model_turn(state, tool_output(reserve("w1")))
    state.calls["w1"].decision = "approved by nobody; resolved: nobody says applied"
    assert facts(state) == []
    state.calls["w1"].status = "confirmed_after_query"
    [effect] = side_effects(state)
    assert effect.confirmed_by == "lookup by idempotency key"


OLD_REFUSALS: list[dict[str, Any]] = [
    {
        "signal": "message",
        "payload": "hi",
        "refused_because": "too long",
        "at": "2026-01-01T00:00:00+00:00",
    },
    {
        "signal": "approve",
        "call_id": "w1",
        "args_digest": "sha256:ab",
        "approved": True,
        "approver": "mallory",
        "reason": "",
        "refused_because": "'mallory' may not decide",
        "at": "2026-01-01T00:00:01.500000+00:00",
    },
    {
        "signal": "resolve",
        "call_id": "w2",
        "outcome": "applied",
        "operator": "ops",
        "note": "",
        "refused_because": "no write 'w2' is awaiting reconciliation",
        "at": "2026-01-01T00:00:02+00:00",
    },
]
"""Refused decisions as run state has held them since they named their signal."""
OLD_SIDE_EFFECTS: list[dict[str, Any]] = [
    {
        "call_id": "c1",
        "tool": "reserve_seat",
        "idempotency_key": "k1",
        "status": "succeeded",
        "confirmed_by": "the system's response",
    },
    {
        "call_id": "c2",
        "tool": "send_reply",
        "idempotency_key": "k2",
        "status": "unknown",
        "confirmed_by": "not confirmed: outcome unknown",
        "via": "grandchild (delegate d9)",
    },
]
"""A child's side effects as a delegation held them (its own, and one it had delegated)."""


def test_run_state_from_before_the_typed_lists_reads_back_and_shows_the_same() -> None:
    """Run state carried over by continue-as-new holds these lists as plain JSON: it reads
    back into the typed lines, and `status` and the result show them as before."""
    state = new_state().model_dump(mode="json")
    state["refused_decisions"] = [
        *OLD_REFUSALS,
        # From before refusals named their signal: read as the approval or resolution it was.
        {k: v for k, v in OLD_REFUSALS[1].items() if k != "signal"},
        {k: v for k, v in OLD_REFUSALS[2].items() if k != "signal"},
    ]
    state["delegations"] = {
        "d1": {"child_workflow_id": "child-1", "limits": {}, "side_effects": OLD_SIDE_EFFECTS}
    }
    loaded = LoopState.model_validate_json(json.dumps(state))

    shown = loaded.model_dump(mode="json")["refused_decisions"]
    assert shown == [*OLD_REFUSALS, OLD_REFUSALS[1], OLD_REFUSALS[2]]
    assert [type(r) for r in loaded.refused_decisions] == [
        RefusedSignal,
        RefusedApproval,
        RefusedResolution,
        RefusedApproval,
        RefusedResolution,
    ]
    via = "child-1 (delegate d1)"
    assert [e.model_dump(mode="json") for e in side_effects(loaded)] == [
        {**effect, "via": via} for effect in OLD_SIDE_EFFECTS
    ]
    # This run's own writes carry no `via`, as before.
    assert "via" not in SideEffect(**{**OLD_SIDE_EFFECTS[0]}).model_dump(mode="json")


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_status_json_shows_who_approved_as_fields(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    live.provider.register(booking(run_id))
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Book p-carol into ws-101.",
        ["reserve_seat"],
        principal=Principal(subject="agent", scopes=["workshops:write"]),
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    assert view.calls[0].approval is None
    await signal_approval(
        handle, "call_r", pending.args_digest, "workshop-lead", reason="the seat is free"
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason

    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
    )
    status = await agentloop_cli("status", run_id, "--json", env=env, cwd=tmp_path)
    assert status.returncode == 0, status.explain()
    [call] = json.loads(status.stdout)["result"]["calls"]
    approval = call["approval"]
    assert (approval["approved"], approval["approver"], approval["reason"]) == (
        True,
        "workshop-lead",
        "the seat is free",
    )
    assert approval["signed"] is False and approval["at"]
    assert call["resolution"] is None
    assert "Decisions:\n  reserve_seat call_r: approved by workshop-lead at " in result.report
    shown = await agentloop_cli("status", run_id, env=env, cwd=tmp_path)
    assert "    approved by workshop-lead at " in shown.stdout, shown.explain()


# --- nothing reads a decision or a stop back out of its sentence ---------------------------

SENTENCE_MARKERS = ("approved by", "rejected by", "resolved:", "resolved by", "says applied")
"""What the sentences of decisions hold (`ApprovalRecord.said`, `ResolutionRecord.in_ledger`)."""
SENTENCE_FIELDS = {"decision", "stop_reason", "refused_because", "confirmed_by"}
"""Fields that hold a sentence for people; each has a typed field beside it to read instead."""
STRING_READERS = {
    "startswith",
    "endswith",
    "split",
    "rsplit",
    "partition",
    "rpartition",
    "removeprefix",
    "removesuffix",
    "index",
    "find",
    "rfind",
}
PATTERN_READERS = {"match", "search", "fullmatch", "findall", "finditer", "compile", "sub", "split"}


def sentence_parsing(source: str) -> list[str]:
    """Where `source` reads a decision's or a stop's sentence back: a string method or a
    pattern given a decision's words, a sentence field taken apart by a string method, or
    words looked for in a sentence field."""

    def marked(node: ast.AST) -> bool:
        return any(
            isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and any(m in n.value for m in SENTENCE_MARKERS)
            for n in ast.walk(node)
        )

    def sentence_field(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr in SENTENCE_FIELDS

    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            arguments = [*node.args, *(k.value for k in node.keywords)]
            if method in STRING_READERS and (
                sentence_field(owner) or any(marked(a) for a in arguments)
            ):
                found.append(f"{where}: .{method}() on a decision's sentence")
            if (
                isinstance(owner, ast.Name)
                and owner.id == "re"
                and method in PATTERN_READERS
                and any(marked(a) or sentence_field(a) for a in arguments)
            ):
                found.append(f"{where}: re.{method}() on a decision's sentence")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            contains = any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
            if any(marked(side) for side in sides) or (
                contains and any(sentence_field(side) for side in node.comparators)
            ):
                found.append(f"{where}: a decision's sentence compared or searched")
    return found


def test_the_sentence_checker_finds_each_way_of_parsing_it() -> None:
    """The check below can fail: each of these reads a sentence back."""
    parsing = [
        'record.decision.startswith("approved by")',
        'approver = record.decision.split("approved by ")[1]',
        'said = decision.partition("; resolved: ")[2]',
        'rejected = "rejected by" in text',
        'cause = result.stop_reason.split(":")[0]',
        'budget = "max_cost_usd" in result.stop_reason',
        're.search(r"approved by (\\w+)", record.decision)',
        'confirmed = effect.confirmed_by.removeprefix("operator (")',
    ]
    for line in parsing:
        assert sentence_parsing(line), line
    writing = [
        "record.decision = record.approval.said()",
        'record.decision += f"; {resolution.in_ledger()}"',
        'return f"{self.operator} says {self.outcome}"',
        "refused = r.decision in REFUSAL_DECISIONS",
    ]
    for line in writing:
        assert not sentence_parsing(line), line


def test_no_code_parses_a_decision_or_a_stop_sentence_back() -> None:
    """Who decided, how a write was resolved and why a run stopped are typed fields
    (`approval`, `resolution`, `stop_cause`, `OverCap.cap`): the sentences beside them are
    written for people and never read back."""
    package = Path(agentloop.__file__).parent
    found = [
        f"{path.relative_to(package.parent)} {problem}"
        for path in sorted(package.rglob("*.py"))
        for problem in sentence_parsing(path.read_text())
    ]
    assert found == []
