"""Signed approvals (issue #18, item 10): with approver keys configured, a decision counts
only when it is signed by the named approver's key, for this run chain, call, arguments,
verdict and reason, and not expired. The check runs in the worker (`check_approval`); the
workflow records the verdict. Without keys (the dev stack's default) names count as given,
and `status` says so."""

from __future__ import annotations

import json
import stat
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, WorkflowHandle

from agentloop.contract import (
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    RefusedResolution,
    ResolveRequest,
    RunStatusView,
)
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import ConfigError, Settings
from agentloop.runtime.signing import (
    MAX_LIFETIME,
    ApproverKeys,
    SigningError,
    load_private_key,
    public_key_text,
    sign_decision,
    sign_resolution,
    signed_bytes,
)
from agentloop.worker import running_worker
from tests.cli.test_cli import agentloop, assert_no_traceback, process_env
from tests.crash.test_exactly_once import (
    CALL_ID,
    LOOKUP_OUTAGE,
    RESERVE,
    run_input,
    the_call,
    write_script,
)
from tests.live import Live, Servers
from tests.loop.test_hardening import assert_never_wedged, paused_for_approval, refusals
from tests.support import result_of, scheduled_activity_types, start_run, wait_for_phase

LEAD = Ed25519PrivateKey.generate()
INTRUDER = Ed25519PrivateKey.generate()
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
KEYS = ApproverKeys.parse(f"workshop-lead={public_key_text(LEAD)}")
PKCS8 = (
    serialization.Encoding.PEM,
    serialization.PrivateFormat.PKCS8,
    serialization.NoEncryption(),
)


def decision(**fields: Any) -> ApprovalDecision:
    return ApprovalDecision.model_validate(
        {
            "call_id": "c_res",
            "args_digest": "sha256:abc",
            "approved": True,
            "approver": "workshop-lead",
            **fields,
        }
    )


def signed(key: Ed25519PrivateKey = LEAD, run: str = "run-1", **fields: Any) -> ApprovalDecision:
    return sign_decision(decision(**fields), key, workflow_id="wf-1", run=run, now=NOW)


def problem(candidate: ApprovalDecision, *, run: str = "run-1", now: datetime = NOW) -> str | None:
    return KEYS.problem(candidate, workflow_id="wf-1", run=run, now=now)


# --- the check itself ------------------------------------------------------------------------


def test_a_decision_signed_by_the_approvers_key_counts() -> None:
    assert problem(signed()) is None
    assert problem(signed(approved=False, reason="not today")) is None


@pytest.mark.parametrize(
    "change",
    [
        {"approved": False},
        {"args_digest": "sha256:other"},
        {"call_id": "c_other"},
        {"reason": "added later"},
        {"edited_arguments": {"amount": 450}},
        {"approved": False, "response": "added later"},
    ],
)
def test_any_field_changed_after_signing_breaks_the_signature(change: dict[str, Any]) -> None:
    tampered = signed().model_copy(update=change)
    assert "the signature is not workshop-lead's" in (problem(tampered) or "")


def test_a_signed_edit_binds_the_edited_arguments_and_a_response_its_words() -> None:
    edit = signed(edited_arguments={"amount": 450})
    assert problem(edit) is None
    other = edit.model_copy(update={"edited_arguments": {"amount": 4500}})
    assert "the signature is not workshop-lead's" in (problem(other) or "")
    answered = signed(approved=False, response="book ws-101 instead")
    assert problem(answered) is None
    # Without an edit or a response, the bytes signed are those signed before either existed.
    assert signed_bytes(decision(), workflow_id="w", run="r") == signed_bytes(
        decision(edited_arguments=None, response=""), workflow_id="w", run="r"
    )
    assert b"edited_digest" not in signed_bytes(decision(), workflow_id="w", run="r")


def test_a_signature_for_another_run_or_workflow_does_not_count() -> None:
    assert "the signature is not" in (problem(signed(), run="run-2") or "")
    other_workflow = sign_decision(decision(), LEAD, workflow_id="wf-2", run="run-1", now=NOW)
    assert "the signature is not" in (problem(other_workflow) or "")


def test_unsigned_wrong_key_unknown_approver_and_expiry_are_each_named() -> None:
    assert "unsigned: this worker takes only signed approvals" in (problem(decision()) or "")
    assert "the signature is not workshop-lead's" in (problem(signed(INTRUDER)) or "")
    assert "no approver key is configured for 'mallory'" in (
        problem(signed(approver="mallory")) or ""
    )
    assert "expired" in (problem(signed(), now=NOW + timedelta(hours=1)) or "")
    too_long = signed().model_copy(update={"expires_at": NOW + MAX_LIFETIME + timedelta(hours=1)})
    assert "past" in (problem(too_long) or "")
    assert "not base64" in (problem(signed().model_copy(update={"signature": "!!"})) or "")
    with pytest.raises(SigningError, match="at most"):
        sign_decision(decision(), LEAD, workflow_id="w", run="r", lifetime=timedelta(days=2))


