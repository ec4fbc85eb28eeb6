"""A run's tool specs travel into its first model call only; later calls name them by
reference, and the model still gets every declaration on every request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from agentloop.activity_io import MODEL_CALL, MODEL_CALL_BY_REF
from agentloop.scripted_provider import ScriptTurn
from agentloop.store import SqliteStore, StoreError
from agentloop.store.specs import ToolSpecCache
from agentloop.testing.turns import call as scripted_call
from agentloop.tool_spec import ToolSpec
from tests.live import Live, agent_input, scripted
from tests.support import result_of, start_run

WEATHER = {"city": "Shanghai", "date": "2026-12-01"}


async def test_specs_stored_once_are_found_by_any_worker(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    try:
        specs = [
            ToolSpec(name="get_weather", effect="read"),
            ToolSpec(name="reserve", effect="write"),
        ]
        ref = await ToolSpecCache().put(store, specs)
        assert ref == await ToolSpecCache().put(store, list(specs))  # content-addressed
        # A worker that did not store them reads them from the store.
        assert await ToolSpecCache().get(store, ref) == specs
        with pytest.raises(StoreError, match="missing"):
            await ToolSpecCache().get(store, "sha256:" + "0" * 64)
    finally:
        await store.close()


@pytest.mark.integration
@pytest.mark.usefixtures("clean_fakes")
async def test_only_the_first_model_call_carries_the_specs(live: Live, run_id: str) -> None:
    live.provider.register(
        scripted(
            run_id,
            *(
                ScriptTurn(tool_calls=[scripted_call("get_weather", f"call_{i}", **WEATHER)])
                for i in range(2)
            ),
            "done",
        )
    )
    run_input = agent_input(
        run_id, "openai-chat", "weather twice", ["get_train_status", "get_weather"]
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason

    calls = []
    for event in (await handle.fetch_history()).events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name in (MODEL_CALL, MODEL_CALL_BY_REF):
                payload = json.loads(scheduled.input.payloads[0].data)
                calls.append((scheduled.activity_type.name, payload, event.ByteSize()))
    assert [name for name, _, _ in calls] == [MODEL_CALL, MODEL_CALL_BY_REF, MODEL_CALL_BY_REF]
    first, *later = [payload for _, payload, _ in calls]
    assert [spec["name"] for spec in first["tools"]] == [
        "get_train_status",
        "get_weather",
        "read_artifact",
        "ask_user",
        "give_up",
    ]
    assert first["tools_ref"] is None
    assert all(p["tools"] == [] and p["tools_ref"].startswith("sha256:") for p in later)
    assert len({p["tools_ref"] for p in later}) == 1
    # What the history no longer carries on every turn.
    assert max(size for _, _, size in calls[1:]) < calls[0][2] - 2_000

    # The model was told about every tool on every request all the same.
    declared = [
        sorted(t["function"]["name"] for t in request["body"]["tools"])
        for request in live.provider.requests
        if request["body"].get("model") == run_id
    ]
    declared_names = ["ask_user", "get_train_status", "get_weather", "give_up", "read_artifact"]
    assert declared == [declared_names] * 3
