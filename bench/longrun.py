"""Long scripted runs: play one to the end, fetch its history, load its transcript."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Worker

from agentloop.activities.model import ModelActivities
from agentloop.activities.tools import ToolActivities
from agentloop.adapters import AdapterFactory
from agentloop.config import Settings
from agentloop.contract import WORKFLOW_NAME, AgentRunInput, AgentRunResult
from agentloop.events import Event
from agentloop.store import Store, load_transcript, open_store
from agentloop.tools.contract import Tool
from agentloop.tools.http import ServiceClient
from agentloop.tools.registry import default_registry
from agentloop.worker import ToolServices
from agentloop.workflows.agent_run import AgentRun


async def play(
    client: Client, task_queue: str, workflow_id: str, run_input: AgentRunInput
) -> tuple[AgentRunResult, WorkflowHistory]:
    """Run to the end; it must complete within one Temporal run (no continue-as-new), so the
    history fetched is the whole run."""
    handle = await client.start_workflow(
        WORKFLOW_NAME, run_input, id=workflow_id, task_queue=task_queue, result_type=AgentRunResult
    )
    result = await handle.result()
    if result.status != "completed":
        raise RuntimeError(f"{workflow_id} ended {result.status}: {result.stop_reason}")
    history = await handle.fetch_history()
    if any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        for e in history.events
    ):
        raise RuntimeError(f"{workflow_id} continued as new: its history is split")
    return result, history


async def transcript(store: Store, result: AgentRunResult) -> list[Event]:
    return await load_transcript(store, result.transcript_head)


@asynccontextmanager
async def worker_with_tools(
    client: Client, settings: Settings, task_queue: str, store_path: Path, extra: list[Tool]
) -> AsyncIterator[Store]:
    """A worker wired like `agentloop.worker.running_worker`, whose registry also has `extra`
    tools, on its own task queue and store; yields the store."""
    store = open_store(f"sqlite:///{store_path}")
    registry = default_registry()
    for tool in extra:
        registry.add(tool)
    timeout = aiohttp.ClientTimeout(total=settings.tool_http_timeout_seconds)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            example = ServiceClient(settings.example_service_url, session)
            model = ModelActivities(store, AdapterFactory(settings.provider_endpoints()))
            tools = ToolActivities(registry, ToolServices(example=example, store=store))
            activities: list[Callable[..., Any]] = [
                model.call_model,
                tools.describe_tools,
                tools.check_precondition,
                tools.run_tool,
                tools.lookup_outcome,
            ]
            worker = Worker(
                client, task_queue=task_queue, workflows=[AgentRun], activities=activities
            )
            async with worker:
                yield store
    finally:
        await store.close()