def test_without_keys_every_decision_counts_as_given() -> None:
    assert ApproverKeys.parse(None).problem(decision(), workflow_id="w", run="r", now=NOW) is None
    assert not ApproverKeys.parse("").signing


def resolution(key: Ed25519PrivateKey | None = LEAD, **fields: Any) -> ResolveRequest:
    word = ResolveRequest.model_validate(
        {"call_id": "c_res", "outcome": "not_applied", "operator": "workshop-lead", **fields}
    )
    return (
        word
        if key is None
        else sign_resolution(word, key, workflow_id="wf-1", run="run-1", now=NOW)
    )


def resolution_problem(word: ResolveRequest, approvers: tuple[str, ...] = ()) -> str | None:
    return KEYS.resolution_problem(
        word, workflow_id="wf-1", run="run-1", now=NOW, approvers=approvers
    )


def test_a_resolve_counts_when_signed_by_a_key_holder_the_tool_allows() -> None:
    assert resolution_problem(resolution()) is None
    assert resolution_problem(resolution(), approvers=("workshop-lead",)) is None
    assert "unsigned: this worker takes only signed resolutions" in (
        resolution_problem(resolution(None)) or ""
    )
    assert "'workshop-lead' may not settle this write; approvers: ops" in (
        resolution_problem(resolution(), approvers=("ops",)) or ""
    )
    assert "no approver key is configured for 'mallory'" in (
        resolution_problem(resolution(operator="mallory")) or ""
    )
    for change in ({"outcome": "applied"}, {"note": "added later"}, {"call_id": "c_other"}):
        tampered = resolution().model_copy(update=change)
        assert "the signature is not workshop-lead's" in (resolution_problem(tampered) or "")
    # An approval's signature never passes for a resolution, nor the other way round.
    approval = signed(call_id="c_res")
    borrowed = resolution(None).model_copy(
        update={"signature": approval.signature, "expires_at": approval.expires_at}
    )
    assert "the signature is not" in (resolution_problem(borrowed) or "")
    # Without keys a name counts as given, but only a name the tool allows (issue #44 item 3).
    unsigned_keys = ApproverKeys.parse(None)
    assert (
        unsigned_keys.resolution_problem(
            resolution(None, operator="ops"), workflow_id="w", run="r", now=NOW, approvers=("ops",)
        )
        is None
    )
    assert unsigned_keys.resolution_problem(
        resolution(None), workflow_id="w", run="r", now=NOW, approvers=("ops",)
    ) == ("'workshop-lead' may not settle this write; approvers: ops")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("workshop-lead", "does not start with an approver name"),
        ("lead=rsa:AAAA", "expected ed25519:BASE64"),
        ("lead=ed25519:!!!", "not base64"),
        ("lead=ed25519:AAAA", "32 bytes"),
        (f"a={public_key_text(LEAD)},a={public_key_text(INTRUDER)}", "has two keys"),
    ],
)
def test_malformed_approver_keys_stop_the_worker_naming_the_variable(
    text: str, expected: str
) -> None:
    with pytest.raises(ConfigError, match="AGENTLOOP_APPROVER_KEYS") as raised:
        Settings.load({"AGENTLOOP_APPROVER_KEYS": text})
    assert expected in str(raised.value)


def test_the_toml_file_may_list_the_keys(tmp_path: Path) -> None:
    config = tmp_path / "agentloop.toml"
    lines = [f"lead={public_key_text(LEAD)}", f"ops={public_key_text(INTRUDER)}"]
    config.write_text(f"approver_keys = {json.dumps(lines)}\n")
    settings = Settings.load({"AGENTLOOP_CONFIG": str(config)})
    assert sorted(settings.approvers().keys) == ["lead", "ops"]


# --- the CLI's keys ---------------------------------------------------------------------------


async def test_keys_new_writes_a_private_file_and_prints_the_public_line(tmp_path: Path) -> None:
    env = process_env()
    made = await agentloop("keys", "new", "workshop-lead", "--dir", str(tmp_path), env=env)
    assert made.returncode == 0, made.explain()
    pem = tmp_path / "workshop-lead.pem"
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    line = made.stdout.strip()
    assert line == f"workshop-lead={public_key_text(load_private_key(pem))}"
    assert ApproverKeys.parse(line).signing
    shown = await agentloop("keys", "public", "workshop-lead", str(pem), env=env)
    assert shown.stdout.strip() == line

    kept = pem.read_bytes()
    again = await agentloop("keys", "new", "workshop-lead", "--dir", str(tmp_path), env=env)
    assert again.returncode == 2 and "exists; keeping it" in again.stderr
    assert pem.read_bytes() == kept
    not_a_key = await agentloop("keys", "public", "x", str(tmp_path / "none.pem"), env=env)
    assert not_a_key.returncode == 2 and "cannot read the key file" in not_a_key.stderr
    assert_no_traceback(not_a_key)


