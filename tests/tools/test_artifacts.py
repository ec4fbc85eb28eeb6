"""A large tool output never reaches the model whole: it is kept as an artifact, the model
gets a bounded preview with the reference, and `read_artifact` pages through the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from temporalio.testing import ActivityEnvironment

from agentloop.activity_io import RunToolInput
from agentloop.events import ToolResult
from agentloop.store import SqliteStore
from agentloop.tools.builtins import read_artifact
from agentloop.tools.contract import ToolContext
from agentloop.tools.decorator import tool
from agentloop.workflows import loop
from agentloop.workflows.loop import CallModel, LoopState
from tests.live import agent_input
from tests.loop.test_loop import T0, call, model_turn, tool_output
from tests.support import tool_activities

ONE_MB = 1_000_000


@tool(name="dump_logs", effect="read", max_result_chars=2_000)
async def DUMP(ctx: ToolContext[Any]) -> Any:
    # Distinct, escape-heavy lines so a wrong offset or a lost character would show.
    return "".join(f'line {i:06d} "quoted" é\n' for i in range(ONE_MB // 23 + 1))


async def test_a_one_megabyte_output_becomes_a_preview_and_pages(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    try:
        tools = tool_activities([DUMP], store)
        env = ActivityEnvironment()
        result: ToolResult = await env.run(
            tools.run_tool, RunToolInput(workflow_id="wf", call_id="c1", tool="dump_logs")
        )
        full = await DUMP(None)
        assert len(full) >= ONE_MB
        assert len(result.content) <= DUMP.spec.max_result_chars
        frame = json.loads(result.content)
        assert frame["truncated"] and frame["total_chars"] == len(full)
        assert frame["source"] == {"tool": "dump_logs", "call_id": "c1"}
        assert frame["artifact"] == result.artifact_ref
        assert full.startswith(frame["preview"]) and len(frame["preview"]) > 500

        # Page through everything with the built-in tool, 4000 characters at a time.
        pages, offset = [], 0
        while offset is not None:
            page: ToolResult = await env.run(
                tools.run_tool,
                RunToolInput(
                    workflow_id="wf",
                    call_id=f"r{offset}",
                    tool="read_artifact",
                    arguments={"ref": result.artifact_ref, "offset": offset, "limit": 4000},
                ),
            )
            body = json.loads(page.content)
            pages.append(body["text"])
            offset = body["next_offset"]
        assert "".join(pages) == full
    finally:
        await store.close()


def test_a_run_reads_only_its_own_artifacts() -> None:
    state = LoopState.start(
        agent_input("m", "anthropic", "t", []),
        [read_artifact.spec],
        T0,
    )
    mine, other = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    state.artifacts.append(mine)
    model_turn(
        state,
        tool_output(call("r1", "read_artifact", ref=mine), call("r2", "read_artifact", ref=other)),
    )
    step = loop.decide(state, T0)
    assert not isinstance(step, CallModel)
    assert state.batch is not None
    refused = state.batch.results["r2"]
    assert refused.status == "rejected" and "no artifact" in refused.content
    assert "r1" not in state.batch.results  # read_artifact needs no `tools` entry
