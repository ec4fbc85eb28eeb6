"""Nothing from outside wedges a run (issue #18): careless and hostile input, each reproduced
against a real dev server, is refused and recorded with its reason, or fails the run at once
naming the field. No history here may hold a failed or timed-out workflow task."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from agentloop.activities.verify import VerifierActivities
from agentloop.activity_io import UnreadableJSON, VerifyInput
from agentloop.adapters._shared import make_tool_call, make_tool_calls, text_safe
from agentloop.contract import (
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    PendingCall,
    Principal,
    RefusedDecision,
    RunStatusView,
)
from agentloop.demo.mcp_server import fanning_schema
from agentloop.events import ModelOutput
from agentloop.input_limits import MAX_NAME_CHARS
from agentloop.policies import checks
from agentloop.policies.bounds import MAX_INLINE_ANSWER_CHARS
from agentloop.runtime.config import Settings
from agentloop.runtime.converter import data_converter as agentloop_data_converter
from agentloop.runtime.dev_server import temporal_binary
from agentloop.scripted_provider import (
    Script,
    ScriptedError,
    ScriptedProvider,
    ScriptedToolCall,
    ScriptTurn,
)
from agentloop.scripted_provider.scripts import ScriptUsage
from agentloop.store import load_artifact_text, load_transcript, open_store
from agentloop.store.memory import MemoryStore
from agentloop.testing.turns import call as scripted_call
from agentloop.workflows.loop.delegation import child_run_id
from tests.cli.test_cli import process_env, run_process
from tests.live import Live, scripted
from tests.loop.test_large_output import history_sizes
from tests.support import (
    approve_as_shown,
    result_of,
    signal_approval,
    start_run,
    wait_for_phase,
    wait_for_status,
    wait_until,
    waited_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

ALL_SCOPES = ["workshops:read", "workshops:write", "tickets:read", "tickets:write"]
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
WEATHER = {"city": "Shanghai", "date": "2026-12-01"}
WEDGED = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
}


def call(call_id: str, name: str, **arguments: Any) -> ScriptedToolCall:
    return ScriptedToolCall(id=call_id, name=name, arguments=arguments)


def run_input(model: str, tools: list[str], **fields: Any) -> AgentRunInput:
    return AgentRunInput.model_validate(
        {
            "task": "Do the thing.",
            "provider": "openai-chat",
            "model": model,
            "tools": tools,
            "principal": Principal(subject="p-alice", scopes=ALL_SCOPES),
            **fields,
        }
    )


async def assert_never_wedged(handle: WorkflowHandle[Any, Any]) -> None:
    events = [e.event_type async for e in handle.fetch_history_events()]
    assert WEDGED.isdisjoint(events), [EventType.Name(e) for e in events if e in WEDGED]


async def paused_for_approval(
    client: Client, worker: Settings, provider: ScriptedProvider, run_id: str
) -> WorkflowHandle[Any, AgentRunResult]:
    provider.register(
        scripted(
            run_id,
            [call("c_res", "reserve_seat", **RESERVE)],
            "Booked.",
        )
    )
    handle = await start_run(client, worker, run_id, run_input(run_id, ["reserve_seat"]))
    await wait_for_phase(handle, "awaiting_approval")
    return handle


async def refusals(handle: WorkflowHandle[Any, Any], count: int) -> list[RefusedDecision]:
    view = await wait_for_status(
        handle, lambda v: len(v.refused_decisions) >= count, f"{count} refusals"
    )
    return view.refused_decisions


async def test_signals_without_a_payload_are_refused_and_recorded_and_a_bare_cancel_cancels(
    live: Live, run_id: str
) -> None:
    handle = await paused_for_approval(live.client, live.worker, live.provider, run_id)
    await handle.signal("approve")
    await handle.signal("approve", None)
    await handle.signal("resolve", None)
    await handle.signal("message")
    refused = await refusals(handle, 4)
    assert [(r.signal, r.refused_because) for r in refused] == [
        (
            "approve",
            "approve: a payload is required: {call_id, args_digest, approved, approver, ...}",
        ),
        (
            "approve",
            "approve: a payload is required: {call_id, args_digest, approved, approver, ...}",
        ),
        ("resolve", "resolve: a payload is required: {call_id, outcome, operator, ...}"),
        ("message", "message: a payload is required: {text, sender, ...}"),
    ]
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("decide_approval", None)
    assert "decide_approval: a payload is required" in str(rejected.value.cause)
    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "awaiting_approval" and len(view.refused_decisions) == 4

    # The operator's most natural command: no input at all. It cancels.
    target = live.client.service_client.config.target_host
    sent = await run_process(
        temporal_binary(),
        "workflow",
        "signal",
        "--address",
        target,
        "-w",
        run_id,
        "--name",
        "cancel",
        env=process_env(),
    )
    assert sent.returncode == 0, sent.explain()
    result = await result_of(handle)
    assert result.status == "cancelled", result.stop_reason
    await assert_never_wedged(handle)


MALFORMED: list[tuple[str, Any, str]] = [
    ("approve", {"call_id": "c_res"}, "args_digest: Field required"),
    (
        "approve",
        {"call_id": "c_res", "args_digest": "x", "approved": "maybe", "approver": "a"},
        "approved: Input should be a valid boolean",
    ),
    (
        "approve",
        {"call_id": "c_res", "args_digest": "x", "approved": True, "approver": "a", "sneaky": 1},
        "sneaky: Extra inputs are not permitted",
    ),
    ("approve", "yes please", "approve: input: Input should be a valid dictionary"),
    (
        "resolve",
        {"call_id": "c_res", "outcome": "maybe", "operator": "ops"},
        "outcome: Input should be 'applied' or 'not_applied'",
    ),
    ("message", {"text": "", "sender": "dana"}, "text: String should have at least 1 character"),
    ("message", {"text": "x" * 100_001, "sender": "dana"}, "text: String should have at most"),
    ("nudge", {"any": "thing"}, "no signal 'nudge'"),
]


async def test_malformed_signals_and_updates_are_refused_naming_the_field(
    live: Live, run_id: str
) -> None:
    handle = await paused_for_approval(live.client, live.worker, live.provider, run_id)
    for name, payload, _ in MALFORMED:
        await handle.signal(name, payload)
    refused = await refusals(handle, len(MALFORMED))
    for record, (name, _, reason) in zip(refused, MALFORMED, strict=True):
        assert record.signal == name and reason in record.refused_because, record
    # Deeply nested JSON and a payload over the limit: refused unparsed.
    await handle.signal("approve", json.loads("[" * 30 + "]" * 30))
    await handle.signal("message", {"text": "y" * 300_000, "sender": "dana"})
    deep, big = (await refusals(handle, len(MALFORMED) + 2))[-2:]
    assert "approve: input: Input should be a valid dictionary" in deep.refused_because
    assert "over the limit of 256000" in big.refused_because

    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await handle.execute_update("decide_approval", {"call_id": "c_res", "approved": True})
    assert "args_digest: Field required" in str(rejected.value.cause)
    # The real decision still counts, and the run completes.
    view = await handle.query("status", result_type=RunStatusView)
    [pending] = view.pending_approvals
    decision = ApprovalDecision(
        call_id="c_res", args_digest=pending.args_digest, approved=True, approver="workshop-lead"
    )
    verdict = await handle.execute_update("decide_approval", decision)
    assert verdict["accepted"] is True
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    await assert_never_wedged(handle)


async def test_an_update_too_large_to_answer_is_rejected_and_the_run_goes_on(
    live: Live, run_id: str
) -> None:
    """Issue #33: a 3 MB `decide_approval` (under gRPC's 4 MiB, so the server admits it) failed
    every workflow task with PayloadsTooLarge, for good: any answer to an update carries its
    request back. The worker leaves it unanswered; Temporal rejects it, echoing nothing."""
    handle = await paused_for_approval(live.client, live.worker, live.provider, run_id)
    huge = {"call_id": "c_res", "args_digest": "x" * 3_000_000, "approved": True, "approver": "m"}
    with pytest.raises(WorkflowUpdateFailedError) as rejected:
        await waited_for(
            handle.execute_update("decide_approval", huge), "the oversized update's answer"
        )
    cause = rejected.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "UnprocessedUpdate", cause
    assert len(str(cause)) < 300 and "xxx" not in str(cause)
    # Just under the bound, an update is still answered, naming the limit.
    with pytest.raises(WorkflowUpdateFailedError) as named:
        await handle.execute_update("decide_approval", {**huge, "args_digest": "x" * 300_000})
    assert "over the limit of 256000" in str(named.value.cause)

    view = await handle.query("status", result_type=RunStatusView)
    [pending] = view.pending_approvals
    decision = ApprovalDecision(
        call_id="c_res", args_digest=pending.args_digest, approved=True, approver="workshop-lead"
    )
    assert (await handle.execute_update("decide_approval", decision))["accepted"] is True
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    await assert_never_wedged(handle)


async def test_a_recipient_that_would_backtrack_is_refused_at_once(live: Live, run_id: str) -> None:
    recipient = "x@" + "a." * 30_000 + "@"
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[
                    call(
                        "c_reply",
                        "send_reply",
                        ticket_id="T-1001",
                        recipient=recipient,
                        body="Hi",
                    )
                ],
                fragment_chars=4096,
            ),
            "Could not send.",
        )
    )
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, ["send_reply"]))
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    [reply] = result.calls
    assert (reply.decision, reply.status) == ("invalid_arguments", "rejected")
    assert "recipient" in reply.result_summary
    assert live.service.records()["replies"] == 0
    await assert_never_wedged(handle)


async def test_an_answer_nested_fifty_thousand_deep_is_refused_not_parsed(
    live: Live, run_id: str
) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    live.provider.register(
        scripted(run_id, ScriptTurn(text=deep), ScriptTurn(text=deep), ScriptTurn(text=deep))
    )
    handle = await start_run(
        live.client, live.worker, run_id, run_input(run_id, [], output_schema={"type": "array"})
    )
    result = await result_of(handle)
    assert result.status == "failed"
    assert "over the limit" in result.stop_reason or "nested deeper" in result.stop_reason
    assert result.usage.model_calls == 3  # two corrections, then the stop
    await assert_never_wedged(handle)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"approval_timeout_seconds": 1e12}, "approval_timeout_seconds"),
        ({"input_timeout_seconds": 1e300}, "input_timeout_seconds"),
        ({"output_schema": {"type": "bogus"}}, "output_schema: not a valid JSON Schema"),
        ({"output_schema": {"type": "string", "minLength": "three"}}, "output_schema"),
        ({"output_schema": {"$ref": "#/missing"}}, "output_schema: $ref '#/missing'"),
        ({"output_schema": {"type": "string", "pattern": "(?<=a)b"}}, "output_schema: a pattern"),
        # Checked by the worker (`describe_run`): the count is work that depends on the schema.
        ({"output_schema": fanning_schema(40)}, "output_schema: checking a value against it"),
        ({"limits": {"per_tool": {"reserve_seat": -1}}}, "limits.per_tool.reserve_seat"),
        ({"task": "t" * 2_090_000}, "task: String should have at most 200000"),
        ({"limits": {"max_tool_calls": 1_000_000}}, "limits.max_tool_calls: 1000000 is over"),
        ({"limits": {"max_model_calls": 5_000}}, "limits.max_model_calls: 5000 is over"),
    ],
)
async def test_inputs_that_would_wedge_later_fail_the_run_at_start_naming_the_field(
    live: Live, run_id: str, fields: dict[str, Any], named: str
) -> None:
    raw = {"task": "x", "provider": "openai-chat", "model": "m", **fields}
    handle = await start_run(live.client, live.worker, run_id, raw)
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert named in cause.message, cause.message
    await assert_never_wedged(handle)


async def test_a_run_started_without_any_input_fails_at_once(live: Live, run_id: str) -> None:
    handle = await live.client.start_workflow(
        WORKFLOW_NAME, id=run_id, task_queue=live.worker.task_queue
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert (
        isinstance(cause, ApplicationError) and "started without an AgentRunInput" in cause.message
    )
    await assert_never_wedged(handle)


def raw_json(data: bytes) -> RawValue:
    """JSON bytes exactly as a client of any SDK could send them."""
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (
            b'{"task": "x", "model_settings": {"extra": ' + b"[" * 300 + b"]" * 300 + b"}}",
            "recursion limit exceeded",
        ),
        (
            b'{"task": "x", "provider": "openai-chat", "model": "m", "n": ' + b"9" * 5000 + b"}",
            "number out of range",
        ),
    ],
)
async def test_input_no_json_parser_reads_fails_the_run_at_once_saying_why(
    live: Live, run_id: str, data: bytes, named: str
) -> None:
    """Before, the data converter refused such input while decoding the run's arguments:
    every workflow task failed ("Failed decoding arguments") and the run never moved."""
    handle = await live.client.start_workflow(
        WORKFLOW_NAME, raw_json(data), id=run_id, task_queue=live.worker.task_queue
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "input: not JSON agentloop can read" in cause.message and named in cause.message
    await assert_never_wedged(handle)


@pytest.mark.parametrize(
    "second",
    [
        raw_json(b'"not a state"'),
        raw_json(b'{"run_input": {"task": "x", "provider": "openai-chat", "model": "m"}}'),
    ],
)
async def test_a_second_start_argument_is_refused_never_taken_as_carried_state(
    live: Live, run_id: str, second: RawValue
) -> None:
    """Only continue-as-new hands a run its state: from a client, a second argument would
    skip every check made at start (input, limits, the worker's own tool specs)."""
    first = run_input(run_id, []).model_dump(mode="json")
    handle = await live.client.start_workflow(
        WORKFLOW_NAME, args=[first, second], id=run_id, task_queue=live.worker.task_queue
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "only continue-as-new hands a run its state" in cause.message
    await assert_never_wedged(handle)


async def test_a_failed_precondition_in_a_batch_of_writes_leaves_the_batch(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            [
                call("c_full", "reserve_seat", workshop_id="ws-102", participant_id="p-carol"),
                call("c_ok", "reserve_seat", **RESERVE),
            ],
            "Booked one.",
        )
    )
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, ["reserve_seat"]))
    view = await wait_for_phase(handle, "awaiting_approval")
    assert [p.call_id for p in view.pending_approvals] == ["c_ok"]  # the refused one is out
    [pending] = view.pending_approvals
    await signal_approval(handle, "c_ok", pending.args_digest, "workshop-lead")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    calls = {c.call_id: c for c in result.calls}
    assert (calls["c_full"].decision, calls["c_full"].attempts) == ("precondition_failed", 0)
    assert (calls["c_ok"].status, calls["c_ok"].attempts) == ("succeeded", 1)
    assert live.service.records()["reservations"] == 1
    await assert_never_wedged(handle)


