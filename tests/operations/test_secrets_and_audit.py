"""A full run with an approval and a write, on a worker process whose log is captured:
the provider API key appears neither in the exported history nor in the log, and the log's
audit records carry every field an operator needs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentloop.contract import Principal
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import ScriptedProvider
from agentloop.testing.turns import call as scripted_call
from tests.live import Servers, agent_input, scripted
from tests.support import (
    WORKER_READY_LINE,
    result_of,
    signal_approval,
    start_run,
    wait_for_phase,
    wait_until,
    waited_for,
    worker_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

API_KEY = "sk-proj-" + "Zq7" * 12  # the scripted provider accepts any key
REQUIRED = {
    "model_call.completed": {
        "workflow_id",
        "run_id",
        "activity_id",
        "attempt",
        "provider",
        "model",
        "response_id",
        "request_id",
        "turn",
        "stop",
        "tool_call_ids",
        "input_tokens",
        "output_tokens",
    },
    "policy.decision": {
        "workflow_id",
        "turn",
        "call_id",
        "tool",
        "tool_version",
        "args_digest",
        "decision",
        "needs_approval",
    },
    "approval.decided": {
        "workflow_id",
        "call_id",
        "args_digest",
        "approved",
        "approver",
        "accepted",
    },
    "tool.executed": {
        "workflow_id",
        "activity_id",
        "attempt",
        "tool",
        "tool_version",
        "call_id",
        "args_digest",
        "effect",
        "idempotency_key",
        "result_status",
        "side_effect",
    },
    "budget.settled": {"workflow_id", "turn", "input_tokens", "output_tokens", "cost_usd"},
    "run.stopped": {"workflow_id", "status", "stop_reason", "side_effects", "pending"},
}


async def test_no_key_in_history_or_log_and_every_audit_field_present(
    servers: Servers, worker_settings: Settings, tmp_path: Path, run_id: str
) -> None:
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"audit-{uuid.uuid4().hex[:8]}",
            "openai_api_key": API_KEY,
        }
    )
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentloop.worker",
            env={**os.environ, **worker_env(servers.client, settings, tmp_path / "store.db")},
            stdout=log,
            stderr=log,
        )
        try:
            await wait_until(lambda: WORKER_READY_LINE in log_path.read_text(), "the worker")
            await _run_with_an_approved_write(servers.client, settings, servers.provider, run_id)
        finally:
            worker.send_signal(signal.SIGTERM)
            await waited_for(worker.wait(), "the worker to stop on SIGTERM")

    history = (await servers.client.get_workflow_handle(run_id).fetch_history()).to_json()
    logged = log_path.read_text()
    assert API_KEY not in history
    assert API_KEY not in logged
    assert "dana@example.com" not in logged  # personal data is not logged in clear
    assert servers.service.records()["replies"] == 1

    records = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]
    audit = [r for r in records if r.get("kind") == "audit" and r.get("workflow_id") == run_id]
    by_event: dict[str, list[dict[str, Any]]] = {}
    for record in audit:
        by_event.setdefault(record["event"], []).append(record)
    for event, fields in REQUIRED.items():
        assert event in by_event, f"no {event} record; have {sorted(by_event)}"
        missing = fields - by_event[event][0].keys()
        assert not missing, f"{event} lacks {missing}"
    executed = by_event["tool.executed"][0]
    assert (executed["tool"], executed["result_status"], executed["side_effect"]) == (
        "send_reply",
        "succeeded",
        True,
    )
    key = executed["idempotency_key"]
    assert key.startswith(f"{run_id}/") and key.endswith("/call_reply")
    assert by_event["run.stopped"][0]["status"] == "completed"


async def _run_with_an_approved_write(
    client: Client, settings: Settings, scripted_provider: ScriptedProvider, run_id: str
) -> None:
    scripted_provider.register(
        scripted(
            run_id,
            [
                scripted_call(
                    "send_reply",
                    "call_reply",
                    ticket_id="T-1001",
                    recipient="dana@example.com",
                    body="Refund sent.",
                )
            ],
            "Replied.",
        )
    )
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Answer ticket T-1001",
        ["send_reply"],
        principal=Principal(subject="agent", scopes=["tickets:write"]),
    )
    handle = await start_run(client, settings, run_id, run_input)
    view = await wait_for_phase(handle, "awaiting_approval")
    await signal_approval(
        handle, "call_reply", view.pending_approvals[0].args_digest, "support-lead"
    )
    assert (await result_of(handle)).status == "completed"
