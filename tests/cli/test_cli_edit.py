"""`agentloop approve --set/--patch` (edit, then approve) and `agentloop reject --respond`
(answer the model instead of the call), real processes against the session's worker: the
service sees the edited call once, the ledger keeps both versions; a response is the call's
result and the run goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import agentloop
from tests.cli.test_cli_runs import env
from tests.inbox.test_inbox_browser import APPROVER, RESERVE, waiting_booking
from tests.live import Live
from tests.support import result_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

__all__ = ["env"]  # a fixture, used by name


async def test_approve_with_set_and_a_patch_runs_the_edited_call_once(
    live: Live, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    handle = await waiting_booking(live.client, live.worker, live.provider, run_id)
    argv = ("approve", run_id, "c_res", "--approver", APPROVER, "--json")
    refused = await agentloop(*argv, "--set", "workshop_id=ws-102", env=env, cwd=tmp_path)
    assert refused.returncode == 1, refused.explain()  # ws-102 is full: its precondition
    assert "precondition failed" in json.loads(refused.stdout)["reason"]
    unreadable = await agentloop(*argv, "--patch", "[1]", env=env, cwd=tmp_path)
    assert unreadable.returncode == 2 and "must be a JSON object" in unreadable.stderr

    patch = json.dumps({"participant_id": "p-bob"})
    approved = await agentloop(
        *argv, "--patch", patch, "--set", "participant_id=p-erin", env=env, cwd=tmp_path
    )
    assert approved.returncode == 0, approved.explain()
    edited = {**RESERVE, "participant_id": "p-erin"}
    assert json.loads(approved.stdout)["edited_arguments"] == edited

    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert live.service.stats()["counts"]["workshops.reserve"] == 1
    assert live.service.records()["reservations_by_workshop"] == {"ws-101": {"p-erin": 1}}
    [record] = result.calls
    assert record.arguments == edited
    assert record.approval is not None and record.approval.proposed_arguments == RESERVE


async def test_reject_with_respond_answers_the_model_and_the_run_goes_on(
    live: Live, env: dict[str, str], run_id: str, tmp_path: Path
) -> None:
    handle = await waiting_booking(live.client, live.worker, live.provider, run_id)
    words = "Carol already has a seat through HR; book nobody."
    responded = await agentloop(
        "reject", run_id, "c_res", "--approver", APPROVER, "--respond", words,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert responded.returncode == 0, responded.explain()
    result = await result_of(handle)
    # reserve_seat's on_reject would stop the run: a response lets it go on to its answer.
    assert result.status == "completed", result.stop_reason
    assert live.service.stats()["counts"]["workshops.reserve"] == 0
    [record] = result.calls
    assert record.decision == f"answered instead by {APPROVER}"
    assert record.approval is not None and record.approval.response == words
    requests = [r for r in live.provider.requests if r["script"] == run_id]
    assert words in json.dumps(requests[1]["body"]["messages"])
