"""What checking a value against a JSON Schema may cost is bounded before and while it runs:
a schema whose `$ref`/`allOf` fan out is refused where it arrives (`schema_work`), and a check
under way stops after its share of steps."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from agentloop.activity_io import CallModelResult
from agentloop.demo.mcp_server import fanning_schema
from agentloop.events import ModelOutput, ToolResult
from agentloop.policies.schema_cost import MAX_SCHEMA_WORK, schema_cost_problem, schema_work
from agentloop.policies.validation import (
    MAX_CHECK_STEPS,
    schema_problems,
)
from agentloop.tool_spec import ToolSpec
from agentloop.workflows import loop
from tests.loop.test_loop import T0, call, new_state

BINARY_TREE = {
    "type": "object",
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "op": {"type": "string"},
                "left": {"$ref": "#/$defs/node"},
                "right": {"$ref": "#/$defs/node"},
            },
        }
    },
    "properties": {"expression": {"$ref": "#/$defs/node"}},
}
ANY_JSON = {
    "type": "object",
    "$defs": {
        "value": {
            "anyOf": [
                {"type": "string"},
                {"type": "number"},
                {"type": "array", "items": {"$ref": "#/$defs/value"}},
                {"type": "object", "additionalProperties": {"$ref": "#/$defs/value"}},
            ]
        }
    },
    "properties": {"data": {"$ref": "#/$defs/value"}},
}


class Address(BaseModel):
    street: str
    city: str


class Booking(BaseModel):
    guest: str
    home: Address
    stops: list[Address]


def list_of_fanning(steps: int) -> dict[str, Any]:
    defs = {**fanning_schema(steps)["$defs"], f"s{steps}": {"type": "string"}}
    return {
        "type": "object",
        "$defs": defs,
        "properties": {"xs": {"type": "array", "items": {"$ref": "#/$defs/s0"}}},
    }


@pytest.mark.parametrize(
    "schema",
    [
        BINARY_TREE,
        ANY_JSON,
        Booking.model_json_schema(),
        # The widest schema of the largest size taken: 3,000 properties, 64,000 characters.
        {"type": "object", "properties": {f"p{i:04d}": {"type": "string"} for i in range(3000)}},
    ],
    ids=["binary tree", "any JSON", "pydantic", "3,000 properties"],
)
def test_schemas_people_write_cost_little_to_check(schema: dict[str, Any]) -> None:
    work = schema_work(schema)
    assert work is not None and work <= MAX_SCHEMA_WORK
    assert schema_cost_problem(schema) is None


def test_a_schema_that_fans_out_is_counted_exactly_then_refused() -> None:
    # Each step names the next twice: every step doubles the count.
    assert [schema_work(fanning_schema(n)) for n in (9, 10, 11)] == [
        2**11 - 2,
        2**12 - 2,
        2**13 - 2,
    ]
    assert schema_work(fanning_schema(40)) == MAX_SCHEMA_WORK + 1
    assert len(json.dumps(fanning_schema(40))) < 3_000
    problem = schema_cost_problem(fanning_schema(40))
    assert problem is not None and "more than 20,000 schema nodes" in problem


def test_a_ref_going_round_in_place_is_refused_and_one_going_down_is_not() -> None:
    in_place = {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}}}
    assert schema_work({**in_place, "$ref": "#/$defs/a"}) is None
    assert "loops back" in (schema_cost_problem({"$ref": "#"}) or "")
    down = {"type": "array", "items": {"$ref": "#"}}
    assert schema_work(down) == 2 * 32 + 1  # one level per value level, 32 at most


def test_a_check_stops_after_its_steps_and_refuses() -> None:
    # 2,047 schema nodes for each member: cheap to count, dear for a long list.
    schema = list_of_fanning(9)
    assert schema_cost_problem(schema) is None
    arguments = {"xs": ["a"] * 60}
    assert schema_problems(schema, arguments) == []
    [problem] = schema_problems(schema, arguments, steps=MAX_CHECK_STEPS)
    assert problem.endswith(f"takes more than {MAX_CHECK_STEPS:,} steps")
    # Within its steps, a check finds what it always found.
    assert schema_problems(schema, {"xs": [1]}, steps=MAX_CHECK_STEPS)


def test_a_model_outputs_calls_share_the_steps_and_the_dear_one_is_refused() -> None:
    heavy = ToolSpec(name="get_weather", parameters=list_of_fanning(9))
    state = new_state()
    state.tools["get_weather"] = heavy
    dear = call("c_dear", "get_weather", xs=["a"] * 30)
    cheap = call("c_cheap", "get_weather", xs=["a"])
    output = ModelOutput(stop="tool_calls", tool_calls=[dear, cheap])
    step = loop.decide(state, T0)
    loop.start_model_call(state, step)  # type: ignore[arg-type]
    loop.record_model_output(state, CallModelResult(head="h1", output=output), T0)
    assert state.batch is not None
    refused: dict[str, ToolResult] = state.batch.results
    decisions = {call_id: record.decision for call_id, record in state.calls.items()}
    # 30 x 2,050 steps is past the half of 100,000 each call has; 1 x 2,050 is not.
    assert list(refused) == ["c_dear"]
    assert "takes more than 50,000 steps" in refused["c_dear"].content
    assert decisions == {"c_dear": "invalid_arguments", "c_cheap": "allowed"}


def test_a_subschema_naming_another_draft_is_still_checked_on_re2_within_the_steps() -> None:
    """jsonschema picks a subschema's validator by its `$schema`: one such key used to check
    the rest with Python's backtracking `re` and no step count."""
    draft7 = "http://json-schema.org/draft-07/schema#"
    # A lookahead: Python's `re` runs it, RE2 does not (nor anything that backtracks).
    lookahead = {
        "type": "object",
        "properties": {"p": {"$schema": draft7, "type": "string", "pattern": "(?=a)a"}},
    }
    [problem] = schema_problems(lookahead, {"p": "a"}, steps=1_000)
    assert problem.startswith("the arguments could not be checked") and "(?=" in problem
    items = {"$schema": draft7, "type": "array", "items": {"type": "integer"}}
    listed = {"type": "object", "properties": {"xs": items}}
    [refused] = schema_problems(listed, {"xs": list(range(5_000))}, steps=10)
    assert "takes more than 10 steps" in refused


