"""How a run starts: its input checked, what the worker says of it (`describe_run`: its tools,
and the checks only the worker can make), a finished run's transcript taken up
(`continue_from`), and when it continues as new. Workflow code (deterministic)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

import agentloop.workflows.loop as loop
import agentloop.workflows.visibility as visibility
from agentloop import search
from agentloop.activity_io import (
    DESCRIBE_RUN,
    LOAD_PREVIOUS_RUN,
    CheckPrincipalInput,
    DescribeToolsInput,
    PrincipalCheck,
    RunDescription,
    UnreadableJSON,
)
from agentloop.contract import AgentRunInput, PreviousRun, describe_validation_error
from agentloop.policies import checks
from agentloop.policies.bounds import MAX_DEPTH, NOT_TEXT, is_text_value, value_depth
from agentloop.tool_spec import BUILTIN_TOOLS, GIVE_UP
from agentloop.workflows.failures import describe_failure, invalid_input
from agentloop.workflows.inbound import Inflow
from agentloop.workflows.loop import LoopState

DESCRIBE_RUN_TIMEOUT = timedelta(minutes=6)
"""Past the longest a worker waits for an MCP server's listing (`MAX_START_BUDGET_SECONDS`,
5 min): it ends the wait itself, naming the server and its budget, and the run fails once;
timed out before, it would be retried, and a server that never answers would hold the run."""
DESCRIBE_RUN_HEARTBEAT = timedelta(seconds=30)
"""A worker lost while it describes the run (waiting on a slow MCP server) is noticed this
fast, not after `DESCRIBE_RUN_TIMEOUT`."""
CONTINUE_FROM_TIMEOUT = timedelta(seconds=30)
CONTINUE_FROM_RETRY = RetryPolicy(maximum_attempts=5, maximum_interval=timedelta(seconds=10))


def parse_carried(carried: Any) -> LoopState | None:
    """The state a run continued as new was handed (None on a fresh start). Both start
    arguments are untyped, so that no argument anyone sends can fail the workflow task that
    decodes it; and only a continuation takes state, never whoever starts a run."""
    if carried is None:
        return None
    if workflow.info().continued_run_id is None:
        raise invalid_input(
            "the run was started with a second argument; only continue-as-new hands a run its state"
        )
    return LoopState.model_validate(carried)


def parse_input(raw_input: Any, carried: LoopState | None) -> AgentRunInput:
    """The run's input, checked: bad input fails the run at once, naming the field, instead
    of failing a workflow task (which Temporal would retry for ever). A run continued as new
    has it in the state it carries."""
    if carried is not None:
        return carried.run_input
    if raw_input is None:
        raise invalid_input("input: the run was started without an AgentRunInput")
    if isinstance(raw_input, UnreadableJSON):
        raise invalid_input(f"input: not JSON agentloop can read: {raw_input.reason}")
    if value_depth(raw_input) > MAX_DEPTH:
        raise invalid_input(f"input: nested deeper than {MAX_DEPTH} levels")
    if not is_text_value(raw_input):
        raise invalid_input(f"input: {NOT_TEXT}")
    try:
        run_input = AgentRunInput.model_validate(raw_input)
    except ValidationError as exc:
        raise invalid_input(describe_validation_error(exc)) from None
    problem = checks.input_problem(run_input)
    if problem:
        raise invalid_input(problem)
    return run_input


def task_of(raw_input: Any) -> str:
    """The task of an input that may not be one (what a run that failed at its start was
    asked to do, when it says)."""
    task = raw_input.get("task") if isinstance(raw_input, dict) else None
    return task if isinstance(task, str) else ""


async def start(run_input: AgentRunInput) -> LoopState:
    """A fresh run's state, once its input passed each check in turn: those of the input
    itself, then what the worker says of the run as it starts (`describe_run`, recorded in
    history), then the run it continues (`continue_from`). Each refusal fails the run at
    once, naming the field."""
    _refuse(checks.limits_problem(run_input.limits))  # input limits
    _refuse(checks.principal_problem(run_input.principal))  # principal size
    _refuse(run_input.unbudgeted_continuation())  # continuation budget
    _refuse(search.run_input_problem(run_input))  # searchable names
    builtins = [*BUILTIN_TOOLS, *([GIVE_UP] if run_input.offer_give_up else [])]
    described = await _describe_run(run_input, list(dict.fromkeys([*run_input.tools, *builtins])))
    _refuse(_principal_problem(run_input, described.principal))  # signed principal
    _refuse(described.output_schema_problem)  # schema cost
    _refuse(described.unpriced_problem)  # prices
    info = workflow.info()
    state = LoopState.start(run_input, described.tools, workflow.now(), info.workflow_id, builtins)
    state.approval_signing = described.approval_signing or ""
    state.operators = described.operators
    state.notify = described.notify
    state.notice_timers = described.notice_timers
    state.require_verification = run_input.require_verification or described.require_verification
    state.failed_runs_complete = described.failed_runs_complete
    if described.indexable:
        visibility.index(state, family=described.family_indexable)
    if run_input.continue_from:
        await _continue_from(state, run_input.continue_from)  # continue_from checked
    return state


def _refuse(problem: str | None) -> None:
    if problem:
        raise invalid_input(problem)


def _principal_to_check(run_input: AgentRunInput) -> CheckPrincipalInput:
    """What the worker is asked about the run's start: the signature is bound to the run's
    input, workflow id, start time and run chain; a delegated child carries its root run's,
    so it is checked against the root's workflow id (the root's input, expiry and nonce were
    checked as the root started). Only a signed run's own input is digested."""
    info = workflow.info()
    delegated = info.parent is not None
    own = not delegated and run_input.principal_signature
    return CheckPrincipalInput(
        principal=run_input.principal,
        signature=run_input.principal_signature,
        workflow_id=info.root.workflow_id if info.root is not None else info.workflow_id,
        delegated=delegated,
        input_digest=run_input.start_digest() if own else "",
        started_at=info.workflow_start_time,
        run=info.first_execution_run_id,
    )