# --- against a real dev server ------------------------------------------------------------------


@pytest.fixture
async def signing_worker(client: Client, worker_settings: Settings) -> AsyncIterator[Settings]:
    """A worker on its own task queue that takes only decisions signed by workshop-lead."""
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"signed-{uuid.uuid4().hex[:8]}",
            "approver_keys": f"workshop-lead={public_key_text(LEAD)}",
        }
    )
    async with running_worker(client, settings):
        yield settings


def lead_key_for_the_cli(
    client: Client, settings: Settings, tmp_path: Path
) -> tuple[Path, dict[str, str]]:
    """workshop-lead's key file, and the environment the CLI reaches `settings`' worker with."""
    lead_pem = tmp_path / "lead.pem"
    lead_pem.write_bytes(LEAD.private_bytes(*PKCS8))
    env = process_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=settings.task_queue,
        AGENTLOOP_STORE_URL=settings.store_url,
    )
    return lead_pem, env


def reservations(example_service: ExampleService) -> int:
    return int(example_service.records()["reservations"])


async def pending_decision(handle: WorkflowHandle[Any, Any], **fields: Any) -> ApprovalDecision:
    view = await handle.query("status", result_type=RunStatusView)
    [pending] = view.pending_approvals
    return decision(call_id=pending.call_id, args_digest=pending.args_digest, **fields)


async def run_of(handle: WorkflowHandle[Any, Any]) -> str:
    view = await handle.query("status", result_type=RunStatusView)
    return view.run_chain[0]


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_with_keys_only_the_approvers_signature_lets_the_write_run(
    servers: Servers, signing_worker: Settings, run_id: str
) -> None:
    handle = await paused_for_approval(servers.client, signing_worker, servers.provider, run_id)
    waiting = await handle.query("status", result_type=RunStatusView)
    assert waiting.approval_signing == "signed"
    unsigned = await pending_decision(handle)
    run = await run_of(handle)
    forged = sign_decision(unsigned, INTRUDER, workflow_id=handle.id, run=run)
    elsewhere = sign_decision(unsigned, LEAD, workflow_id=handle.id, run="another-run")

    for refused in (unsigned, forged, elsewhere):
        verdict = await handle.execute_update(
            "decide_approval", refused, result_type=ApprovalVerdict
        )
        assert not verdict.accepted
    # The signal path is checked the same way.
    await handle.signal("approve", forged)
    records = await refusals(handle, 4)
    reasons = [r.refused_because for r in records]
    assert reasons[0].startswith("unsigned: this worker takes only signed approvals")
    assert all("the signature is not workshop-lead's" in r for r in reasons[1:])
    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "awaiting_approval" and view.pending_approvals
    # What status shows leaves the signature out.
    assert "signature" not in records[1].model_dump(mode="json")
    assert reservations(servers.service) == 0

    good = sign_decision(unsigned, LEAD, workflow_id=handle.id, run=run)
    verdict = await handle.execute_update("decide_approval", good, result_type=ApprovalVerdict)
    assert verdict.accepted, verdict.reason
    result: AgentRunResult = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    [call] = result.calls
    assert (call.call_id, call.status, call.decision) == (
        "c_res",
        "succeeded",
        "approved by workshop-lead",
    )
    assert reservations(servers.service) == 1
    await assert_never_wedged(handle)
    events = [e async for e in handle.fetch_history_events()]
    checks = [t for t in scheduled_activity_types(events) if t == "check_approval"]
    assert len(checks) == 5  # four refused, one accepted: each checked by the worker once


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_agentloop_approve_with_key_signs_for_the_run(
    servers: Servers, signing_worker: Settings, run_id: str, tmp_path: Path
) -> None:
    handle = await paused_for_approval(servers.client, signing_worker, servers.provider, run_id)
    lead_pem, env = lead_key_for_the_cli(servers.client, signing_worker, tmp_path)
    unsigned = await agentloop("approve", run_id, "c_res", "--approver", "workshop-lead", env=env)
    assert unsigned.returncode == 1, unsigned.explain()
    assert "decision refused: unsigned: this worker takes only signed approvals" in (
        unsigned.stderr
    )
    made = await agentloop("keys", "new", "intruder", "--dir", str(tmp_path), env=env)
    assert made.returncode == 0, made.explain()
    wrong = await agentloop(
        "approve", run_id, "c_res", "--approver", "workshop-lead", "--key",
        str(tmp_path / "intruder.pem"), env=env,
    )  # fmt: skip
    assert wrong.returncode == 1 and "the signature is not workshop-lead's" in wrong.stderr
    assert reservations(servers.service) == 0

    approved = await agentloop(
        "approve", run_id, "c_res", "--approver", "workshop-lead", "--json",
        env={**env, "AGENTLOOP_APPROVER_KEY": str(lead_pem)},
    )  # fmt: skip
    assert approved.returncode == 0, approved.explain()
    assert json.loads(approved.stdout)["accepted"] is True
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert reservations(servers.service) == 1
    await assert_never_wedged(handle)


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_without_keys_status_says_approvals_are_unsigned(live: Live, run_id: str) -> None:
    handle = await paused_for_approval(live.client, live.worker, live.provider, run_id)
    waiting = await handle.query("status", result_type=RunStatusView)
    assert waiting.approval_signing == "unsigned"  # said from the start, before any decision
    verdict = await handle.execute_update(
        "decide_approval", await pending_decision(handle), result_type=ApprovalVerdict
    )
    assert verdict.accepted, verdict.reason
    await result_of(handle)
    view = await handle.query("status", result_type=RunStatusView)
    assert view.approval_signing == "unsigned"
    assert reservations(live.service) == 1


