"""Property tests (issue #18): generated JSON thrown at what takes outside input, the run's
input, every signal and the update, and generated model output thrown at the adapters'
argument parsing and at validation. Nothing generated may raise anything but the refusal its
path promises; against a real dev server, no generated case may leave a failed or timed-out
workflow task in history."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import RawValue

from agentloop.adapters._shared import ArgumentsError, parse_arguments
from agentloop.contract import WORKFLOW_NAME, AgentRunInput, RunStatusView
from agentloop.demo.tools import EXAMPLE_TOOLS
from agentloop.events import ToolCall
from agentloop.policies.checks import input_problem
from agentloop.policies.completion import check_output
from agentloop.policies.validation import Allowed, Refused, validate_call
from agentloop.workflows.inbound import SIGNAL_SHAPES, InboundRefused, parse
from tests.live import Live
from tests.loop.test_hardening import assert_never_wedged, paused_for_approval
from tests.support import result_of

SPECS = {tool.spec.name: tool.spec for tool in EXAMPLE_TOOLS}
FAST = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=30,
)
"""JSON-like values: what a client could send, of any shape."""
near_miss = st.fixed_dictionaries(
    {},
    optional={
        "call_id": scalars,
        "args_digest": scalars,
        "approved": scalars,
        "approver": scalars,
        "reason": scalars,
        "outcome": st.sampled_from(["applied", "not_applied", "maybe"]) | scalars,
        "operator": scalars,
        "note": scalars,
        "text": scalars,
        "sender": scalars,
    },
)
"""Objects with the signals' own field names, and values of any type."""
payloads = json_values | near_miss


def raw(value: Any) -> RawValue:
    return RawValue(
        Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode("utf-8"))
    )


def deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@FAST
@given(name=st.sampled_from([*SIGNAL_SHAPES, "unknown"]), value=payloads)
def test_a_signal_payload_is_parsed_or_refused_with_a_reason(name: str, value: Any) -> None:
    try:
        parsed = parse(name, [raw(value)])
    except InboundRefused as refused:
        assert refused.reason and len(refused.shown) <= 200
    else:
        assert isinstance(parsed, SIGNAL_SHAPES[name])


@FAST
@given(data=st.binary(max_size=200) | st.sampled_from([deep(50_000).encode(), b"\xff\xfe", b"{"]))
def test_bytes_that_are_not_json_are_refused_unparsed(data: bytes) -> None:
    payload = RawValue(Payload(metadata={"encoding": b"json/plain"}, data=data))
    with contextlib.suppress(InboundRefused):  # nothing else may escape
        parse("approve", [payload])


@FAST
@given(value=payloads)
def test_a_run_input_is_valid_or_refused_naming_a_field(value: Any) -> None:
    try:
        run_input = AgentRunInput.model_validate(value)
    except ValidationError:
        return
    problem = input_problem(run_input)
    assert problem is None or problem.startswith("output_schema")


@FAST
@given(
    text=st.text(max_size=300)
    | st.sampled_from(
        [
            deep(50_000),
            '{"a": 1, "a": 2}',  # duplicate keys
            '{"a": "\\ud800"}',  # a lone surrogate escape
            '{"a": NaN}',
            "x" * 300_000,
        ]
    )
)
def test_model_arguments_parse_to_an_object_or_are_refused(text: str) -> None:
    try:
        arguments = parse_arguments(text)
    except ArgumentsError:
        return
    assert isinstance(arguments, dict)


@FAST
@given(
    tool=st.sampled_from(sorted(SPECS)),
    arguments=st.dictionaries(st.text(max_size=20), json_values, max_size=6),
)
def test_validation_allows_or_refuses_every_call_at_bounded_cost(
    tool: str, arguments: dict[str, Any]
) -> None:
    call = ToolCall(call_id="c1", name=tool, arguments=arguments)
    verdict = validate_call(call, SPECS, set(SPECS))
    assert isinstance(verdict, Allowed | Refused)
    if isinstance(verdict, Refused):
        assert len(verdict.message) < 2_000


@FAST
@given(text=st.text(max_size=200) | st.sampled_from([deep(50_000), "[" * 40 + "]" * 40]))
def test_a_final_answer_is_accepted_or_refused_never_raising(text: str) -> None:
    parsed, problems = check_output({"type": "array"}, text)
    assert problems or isinstance(parsed, list)


# --- against the real server -----------------------------------------------------------------


def examples(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """`count` values drawn by hypothesis (deterministically), to send to a running server."""
    drawn: list[Any] = []

    @settings(max_examples=count, derandomize=True, database=None, deadline=None)
    @given(strategy)
    def draw(value: Any) -> None:
        drawn.append(value)

    draw()
    return drawn


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_generated_signals_and_updates_never_wedge_a_run(live: Live, run_id: str) -> None:
    handle = await paused_for_approval(live.client, live.worker, live.provider, run_id)
    cases = examples(
        st.tuples(st.sampled_from(["approve", "resolve", "message", "nope"]), payloads), 60
    )
    for name, value in cases:
        await handle.signal(name, value)
    for value in examples(payloads, 15):
        with contextlib.suppress(WorkflowUpdateFailedError):  # rejected, naming the field
            await handle.execute_update("decide_approval", value)
    view = await handle.query("status", result_type=RunStatusView)
    assert view.phase == "awaiting_approval"  # still waiting, still answering
    assert len(view.refused_decisions) >= 50
    await handle.signal("cancel")
    result = await result_of(handle)
    assert result.status == "cancelled"
    await assert_never_wedged(handle)


@pytest.mark.integration
async def test_generated_run_inputs_never_wedge_a_run(live: Live, run_id: str) -> None:
    inputs = examples(
        payloads
        | st.builds(
            lambda extra: {"task": "t", "provider": "openai-chat", "model": "nope", **extra},
            st.dictionaries(
                st.sampled_from(["limits", "output_schema", "approval_timeout_seconds", "tools"]),
                json_values,
                max_size=2,
            ),
        ),
        25,
    )
    for index, value in enumerate(inputs):
        handle = await live.client.start_workflow(
            WORKFLOW_NAME, value, id=f"{run_id}-{index}", task_queue=live.worker.task_queue
        )
        # InvalidInput naming the field, or a model that is not there: an ending either way.
        with contextlib.suppress(WorkflowFailureError):
            await result_of(handle)
        await assert_never_wedged(handle)