async def test_a_reused_workflow_id_never_shares_a_write_key_with_the_earlier_run(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            [
                call(
                    "c_reply",
                    "send_reply",
                    ticket_id="T-1001",
                    recipient="dana@example.com",
                    body="Your refund is on its way.",
                )
            ],
            "Replied.",
        )
    )
    results: list[AgentRunResult] = []
    for _ in range(2):  # the same workflow id, once the first run has closed
        handle = await start_run(
            live.client, live.worker, run_id, run_input(run_id, ["send_reply"])
        )
        view = await wait_for_phase(handle, "awaiting_approval")
        await signal_approval(
            handle, "c_reply", view.pending_approvals[0].args_digest, "support-lead"
        )
        results.append(await result_of(handle))
    first, second = (r.calls[0] for r in results)
    assert first.status == second.status == "succeeded"
    assert first.idempotency_key != second.idempotency_key
    assert live.service.records()["replies"] == 2  # each run's reply was really sent


async def test_a_provider_error_echoing_the_api_key_is_masked_in_the_stop_and_history(
    live: Live, run_id: str
) -> None:
    key = live.worker.openai_api_key
    assert key
    echo = f"Incorrect API key provided: {key}. Find your key at the dashboard."
    live.provider.register(
        scripted(run_id, ScriptTurn(text="x", errors=[ScriptedError(status=401, message=echo)]))
    )
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, []))
    result = await result_of(handle)

    assert result.status == "failed"
    assert "Incorrect API key provided: ***" in result.stop_reason, result.stop_reason
    assert key not in result.stop_reason and key not in result.report
    history = (await handle.fetch_history()).to_json()
    assert f"provided: {key}" not in history
    await assert_never_wedged(handle)