def _principal_problem(run_input: AgentRunInput, check: PrincipalCheck | None) -> str | None:
    """A principal the worker's starter keys do not vouch for fails the run at start, naming
    it; so does one the worker did not check."""
    problem = "the worker did not check it" if check is None else check.problem
    if not problem:
        return None
    principal = run_input.principal
    return f"principal {principal.subject!r} (tenant {principal.tenant!r}): {problem}"


async def _describe_run(run_input: AgentRunInput, names: list[str]) -> RunDescription:
    """What the worker tells a run at its start: its tools' specs, how approvals are taken,
    and, for a run started without the search attributes, whether the namespace has them (a
    run must never upsert them where they are not: that fails the workflow task, again on
    every retry). The worker counts what checks against `output_schema` may cost, says
    whether a `max_cost_usd` can bind (only it knows its prices) and whether the principal
    may be taken. Its failure (an unknown tool or completion check) is bad input, said as the
    run's own failure."""
    priced = run_input.limits.max_cost_usd is not None
    asked = DescribeToolsInput(
        names=names,
        completion_check=run_input.completion_check,
        indexing=not visibility.indexed(),
        output_schema=run_input.output_schema,
        priced_model=run_input.model if priced else None,
        priced_fallbacks=[f.model for f in run_input.fallbacks] if priced else [],
        principal=_principal_to_check(run_input),
        task_family=run_input.task_family,
    )
    try:
        described: RunDescription = await workflow.execute_activity(
            DESCRIBE_RUN,
            asked,
            result_type=RunDescription,
            start_to_close_timeout=DESCRIBE_RUN_TIMEOUT,
            heartbeat_timeout=DESCRIBE_RUN_HEARTBEAT,
            summary=f"tools: {', '.join(asked.names) or 'none'}",
        )
    except ActivityError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "InvalidInput":
            # The worker's refusal, in its words, is the run's own failure.
            raise ApplicationError(cause.message, type="InvalidInput", non_retryable=True) from None
        raise invalid_input(describe_failure(exc)) from None
    return described


async def _continue_from(state: LoopState, workflow_id: str) -> None:
    """Start from a finished run's transcript: what its model had not seen goes first. A run
    of another tenant (or, unless allowed, another subject) may not be continued: its model
    would see that run's task and tool output."""
    try:
        previous: PreviousRun = await workflow.execute_activity(
            LOAD_PREVIOUS_RUN,
            workflow_id,
            result_type=PreviousRun,
            start_to_close_timeout=CONTINUE_FROM_TIMEOUT,
            # Bounded: the run has no deadline yet, so an error that never clears (the
            # server refusing to describe that run) must end in a failure, not a wait.
            retry_policy=CONTINUE_FROM_RETRY,
            summary=f"continue from {workflow_id}",
        )
    except ActivityError as exc:
        raise invalid_input(f"continue_from: {describe_failure(exc)}") from None
    problem = checks.continue_from_problem(state.run_input, previous)
    if problem:
        raise invalid_input(f"continue_from: {problem}")
    loop.continue_transcript(state, previous)


CONTINUE_AS_NEW_MIN_INTERVAL = timedelta(seconds=1)
"""Temporal's `history.continueAsNewMinInterval` (its default): the next run of one that continued
as new younger than this gets no workflow task until that long after this one started, and
whatever is signalled meanwhile piles up in its history, for one large first task to take."""


HISTORY_BYTES_TO_CONTINUE = 4 * 2**20
"""A run's history size past which it continues as new whether or not Temporal suggests it:
Temporal's default suggestion point (`limit.historySize.suggestContinueAsNew`), kept should a
server suggest later or never, 46 MB short of the 50 MB at which Temporal terminates a run
(two dozen signals at the payload limit that arrive before the run can continue)."""


def _past_min_interval() -> bool:
    return until_past_min_interval() <= timedelta(0)


def until_past_min_interval() -> timedelta:
    """How long until this run may continue as new for size (`CONTINUE_AS_NEW_MIN_INTERVAL`)."""
    return workflow.info().workflow_start_time + CONTINUE_AS_NEW_MIN_INTERVAL - workflow.now()


def flood_waits_for_min_interval(inflow: Inflow) -> bool:
    """Signals brought in enough to continue as new, but the run is too young to: a wait for
    people wakes when it is old enough (else it would wait for the next signal to look again)."""
    return inflow.flooded() and not _past_min_interval()


def time_to_continue_as_new(state: LoopState, inflow: Inflow) -> bool:
    """When Temporal suggests it, its history passed `HISTORY_BYTES_TO_CONTINUE` or signals
    brought in more than a run takes (`Inflow`), once the run is older than
    `CONTINUE_AS_NEW_MIN_INTERVAL`; or past the run's own event count: history stays small. Not
    while a decision waits for the worker's check (its update waits for the verdict)."""
    info = workflow.info()
    every = state.run_input.continue_as_new_after_events
    grown = (
        info.is_continue_as_new_suggested()
        or info.get_current_history_size() > HISTORY_BYTES_TO_CONTINUE
        or inflow.flooded()
    )
    due = (grown and _past_min_interval()) or (
        every is not None and info.get_current_history_length() >= every
    )
    return due and not loop.decisions_to_check(state)