def test_a_key_file_that_is_not_ed25519_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ec.pem"
    path.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(*PKCS8))
    with pytest.raises(SigningError, match="not an Ed25519 key"):
        load_private_key(path)
    path.write_text("not a key")
    with pytest.raises(SigningError, match="not an unencrypted PEM private key"):
        load_private_key(path)


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_with_keys_only_a_signed_resolve_by_an_approver_settles_a_write(
    servers: Servers, signing_worker: Settings, run_id: str, tmp_path: Path
) -> None:
    """Issue #33: on a worker taking only signed approvals, an unsigned `resolve` saying a
    write that was sent was not applied settled it all the same; settling a write's outcome
    decides as much as approving it."""
    servers.provider.register(write_script(run_id, RESERVE, "workshop-lead says applied"))
    servers.service.inject_fault(RESERVE.write_endpoint, "commit_then_drop")
    servers.service.inject_fault(RESERVE.lookup_endpoint, "unavailable", count=LOOKUP_OUTAGE)
    handle = await start_run(servers.client, signing_worker, run_id, run_input(run_id, RESERVE))
    await wait_for_phase(handle, "awaiting_approval")
    run = await run_of(handle)
    approval = sign_decision(await pending_decision(handle), LEAD, workflow_id=handle.id, run=run)
    assert (await handle.execute_update("decide_approval", approval))["accepted"] is True
    await wait_for_phase(handle, "awaiting_reconciliation")

    def word(operator: str = "workshop-lead", **fields: Any) -> ResolveRequest:
        said = {"call_id": CALL_ID, "outcome": "not_applied", "operator": operator, **fields}
        return ResolveRequest.model_validate(said)

    for refused in (
        word("mallory"),
        word(),
        sign_resolution(word(), INTRUDER, workflow_id=handle.id, run=run),
    ):
        await handle.signal("resolve", refused)
    records = await refusals(handle, 3)
    assert [(r.signal, r.operator) for r in records if isinstance(r, RefusedResolution)] == [
        ("resolve", "mallory"),
        ("resolve", "workshop-lead"),
        ("resolve", "workshop-lead"),
    ]
    reasons = [r.refused_because for r in records]
    assert reasons[0] == "'mallory' may not settle this write; approvers: workshop-lead"
    assert reasons[1].startswith("unsigned: this worker takes only signed resolutions")
    assert "the signature is not workshop-lead's" in reasons[2]
    assert "signature" not in records[2].model_dump(mode="json")
    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "awaiting_reconciliation" and the_call(view.calls).status == "unknown"

    # `agentloop resolve --key` signs for the run chain, as `approve --key` does.
    lead_pem, env = lead_key_for_the_cli(servers.client, signing_worker, tmp_path)
    resolved = await agentloop(
        "resolve", run_id, CALL_ID, "--outcome", "applied", "--operator", "workshop-lead",
        "--note", "seen in the register", "--key", str(lead_pem), "--json", env=env,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.explain()
    assert json.loads(resolved.stdout)["request"]["signature"]
    result: AgentRunResult = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    call = the_call(result.calls)
    assert call.status == "confirmed_after_query"
    assert "resolved: workshop-lead says applied: seen in the register" in call.decision
    assert reservations(servers.service) == 1
    await assert_never_wedged(handle)
    events = [e async for e in handle.fetch_history_events()]
    checks = [t for t in scheduled_activity_types(events) if t == "check_resolution"]
    assert len(checks) == 4  # three refused, one accepted: each checked by the worker once