async def test_temporals_own_cancel_stops_the_run_with_its_result_and_report(
    live: Live, run_id: str
) -> None:
    handle = await paused_for_approval(live.client, live.worker, live.provider, run_id)
    await handle.cancel()  # what the UI's Cancel button and `temporal workflow cancel` send
    result = await result_of(handle)
    assert result.status == "cancelled"
    assert result.stop_reason == "cancelled: cancel requested through Temporal"
    assert result.pending == [
        PendingCall(call_id="c_res", tool="reserve_seat", status="awaiting_approval")
    ]
    assert "cancelled" in result.report
    assert (await handle.describe()).status.name == "COMPLETED"
    await assert_never_wedged(handle)


async def test_temporals_cancel_lets_a_write_in_flight_finish(live: Live, run_id: str) -> None:
    handle = await paused_for_approval(live.client, live.worker, live.provider, run_id)
    live.service.set_delay("workshops.reserve", 1_500)
    view = await handle.query("status", result_type=RunStatusView)
    decision = ApprovalDecision(
        call_id="c_res",
        args_digest=view.pending_approvals[0].args_digest,
        approved=True,
        approver="workshop-lead",
    )
    await handle.signal("approve", decision)
    await wait_for_status(handle, lambda v: v.phase == "executing_tools", "the write to start")
    await handle.cancel()
    result = await result_of(handle)

    assert result.status == "cancelled", result.stop_reason
    [write] = result.calls
    assert (write.status, write.attempts) == ("succeeded", 1)  # finished, not cut short
    [effect] = result.side_effects
    assert (effect.call_id, effect.status) == ("c_res", "succeeded")
    assert live.service.records()["reservations"] == 1
    await assert_never_wedged(handle)


