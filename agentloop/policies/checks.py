"""What a run's input must be besides its field types, checked when the run starts, so
nothing that passed validation wedges it later (an `output_schema` that is no schema was
found only when the final answer arrived). Pure."""

from __future__ import annotations

from agentloop.contract import AgentRunInput, Limits, PreviousRun
from agentloop.digests import canonical_json
from agentloop.policies.bounds import MAX_DEPTH, MAX_RUN_CALLS, MAX_SCHEMA_CHARS, value_depth
from agentloop.policies.validation import schema_problem


def input_problem(run_input: AgentRunInput) -> str | None:
    """Why `run_input` cannot run, naming the field; None when it can."""
    schema = run_input.output_schema
    if schema is not None:
        if value_depth(schema) > MAX_DEPTH:
            return f"output_schema: nested deeper than {MAX_DEPTH} levels"
        size = len(canonical_json(schema))
        if size > MAX_SCHEMA_CHARS:
            return f"output_schema: {size} characters of JSON, over the {MAX_SCHEMA_CHARS} limit"
        problem = schema_problem(schema)
        if problem:
            return f"output_schema: {problem}"
    return None


def limits_problem(limits: Limits) -> str | None:
    """Why `limits` are more than one run may use: its ledger and progress record one entry
    per call, and they ride in the result and in what continue-as-new carries."""
    for field in ("max_model_calls", "max_tool_calls"):
        value = getattr(limits, field)
        if value > MAX_RUN_CALLS:
            return (
                f"limits.{field}: {value} is over the {MAX_RUN_CALLS} one run may make"
                " (continue_from goes on in a new run)"
            )
    return None


def continue_from_problem(run_input: AgentRunInput, previous: PreviousRun) -> str | None:
    """Why `run_input` may not continue `previous`: a run is continued by its own tenant, and
    by its own subject unless `continue_as_other_subject` says otherwise."""
    theirs, ours = previous.principal, run_input.principal
    if theirs is None:
        return f"run {previous.workflow_id!r} does not say whose it was: it is not continued"
    if theirs.tenant != ours.tenant:
        return (
            f"run {previous.workflow_id!r} belongs to tenant {theirs.tenant!r}, not {ours.tenant!r}"
        )
    if theirs.subject != ours.subject and not run_input.continue_as_other_subject:
        return (
            f"run {previous.workflow_id!r} ran for {theirs.subject!r}, not {ours.subject!r} "
            "(continue_as_other_subject allows it, within the tenant)"
        )
    return None
