"""The options every tool declared in a team's code takes (`@agentloop.tool` and
`agentloop.activity_tool` alike), and the one place a declared tool's `ToolSpec` is built
from them, checked as it is declared."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypedDict

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import ValidationError

from agentloop.contract import describe_validation_error
from agentloop.redaction import PATTERNS, unknown_redactors
from agentloop.tool_spec import Effect, ToolSpec, tool_name_problem


class ToolDefinitionError(TypeError):
    """A tool, rule, verifier or dependencies declaration agentloop cannot use, named with the
    function and the problem (raised when the module is imported)."""


class ToolOptions(TypedDict, total=False):
    """What `@agentloop.tool` and `agentloop.activity_tool` both take (see `agentloop.tool`
    for each): an option left out gets the same default from either."""

    effect: Effect
    """`write` unless said: one attempt, an idempotency key, a lost answer looked up."""
    scopes: Sequence[str]
    needs_approval: bool | str
    approvers: Sequence[str]
    action: str
    on_reject: Literal["stop", "tell_model"]
    timeout_seconds: float | None
    """None: the default (30 s)."""
    max_attempts: int
    max_calls_per_run: int | None
    max_result_chars: int
    poll_limit: int | None
    version: str
    compensate: str
    """A write's undo: the name of another tool (`@agentloop.tool` or an activity tool) the
    runner offers to call when a run ends without delivering (docs/concepts/compensation.md)."""
    trusted: bool
    redact: Sequence[str | Callable[[str], str]]
    """Pattern names, or the team's own functions (`TeamRedactor`)."""
    keep_redacted: Literal["approvers", "nobody"]


class UndeclaredEffectWarning(UserWarning):
    """A tool declared without `effect=`: it is a write (the safe default), which its author
    may not know (no retries, an idempotency key, an operator for a lost answer)."""


def _warn_undeclared_effect(what: str, name: str, has_outcome_lookup: bool) -> None:
    settled = (
        "a lost answer is looked up with its lookup_outcome"
        if has_outcome_lookup
        else "a lost answer waits for an operator, since it has no lookup_outcome"
    )
    warnings.warn(
        UndeclaredEffectWarning(
            f'{what} {name!r} is declared without effect=: it defaults to effect="write"'
            f' (one attempt, an idempotency key; {settled}). Say effect="read" or'
            ' effect="write" to silence this.'
        ),
        stacklevel=_declaration_level(),
    )


def _declaration_level() -> int:
    """The `stacklevel` of the team's declaration (the first frame outside this package)."""
    level, frame = 2, sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_HERE):
        level, frame = level + 1, frame.f_back
    return level


_HERE = str(Path(__file__).parent)


def team_redactors(options: ToolOptions) -> tuple[Callable[[str], str], ...]:
    """The team's own functions among a tool's `redact` (the rest are pattern names)."""
    return tuple(kind for kind in options.get("redact", ()) if callable(kind))


def declared_spec(
    what: str,
    name: str,
    *,
    named: str,
    description: str,
    parameters: Mapping[str, Any],
    has_outcome_lookup: bool,
    options: ToolOptions,
    **own: Any,
) -> ToolSpec:
    """The spec of the tool `name` declared as `what` ("tool", "activity tool") with
    `options`, and `own` the fields only its kind sets. Raises `ToolDefinitionError`, saying
    `named` (how the declaration is named) for a name no provider takes."""
    if problem := tool_name_problem(name):
        raise ToolDefinitionError(f"{named}: {problem}")
    unknown = sorted(set(options) - ToolOptions.__optional_keys__)
    if unknown:
        raise ToolDefinitionError(f"{what} {name}: no option {', '.join(map(repr, unknown))}")
    if "effect" not in options:
        _warn_undeclared_effect(what, name, has_outcome_lookup)
    fields: dict[str, Any] = {"effect": "write", **options}
    if fields["effect"] == "read" and has_outcome_lookup:
        raise ToolDefinitionError(f"{what} {name}: only a write has an outcome to look up")
    fields["required_scopes"] = list(fields.pop("scopes", ()))
    fields["approvers"] = list(fields.get("approvers", ()))
    fields["redact"] = [kind for kind in fields.get("redact", ()) if isinstance(kind, str)]
    if unknown_redactors(fields["redact"]):
        known = ", ".join(PATTERNS)
        raise ToolDefinitionError(
            f"{what} {name}: no redactor {', '.join(unknown_redactors(fields['redact']))} "
            f"(known: {known})"
        )
    if fields.get("timeout_seconds") is None:
        fields.pop("timeout_seconds", None)
    try:
        Draft202012Validator.check_schema(parameters)
    except SchemaError as exc:
        raise ToolDefinitionError(
            f"{what} {name}: its parameters are no JSON Schema: {exc.message}"
        ) from None
    try:
        return ToolSpec(
            name=name,
            description=description,
            parameters=dict(parameters),
            has_outcome_lookup=has_outcome_lookup,
            **fields,
            **own,
        )
    except ValidationError as exc:
        raise ToolDefinitionError(f"{what} {name}: {describe_validation_error(exc)}") from None
