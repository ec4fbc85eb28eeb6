"""Generated payloads at every signal and at the update of a run paused for approval (issue
#33): wrong types, missing fields, huge strings, deep nesting, and sizes around Temporal's
2 MiB payload limit and gRPC's 4 MiB message limit. Each is refused and recorded, rejected
with a short reason, or refused by the server before it reaches the run. No workflow task
fails (but for Temporal's documented `UnhandledCommand`: a signal arriving while the run
continues as new), and a valid approval afterwards completes the run.

`tests/loop/test_properties.py` throws small generated JSON; this throws its shapes and the sizes
and depths beside them: a short slice in CI, thousands under `make fuzz`."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError

from agentloop.contract import AgentRunResult, ApprovalDecision
from agentloop.policies.bounds import MAX_SIGNAL_BYTES
from agentloop.workflows.inbound import InboundRefused, parse
from tests.fuzzing import cases
from tests.live import Live
from tests.loop.test_hardening import paused_for_approval, raw_json
from tests.loop.test_properties import deep, examples, payloads
from tests.support import result_of, wait_for_status, waited_for

pytestmark = [pytest.mark.integration, pytest.mark.fuzz, pytest.mark.usefixtures("clean_fakes")]

TARGETS = ("approve", "resolve", "message", "cancel", "decide_approval")
MIB = 1024 * 1024
SIZES = (MAX_SIGNAL_BYTES + 1, 2 * MIB - 64_000, 2 * MIB + 1_000, 4 * MIB + 1_000, 3 * MIB)
"""Sizes of a string in a payload: just over agentloop's bound, just under and over Temporal's
payload limit, over gRPC's message limit, and between the two (issue #33's 3 MB update)."""
SHAPES: dict[str, dict[str, Any]] = {
    "approve": {"call_id": "c_res", "args_digest": "sha256:x", "approved": True, "approver": "m"},
    "resolve": {"call_id": "c_res", "outcome": "applied", "operator": "m"},
    "message": {"text": "hi", "sender": "m"},
    "cancel": {"reason": "r"},
}
SHAPES["decide_approval"] = SHAPES["approve"]
TEXT_FIELD = {"approve": "reason", "resolve": "note", "message": "text", "cancel": "reason"}
TEXT_FIELD["decide_approval"] = TEXT_FIELD["approve"]
WRONG_VALUES: tuple[Any, ...] = (None, 1, -1.5, True, [], {}, "", "y" * 5_000, [[["z"]]])
WORKFLOW_TASK_FAILED = EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
UNHANDLED_COMMAND = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND


def generated(count: int) -> list[tuple[str, bytes]]:
    """`count` (target, JSON bytes) cases, the same every time, cycling through the targets
    and four kinds: any JSON shape, deep nesting, a huge string, one field of a wrong type.
    A `cancel` that would be taken is left out: it would end the run."""
    rng = random.Random(33)
    made: list[tuple[str, bytes]] = []
    for index, shape in enumerate(examples(payloads, count)):
        name = TARGETS[index % len(TARGETS)]
        kind = (index // len(TARGETS)) % 4
        if kind == 0:
            data = json.dumps(shape).encode()
        elif kind == 1:
            data = deep(rng.choice([33, 300, 50_000])).encode()
        elif kind == 2:
            size = SIZES[(index + index // (4 * len(TARGETS))) % len(SIZES)]
            data = json.dumps({**SHAPES[name], TEXT_FIELD[name]: "x" * size}).encode()
        else:
            field = rng.choice(sorted(SHAPES[name]))
            data = json.dumps({**SHAPES[name], field: rng.choice(WRONG_VALUES)}).encode()
        if name == "cancel" and taken("cancel", data):
            continue
        made.append((name, data))
    return made


def taken(name: str, data: bytes) -> bool:
    try:
        parse(name, [raw_json(data)])
    except InboundRefused:
        return False
    return True


async def send(handle: WorkflowHandle[Any, Any], name: str, data: bytes) -> str:
    """What became of one case: answered or rejected (the update), sent (a signal: the run
    records what it refused), or refused by the server (past its limits)."""
    payload = raw_json(data)
    try:
        if name == "decide_approval":
            await waited_for(handle.execute_update(name, payload), f"update {name} to be answered")
            return "answered"
        await waited_for(handle.signal(name, payload), f"signal {name} to be taken")
        return "sent"
    except WorkflowUpdateFailedError as rejected:
        reason = str(rejected.cause)
        assert len(reason) < 1_000 and "xxxxxxxxxx" not in reason, reason[:300]
        return "rejected"
    except RPCError as refused:
        # The server's (or gRPC's) own limit, before anything reaches the run.
        assert len(data) > 2 * MIB, (name, len(data), refused)
        return "refused by the server"


async def failed_tasks(
    client: Client,
    workflow_id: str,
    run_id: str,
    tolerated: frozenset[WorkflowTaskFailedCause.ValueType] = frozenset({UNHANDLED_COMMAND}),
) -> list[str]:
    """The failed workflow tasks of the run and every run it continued as new into, each as
    `CAUSE: message`, but for those of a `tolerated` cause (Temporal's documented
    `UnhandledCommand`)."""
    failed: list[str] = []
    following: str | None = run_id
    while following:
        handle = client.get_workflow_handle(workflow_id, run_id=following)
        following = None
        async for event in handle.fetch_history_events():
            if event.event_type == CONTINUED:
                attributes = event.workflow_execution_continued_as_new_event_attributes
                following = attributes.new_execution_run_id
            if event.event_type == WORKFLOW_TASK_FAILED:
                attributes = event.workflow_task_failed_event_attributes
                if attributes.cause not in tolerated:
                    cause = WorkflowTaskFailedCause.Name(attributes.cause)
                    failed.append(f"{cause}: {attributes.failure.message[:200]}")
    return failed


async def test_generated_payloads_at_every_signal_and_the_update_never_wedge_a_run(
    live: Live, run_id: str
) -> None:
    handle = await paused_for_approval(live.client, live.worker, live.provider, run_id)
    thrown = generated(cases(short=20, long=2_000))
    outcomes = [(name, await send(handle, name, data)) for name, data in thrown]
    assert {name for name, _ in outcomes} == set(TARGETS)
    assert ("decide_approval", "rejected") in outcomes

    # The run still waits, answers `status`, and what it recorded is small.
    latest: WorkflowHandle[Any, AgentRunResult] = live.client.get_workflow_handle(
        run_id, result_type=AgentRunResult
    )
    view = await wait_for_status(latest, lambda v: bool(v.refused_decisions), "refusals")
    assert view.phase == "awaiting_approval"
    assert all(len(r.model_dump_json()) < 6_000 for r in view.refused_decisions)
    [pending] = view.pending_approvals
    decision = ApprovalDecision(
        call_id="c_res", args_digest=pending.args_digest, approved=True, approver="workshop-lead"
    )
    assert (await latest.execute_update("decide_approval", decision))["accepted"] is True
    result = await result_of(latest)
    assert result.status == "completed", result.stop_reason
    first = handle.result_run_id or handle.run_id
    assert first is not None
    assert await failed_tasks(live.client, run_id, first) == []
