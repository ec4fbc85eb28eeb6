"""What a run keeps of its own in a worker's cache (issue #21: waiting runs are cheap). A
tool's spec, its JSON Schema above all, was the largest part: each run held the copy decoded
for it. Runs now share the worker's copy of each spec."""

from __future__ import annotations

from pathlib import Path

from agentloop.cli.replay import load_history
from agentloop.tool_spec import ToolSpec, shared_specs
from bench import run_state

TRAVEL = Path(__file__).parents[1] / "histories" / "travel.json"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_equal_specs_decoded_apart_become_one_object_and_the_order_is_kept() -> None:
    weather = ToolSpec(name="get_weather", description="Weather", parameters=SCHEMA)
    train = ToolSpec(name="get_train", parameters={"type": "object"}, effect="read")
    first = [ToolSpec.model_validate_json(s.model_dump_json()) for s in (weather, train)]
    second = [ToolSpec.model_validate_json(s.model_dump_json()) for s in (weather, train)]
    assert first[0] is not second[0]
    one, other = shared_specs(first), shared_specs(second)
    assert list(one) == ["get_weather", "get_train"]
    assert all(one[name] is other[name] for name in one)
    assert one["get_weather"] == weather
    changed = weather.model_copy(update={"parameters": {"type": "object"}})
    assert shared_specs([changed])["get_weather"] is not one["get_weather"]


async def test_a_cached_run_holds_no_copy_of_its_tools_specs() -> None:
    state = await run_state.measure(load_history(TRAVEL))
    assert state.by_field.get("tools", 0) < 1024, state.by_field  # the dict, not the specs
    # About 24 KiB (the state of compensation, reminders and fallbacks included); with a copy
    # of its specs of its own, 7 KiB more.
    assert state.total_bytes < 27 * 1024, state.total_bytes
