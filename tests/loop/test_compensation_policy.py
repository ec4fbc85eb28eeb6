"""The compensation decision as a pure function (`agentloop.policies.compensation`): what is
offered after which stop, in which order, under which policy, and what an undo is called with."""

from __future__ import annotations

import json

import pytest

from agentloop.contract import RunStatus
from agentloop.policies.compensation import (
    LeftAsIs,
    Offered,
    Written,
    plan_compensation,
    undo_arguments,
)

UNDO = {"booking_id": "b-1"}
WRITTEN = [
    Written("c1", "book_train", "succeeded", "cancel_booking", UNDO),
    Written("c2", "send_reply", "succeeded"),
    Written("c3", "book_hotel", "confirmed_after_query", "cancel_hotel", {"hotel": "h-1"}),
    Written("c4", "book_train", "unknown", "cancel_booking"),
    Written("c5", "book_car", "succeeded", "cancel_car", None, "no car id"),
]


def test_a_delivered_run_undoes_nothing() -> None:
    assert plan_compensation("completed", WRITTEN, "always", {}) == []


@pytest.mark.parametrize(
    "status", ["cancelled", "rejected", "blocked", "limit_reached", "failed", "denied"]
)
def test_every_other_stop_offers_the_undos_newest_first_and_leaves_the_rest_saying_why(
    status: RunStatus,
) -> None:
    assert plan_compensation(status, WRITTEN, "ask", {}) == [
        LeftAsIs("c5", "book_car", "its undo could not be prepared: no car id"),
        LeftAsIs(
            "c4",
            "book_train",
            "its outcome is unknown: an operator says whether it happened (resolve)",
        ),
        Offered("c3", "book_hotel", "cancel_hotel", {"hotel": "h-1"}, ask=True),
        LeftAsIs("c2", "send_reply", "no undo declared"),
        Offered("c1", "book_train", "cancel_booking", UNDO, ask=True),
    ]


def test_an_undo_the_principal_may_not_call_is_not_offered() -> None:
    denied = Written(
        "c1", "book_train", "succeeded", "cancel_booking", UNDO, undo_denied="no scope"
    )
    assert plan_compensation("cancelled", [denied], "always", {}) == [
        LeftAsIs("c1", "book_train", "its undo is not allowed: no scope")
    ]


def test_a_tools_policy_wins_over_the_runs() -> None:
    decided = plan_compensation(
        "blocked", WRITTEN[:3], "never", {"book_hotel": "always", "send_reply": "always"}
    )
    assert decided == [
        Offered("c3", "book_hotel", "cancel_hotel", {"hotel": "h-1"}, ask=False),
        LeftAsIs("c2", "send_reply", "no undo declared"),
        LeftAsIs("c1", "book_train", "compensate: never"),
    ]
    assert decided[0].undo_call_id == "undo-c3"  # type: ignore[union-attr]


CANCEL = {
    "type": "object",
    "properties": {"booking_id": {}, "reason": {}, "original_idempotency_key": {}},
    "required": ["booking_id"],
}


def test_an_undo_takes_what_the_result_names_then_the_arguments_then_the_key() -> None:
    result = json.dumps({"booking_id": "b-9", "status": "booked"})
    arguments = {"booking_id": "ignored", "reason": "duplicate", "traveller": "Ada"}
    assert undo_arguments(CANCEL, arguments, result, "wf/run/c1") == {
        "booking_id": "b-9",
        "reason": "duplicate",
        "original_idempotency_key": "wf/run/c1",
    }


def test_a_write_confirmed_by_lookup_gives_its_record() -> None:
    confirmed = json.dumps(
        {"confirmed": "the system of record has it", "record": {"booking_id": "b-7"}}
    )
    assert undo_arguments(CANCEL, {}, confirmed, "k")["booking_id"] == "b-7"  # type: ignore[index]


@pytest.mark.parametrize("result", ["not json", "[1, 2]", json.dumps({"id": "b-1"})])
def test_a_required_parameter_nothing_names_is_why_there_is_no_undo(result: str) -> None:
    assert undo_arguments(CANCEL, {}, result, "k") == (
        "neither the write's result nor its arguments name booking_id"
    )
