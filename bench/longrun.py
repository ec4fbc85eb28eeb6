"""Long scripted runs: play one to the end, fetch its history, load its transcript."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory

from agentloop.contract import WORKFLOW_NAME, AgentRunInput, AgentRunResult
from agentloop.events import Event
from agentloop.runtime.config import Settings
from agentloop.store import Store, load_transcript, open_store
from agentloop.tools.contract import Tool
from agentloop.tools.plugins import load_toolbox
from agentloop.worker import running_worker


async def play(
    client: Client, task_queue: str, workflow_id: str, run_input: AgentRunInput
) -> tuple[AgentRunResult, WorkflowHistory]:
    """Run to the end; it must complete within one Temporal run (no continue-as-new), so the
    history fetched is the whole run."""
    result, chain = await play_chain(client, task_queue, workflow_id, run_input)
    if len(chain) > 1:
        raise RuntimeError(f"{workflow_id} continued as new: its history is split")
    return result, chain[0]


async def play_chain(
    client: Client, task_queue: str, workflow_id: str, run_input: AgentRunInput
) -> tuple[AgentRunResult, list[WorkflowHistory]]:
    """Run to the end, across continue-as-new; the history of every run of the chain."""
    handle = await client.start_workflow(
        WORKFLOW_NAME, run_input, id=workflow_id, task_queue=task_queue, result_type=AgentRunResult
    )
    result = await handle.result()  # follows the chain to its last run
    if result.status != "completed":
        raise RuntimeError(f"{workflow_id} ended {result.status}: {result.stop_reason}")
    return result, await chain_histories(client, workflow_id, handle.result_run_id)


async def chain_histories(
    client: Client, workflow_id: str, first_run_id: str | None
) -> list[WorkflowHistory]:
    """The histories of a run and of each run it continued as new into, in order."""
    histories: list[WorkflowHistory] = []
    run_id = first_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        continued = last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if continued
            else None
        )
    return histories


@dataclass
class Attempt:
    """A run played to its end, or given up on."""

    outcome: str
    """`completed`, the status it ended with, or why it was given up on."""
    seconds: float
    histories: list[WorkflowHistory]
    """Every run of its continue-as-new chain, as far as it got."""

    @property
    def completed(self) -> bool:
        return self.outcome == "completed"


async def attempt(
    client: Client,
    task_queue: str,
    workflow_id: str,
    run_input: AgentRunInput,
    timeout_seconds: float,
) -> Attempt:
    """Like `play_chain`, but a run that does not complete is reported, not raised: one still
    going after `timeout_seconds` (e.g. a workflow task failing and retried for ever, as with
    `PAYLOADS_TOO_LARGE`) is terminated."""
    handle = await client.start_workflow(
        WORKFLOW_NAME, run_input, id=workflow_id, task_queue=task_queue, result_type=AgentRunResult
    )
    started = time.perf_counter()
    try:
        result = await asyncio.wait_for(handle.result(), timeout_seconds)
        done = result.status == "completed"
        outcome = "completed" if done else f"{result.status}: {result.stop_reason}"
    except TimeoutError:
        outcome = f"not done after {timeout_seconds:.0f} s (terminated)"
        await client.get_workflow_handle(workflow_id).terminate("bench: timed out")
    except WorkflowFailureError as exc:
        outcome = f"failed: {exc.cause or exc}"
    seconds = time.perf_counter() - started
    histories = await chain_histories(client, workflow_id, handle.result_run_id)
    return Attempt(outcome, seconds, histories)


def history_bytes(histories: list[WorkflowHistory]) -> int:
    """Serialized size of every event of `histories`."""
    return sum(event.ByteSize() for history in histories for event in history.events)


async def transcript(store: Store, result: AgentRunResult) -> list[Event]:
    return await load_transcript(store, result.transcript_head)


@asynccontextmanager
async def worker_with_tools(
    client: Client, settings: Settings, task_queue: str, store_path: Path, extra: list[Tool]
) -> AsyncIterator[Store]:
    """The agentloop worker with the example tools and `extra` (a tool module like any
    team's), on its own task queue and store; yields the store to read transcripts from."""
    own = settings.model_copy(
        update={"task_queue": task_queue, "store_url": f"sqlite:///{store_path}"}
    )
    toolbox = load_toolbox(["agentloop.demo.tools"])
    for tool in extra:
        toolbox.registry.add(tool)
    store = open_store(own.store_url)
    try:
        async with running_worker(client, own, toolbox):
            yield store
    finally:
        await store.close()
