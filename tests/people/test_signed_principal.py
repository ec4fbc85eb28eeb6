"""Signed principals: a front end that starts runs for its users signs each run's principal
for its workflow id; workers with starter keys take a run only with a valid signature (checked
by the worker in `describe_run`, never in the workflow), else it fails at start with
`InvalidInput` naming the principal."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError

from agentloop import start_run
from agentloop.contract import AgentRunInput, AgentRunResult, Principal
from agentloop.demo.scripted_provider import Script, ScriptedProvider, ScriptTurn
from agentloop.runtime.config import ConfigError, Settings
from agentloop.runtime.signing import (
    ApproverKeys,
    PrincipalSignatures,
    public_key_text,
    sign_principal,
)
from agentloop.worker import running_worker
from tests.operations.test_cli import agentloop, assert_no_traceback, process_env
from tests.support import activity_result, result_of
from tests.tools.test_delegate import call

DANA = Principal(subject="dana", tenant="acme", scopes=["orders:read"])


def starters(key: Ed25519PrivateKey, name: str = "front") -> ApproverKeys:
    return ApproverKeys.parse(f"{name}={public_key_text(key)}")


# --- the check, by itself -------------------------------------------------------------------


def test_a_signature_counts_for_its_principal_and_workflow_id_only() -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    required = PrincipalSignatures(starters(key), required=True)
    signed = sign_principal(DANA, key, workflow_id="run-1")

    assert required.verdict(DANA, signed, workflow_id="run-1") == (None, "front")
    # The same principal written out in full (its defaults given) is the same principal.
    spelled = Principal.model_validate(DANA.model_dump())
    assert required.verdict(spelled, signed, workflow_id="run-1") == (None, "front")
    for principal, workflow_id, signature in (
        (DANA.model_copy(update={"scopes": ["orders:read", "orders:write"]}), "run-1", signed),
        (DANA.model_copy(update={"tenant": "globex"}), "run-1", signed),
        (DANA, "run-2", signed),
        (DANA, "run-1", sign_principal(DANA, other, workflow_id="run-1")),
    ):
        problem, signer = required.verdict(principal, signature, workflow_id=workflow_id)
        assert problem is not None and "no starter's signature" in problem and signer is None
    problem, _ = required.verdict(DANA, None, workflow_id="run-1")
    assert problem is not None and problem.startswith("unsigned: ") and "front" in problem
    assert required.verdict(DANA, "not base64!", workflow_id="run-1")[0] == (
        "principal_signature is not base64"
    )

    # Optional: an unsigned principal is taken; a signature that is given must hold.
    optional = PrincipalSignatures(starters(key), required=False)
    assert optional.verdict(DANA, None, workflow_id="run-1") == (None, None)
    assert optional.verdict(DANA, signed, workflow_id="run-2")[0] is not None
    # No starter keys: principals are taken as given (today's default).
    assert PrincipalSignatures().verdict(DANA, signed, workflow_id="run-2") == (None, None)


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
    scripted_provider.register(Script(name=run_id, turns=[ScriptTurn(text="done")]))
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
async def test_a_run_with_its_principal_signed_for_it_starts(
    client: Client,
    signing_worker: Settings,
    scripted_provider: ScriptedProvider,
    starter_key: Ed25519PrivateKey,
    run_id: str,
) -> None:
    run = answering(scripted_provider, run_id)
    handle = await start_run(
        client, run, id=run_id, task_queue=signing_worker.task_queue, principal_key=starter_key
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    # The worker's verdict is in history (the describe_run activity's result), for replay.
    events = [e async for e in handle.fetch_history_events()]
    described = activity_result(events, "describe_run")
    assert described["principal"] == {"problem": "", "signer": "front"}


@pytest.mark.integration
async def test_a_tampered_principal_or_a_signature_for_another_run_fails_at_start(
    client: Client,
    signing_worker: Settings,
    scripted_provider: ScriptedProvider,
    starter_key: Ed25519PrivateKey,
    run_id: str,
) -> None:
    run = answering(scripted_provider, run_id)
    signed = sign_principal(DANA, starter_key, workflow_id=run_id)
    admin = DANA.model_copy(update={"scopes": ["orders:read", "orders:admin"]})
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("tampered", {"principal": admin, "principal_signature": signed}, "no starter's"),
        (
            "other-run",
            {"principal_signature": sign_principal(DANA, starter_key, workflow_id="elsewhere")},
            "no starter's",
        ),
        ("unsigned", {}, "unsigned: this worker takes only principals signed by a starter"),
    ]
    for suffix, update, said in cases:
        message = await refusal(
            client, signing_worker, f"{run_id}-{suffix}", run.model_copy(update=update)
        )
        assert message.startswith("invalid AgentRunInput: principal 'dana' (tenant 'acme'): ")
        assert said in message, message
    assert not [r for r in scripted_provider.requests if r["script"] == run_id]  # no model call


@pytest.mark.integration
async def test_a_delegated_child_is_checked_against_its_root_runs_signature(
    client: Client,
    signing_worker: Settings,
    scripted_provider: ScriptedProvider,
    starter_key: Ed25519PrivateKey,
    run_id: str,
) -> None:
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(tool_calls=[call("call_d", "delegate", task="Say done.", tools=[])]),
                ScriptTurn(text="The helper says: {{call_d.output}}"),
            ],
        )
    )
    scripted_provider.register(Script(name=f"{run_id}-child", turns=[ScriptTurn(text="done")]))
    run = AgentRunInput(
        task="Ask a helper.",
        provider="openai-chat",
        model=run_id,
        delegate_model=f"{run_id}-child",
        tools=["delegate"],
        principal=DANA,
    )
    handle = await start_run(
        client, run, id=run_id, task_queue=signing_worker.task_queue, principal_key=starter_key
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    child = client.get_workflow_handle(f"{run_id}/delegate/call_d", result_type=AgentRunResult)
    assert (await result_of(child)).output == "done"
    assert result.output == "The helper says: done"


@pytest.mark.integration
async def test_agentloop_run_key_signs_the_principal(
    client: Client,
    signing_worker: Settings,
    scripted_provider: ScriptedProvider,
    run_id: str,
    tmp_path: Path,
) -> None:
    made = await agentloop("keys", "new", "front", "--dir", str(tmp_path), env=process_env())
    assert made.returncode == 0, made.explain()
    (line,) = made.stdout.splitlines()
    # A worker taking the principals that key signs (the line `keys new` printed).
    worker = signing_worker.model_copy(
        update={"starter_keys": line, "task_queue": f"{signing_worker.task_queue}-cli"}
    )
    answering(scripted_provider, run_id)
    env = process_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        AGENT_LOOP_TASK_QUEUE=worker.task_queue,
    )
    args = ["run", "Say done.", "--model", run_id, "--subject", "dana", "--follow"]
    async with running_worker(client, worker):
        signed = await agentloop(
            *args, "--id", run_id, "--key", str(tmp_path / "front.pem"), env=env, cwd=tmp_path
        )
        unsigned = await agentloop(*args, "--id", f"{run_id}-unsigned", env=env, cwd=tmp_path)
    assert signed.returncode == 0, signed.explain()
    assert_no_traceback(unsigned)
    assert unsigned.returncode != 0, unsigned.explain()
    assert "principal 'dana'" in unsigned.stdout + unsigned.stderr, unsigned.explain()
