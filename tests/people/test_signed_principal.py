"""Signed starts: a front end that starts runs for its users signs each run's whole input,
workflow id, an expiry and a nonce; workers with starter keys take a run only with a valid
signature, once (checked by the worker in `describe_run`, never in the workflow, the nonce
claimed in the store the workers share), else it fails at start with `InvalidInput` naming
the principal."""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentloop import start_run
from agentloop.activities.principals import check_principal
from agentloop.activity_io import CheckPrincipalInput
from agentloop.contract import AgentRunInput, AgentRunResult, Principal
from agentloop.runtime.audit import AUDIT_LOGGER
from agentloop.runtime.config import ConfigError, Settings
from agentloop.runtime.signing import ApproverKeys, SigningError, public_key_text
from agentloop.runtime.start_signing import (
    NONCE_RETENTION,
    PrincipalSignatures,
    StartSignature,
    sign_start,
)
from agentloop.scripted_provider import ScriptedProvider
from agentloop.store.memory import MemoryStore
from agentloop.worker import running_worker
from tests.cli.test_cli import agentloop, assert_no_traceback, process_env
from tests.live import Servers, agent_input, scripted
from tests.support import activity_result, result_of
from tests.tools.test_delegate import call

DANA = Principal(subject="dana", tenant="acme", scopes=["orders:read"])
NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
TASK = AgentRunInput(task="Refund order 7.", provider="openai-chat", model="m", principal=DANA)


def starters(key: Ed25519PrivateKey, name: str = "front") -> ApproverKeys:
    return ApproverKeys.parse(f"{name}={public_key_text(key)}")


def asked(
    run_input: AgentRunInput, workflow_id: str = "run-1", **fields: Any
) -> CheckPrincipalInput:
    """What the workflow asks the worker of a fresh run of `run_input` started at NOW."""
    asking = {
        "principal": run_input.principal,
        "signature": run_input.principal_signature,
        "workflow_id": workflow_id,
        "input_digest": run_input.start_digest(),
        "started_at": NOW,
        "run": "first-run-id",
    }
    return CheckPrincipalInput.model_validate({**asking, **fields})


def signed(run_input: AgentRunInput, key: Ed25519PrivateKey, **options: Any) -> AgentRunInput:
    options = {"workflow_id": "run-1", "now": NOW, **options}
    return run_input.model_copy(
        update={"principal_signature": sign_start(run_input, key, **options)}
    )


# --- the check, by itself -------------------------------------------------------------------


def test_a_signature_counts_for_its_whole_input_workflow_id_and_lifetime_only() -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    required = PrincipalSignatures(starters(key), required=True)
    run = signed(TASK, key)
    taken = required.verdict(asked(run))
    assert (taken.problem, taken.signer) == (None, "front")
    assert taken.signed is not None and taken.signed.expires_at == NOW + timedelta(minutes=10)
    # The same input written out in full (its defaults given) is the same input.
    spelled = AgentRunInput.model_validate(run.model_dump())
    assert required.verdict(asked(spelled)).signer == "front"

    # What the starter did not sign: another task, tools, limits, principal (the signature
    # carried over as it is).
    admin = DANA.model_copy(update={"scopes": ["orders:read", "orders:admin"]})
    for update in (
        {"task": "Refund every order."},
        {"tools": ["refund"]},
        {"limits": {"max_model_calls": 80}},
        {"principal": admin},
    ):
        other_input = AgentRunInput.model_validate({**run.model_dump(), **update})
        problem = required.verdict(asked(other_input)).problem
        assert problem is not None and "signed for another start input" in problem, update
    for verdict in (
        required.verdict(asked(run, workflow_id="run-2")),
        required.verdict(asked(signed(TASK, other))),
    ):
        assert verdict.problem is not None and "no starter's signature" in verdict.problem
        assert verdict.signer is None and verdict.signed is None

    # Expired when the run started (as its history says), or claiming to count too long.
    late = required.verdict(asked(run, started_at=NOW + timedelta(minutes=10)))
    assert late.problem == (
        "the signature expired at 2026-12-07T12:10:00Z, before the run started"
        " (2026-12-07T12:10:00Z): sign the start again"
    )
    with pytest.raises(SigningError):
        sign_start(TASK, key, workflow_id="run-1", lifetime=timedelta(days=2))
    forever = StartSignature.parse(str(run.principal_signature))
    assert isinstance(forever, StartSignature)
    forged = forever.text().replace(str(int(forever.expires_at.timestamp())), "99999999999")
    problem = required.verdict(asked(run.model_copy(update={"principal_signature": forged})))
    assert problem.problem is not None and "claims to count until" in problem.problem