REPLY = {"ticket_id": "T-1001", "recipient": "dana@example.com", "body": "Refund issued."}


def reply_script(name: str) -> Script:
    """Turn 1 (the first run) sends the reply; turn 2 (the run continuing it) proposes the
    same reply under a new call id; turn 3 ends."""
    return scripted(
        name,
        [call("c_first", "send_reply", **REPLY)],
        [call("c_again", "send_reply", **REPLY)],
        "Sent.",
    )


async def approve_the_pending(handle: WorkflowHandle[Any, AgentRunResult]) -> None:
    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    await approve_as_shown(handle, pending, "support-lead")


async def test_continuing_an_unresolved_run_holds_the_same_write_instead_of_sending_it_again(
    live: Live, run_id: str
) -> None:
    live.provider.register(reply_script(run_id))
    live.service.inject_fault("support.reply", "commit_then_drop")
    live.service.inject_fault("support.operation", "unavailable", count=50)
    first = await start_run(
        live.client,
        live.worker,
        run_id,
        run_input(run_id, ["send_reply"], reconciliation_timeout_seconds=1),
    )
    await approve_the_pending(first)
    stopped = await result_of(first)
    assert stopped.status == "unresolved", stopped.stop_reason
    [unknown] = stopped.unresolved_writes
    assert (unknown.call_id, unknown.tool) == ("c_first", "send_reply")
    assert live.service.records()["replies"] == 1  # it did go out, once

    # The continuation's model proposes the same reply under a new call id.
    live.service.clear_faults()
    handle = await start_run(
        live.client,
        live.worker,
        f"{run_id}-again",
        run_input(run_id, ["send_reply"], continue_from=run_id),
    )
    view = await wait_for_phase(handle, "awaiting_reconciliation")
    [held] = view.unresolved
    assert held.call_id == "c_again" and held.idempotency_key == unknown.idempotency_key
    assert "unknown outcome" in held.known
    assert live.service.records()["replies"] == 1  # held, not sent
    await handle.signal("resolve", {"call_id": "c_again", "outcome": "applied", "operator": "ops"})
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert {c.call_id: c.status for c in result.calls} == {"c_again": "confirmed_after_query"}
    assert result.unresolved_writes == []  # settled by the operator's word
    assert live.service.records()["replies"] == 1
    await assert_never_wedged(handle)


