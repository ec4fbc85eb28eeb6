"""What a run's input must be besides its field types, checked when the run starts, so
nothing that passed validation wedges it later (an `output_schema` that is no schema was
found only when the final answer arrived). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from agentloop.contract import (
    MAX_EXTRA_CHARS,
    AgentRunInput,
    Limits,
    ModelParameters,
    PreviousRun,
    Principal,
)
from agentloop.digests import canonical_json
from agentloop.policies.bounds import MAX_DEPTH, MAX_RUN_CALLS, MAX_SCHEMA_CHARS, value_depth
from agentloop.policies.validation import schema_problem


@dataclass(frozen=True)
class ProviderParameters:
    """What a provider's API takes of `ModelParameters`."""

    max_temperature: float | None
    """None: it takes no sampling parameters (`temperature`, `top_p`) at all."""
    max_stop: int
    """Stop sequences it takes (0: none)."""
    reasoning_effort: bool


PROVIDER_PARAMETERS: dict[str, ProviderParameters] = {
    "openai-chat": ProviderParameters(max_temperature=2.0, max_stop=4, reasoning_effort=True),
    "openai-responses": ProviderParameters(max_temperature=2.0, max_stop=0, reasoning_effort=True),
    # Anthropic's API version 2026-10-21 (which its SDK 2 sends) answers 400 to any sampling
    # parameter, even at its default.
    "anthropic": ProviderParameters(max_temperature=None, max_stop=16, reasoning_effort=False),
}

SET_BY_AGENTLOOP = frozenset(
    {
        *("model", "messages", "input", "instructions", "system", "tools", "tool_choice"),
        *("stream", "stream_options", "store", "include", "previous_response_id"),
        *("max_tokens", "max_completion_tokens", "max_output_tokens", "temperature", "top_p"),
        *("stop", "stop_sequences", "reasoning_effort", "reasoning", "extra_body"),
    }
)
"""Request fields agentloop writes itself: `model_settings.extra` may not set them."""


def model_settings_problem(provider: str, parameters: ModelParameters) -> str | None:
    """Why `parameters` cannot be sent to `provider`, naming the field."""
    takes = PROVIDER_PARAMETERS[provider]
    if takes.max_temperature is None:
        for field in ("temperature", "top_p"):
            if getattr(parameters, field) is not None:
                return f"model_settings.{field}: {provider} takes no sampling parameters"
    elif parameters.temperature is not None and parameters.temperature > takes.max_temperature:
        return (
            f"model_settings.temperature: {parameters.temperature} is over the"
            f" {takes.max_temperature} {provider} takes"
        )
    if len(parameters.stop) > takes.max_stop:
        if takes.max_stop == 0:
            return f"model_settings.stop: {provider} takes no stop sequences"
        return f"model_settings.stop: {provider} takes at most {takes.max_stop} stop sequences"
    if parameters.reasoning_effort is not None and not takes.reasoning_effort:
        return (
            f"model_settings.reasoning_effort: {provider} takes none (its own fields can go"
            " in model_settings.extra)"
        )
    taken = sorted(SET_BY_AGENTLOOP & parameters.extra.keys())
    if taken:
        return f"model_settings.extra: {', '.join(taken)} set by agentloop itself"
    if value_depth(parameters.extra) > MAX_DEPTH:
        return f"model_settings.extra: nested deeper than {MAX_DEPTH} levels"
    size = len(canonical_json(parameters.extra))
    if size > MAX_EXTRA_CHARS:
        return f"model_settings.extra: {size} characters of JSON, over the {MAX_EXTRA_CHARS} limit"
    return None


def input_problem(run_input: AgentRunInput) -> str | None:
    """Why `run_input` cannot run, naming the field; None when it can."""
    problem = model_settings_problem(run_input.provider, run_input.model_settings)
    if problem:
        return problem
    for n, fallback in enumerate(run_input.fallbacks):
        problem = model_settings_problem(fallback.provider, run_input.model_settings)
        if problem:
            return f"fallbacks.{n} ({fallback.provider}): {problem}"
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


MAX_PRINCIPAL_BYTES = 4_000
"""The principal rides in the input of every tool call: a batch's calls start together, in
one workflow task completion, which Temporal caps at 4 MiB."""


def principal_problem(principal: Principal) -> str | None:
    """Why `principal` is too large to travel with each of a batch's calls."""
    size = len(principal.model_dump_json())
    if size > MAX_PRINCIPAL_BYTES:
        return (
            f"principal: {size} bytes of JSON, over the {MAX_PRINCIPAL_BYTES} it may take"
            " (it travels with every tool call)"
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