def test_the_first_format_and_malformed_signatures_are_refused_saying_which() -> None:
    key = Ed25519PrivateKey.generate()
    required = PrincipalSignatures(starters(key), required=True)
    v1 = base64.b64encode(key.sign(b"agentloop principal v1\n{}")).decode()
    problem = required.verdict(asked(TASK.model_copy(update={"principal_signature": v1})))
    assert problem.problem == (
        "principal_signature is a v1 signature (of the principal and workflow id only), no"
        " longer taken: sign the whole start input (v2) with `agentloop run --key`, or"
        " `agentloop.sign_start`"
    )
    good = str(signed(TASK, key).principal_signature)
    _, expires, nonce, digest, signature = good.split(".")
    for bad in (
        "not base64!",
        f"v2.{expires}.{nonce}.{digest}",
        f"v2.soon.{nonce}.{digest}.{signature}",
        f"v2.{expires}.{nonce[:-4]}.{digest}.{signature}",  # a nonce of 13 bytes
        f"v2.{expires}.{nonce}.{digest}.{signature}=",
        f"v2.{expires}.{nonce}+.{digest}.{signature}",
    ):
        verdict = required.verdict(asked(TASK.model_copy(update={"principal_signature": bad})))
        assert verdict.problem is not None and "is not a v2 start signature" in verdict.problem, bad
    problem = required.verdict(asked(TASK)).problem
    assert problem is not None and problem.startswith("unsigned: ") and "front" in problem

    # Optional: an unsigned run is taken; a signature that is given must hold.
    optional = PrincipalSignatures(starters(key), required=False)
    assert optional.verdict(asked(TASK)).problem is None
    assert optional.verdict(asked(signed(TASK, key), workflow_id="run-2")).problem is not None
    # No starter keys: principals are taken as given (the default).
    assert PrincipalSignatures().verdict(asked(signed(TASK, key), workflow_id="x")).problem is None


def test_a_child_is_checked_against_its_roots_workflow_id_and_its_own_principal() -> None:
    key = Ed25519PrivateKey.generate()
    required = PrincipalSignatures(starters(key), required=True)
    root = signed(TASK, key, workflow_id="root")
    child = root.model_copy(update={"task": "Look order 7 up.", "tools": ["lookup"]})
    as_child = {"delegated": True, "input_digest": "", "started_at": NOW + timedelta(days=3)}
    # Another input, long past the expiry: the root's were checked as it started.
    assert required.verdict(asked(child, "root", **as_child)).signer == "front"
    someone_else = child.model_copy(update={"principal": Principal(subject="eve")})
    for verdict in (
        required.verdict(asked(someone_else, "root", **as_child)),
        required.verdict(asked(child, "elsewhere", **as_child)),
    ):
        assert verdict.problem is not None and "no starter's signature" in verdict.problem


async def test_a_nonce_starts_one_run_chain_and_the_same_run_may_ask_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    key = Ed25519PrivateKey.generate()
    required = PrincipalSignatures(starters(key), required=True)
    now = datetime.now(UTC)
    run = signed(TASK, key, now=now)
    store = MemoryStore()
    check = ActivityEnvironment().run
    first = await check(check_principal, required, store, asked(run, started_at=now))
    again = await check(check_principal, required, store, asked(run, started_at=now))
    assert first.problem == again.problem == "" and first.signer == "front"
    other = await check(
        check_principal, required, store, asked(run, started_at=now, run="another-run")
    )
    assert other.problem.startswith("the signature was used to start another run already")
    assert other.signer is None
    checks = [r.audit for r in caplog.records if r.getMessage() == "principal.checked"]  # type: ignore[attr-defined]
    assert [(c["taken"], c["problem"]) for c in checks] == [
        (True, None),
        (True, None),
        (False, other.problem),
    ]
    assert checks[-1]["nonce"] == checks[0]["nonce"] and checks[-1]["signer"] == "front"
    # A child carries its root's nonce: never claimed again.
    child = asked(run, started_at=now, run="child-run", delegated=True, input_digest="")
    assert (await check(check_principal, required, store, child)).problem == ""
    # Checked so late that the nonce may have been forgotten: refused, never claimed.
    stale = signed(TASK, key, now=now - NONCE_RETENTION - timedelta(hours=1))
    started = now - NONCE_RETENTION - timedelta(minutes=55)
    late = await check(check_principal, required, store, asked(stale, started_at=started))
    assert "its nonce may be forgotten" in late.problem