async def test_a_run_of_another_tenant_or_subject_is_not_continued(live: Live, run_id: str) -> None:
    live.provider.register(scripted(run_id, "Secret plans.", "Go on."))
    first = await start_run(live.client, live.worker, run_id, run_input(run_id, []))
    assert (await result_of(first)).status == "completed"

    cases = [
        (Principal(subject="p-alice", tenant="globex"), False, "belongs to tenant 'default'"),
        (Principal(subject="p-mallory"), False, "ran for 'p-alice', not 'p-mallory'"),
    ]
    for index, (principal, other_subject, refused) in enumerate(cases):
        handle = await start_run(
            live.client,
            live.worker,
            f"{run_id}-{index}",
            run_input(
                run_id,
                [],
                principal=principal,
                continue_from=run_id,
                continue_as_other_subject=other_subject,
            ),
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await result_of(handle)
        cause = failed.value.cause
        assert isinstance(cause, ApplicationError) and refused in cause.message, cause.message
    # Within the tenant, another subject may continue it when the input says so.
    allowed = await start_run(
        live.client,
        live.worker,
        f"{run_id}-ok",
        run_input(
            run_id,
            [],
            principal=Principal(subject="p-bob"),
            continue_from=run_id,
            continue_as_other_subject=True,
        ),
    )
    assert (await result_of(allowed)).status == "completed"


async def test_a_continued_run_reads_the_artifacts_its_inherited_transcript_refers_to(
    live: Live, run_id: str
) -> None:
    from agentloop.contract import Limits
    from agentloop.store import artifact_key
    from tests.loop.test_large_output import WEATHER_ARGS, weather_body

    live.service.set_padding("weather", 20_000)
    try:
        full = await weather_body(live.service)
        ref = artifact_key(full.encode("utf-8"))
        page = {"ref": ref, "offset": 0, "limit": 100}
        live.provider.register(
            scripted(
                run_id,
                [call("c_big", "get_weather", **WEATHER_ARGS)],
                [call("c_page", "read_artifact", **page)],
                "Read it.",
            )
        )
        first = await start_run(
            live.client,
            live.worker,
            run_id,
            run_input(run_id, ["get_weather"], limits=Limits(max_model_calls=1)),
        )
        stopped = await result_of(first)
        assert stopped.status == "limit_reached" and stopped.artifacts == [ref]

        handle = await start_run(
            live.client,
            live.worker,
            f"{run_id}-2",
            run_input(run_id, ["get_weather"], continue_from=run_id),
        )
        result = await result_of(handle)
    finally:
        live.service.set_padding(None, 0)
    assert result.status == "completed", result.stop_reason
    [paged] = result.calls
    assert (paged.call_id, paged.decision, paged.status) == ("c_page", "allowed", "succeeded")
    # The page came back: the artifact of the run it continues, read whole from the store.
    assert f'"ref": "{ref}"' in paged.result_summary
    assert f'"total_chars": {len(full)}' in paged.result_summary


async def test_a_message_sent_while_the_model_answers_reaches_the_next_model_call(
    live: Live, run_id: str
) -> None:
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(tool_calls=[call("c_w", "get_weather", **WEATHER)], delay_ms=1_500),
            "Noted.",
        )
    )
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, ["get_weather"]))
    await wait_until(lambda: len(live.provider.requests) == 1, "the first model call")
    await handle.signal("message", {"text": "Also: I travel on Friday.", "sender": "p-alice"})
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    first, second = (r["body"]["messages"] for r in live.provider.requests)
    said = [m for m in second if m["role"] == "user" and "Friday" in str(m["content"])]
    assert len(said) == 1 and not any("Friday" in str(m.get("content")) for m in first)
    # The message follows the tool result it arrived after, not before the call it raced.
    assert second.index(said[0]) > next(i for i, m in enumerate(second) if m["role"] == "tool")
    await assert_never_wedged(handle)


