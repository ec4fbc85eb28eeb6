"""Pure parts of edit-then-approve and of how the inbox and the CLI say a deadline: the
approver's edit as written (`--set`, a merge patch), which arguments it changed, and a moment
next to its duration (the clock within a day, the date farther)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentloop.argument_edits import EditError, edited_arguments, json_object
from agentloop.inbox.reading import from_now
from agentloop.moments import clock_of
from agentloop.workflows.loop.edits import changed_fields

PROPOSED = {"amount": 500, "account": "A-1", "note": "refund", "meta": {"a": 1, "b": 2}}


def test_set_reads_json_values_and_keeps_other_text_as_text() -> None:
    edited = edited_arguments(PROPOSED, ["amount=450", "account=A-2", "flag=true", 'id="7"'])
    assert edited == {**PROPOSED, "amount": 450, "account": "A-2", "flag": True, "id": "7"}
    assert PROPOSED["amount"] == 500  # the proposed arguments are not changed in place


def test_a_merge_patch_replaces_merges_and_removes_before_set() -> None:
    patch = '{"amount": 1, "note": null, "meta": {"b": null, "c": 3}}'
    edited = edited_arguments(PROPOSED, ["amount=450"], patch)
    assert edited == {"amount": 450, "account": "A-1", "meta": {"a": 1, "c": 3}}


@pytest.mark.parametrize(
    ("settings", "patch", "said"),
    [
        (["amount"], None, "expected NAME=VALUE"),
        (["=3"], None, "expected NAME=VALUE"),
        ([], "{not json", "is not JSON"),
        ([], "[1, 2]", "must be a JSON object"),
    ],
)
def test_an_edit_that_cannot_be_read_says_why(
    settings: list[str], patch: str | None, said: str
) -> None:
    with pytest.raises(EditError, match=said):
        edited_arguments(PROPOSED, settings, patch)
    with pytest.raises(EditError, match="must be a JSON object"):
        json_object('"just text"')


def test_the_changed_fields_name_what_was_changed_added_or_removed() -> None:
    edited = {"amount": 450, "account": "A-1", "meta": {"a": 1, "b": 2}, "extra": None}
    assert changed_fields(PROPOSED, edited) == ["amount", "extra", "note"]
    assert changed_fields(PROPOSED, dict(PROPOSED)) == []


def test_a_moment_within_a_day_shows_its_clock_and_farther_its_date() -> None:
    now = datetime(2026, 12, 3, 15, 40, tzinfo=UTC)
    soon, tomorrow = now + timedelta(hours=3), now + timedelta(hours=27)
    assert clock_of(soon, now) == soon.astimezone().strftime("%H:%M")
    assert clock_of(tomorrow, now) == tomorrow.astimezone().strftime("%Y-%m-%d %H:%M")
    assert from_now(soon, now) == f"in 3 h 0 min ({clock_of(soon, now)})"
    assert from_now(tomorrow, now).startswith("in 1 d 3 h (2026-12-0")
    assert from_now(now - timedelta(seconds=1), now) == "now"