def test_unique_items_costs_what_comparing_every_pair_does() -> None:
    schema = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}
    few = {"xs": [{"n": i} for i in range(300)]}
    many = {"xs": [{"n": i} for i in range(8_000)]}  # 16 million comparisons: refused unmade
    assert schema_problems(schema, few, steps=MAX_CHECK_STEPS) == []
    [problem] = schema_problems(schema, many, steps=MAX_CHECK_STEPS)
    assert "takes more than 100,000 steps" in problem


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"$defs": {"a": {"$anchor": "a"}}, "$ref": "#/$defs/a"}, "it uses $anchor"),
        ({"properties": {"p": {"$ref": "#a1"}}, "a1": {}}, "no JSON pointer within it"),
        ({"$defs": {"inner": {"$id": "urn:inner", "$ref": "#/x"}}}, "an $id below its root"),
        ({"$dynamicRef": "#meta"}, "it uses $dynamicRef"),
    ],
)
def test_refs_resolved_elsewhere_than_the_count_follows_them_are_refused(
    schema: dict[str, Any], problem: str
) -> None:
    assert problem in (schema_cost_problem(schema) or "")


def test_unevaluated_properties_count_the_branches_they_check_again() -> None:
    # Each level's anyOf branches are checked twice (once for the annotations): 2^depth.
    node = {
        "anyOf": [{"type": "string"}, {"properties": {"next": {"$ref": "#/$defs/node"}}}],
        "unevaluatedProperties": False,
    }
    schema = {"$defs": {"node": node}, "$ref": "#/$defs/node"}
    assert schema_work(schema) == MAX_SCHEMA_WORK + 1
    without = {"$defs": {"node": {"anyOf": node["anyOf"]}}, "$ref": "#/$defs/node"}
    assert (schema_work(without) or 0) < 1_000