LONG_ANSWER = "".join(f"line {i:06d} of a very long report\n" for i in range(10_000))
"""About 320,000 characters: over what travels inline (`MAX_INLINE_ANSWER_CHARS`)."""


@pytest.mark.parametrize("provider", ["openai-chat", "openai-responses", "anthropic"])
async def test_a_very_long_answer_travels_by_reference_and_the_result_names_it(
    live: Live, run_id: str, provider: str
) -> None:
    # Counted within Anthropic's default output limit (4,096 tokens), which a longer answer
    # would be cut at, as the scripted provider cuts it.
    usage = ScriptUsage(prompt_tokens=50, completion_tokens=4_000)
    live.provider.register(scripted(run_id, ScriptTurn(text=LONG_ANSWER, usage=usage)))
    handle = await start_run(
        live.client, live.worker, run_id, run_input(run_id, [], provider=provider)
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert result.output == LONG_ANSWER[:MAX_INLINE_ANSWER_CHARS]
    assert result.output_ref and f"{len(LONG_ANSWER)} characters" in result.stop_reason
    store = open_store(live.worker.store_url)
    try:
        whole, _ = await load_artifact_text(store, result.output_ref)
        [answer] = [e for e in await load_transcript(store, result.transcript_head)
                    if isinstance(e, ModelOutput)]  # fmt: skip
    finally:
        await store.close()
    assert whole == LONG_ANSWER and answer.text == LONG_ANSWER  # the transcript has it whole
    # What rode in history: the answer's start once in the model call's result (no raw
    # provider items repeating it) and once in the run's result; never the whole of it.
    history = await handle.fetch_history()
    _, largest = history_sizes(history)
    assert largest < 2.5 * MAX_INLINE_ANSWER_CHARS, largest
    await assert_never_wedged(handle)


async def test_a_very_long_answer_cannot_be_checked_against_output_schema_and_is_refused(
    live: Live, run_id: str
) -> None:
    live.provider.register(scripted(run_id, ScriptTurn(text=LONG_ANSWER), '{"ok": 1}'))
    schema = {"type": "object", "required": ["ok"]}
    handle = await start_run(
        live.client, live.worker, run_id, run_input(run_id, [], output_schema=schema)
    )
    result = await result_of(handle)
    assert (result.status, result.output, result.output_ref) == ("completed", {"ok": 1}, None)
    second = live.provider.requests[1]["body"]["messages"]
    told = [m["content"] for m in second if "can be checked against output_schema" in str(m)]
    assert told and f"{len(LONG_ANSWER)} characters" in str(told[0])


async def test_tool_calls_whose_arguments_pass_the_output_bound_do_not_run(
    live: Live, run_id: str
) -> None:
    body = "x" * 200_000  # each call is under the per-call bound; three are over the total
    calls = [
        call(f"c_{n}", "send_reply", ticket_id="T-1001", recipient="dana@example.com", body=body)
        for n in range(3)
    ]
    # Streamed in 4 KB fragments, not the scripted default of 5 characters: 120,000 events
    # took 10 s and tested nothing more.
    turn = ScriptTurn(tool_calls=calls, fragment_chars=4096)
    live.provider.register(scripted(run_id, turn))
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, ["send_reply"]))
    result = await result_of(handle)
    assert result.status == "incomplete"
    assert "call c_2: the output's tool calls pass 512000 bytes" in result.stop_reason
    assert live.service.records()["replies"] == 0 and result.calls == []
    await assert_never_wedged(handle)


