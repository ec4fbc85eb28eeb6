"""How a run starts: its input checked, the behaviours it runs with chosen, its tools
described, a finished run's transcript taken up (`continue_from`), and when it continues as
new. Workflow code (deterministic)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

import agentloop.workflows.loop as loop
import agentloop.workflows.visibility as visibility
from agentloop import search
from agentloop.activity_io import (
    DESCRIBE_RUN,
    DESCRIBE_TOOLS,
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
from agentloop.tool_spec import GIVE_UP, ToolSpec
from agentloop.workflows.failures import describe_failure, invalid_input
from agentloop.workflows.loop import Feature, LoopState

DESCRIBE_TOOLS_TIMEOUT = timedelta(seconds=30)
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


def input_to_carry(raw_input: Any, state: LoopState) -> Any:
    """What `continue_as_new` passes as the next run's input: nothing, since the state it
    carries holds the input (feature `input-carried-once`; before it, the input went twice,
    and a large one made the next run's start payload too large)."""
    return None if state.has(Feature.INPUT_CARRIED_ONCE) else raw_input


async def start(run_input: AgentRunInput) -> LoopState:
    """A fresh run's state. A new run asks for the newest feature set (one patch marker); a
    run that recorded an older set replays with it; a run started before sets asks for each
    behaviour on its own, in the order it did then (patch markers are commands): built-in
    tools first. Such a run learns from the worker (`describe_run`, feature
    `indexed-however-started`) how approvals are taken and, when it was started without
    agentloop's search attributes, whether the namespace has them: then it indexes itself."""
    in_set: tuple[Feature, ...] | None = next(
        (members for set_id, members in loop.FEATURE_SETS if workflow.patched(set_id)), None
    )
    builtins = [
        name
        for name, feature in loop.BUILTIN_TOOL_PATCHES
        if in_set is not None or workflow.patched(feature.value)
    ]
    if in_set is not None and Feature.BLOCKED_NOT_COMPLETED in in_set and run_input.offer_give_up:
        builtins.append(GIVE_UP)
    if in_set is not None and Feature.TEXTS_BY_REFERENCE in in_set:
        # Checked here, not in `parse_input`: a run started before the bound replays as it ran.
        problem = checks.limits_problem(run_input.limits)
        if problem:
            raise invalid_input(problem)
    if in_set is not None and Feature.BOUNDED_PRINCIPAL in in_set:
        problem = checks.principal_problem(run_input.principal)
        if problem:
            raise invalid_input(problem)
    if in_set is not None and Feature.CONTINUE_CHAIN_USAGE in in_set:
        problem = run_input.unbudgeted_continuation()
        if problem:
            raise invalid_input(problem)
    if in_set is not None and Feature.SEARCHABLE_NAMES in in_set:
        problem = search.run_input_problem(run_input)
        if problem:
            raise invalid_input(problem)
    names = list(dict.fromkeys([*run_input.tools, *builtins]))
    described: RunDescription | None = None
    if in_set is not None and Feature.INDEXED_HOWEVER_STARTED in in_set:
        # What checks against `output_schema` may cost depends on the schema: the worker counts.
        costed = Feature.BOUNDED_SCHEMA_WORK in in_set
        schema = run_input.output_schema if costed else None
        # Only the worker knows its prices (its pricing file): it says whether the cap can bind.
        priced = Feature.PRICED_COST_CAPS in in_set and run_input.limits.max_cost_usd is not None
        model = run_input.model if priced else None
        signed = Feature.SIGNED_PRINCIPAL in in_set
        principal = _principal_to_check(run_input) if signed else None
        described = await _describe_run(names, run_input.completion_check, schema, model, principal)
        if principal is not None:
            _take_principal(run_input, described.principal)
        if described.output_schema_problem:
            raise invalid_input(described.output_schema_problem)
        if described.unpriced_problem:
            raise invalid_input(described.unpriced_problem)
        specs = described.tools
    else:
        specs = await _describe_tools(names, run_input.completion_check, local=in_set is not None)
    info = workflow.info()
    state = LoopState.start(run_input, specs, workflow.now(), info.workflow_id, builtins)
    if described is not None:
        state.approval_signing = described.approval_signing or ""
        state.notify = described.notify
        if described.indexable:
            visibility.index(state, family=described.family_indexable)
    if in_set is not None:
        state.features = list(in_set)
    if run_input.continue_from:
        checked = in_set is not None and Feature.CONTINUE_FROM_CHECKED in in_set
        await _continue_from(state, run_input.continue_from, checked)
    if in_set is None:
        # After `continue_from`, as such a run asked then (patch markers are commands).
        state.features = [f for f in loop.FEATURES if workflow.patched(f.value)]
    return state


async def _describe_tools(
    names: list[str], completion_check: str | None, *, local: bool
) -> list[ToolSpec]:
    """The specs of `names` from the worker's registry (which also checks that the run's
    completion check exists there). `local`: as a local activity, inside the workflow task (an
    in-memory lookup needs no activity task round trip); runs started before that replay with
    an ordinary one."""
    execute = workflow.execute_local_activity if local else workflow.execute_activity
    asked = DescribeToolsInput(names=names, completion_check=completion_check)
    specs: list[ToolSpec] = await _ask_worker(execute, DESCRIBE_TOOLS, asked, list[ToolSpec])
    return specs


def _principal_to_check(run_input: AgentRunInput) -> CheckPrincipalInput:
    """What the worker is asked about the run's principal (feature `signed-principal`): the
    signature is bound to the run's workflow id, and a delegated child carries its root
    run's, so it is checked against that one."""
    info = workflow.info()
    return CheckPrincipalInput(
        principal=run_input.principal,
        signature=run_input.principal_signature,
        workflow_id=info.root.workflow_id if info.root is not None else info.workflow_id,
    )


def _take_principal(run_input: AgentRunInput, check: PrincipalCheck | None) -> None:
    """A principal the worker's starter keys do not vouch for fails the run at start, naming
    it; so does one the worker did not check."""
    problem = "the worker did not check it" if check is None else check.problem
    if problem:
        principal = run_input.principal
        raise invalid_input(
            f"principal {principal.subject!r} (tenant {principal.tenant!r}): {problem}"
        )


async def _describe_run(
    names: list[str],
    completion_check: str | None,
    output_schema: dict[str, Any] | None,
    priced_model: str | None,
    principal: CheckPrincipalInput | None,
) -> RunDescription:
    """What the worker tells a run at its start (feature `indexed-however-started`): the
    tools' specs as `_describe_tools` does (local), how approvals are taken, and, for a run
    started without the search attributes, whether the namespace has them: a run must never
    upsert them where they are not (that fails the workflow task, again on every retry)."""
    asked = DescribeToolsInput(
        names=names,
        completion_check=completion_check,
        indexing=not visibility.indexed(),
        output_schema=output_schema,
        priced_model=priced_model,
        principal=principal,
    )
    described: RunDescription = await _ask_worker(
        workflow.execute_local_activity, DESCRIBE_RUN, asked, RunDescription
    )
    return described


async def _ask_worker(
    execute: Any, activity: str, asked: DescribeToolsInput, result_type: Any
) -> Any:
    """`activity` run with `execute`; its failure (an unknown tool or completion check) is
    bad input, said as the run's own failure."""
    try:
        return await execute(
            activity,
            asked,
            result_type=result_type,
            start_to_close_timeout=DESCRIBE_TOOLS_TIMEOUT,
            summary=f"tools: {', '.join(asked.names) or 'none'}",
        )
    except ActivityError as exc:
        raise invalid_input(describe_failure(exc)) from None


async def _continue_from(state: LoopState, workflow_id: str, checked: bool) -> None:
    """Start from a finished run's transcript: what its model had not seen goes first. A run
    of another tenant (or, unless allowed, another subject) may not be continued: its model
    would see that run's task and tool output."""
    try:
        previous: PreviousRun = await workflow.execute_activity(
            LOAD_PREVIOUS_RUN,
            workflow_id,
            result_type=PreviousRun,
            start_to_close_timeout=DESCRIBE_TOOLS_TIMEOUT,
            # Bounded: the run has no deadline yet, so an error that never clears (the
            # server refusing to describe that run) must end in a failure, not a wait.
            retry_policy=CONTINUE_FROM_RETRY,
            summary=f"continue from {workflow_id}",
        )
    except ActivityError as exc:
        raise invalid_input(f"continue_from: {describe_failure(exc)}") from None
    problem = checks.continue_from_problem(state.run_input, previous) if checked else None
    if problem:
        raise invalid_input(f"continue_from: {problem}")
    loop.continue_transcript(state, previous)


def time_to_continue_as_new(state: LoopState) -> bool:
    """When Temporal suggests it, or past the run's own event count: history stays small.
    Not while a decision waits for the worker's check (its update waits for the verdict)."""
    info = workflow.info()
    every = state.run_input.continue_as_new_after_events
    due = info.is_continue_as_new_suggested() or (
        every is not None and info.get_current_history_length() >= every
    )
    return due and not loop.decisions_to_check(state)
