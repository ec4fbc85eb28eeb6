"""Child runs: the `delegate` calls of a tool step, each a child `AgentRun` started beside the
step's reads. Workflow code (deterministic)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError

import agentloop.workflows.loop as loop
from agentloop.contract import (
    CANCEL_SIGNAL,
    WORKFLOW_NAME,
    AgentRunInput,
    AgentRunResult,
    CancelRequest,
)
from agentloop.events import ToolCall
from agentloop.run_failure import result_in
from agentloop.search import AGENT_PHASE, initial
from agentloop.workflows.loop import ChildOutcome, LoopState, RunTools, ToolOutcome
from agentloop.workflows.tool_activities import start_tool, tool_outcome
from agentloop.workflows.visibility import audit


async def run_with_children(
    state: LoopState, step: RunTools, children: dict[str, AgentRunInput]
) -> None:
    """Reads and child runs side by side. A child keeps its own slice of the deadline (its
    waits for humans excluded), so no timer here; a cancel reaches the children as their
    own `cancel`, and what they did is recorded before this run stops."""
    tools: dict[str, workflow.ActivityHandle[Any]] = {}
    runs: dict[str, workflow.ChildWorkflowHandle[Any, AgentRunResult]] = {}
    not_started: dict[str, str] = {}
    for call, spec in step.calls:
        child_input = children.get(call.call_id)
        if child_input is None:
            tools[call.call_id] = start_tool(
                call,
                spec,
                state.run_input.principal,
                "",
            )
            continue
        started = await _start_child(state, call, child_input)
        if isinstance(started, str):
            not_started[call.call_id] = started
        else:
            runs[call.call_id] = started
            audit(
                "delegation.started",
                turn=state.turn,
                call_id=call.call_id,
                child_workflow_id=runs[call.call_id].id,
                limits=child_input.limits.model_dump(mode="json"),
            )
    # Details only (no search attribute upsert here: that would be a new command).
    workflow.set_current_details(loop.details(state, workflow.now()))
    handles: list[asyncio.Future[Any]] = [*tools.values(), *runs.values()]
    try:
        await workflow.wait_condition(
            lambda: all(h.done() for h in handles) or state.cancel_reason is not None
        )
    except asyncio.CancelledError:
        # Temporal's cancel request: the children are told as by the `cancel` signal, and
        # what they did is recorded before this run stops (else Temporal would terminate
        # them, a write of theirs mid-flight).
        loop.record_cancel_request(state)
    stopped = not all(h.done() for h in handles)
    if stopped:
        for handle in tools.values():
            handle.cancel()
        for child in runs.values():
            if not child.done():
                await child.signal(
                    CANCEL_SIGNAL,
                    CancelRequest(
                        reason=f"the parent run was cancelled: "
                        f"{state.cancel_reason or 'no reason given'}"
                    ),
                )
    outcomes: list[ToolOutcome] = []
    paused = 0.0
    for call, spec in step.calls:
        if call.call_id in runs:
            report = await _child_outcome(runs[call.call_id])
            paused = max(paused, report.paused_seconds if report else 0.0)
            outcomes.append(ChildOutcome(call.call_id, report))
        elif call.call_id in not_started:
            outcomes.append(ChildOutcome(call.call_id, None, not_started[call.call_id]))
        elif not stopped:
            outcomes.append(await tool_outcome(call, spec, tools[call.call_id]))
    # The parent waited as long as its children waited for humans: not its working time.
    loop.record_tool_results(state, outcomes, paused_seconds=paused)
    for call_id in [*runs, *not_started]:
        delegation = state.delegations[call_id]
        audit(
            "delegation.settled",
            turn=state.turn,
            call_id=call_id,
            child_workflow_id=delegation.child_workflow_id,
            status=delegation.status,
            charged=delegation.usage.model_dump(mode="json"),
            side_effects=[e.call_id for e in delegation.side_effects],
        )


async def _start_child(
    state: LoopState, call: ToolCall, child_input: AgentRunInput
) -> workflow.ChildWorkflowHandle[Any, AgentRunResult] | str:
    """The child run, started; or why it could not start (a workflow already runs under its
    id, which anyone who may start workflows can take)."""
    indexed = workflow.info().typed_search_attributes.get(AGENT_PHASE) is not None
    child_id = state.delegations[call.call_id].child_workflow_id
    try:
        return await workflow.start_child_workflow(
            WORKFLOW_NAME,
            child_input,
            id=child_id,
            result_type=AgentRunResult,
            static_summary=child_input.summary(),
            search_attributes=initial(child_input) if indexed else None,
        )
    except WorkflowAlreadyStartedError:
        return f"a workflow with id {child_id!r} is already running"


async def _child_outcome(
    handle: workflow.ChildWorkflowHandle[Any, AgentRunResult],
) -> AgentRunResult | None:
    try:
        return await handle
    except ChildWorkflowError as exc:
        failed = result_in(exc.cause)  # a child run that ended `failed`
        if failed is not None:
            return failed
        workflow.logger.warning("child run %s ended without a result: %s", handle.id, exc)
        return None