async def test_a_verifier_judges_the_whole_of_an_answer_that_came_by_reference() -> None:
    store = MemoryStore()
    ref = await store.put_artifact(LONG_ANSWER.encode(), "text/plain")
    verifiers = VerifierActivities(toolbox=None, store=store)  # type: ignore[arg-type]
    start = VerifyInput(check="c", workflow_id="w", answer=LONG_ANSWER[:10], answer_ref=ref)
    assert await verifiers._whole_answer(start) == LONG_ANSWER
    inline = VerifyInput(check="c", workflow_id="w", answer="short")
    assert await verifiers._whole_answer(inline) == "short"
    missing = VerifyInput(check="c", workflow_id="w", answer="x", answer_ref="sha256:00")
    with pytest.raises(ApplicationError, match="missing"):
        await verifiers._whole_answer(missing)


LONE = "\ud800"
"""A lone surrogate: what a JSON `\\ud800` escape parses to. No payload can encode it."""


def escaped(value: Any) -> RawValue:
    """`value` as JSON with `\\u` escapes, as any other client could send it."""
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode()))


def test_lone_surrogates_from_the_model_are_refused_or_replaced_never_raised() -> None:
    call, problem = make_tool_call("c1", "get_weather", '{"city": "\\ud800"}')
    assert call.arguments == {} and "lone surrogate" in problem
    call, problem = make_tool_call(f"c{LONE}", "get_weather", "{}")
    assert call.call_id == "c?" and "lone surrogate" in problem
    paired = make_tool_call("c2", "get_weather", '{"city": "\\ud83d\\ude00"}')
    assert paired == (paired[0], "") and paired[0].arguments == {"city": "\U0001f600"}
    output = text_safe(ModelOutput(text=f"a{LONE}b"))
    assert output.text == "a?b"
    output.model_dump_json()  # now it can be recorded


