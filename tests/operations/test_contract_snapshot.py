"""The public JSON does not change by accident: a scripted run goes through a refused
decision, an approval, a write whose outcome stays unknown and an operator's word on it, and a
second run is cancelled while its write waits; `agentloop status --json` at each wait and at
the end, and each run's result as the workflow returned it, are compared with a stored copy
(`tests/snapshots/contract_run.json`).

Only what differs from run to run is normalised (ids, timestamps, durations, store keys); any
other difference in a field's name, place or value fails. A change meant to alter the public
JSON regenerates the copy with `AGENTLOOP_UPDATE_SNAPSHOTS=1` and shows the diff in review."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from agentloop.scripted_provider import Script
from agentloop.testing.turns import call as scripted_call
from tests.cli.test_cli import Finished, agentloop, assert_no_traceback, process_env
from tests.live import Live, scripted
from tests.support import result_of, wait_for_phase, wait_for_status

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

SNAPSHOT = Path(__file__).parents[1] / "snapshots" / "contract_run.json"
UPDATE = os.environ.get("AGENTLOOP_UPDATE_SNAPSHOTS") == "1"
PARTICIPANTS = ("p-carol", "p-alice")
"""One a run: a participant already booked would be refused by the write's precondition."""
LOOKUP_OUTAGE = 50
"""Lookups the operation endpoint refuses: more than the lookup's attempts, so the write's
outcome stays unknown until an operator says."""

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?")
"""A moment, without its zone: how the zone is written (`Z`, `+00:00`) is part of the JSON."""
VOLATILE_NUMBERS = {"seconds", "paused_seconds"}
"""Numbers that are durations measured on the clock."""
STORE_KEYS = {"transcript_head", "output_ref", "tools_ref"}
"""Keys of the store, which name content that holds the run's ids."""


def workshop_script(name: str, participant: str) -> Script:
    return scripted(
        name,
        [
            scripted_call("check_workshop", "call_check", workshop_id="ws-101"),
            scripted_call(
                "reserve_seat", "call_reserve", workshop_id="ws-101", participant_id=participant
            ),
        ],
        "Done.",
    )


def normalised(value: Any, run_ids: dict[str, str], key: str = "") -> Any:
    """`value` with what differs between two runs of the same script replaced by a marker."""
    if isinstance(value, dict):
        return {k: normalised(v, run_ids, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v, run_ids, key) for v in value]
    if key in VOLATILE_NUMBERS and isinstance(value, int | float):
        return "<seconds>"
    if key in STORE_KEYS and isinstance(value, str) and value:
        return "<store key>"
    if isinstance(value, str):
        for run_id, marker in run_ids.items():
            value = value.replace(run_id, marker)
        value = UUID.sub("<uuid>", value)
        return TIMESTAMP.sub("<time>", value)
    return value


def document(finished: Finished, exit_code: int) -> Any:
    assert_no_traceback(finished)
    assert finished.returncode == exit_code, finished.explain()
    return json.loads(finished.stdout)


async def test_status_and_result_json_stay_as_stored(
    live: Live, run_id: str, tmp_path: Path
) -> None:
    env = process_env(
        TEMPORAL_ADDRESS=live.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=live.worker.task_queue,
        AGENTLOOP_STORE_URL=live.worker.store_url,
    )

    async def cli(exit_code: int, *args: str) -> Any:
        return document(await agentloop(*args, "--json", env=env, cwd=tmp_path), exit_code)

    async def start(workflow_id: str, participant: str) -> str:
        live.provider.register(workshop_script(workflow_id, participant))
        await cli(
            0,
            "run",
            f"Reserve a seat in ws-101 for {participant}.",
            "--provider",
            "anthropic",
            "--model",
            workflow_id,
            "--id",
            workflow_id,
            "--tool",
            "check_workshop",
            "--tool",
            "reserve_seat",
            "--scope",
            "workshops:read",
            "--scope",
            "workshops:write",
        )
        handle = live.client.get_workflow_handle(workflow_id)
        view = await wait_for_status(
            handle, lambda v: v.phase in ("awaiting_approval", "finished"), "the approval wait"
        )
        assert view.phase == "awaiting_approval", view.stop_reason
        [pending] = view.pending_approvals
        return str(pending.args_digest)

    live.service.inject_fault("workshops.reserve", "commit_then_drop")
    live.service.inject_fault("workshops.operation", "unavailable", count=LOOKUP_OUTAGE)
    seen: dict[str, Any] = {}

    # Run 1: a refused decision, an approval, an unknown write an operator settles.
    digest = await start(run_id, PARTICIPANTS[0])
    seen["refused_approve"] = await cli(
        1, "approve", run_id, "call_reserve", "--approver", "mallory", "--digest", digest
    )
    seen["awaiting_approval"] = await cli(4, "status", run_id)
    seen["approve"] = await cli(
        0, "approve", run_id, "call_reserve", "--approver", "workshop-lead", "--digest", digest
    )
    await wait_for_phase(live.client.get_workflow_handle(run_id), "awaiting_reconciliation")
    seen["awaiting_reconciliation"] = await cli(4, "status", run_id)
    seen["resolve"] = await cli(
        0,
        "resolve",
        run_id,
        "call_reserve",
        "--outcome",
        "applied",
        "--operator",
        "workshop-lead",  # reserve_seat's approver: who may settle its write (issue 44)
        "--note",
        "seen in the ledger",
    )
    resolved = live.client.get_workflow_handle(run_id, result_type=dict[str, Any])
    seen["result"] = await result_of(resolved)
    seen["finished"] = await cli(0, "status", run_id)

    # Run 2: cancelled while its write waits for approval (what stays pending).
    cancelled_id = f"{run_id}-cancelled"
    await start(cancelled_id, PARTICIPANTS[1])
    await cli(0, "cancel", cancelled_id, "--reason", "not this week")
    cancelled = live.client.get_workflow_handle(cancelled_id, result_type=dict[str, Any])
    seen["cancelled_result"] = await result_of(cancelled)
    seen["cancelled"] = await cli(3, "status", cancelled_id)

    # The longer id first: it holds the shorter.
    got = normalised(seen, {cancelled_id: "<run 2>", run_id: "<run 1>"})
    if UPDATE:
        SNAPSHOT.parent.mkdir(exist_ok=True)
        SNAPSHOT.write_text(json.dumps(got, indent=2, sort_keys=False) + "\n")
    stored = json.loads(SNAPSHOT.read_text())
    for name in stored.keys() | got.keys():
        assert got.get(name) == stored.get(name), f"{name} differs from {SNAPSHOT.name}"
    # Field order is part of what a reader of the text sees.
    assert json.dumps(got) == json.dumps(stored)