def test_starter_keys_make_signatures_required_unless_optional() -> None:
    public = f"front={public_key_text(Ed25519PrivateKey.generate())}"
    assert not Settings().principal_signatures().required
    assert Settings(starter_keys=public).principal_signatures().required
    assert Settings(starter_keys=public, env="production").principal_signatures().required
    relaxed = Settings(starter_keys=public, principal_signing="optional")
    assert not relaxed.principal_signatures().required
    with pytest.raises(ConfigError, match="AGENTLOOP_STARTER_KEYS"):
        Settings(principal_signing="required").principal_signatures()
    # Said where the settings are loaded, before a worker (or any command) starts.
    with pytest.raises(ConfigError) as refused:
        Settings.load({"AGENTLOOP_PRINCIPAL_SIGNING": "required"})
    assert refused.value.problems == [
        "AGENTLOOP_PRINCIPAL_SIGNING=required: AGENTLOOP_STARTER_KEYS (or"
        " AGENTLOOP_STARTER_KEYS_FILE) is not set: set it to the starters' public keys"
        " (NAME=ed25519:BASE64,...)"
    ]
    with pytest.raises(ConfigError, match="AGENTLOOP_STARTER_KEYS"):
        Settings(starter_keys="front=ed25519:nope").principal_signatures()


# --- runs on a worker with starter keys -----------------------------------------------------


@pytest.fixture
async def starter_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


@pytest.fixture
async def signing_worker(
    client: Client, worker_settings: Settings, starter_key: Ed25519PrivateKey
) -> AsyncIterator[Settings]:
    settings = worker_settings.model_copy(
        update={
            "task_queue": f"signed-{uuid.uuid4().hex[:8]}",
            "starter_keys": f"front={public_key_text(starter_key)}",
        }
    )
    async with running_worker(client, settings):
        yield settings


def answering(scripted_provider: ScriptedProvider, run_id: str) -> AgentRunInput:
    scripted_provider.register(scripted(run_id, "done"))
    return AgentRunInput(task="Say done.", provider="openai-chat", model=run_id, principal=DANA)


async def refusal(client: Client, settings: Settings, run_id: str, run: AgentRunInput) -> str:
    """The message of the run's failure, which must be `InvalidInput` at its start."""
    handle = await start_run(client, run, id=run_id, task_queue=settings.task_queue)
    with pytest.raises(WorkflowFailureError) as failed:
        await result_of(handle)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InvalidInput", cause
    return cause.message