async def test_lone_surrogates_from_outside_never_reach_a_payload(live: Live, run_id: str) -> None:
    live.provider.register(scripted(run_id, f"Sunny{LONE}.", "ok"))
    handle = await paused_for_approval(live.client, live.worker, live.provider, f"{run_id}-a")
    await handle.signal("message", escaped({"text": f"hi{LONE}", "sender": "p-alice"}))
    [refused] = await refusals(handle, 1)
    assert refused.signal == "message" and "lone surrogate" in refused.refused_because
    await handle.signal("cancel")
    await result_of(handle)
    await assert_never_wedged(handle)

    bad_input = run_input(run_id, []).model_dump(mode="json") | {"task": f"go{LONE}"}
    started = await live.client.start_workflow(
        WORKFLOW_NAME, escaped(bad_input), id=f"{run_id}-b", task_queue=live.worker.task_queue
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(started)
    assert "lone surrogate" in str(failed.value.cause)
    await assert_never_wedged(started)

    answered = await start_run(live.client, live.worker, run_id, run_input(run_id, []))
    result = await result_of(answered)
    assert (result.status, result.output) == ("completed", "Sunny?.")
    await assert_never_wedged(answered)


def test_the_converter_reads_lone_surrogates_and_refuses_what_is_not_json() -> None:
    convert = agentloop_data_converter.payload_converter

    def payload(data: bytes) -> Payload:
        return Payload(metadata={"encoding": b"json/plain"}, data=data)

    [value] = convert.from_payloads([payload(b'{"task": "go\\ud800"}')], [dict])
    assert value == {"task": f"go{LONE}"}
    for broken in (b'{"task": "go\\ud800"', b"[" * 50_000 + b'"\\ud800"' + b"]" * 50_000):
        with pytest.raises(ValidationError):
            convert.from_payloads([payload(broken)], [dict])
        # Asked for no type (a run's start input, an activity tool's result), it is a value
        # the workflow code refuses, naming why, instead of an error failing its task.
        [unread] = convert.from_payloads([payload(broken)], None)
        assert isinstance(unread, UnreadableJSON) and unread.reason.startswith("Invalid JSON")
    [value] = convert.from_payloads([payload(b"[]")], None)
    assert value == []


LONG_NAME = "n" * 150_000


def test_a_call_id_or_tool_name_past_the_limit_is_cut_and_the_call_never_runs() -> None:
    call, problem = make_tool_call("c1", LONG_NAME, "{}")
    assert len(call.name) <= MAX_NAME_CHARS and "over 200 characters" in problem
    call, problem = make_tool_call("c" * 5_000, "get_weather", "{}")
    assert len(call.call_id) <= MAX_NAME_CHARS and problem
    # However many broken calls one output holds, its stop detail names 20 and counts the rest.
    calls, problems = make_tool_calls([(f"c{n}", LONG_NAME, "{}") for n in range(30)])
    assert len(calls) == 30 and all(len(c.name) <= MAX_NAME_CHARS for c in calls)
    assert len(problems) == 21 and problems[-1] == "and 10 more calls that cannot run"
    # Ids and names count towards the output's bytes: they bound how many calls it holds.
    arguments = json.dumps({"city": "x" * 4_935})  # 100 of them: 495,000 bytes
    many = [(f"c{n:03}", "n" * 200, arguments) for n in range(100)]
    _, problems = make_tool_calls(many)
    assert problems and "pass 512000 bytes in all" in problems[0]


def test_a_child_run_id_stays_within_temporals_limit_and_one_per_call() -> None:
    assert child_run_id("parent", "c1") == "parent/delegate/c1"
    long_parent = "p" * 990
    first, second = child_run_id(long_parent, "c1"), child_run_id(long_parent, "c2")
    assert first != second
    assert all(len(i.encode()) <= 1_000 and "/delegate/" in i for i in (first, second))


async def test_calls_with_enormous_tool_names_end_the_run_incomplete_with_a_small_result(
    live: Live, run_id: str
) -> None:
    """Nine calls each naming a 150,000-character tool: before, every name was copied into
    the records, refusals and `unsent` of a result over Temporal's 2 MB limit, which the run
    could not write."""
    calls = [scripted_call(LONG_NAME, f"c{n}") for n in range(9)]
    live.provider.register(
        scripted(run_id, ScriptTurn(tool_calls=calls, undeclared_tools=[LONG_NAME]))
    )
    handle = await start_run(live.client, live.worker, run_id, run_input(run_id, ["get_weather"]))
    result = await result_of(handle)
    assert result.status == "incomplete", result.stop_reason
    assert "over 200 characters" in result.stop_reason
    assert len(result.model_dump_json()) < 100_000
    assert result.calls == [] and result.side_effects == []
    await assert_never_wedged(handle)


def test_an_output_of_more_than_128_calls_does_not_run() -> None:
    calls, problems = make_tool_calls([(f"c{n}", "get_weather", "{}") for n in range(130)])
    assert len(calls) == 130
    assert problems == [
        "call c128: the output proposes more than 128 calls",
        "call c129: the output proposes more than 128 calls",
    ]
    assert make_tool_calls([(f"c{n}", "get_weather", "{}") for n in range(128)])[1] == []


def test_a_principal_too_large_to_travel_with_each_call_is_named() -> None:
    small = Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"])
    assert checks.principal_problem(small) is None
    large = Principal(subject="p-alice", scopes=[f"scope-{n:03}" + "x" * 100 for n in range(60)])
    problem = checks.principal_problem(large)
    assert problem is not None and "over the 4000 it may take" in problem


async def test_a_principal_too_large_to_travel_with_each_call_fails_the_run_at_start(
    live: Live, run_id: str
) -> None:
    """Before, 100 parallel reads under a 52 KB principal made a workflow task completion
    over Temporal's 4 MiB: Temporal terminated the run (GrpcMessageTooLarge), with no stop
    reason and no result."""
    scopes = [f"s{n:03}" + "x" * 190 for n in range(256)]
    principal = Principal(subject="p-alice", scopes=scopes).model_dump(mode="json")
    raw = {"task": "x", "provider": "openai-chat", "model": "m", "principal": principal}
    handle = await start_run(live.client, live.worker, run_id, raw)
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput"
    assert "principal:" in cause.message and "travels with every tool call" in cause.message
    await assert_never_wedged(handle)
