"""The redactors tool output passes through before the model and the store see it, the
placeholders the model may not send back, and who may read an original."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentloop
from agentloop.ledger import CallRecord
from agentloop.policies.placeholders import placeholder_problem
from agentloop.redaction import (
    DEFAULT_REDACT,
    MAX_SCANNED_CHARS,
    ORIGINAL_MEDIA_TYPE,
    original_record,
    placeholder,
    redact,
    redactor_names,
)
from agentloop.store import SqliteStore
from agentloop.store.originals import NotAReader, read_original
from agentloop.tools.options import ToolDefinitionError

VISA = "4111 1111 1111 1111"
NOT_LUHN = "4111 1111 1111 1112"
OPENAI_KEY = "sk-proj-" + "A1b2C3d4" * 4
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
IBAN = "DE89 3704 0044 0532 0130 00"
BAD_IBAN = "DE88 3704 0044 0532 0130 00"


def test_the_default_set_hides_card_numbers_and_api_keys_and_counts_them() -> None:
    text = f"card {VISA}, again 4111-1111-1111-1111; key {OPENAI_KEY} and {AWS_KEY}; a@b.io"
    found = redact(text, DEFAULT_REDACT)
    assert found.text == (
        "card [redacted:card_number], again [redacted:card_number]; key [redacted:api_key] "
        "and [redacted:api_key]; a@b.io"
    )
    assert found.counts == {"card_number": 2, "api_key": 2}


def test_checks_keep_false_alarms_out() -> None:
    text = f"order {NOT_LUHN}, iban {BAD_IBAN}, phone 0044 20 7946 0958"
    assert redact(text, ["card_number", "iban"]).counts == {}


def test_ibans_and_e_mail_addresses_when_asked() -> None:
    # Beside the defaults: the IBAN is found first, not half taken for a card number.
    kinds = [*DEFAULT_REDACT, "iban", "email"]
    found = redact(f"pay {IBAN} and write to ops.team+x@example.co.uk", kinds)
    assert found.text == "pay [redacted:iban] and write to [redacted:email]"
    assert found.counts == {"iban": 1, "email": 1}


def test_a_teams_redactor_runs_after_the_patterns_and_withholds_all_when_it_fails() -> None:
    def mask_ids(text: str) -> str:
        return text.replace("acc-7", placeholder("account"))

    def broken(text: str) -> str:
        raise RuntimeError("bug")

    found = redact(f"acc-7 paid with {VISA}", DEFAULT_REDACT, [mask_ids])
    assert found.text == "[redacted:account] paid with [redacted:card_number]"
    assert found.counts == {"card_number": 1, "mask_ids": 1}
    withheld = redact(f"acc-7 paid with {VISA}", (), [broken])
    assert withheld.text == "[redacted:broken] (the whole output: RuntimeError)"
    assert withheld.counts == {"broken": 1}


def test_a_tool_names_known_redactors_or_its_own_functions() -> None:
    with pytest.raises(ToolDefinitionError, match="no redactor phone"):

        @agentloop.tool(effect="read", redact=["phone"])
        async def look(ctx: agentloop.ToolContext[None], q: str) -> str:
            return q

    def mask(text: str) -> str:
        return text

    @agentloop.tool(effect="read", redact=["iban", mask])
    async def find(ctx: agentloop.ToolContext[None], q: str) -> str:
        return q

    assert find.spec.redact == ["iban"] and find.redactors == (mask,)


def test_the_scan_is_bounded() -> None:
    found = redact("x" * (MAX_SCANNED_CHARS + 10) + VISA, DEFAULT_REDACT)
    assert found.counts == {} and VISA not in found.text
    assert found.text.endswith(f"[cut: {len(VISA) + 10} characters past the redaction scan]")


def test_the_setting_names_redactors_or_none() -> None:
    assert redactor_names("card_number, email") == ["card_number", "email"]
    assert redactor_names("none") == [] and redactor_names("") == []


def test_a_placeholder_in_arguments_is_refused_with_what_to_do() -> None:
    problem = placeholder_problem({"to": {"card": "[redacted:card_number]"}})
    assert problem is not None
    assert "[redacted:card_number]" in problem and "Ask the user" in problem
    assert placeholder_problem({"card": "4111"}) is None


def test_the_ledger_shows_redaction_only_when_there_was_some() -> None:
    plain = CallRecord(call_id="c", tool="t").model_dump(mode="json")
    assert "redacted" not in plain and "redacted_original" not in plain
    hidden = CallRecord(call_id="c", tool="t", redacted={"api_key": 1}, redacted_original="r")
    assert hidden.model_dump(mode="json")["redacted"] == {"api_key": 1}


async def test_an_original_is_read_only_by_its_readers(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        data = original_record(VISA, workflow_id="w", call_id="c", tool="t", readers=["alice"])
        ref = await store.put_artifact(data, ORIGINAL_MEDIA_TYPE)
        assert await read_original(store, ref, "alice") == VISA
        with pytest.raises(NotAReader, match="only its approvers"):
            await read_original(store, ref, "mallory")
        # A plain artifact (what `read_artifact` pages through) is never read as an original.
        plain = await store.put_artifact(b"text", "text/plain")
        with pytest.raises(NotAReader, match="not a kept original"):
            await read_original(store, plain, "alice")
    finally:
        await store.close()
