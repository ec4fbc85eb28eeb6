"""A worker process killed with SIGKILL mid-tool: a new worker process finishes the run.

The worker runs as a real OS process here, so the kill is the real thing: no cleanup, no
goodbye to the server. The read tool's attempt is lost and re-run (reads are safe to redo);
the model still gets exactly one result per call id."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentloop.contract import AgentRunInput, AgentRunResult
from agentloop.demo.services import ExampleService
from agentloop.runtime.config import Settings
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from tests.support import result_of, start_run, wait_until, worker_env, worker_process

pytestmark = pytest.mark.integration


async def test_sigkill_while_a_read_is_in_flight(
    temporal_env: WorkflowEnvironment,
    client: Client,
    worker_settings: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    tmp_path: Path,
    run_id: str,
) -> None:
    task_queue = f"crash-{uuid.uuid4().hex[:8]}"
    settings = worker_settings.model_copy(update={"task_queue": task_queue})
    env = worker_env(client, settings, tmp_path / "store.db")
    scripted_provider.register(
        Script(
            name=run_id,
            turns=[
                ScriptTurn(
                    tool_calls=[
                        ScriptedToolCall(
                            id="call_train",
                            name="get_train_status",
                            arguments={"train_number": "G1234", "date": "2026-12-01"},
                        ),
                        ScriptedToolCall(
                            id="call_weather",
                            name="get_weather",
                            arguments={"city": "Shanghai", "date": "2026-12-01"},
                        ),
                    ],
                    expect_tool_results={"call_train": "G1234", "call_weather": "Shanghai"},
                ),
                ScriptTurn(text="{{call_train.train_number}} and {{call_weather.city}}"),
            ],
        )
    )
    run_input = AgentRunInput(
        task="train and weather",
        provider="openai-chat",
        model=run_id,
        tools=["get_train_status", "get_weather"],
    )
    result = await killed_mid_read(
        client, settings, env, run_id, run_input, scripted_provider, example_service, "trains"
    )

    assert result.status == "completed", result.stop_reason
    assert result.output == "G1234 and Shanghai"
    assert {c.call_id: c.status for c in result.calls} == {
        "call_train": "succeeded",
        "call_weather": "succeeded",
    }
    counts = example_service.stats()["counts"]
    # The lost attempt of the read ran again on the new worker; nothing ran a third time.
    assert counts["trains"] == 2
    assert counts["weather"] in (1, 2)
    assert scripted_provider.violations == []
    last = scripted_provider.requests[-1]["body"]["messages"]
    assert sorted(m["tool_call_id"] for m in last if m["role"] == "tool") == [
        "call_train",
        "call_weather",
    ]


async def killed_mid_read(
    client: Client,
    settings: Settings,
    env: dict[str, str],
    run_id: str,
    run_input: AgentRunInput,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    endpoint: str,
) -> AgentRunResult:
    """Start the run on a worker process, SIGKILL it once the (slowed) read of `endpoint` has
    reached the service, and let a fresh worker process finish the run."""
    scripted_provider.reset()
    example_service.reset()
    example_service.set_delay(endpoint, 2_000)
    try:
        async with worker_process(env) as first:
            handle = await start_run(client, settings, run_id, run_input)
            await wait_until(
                lambda: example_service.stats()["counts"][endpoint] == 1,
                f"the {endpoint} read to reach the service",
            )
            first.send_signal(signal.SIGKILL)
            await first.wait()
        example_service.set_delay(endpoint, 0)
        async with worker_process(env):
            return await result_of(handle)
    finally:
        example_service.set_delay(endpoint, 0)