@pytest.mark.integration
async def test_a_signed_start_runs_once_and_replayed_under_its_reused_id_is_refused(
    servers: Servers, signing_worker: Settings, starter_key: Ed25519PrivateKey, run_id: str
) -> None:
    """Whoever reads the finished run's history has its signed input: started again under the
    same workflow id, with another task or as it was, it is refused (and never calls the
    model)."""
    run = answering(servers.provider, run_id)
    handle = await start_run(
        servers.client,
        run,
        id=run_id,
        task_queue=signing_worker.task_queue,
        principal_key=starter_key,
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    # The worker's verdict is in history (the describe_run activity's result), for replay.
    events = [e async for e in handle.fetch_history_events()]
    described = activity_result(events, "describe_run")
    assert described["principal"] == {"problem": "", "signer": "front"}

    recorded = events[0].workflow_execution_started_event_attributes.input.payloads[:1]
    [replayed] = await servers.client.data_converter.decode(recorded, [AgentRunInput])
    assert replayed.principal_signature  # what the history gives away
    calls = len([r for r in servers.provider.requests if r["script"] == run_id])
    another_task = replayed.model_copy(update={"task": "Refund every order of acme."})
    message = await refusal(servers.client, signing_worker, run_id, another_task)
    assert "signed for another start input" in message, message
    message = await refusal(servers.client, signing_worker, run_id, replayed)
    assert "the signature was used to start another run already" in message, message
    assert len([r for r in servers.provider.requests if r["script"] == run_id]) == calls


@pytest.mark.integration
async def test_a_tampered_input_a_signature_for_another_run_or_an_expired_one_fails_at_start(
    servers: Servers, signing_worker: Settings, starter_key: Ed25519PrivateKey, run_id: str
) -> None:
    run = answering(servers.provider, run_id)
    admin = DANA.model_copy(update={"scopes": ["orders:read", "orders:admin"]})
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("tampered", {"principal": admin}, "signed for another start input"),
        ("other-run", {"workflow_id": "elsewhere"}, "no starter's"),
        ("expired", {"now": datetime.now(UTC) - timedelta(hours=1)}, "the signature expired at"),
    ]
    for suffix, change, said in cases:
        workflow_id = f"{run_id}-{suffix}"
        fields = {"workflow_id": workflow_id, "now": None, **change}
        principal = fields.pop("principal", DANA)
        signature = sign_start(run, starter_key, **fields)
        started = run.model_copy(update={"principal": principal, "principal_signature": signature})
        message = await refusal(servers.client, signing_worker, workflow_id, started)
        assert message.startswith("invalid AgentRunInput: principal 'dana' (tenant 'acme'): ")
        assert said in message, message
    unsigned = await refusal(servers.client, signing_worker, f"{run_id}-unsigned", run)
    assert "unsigned: this worker takes only runs signed by a starter" in unsigned
    assert not [r for r in servers.provider.requests if r["script"] == run_id]  # no model call


@pytest.mark.integration
async def test_a_delegated_child_is_checked_against_its_root_runs_signature(
    servers: Servers, signing_worker: Settings, starter_key: Ed25519PrivateKey, run_id: str
) -> None:
    servers.provider.register(
        scripted(
            run_id,
            [call("call_d", "delegate", task="Say done.", tools=[])],
            "The helper says: {{call_d.output}}",
        )
    )
    servers.provider.register(scripted(f"{run_id}-child", "done"))
    run = agent_input(
        run_id,
        "openai-chat",
        "Ask a helper.",
        ["delegate"],
        delegate_model=f"{run_id}-child",
        principal=DANA,
    )
    handle = await start_run(
        servers.client,
        run,
        id=run_id,
        task_queue=signing_worker.task_queue,
        principal_key=starter_key,
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    child = servers.client.get_workflow_handle(
        f"{run_id}/delegate/call_d", result_type=AgentRunResult
    )
    assert (await result_of(child)).output == "done"
    assert result.output == "The helper says: done"


@pytest.mark.integration
async def test_agentloop_run_key_signs_the_principal(
    servers: Servers, signing_worker: Settings, run_id: str, tmp_path: Path
) -> None:
    made = await agentloop("keys", "new", "front", "--dir", str(tmp_path), env=process_env())
    assert made.returncode == 0, made.explain()
    (line,) = made.stdout.splitlines()
    # A worker taking the principals that key signs (the line `keys new` printed).
    worker = signing_worker.model_copy(
        update={"starter_keys": line, "task_queue": f"{signing_worker.task_queue}-cli"}
    )
    answering(servers.provider, run_id)
    env = process_env(
        TEMPORAL_ADDRESS=servers.client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=worker.task_queue,
    )
    args = ["run", "Say done.", "--model", run_id, "--subject", "dana", "--follow"]
    async with running_worker(servers.client, worker):
        signed = await agentloop(
            *args, "--id", run_id, "--key", str(tmp_path / "front.pem"), env=env, cwd=tmp_path
        )
        unsigned = await agentloop(*args, "--id", f"{run_id}-unsigned", env=env, cwd=tmp_path)
    assert signed.returncode == 0, signed.explain()
    assert_no_traceback(unsigned)
    assert unsigned.returncode != 0, unsigned.explain()
    assert "principal 'dana'" in unsigned.stdout + unsigned.stderr, unsigned.explain()
