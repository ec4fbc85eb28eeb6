"""The run client: everything outside the workflow that drives or reads a run goes through
`RunClient` (the CLI, the inbox, the testing kit), so a run's messages are sent by the names
the workflow takes them by (`agentloop.contract`'s constants), with the shapes they take, and
a run's start input is read one way, through continue-as-new.

    run = await RunClient.start(client, run_input, id="my-run")
    view = await run.status()
    verdict = await run.decide(decision)  # whether it counted
    verdict = await run.deliver(message)  # an answer, resolve or cancel: whether it counted
    async for event in run.watch():
        ...
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.workflow_streams import PollInput, PollResult, PublishEntry, PublishInput
from temporalio.service import RPCError, RPCStatusCode

from agentloop.client import first_run_of, start_run
from agentloop.contract import (
    APPROVE_SIGNAL,
    CANCEL_SIGNAL,
    DECIDE_UPDATE,
    DELIVER_UPDATE,
    MESSAGE_SIGNAL,
    RESOLVE_SIGNAL,
    STATUS_QUERY,
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    CancelRequest,
    Delivery,
    ResolveRequest,
    RunStatusView,
    UserMessage,
)
from agentloop.run_events import (
    PUBLISH_SIGNAL,
    TEXT_BATCH_SECONDS,
    TOPIC,
    RunEvent,
    wire_payload,
)
from agentloop.run_results import read_result

Handle = WorkflowHandle[Any, AgentRunResult]


class RunClient:
    """One run (a workflow id: every run of its chain, the newest first; or one `run_id` of
    it), as a client drives and reads it. Only `status`, `decide` and `watch` need a worker
    (a query, an update and the stream's poll query, which the run answers); the signals are
    taken by Temporal, and the start input and the result are read from history."""

    def __init__(self, client: Client, workflow_id: str, *, run_id: str | None = None) -> None:
        self.client = client
        self.id = workflow_id
        self.handle: Handle = client.get_workflow_handle(
            workflow_id, run_id=run_id, result_type=AgentRunResult
        )

    @classmethod
    async def start(
        cls, client: Client, run_input: AgentRunInput, *, id: str, **options: Any
    ) -> RunClient:
        """Start the run as `agentloop.start_run` does (`task_queue`, `indexed`,
        `principal_key` and Temporal's options are its)."""
        run = cls(client, id)
        run.handle = await start_run(client, run_input, id=id, **options)
        return run

    async def status(self, *, timeout: timedelta | None = None) -> RunStatusView:
        """The `status` query (answered by a worker: without one, it waits up to `timeout`)."""
        view: RunStatusView = await self.handle.query(
            STATUS_QUERY, result_type=RunStatusView, rpc_timeout=timeout
        )
        return view

    async def decide(self, decision: ApprovalDecision) -> ApprovalVerdict:
        """A decision through the `decide_approval` update: the verdict says whether it
        counted (raises `WorkflowUpdateFailedError` for one the run rejects unread)."""
        verdict: ApprovalVerdict = await self.handle.execute_update(
            DECIDE_UPDATE, decision, result_type=ApprovalVerdict
        )
        return verdict

    async def deliver(self, word: UserMessage | ResolveRequest | CancelRequest) -> ApprovalVerdict:
        """An answer, an operator's word or a cancel through the `deliver` update: the verdict
        says whether it counted, after the worker's check where it takes only signed ones
        (raises `WorkflowUpdateFailedError` for one the run rejects unread)."""
        if isinstance(word, UserMessage):
            delivery = Delivery(message=word)
        elif isinstance(word, ResolveRequest):
            delivery = Delivery(resolve=word)
        else:
            delivery = Delivery(cancel=word)
        verdict: ApprovalVerdict = await self.handle.execute_update(
            DELIVER_UPDATE, delivery, result_type=ApprovalVerdict
        )
        return verdict

    async def send_decision(self, decision: ApprovalDecision) -> None:
        """A decision through the `approve` signal: delivered is all it tells."""
        await self.handle.signal(APPROVE_SIGNAL, decision)

    async def answer(self, message: UserMessage) -> None:
        """The `message` signal: answers the run's question, or tells it something."""
        await self.handle.signal(MESSAGE_SIGNAL, message)

    async def resolve(self, request: ResolveRequest) -> None:
        """The `resolve` signal: an operator's word on a write whose outcome stayed unknown."""
        await self.handle.signal(RESOLVE_SIGNAL, request)

    async def cancel(self, request: CancelRequest) -> None:
        """The `cancel` signal."""
        await self.handle.signal(CANCEL_SIGNAL, request)

    async def publish(self, items: list[PublishEntry]) -> None:
        """Items to the run's stream, by the Workflow Streams publish signal: the worker's
        model text (the run keeps apart as foreign what the worker did not seal)."""
        await self.handle.signal(PUBLISH_SIGNAL, PublishInput(items=items))

    async def result(self) -> AgentRunResult:
        """The result, once the chain's last run has finished (also of a run that ended
        `failed`, whose workflow failed with it: `read_result`)."""
        return await read_result(self.handle)

    def watch(self, from_offset: int = 0) -> AsyncIterator[RunEvent]:
        """What the run publishes, as it happens (`watch`)."""
        return watch(self.client, self.id, from_offset)

    async def first_run_id(self) -> str:
        """The id of the first run of the chain (this run's own when it never continued)."""
        return first_run_of(await self.handle.describe())

    async def start_input(self, *, first_run_id: str | None = None) -> AgentRunInput | None:
        """What the run was started with, through continue-as-new: a run continued as new
        is started without it (the state it carries holds it), so it is read from the start
        of the chain's first run (`first_run_id`, found here when not given). Read from
        history, it is the same for a closed run, a running one and one whose worker is
        down, in one history page of one event (and a describe without `first_run_id`).
        Where the first run is no longer kept, it is what the newest run was handed in its
        state: its task and instructions then only their start (`MAX_INLINE_TEXT_CHARS`).
        None: the run was started without an input agentloop reads (it failed at its start).
        Raises RPCError NOT_FOUND for a run that does not exist."""
        first = first_run_id or await self.first_run_id()
        try:
            started = await self._started_with(first)
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
            started = await self._started_with(self.handle.run_id)
        return _input_of(started)

    async def _started_with(self, run_id: str | None) -> list[Any]:
        """The arguments `run_id` (None: the newest run) was started with, decoded."""
        handle = self.client.get_workflow_handle(self.id, run_id=run_id)
        async for event in handle.fetch_history_events(page_size=1):
            # The input and, in a run continued as new, the state it carries: no more.
            payloads = event.workflow_execution_started_event_attributes.input.payloads[:2]
            return list(await self.client.data_converter.decode(payloads))
        return []


def _input_of(started: list[Any]) -> AgentRunInput | None:
    """The run input among a run's start arguments: the first, or in a run continued as new
    (started with none) the `run_input` of the state it carries (the second)."""
    raw = started[0] if started else None
    if raw is None and len(started) > 1 and isinstance(started[1], dict):
        raw = started[1].get("run_input")
    try:
        return AgentRunInput.model_validate(raw)
    except ValidationError:
        return None


async def watch(client: Client, workflow_id: str, from_offset: int = 0) -> AsyncIterator[RunEvent]:
    """What the run publishes, as it happens (`agentloop.run_events`): the model's text as it
    streams, each call, result and wait, ending after the run's `done` (or once the run has
    closed without one), across continue-as-new without a gap; for a run that already ended,
    what it kept. Items are read from `from_offset`; when the run no longer keeps some of
    them, a `truncated` event says from where it goes on. Only the run's own items are
    yielded: what anyone else published to the stream (`FOREIGN_TOPIC`, kept apart by the
    run) is skipped, a `done` among it too.

        async for event in agentloop.watch(client, "my-run"):
            if event.kind == "text":
                print(event.delta, end="")
    """
    expected = from_offset
    async for offset, data in _stream_items(client, workflow_id, from_offset):
        event = _own_event(offset, data)
        if offset > expected:
            yield RunEvent(
                kind="truncated",
                offset=offset,
                stop_reason=f"items {expected} to {offset - 1} are no longer kept",
            )
        expected = offset + 1
        if event is None:
            continue
        yield event
        if event.kind == "done":
            return


def _own_event(offset: int, data: Any) -> RunEvent | None:
    """The run's own item at `offset` (`data` None: a foreign one), or None."""
    if data is None:
        return None
    try:
        return RunEvent.model_validate({**data, "offset": offset})
    except (ValidationError, TypeError):
        return None


STREAM_POLL = "__temporal_workflow_stream_poll"
"""The run's Workflow Stream read as a query: what it holds from an offset, at once."""
NOT_ANSWERED = frozenset(
    {
        RPCStatusCode.CANCELLED,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.FAILED_PRECONDITION,
        RPCStatusCode.RESOURCE_EXHAUSTED,
    }
)
"""How the server says a query was not answered this time (what the dev server calls "Timeout
expired" is CANCELLED): a worker too busy to answer in the server's time (a closed run is read
by its worker replaying it), a sticky worker that died and whose replacement has not taken the
run over yet, a first workflow task not done, a run's query buffer full (a run read hard by
others). A watch asks again; so do the tests' waits (`agentloop.testing.patience`)."""
IDLE_POLLS_PER_DESCRIBE = 8
"""A watcher that read nothing this many times asks Temporal whether the run has closed (a run
that ended without `done`, terminated say, publishes nothing more)."""


async def _stream_items(
    client: Client, workflow_id: str, from_offset: int
) -> AsyncIterator[tuple[int, Any]]:
    """The run's stream items by offset, its own as published and foreign ones as None, read
    with the stream's poll *query* every batch interval, never with its poll update.

    Why not the update (the SDK's `WorkflowStreamClient.subscribe`): an update is accepted in
    history, one per long poll, and a watch would grow the run's history with them. A query
    writes nothing to history and follows continue-as-new by itself: it goes to the
    workflow's newest run, which carries the stream. (A query can no longer split a run's
    workflow task: the run takes no local activity, see docs/concepts/activities.md.)"""
    handle = client.get_workflow_handle(workflow_id)
    payloads = client.data_converter.payload_converter
    offset, idle = from_offset, 0
    while True:
        try:
            result = await handle.query(
                STREAM_POLL, PollInput(topics=[], from_offset=offset), result_type=PollResult
            )
        except RPCError as exc:
            if exc.status not in NOT_ANSWERED:
                raise
            await asyncio.sleep(TEXT_BATCH_SECONDS)  # a busy worker or server: ask again
            continue
        for item in result.items:
            own = item.topic == TOPIC
            yield item.offset, payloads.from_payload(wire_payload(item.data)) if own else None
        offset = result.next_offset
        if result.more_ready:
            continue
        idle = 0 if result.items else idle + 1
        if idle and idle % IDLE_POLLS_PER_DESCRIBE == 0 and await _closed(handle):
            return
        await asyncio.sleep(TEXT_BATCH_SECONDS)


async def _closed(handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the workflow's newest run has closed (a run continued as new has not)."""
    status = (await handle.describe()).status
    return status is not None and status != WorkflowExecutionStatus.RUNNING
