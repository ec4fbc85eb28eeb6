"""Signed answers and cancels (issue #44, item 2): where the workers take only signed
decisions (approver keys, which production mode requires), a person's answer (`message`) and a
`cancel` count only when signed by the key of the name they give, for this run chain and
content; an unsigned or badly signed one is refused by the run and recorded with the reason,
never taken. The check runs in the worker (`check_word`); the workflow records the verdict."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, WorkflowHandle

from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    CancelRequest,
    Principal,
    RefusedSignal,
    ResolveRequest,
    UserMessage,
)
from agentloop.run_client import RunClient
from agentloop.runtime.config import ConfigError, Settings
from agentloop.runtime.signing import ApproverKeys, sign_word, word_bytes
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.signed_words import word_of
from agentloop.worker import running_worker
from tests.cli.test_cli import agentloop
from tests.crash.test_exactly_once import (
    CALL_ID,
    LOOKUP_OUTAGE,
    RESERVE,
    run_input,
    the_call,
    write_script,
)
from tests.live import Servers, agent_input
from tests.loop.test_hardening import assert_never_wedged, refusals
from tests.people.test_signed_approvals import (  # noqa: F401  (the fixture)
    INTRUDER,
    KEYS,
    LEAD,
    lead_key_for_the_cli,
    signing_worker,
)
from tests.support import (
    result_of,
    scheduled_activity_types,
    start_run,
    wait_for_phase,
    wait_for_status,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
QUESTION = "Refund 5,000 EUR to account X? (yes/no)"


def answer(sender: str = "workshop-lead", text: str = "yes") -> UserMessage:
    return UserMessage(text=text, sender=sender)


def word_problem(word: UserMessage | CancelRequest, run: str = "run-1") -> str | None:
    return KEYS.word_problem(word_of(word), workflow_id="wf-1", run=run, now=NOW)


Word = TypeVar("Word", UserMessage, CancelRequest)


def signed(word: Word, key: Ed25519PrivateKey = LEAD, run: str = "run-1") -> Word:
    return sign_word(word, key, workflow_id="wf-1", run=run, now=NOW)


# --- the check itself ------------------------------------------------------------------------


def test_an_answer_or_cancel_counts_only_signed_by_the_key_of_the_name_it_gives() -> None:
    cancel = CancelRequest(reason="wrong customer", requested_by="workshop-lead")
    assert word_problem(signed(answer())) is None
    assert word_problem(signed(cancel)) is None
    assert "unsigned: this worker takes only signed messages" in (word_problem(answer()) or "")
    assert "unsigned: this worker takes only signed cancels" in (word_problem(cancel) or "")
    assert "unsigned: this worker takes only signed cancels" in (
        word_problem(CancelRequest(reason="stop")) or ""
    )
    anonymous = signed(cancel).model_copy(update={"requested_by": ""})
    assert word_problem(anonymous) == "a signed cancel names who signed it"
    assert "no approver key is configured for 'ceo'" in (word_problem(signed(answer("ceo"))) or "")
    assert "the signature is not workshop-lead's" in (
        word_problem(signed(answer(), INTRUDER)) or ""
    )
    assert "the signature is not" in (word_problem(signed(answer()), run="run-2") or "")
    assert "expired" in (
        KEYS.word_problem(
            word_of(signed(answer())), workflow_id="wf-1", run="run-1", now=NOW + timedelta(hours=1)
        )
        or ""
    )


def test_an_answer_changed_after_signing_does_not_count() -> None:
    good = signed(answer())
    assert "the signature is not workshop-lead's" in (
        word_problem(good.model_copy(update={"text": "no"})) or ""
    )
    assert "no approver key is configured for 'other'" in (
        word_problem(good.model_copy(update={"sender": "other"})) or ""
    )


def test_a_cancel_reason_changed_after_signing_does_not_count() -> None:
    good = signed(CancelRequest(reason="wrong customer", requested_by="workshop-lead"))
    tampered = good.model_copy(update={"reason": "anything"})
    assert "the signature is not workshop-lead's" in (word_problem(tampered) or "")


def test_a_message_signature_binds_the_text_by_digest_and_never_passes_for_a_cancel() -> None:
    said = word_bytes(word_of(signed(answer(text="x" * 100_000))), workflow_id="w", run="r")
    assert len(said) < 400  # the worker is asked with the digest, not the text
    message = signed(answer())
    cancel = CancelRequest(
        requested_by="workshop-lead", expires_at=message.expires_at, signature=message.signature
    )
    assert "the signature is not" in (word_problem(cancel) or "")


def test_unsigned_words_go_out_as_before_and_without_keys_count_as_given() -> None:
    assert answer().model_dump(mode="json") == {"text": "yes", "sender": "workshop-lead"}
    assert CancelRequest(reason="r").model_dump(mode="json") == {"reason": "r"}
    assert (
        ApproverKeys.parse(None).word_problem(
            word_of(answer("ceo")), workflow_id="w", run="r", now=NOW
        )
        is None
    )


# --- against a real dev server ------------------------------------------------------------------


def asking(name: str) -> tuple[AgentRunInput, Script]:
    """A run that asks twice, one question after the other, then answers."""

    def ask(call_id: str) -> ScriptTurn:
        question = {"question": QUESTION}
        return ScriptTurn(
            tool_calls=[ScriptedToolCall(id=call_id, name="ask_user", arguments=question)]
        )

    turns = [ask("c_q1"), ask("c_q2"), ScriptTurn(text="Refunded.")]
    return agent_input(
        name,
        "openai-chat",
        "Refund the customer if the lead says so.",
        [],
        principal=Principal(subject="p-alice"),
    ), Script(name=name, turns=turns)


async def asked(handle: WorkflowHandle[Any, AgentRunResult], turn: int) -> None:
    await wait_for_status(
        handle, lambda v: v.phase == "awaiting_input" and v.turn == turn, f"question {turn}"
    )


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_signed_mode_refuses_unsigned_answers_and_cancels_and_takes_signed_ones(
    client: Client,
    signing_worker: Settings,  # noqa: F811
    scripted_provider: ScriptedProvider,
    run_id: str,
    tmp_path: Path,
) -> None:
    run_input, script = asking(run_id)
    scripted_provider.register(script)
    handle = await start_run(client, signing_worker, run_id, run_input)
    await asked(handle, 1)
    run = RunClient(client, run_id)
    first = (await run.status()).run_chain[0]

    # Issue #44: a keyless client answered "yes" in the name of `ceo`, and cancelled at will.
    await run.answer(answer("ceo", "yes, approved"))
    await run.cancel(CancelRequest(reason="because I can"))
    forged = sign_word(answer(), INTRUDER, workflow_id=run_id, run=first)
    verdict = await run.deliver(forged)
    assert not verdict.accepted and "the signature is not workshop-lead's" in verdict.reason
    records = await refusals(handle, 3)
    assert [(r.signal, r.payload) for r in records if isinstance(r, RefusedSignal)] == [
        ("message", "ceo: yes, approved"),
        ("cancel", "someone: because I can"),
        ("message", "workshop-lead: yes"),
    ]
    reasons = [r.refused_because for r in records]
    assert reasons[0].startswith("unsigned: this worker takes only signed messages")
    assert reasons[1].startswith("unsigned: this worker takes only signed cancels")
    view = await run.status()
    assert (view.phase, view.turn, view.question) == ("awaiting_input", 1, QUESTION)

    # Signed by the lead's key for this run chain, the answer counts (the update says so).
    verdict = await run.deliver(sign_word(answer(), LEAD, workflow_id=run_id, run=first))
    assert verdict.accepted, verdict.reason
    await asked(handle, 2)

    # `agentloop cancel --key --by` signs for the run chain; the run stops cancelled.
    lead_pem, env = lead_key_for_the_cli(client, signing_worker, tmp_path)
    cancelled = await agentloop(
        "cancel", run_id, "--reason", "the customer withdrew", "--by", "workshop-lead",
        "--key", str(lead_pem), "--json", env=env,
    )  # fmt: skip
    assert cancelled.returncode == 0, cancelled.explain()
    assert json.loads(cancelled.stdout)["request"]["signature"]
    result = await result_of(handle)
    assert result.status == "cancelled", result.stop_reason
    assert result.stop_reason == "cancelled: the customer withdrew"
    [first_question, _] = result.calls
    assert json.loads(first_question.result_summary) == {"answer": "yes", "from": "workshop-lead"}
    await assert_never_wedged(handle)
    events = [e async for e in handle.fetch_history_events()]
    checks = [t for t in scheduled_activity_types(events) if t == "check_word"]
    assert len(checks) == 5  # three refused, two taken: each checked by the worker once


# --- who may settle an unknown write (issue #44, item 3) ----------------------------------------


def test_the_operators_role_is_a_list_of_names() -> None:
    assert Settings(operators=" night-ops, ops@acme ,night-ops").operator_names() == [
        "night-ops",
        "ops@acme",
    ]
    assert Settings().operator_names() == []
    with pytest.raises(ConfigError, match="AGENTLOOP_OPERATORS: 'night ops' is not a name"):
        Settings(operators="night ops").operator_names()


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_only_the_tools_approvers_and_the_operators_settle_an_unknown_write_unsigned_too(
    servers: Servers, worker_settings: Settings, run_id: str
) -> None:
    """Without keys a name counts as given, but only a name allowed to settle the write: the
    tool's approvers, and the workers' operators (`AGENTLOOP_OPERATORS`)."""
    settings = worker_settings.model_copy(
        update={"operators": "night-ops", "task_queue": f"operators-{run_id[-8:]}"}
    )
    async with running_worker(servers.client, settings):
        servers.provider.register(write_script(run_id, RESERVE, "night-ops says applied"))
        servers.service.inject_fault(RESERVE.write_endpoint, "commit_then_drop")
        servers.service.inject_fault(RESERVE.lookup_endpoint, "unavailable", count=LOOKUP_OUTAGE)
        handle = await start_run(servers.client, settings, run_id, run_input(run_id, RESERVE))
        await wait_for_phase(handle, "awaiting_approval")
        run = RunClient(servers.client, run_id)
        pending = (await run.status()).pending_approvals[0]
        decision = ApprovalDecision(
            call_id=CALL_ID, args_digest=pending.args_digest, approved=True, approver="x"
        )
        assert (await run.decide(decision)).accepted is False  # not workshop-lead: refused
        approved = decision.model_copy(update={"approver": "workshop-lead"})
        assert (await run.decide(approved)).accepted is True
        view = await wait_for_phase(handle, "awaiting_reconciliation")
        assert view.approval_signing == "unsigned"
        assert [u.approvers for u in view.unresolved] == [["workshop-lead", "night-ops"]]

        def word(operator: str) -> ResolveRequest:
            return ResolveRequest(call_id=CALL_ID, outcome="applied", operator=operator)

        refused = await run.deliver(word("mallory"))
        assert not refused.accepted
        assert refused.reason == (
            "'mallory' may not settle this write; approvers: workshop-lead, night-ops"
        )
        assert (await run.deliver(word("night-ops"))).accepted
        result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    call = the_call(result.calls)
    assert call.status == "confirmed_after_query" and call.resolution is not None
    assert call.resolution.operator == "night-ops"
    assert int(servers.service.records()["reservations"]) == 1
