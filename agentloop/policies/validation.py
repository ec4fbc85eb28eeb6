"""Validation of proposed tool calls, before anything runs: whitelist, then JSON Schema.

Pure, run inside the workflow. A refused call becomes a structured error result under its own
call id, so the model can correct itself; nothing is executed for it.

What a check may cost is bounded: arguments over
`MAX_ARGUMENT_CHARS` or `MAX_DEPTH` are refused before any schema check; patterns run on RE2,
whose time is linear in the input (Python's `re` backtracks: a 60,000-character recipient
took it ~10 s against an e-mail pattern, holding the worker's GIL); every problem is told in at
most `MAX_ERROR_CHARS`; and any exception a check raises is a refusal, never a failed
workflow task. A check also stops after its
steps (`MAX_CHECK_STEPS`); what a schema may cost is counted
where it arrives (`policies.schema_cost`).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Any

import re2
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.exceptions import SchemaError

from agentloop.digests import canonical_json
from agentloop.events import ToolCall
from agentloop.policies.bounds import MAX_ARGUMENT_CHARS, MAX_DEPTH, clipped, value_depth
from agentloop.policies.placeholders import placeholder_problem
from agentloop.tool_spec import ToolSpec

MAX_SCHEMA_ERRORS = 5

MAX_CHECK_STEPS = 100_000
"""How many keyword checks (about 3-8 µs each; `uniqueItems` on n members counts n²/4) a model
output's checks may take in all, split evenly among its calls: they run inside a workflow
task, which the SDK takes for deadlocked past 2 s. The arguments' size bounds what a check
reads, this what it does: a large array checked against a large `items` schema multiplies the
two."""


@dataclass(frozen=True)
class Allowed:
    spec: ToolSpec


@dataclass(frozen=True)
class Refused:
    error_class: str
    """`unknown_tool` or `invalid_arguments`."""
    message: str


Verdict = Allowed | Refused


MAX_SUGGESTED_NAME_CHARS = 64
"""Names longer than any tool's are not compared (the comparison's cost grows with both)."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the known name closest to a misspelled `name` (or nothing)."""
    if len(name) > MAX_SUGGESTED_NAME_CHARS:
        return ""
    near = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean {near[0]!r}?" if near else ""


def validate_call(
    call: ToolCall,
    tools: Mapping[str, ToolSpec],
    allowed: Set[str],
    *,
    steps: int | None = None,
) -> Verdict:
    spec = tools.get(call.name)
    if spec is None or call.name not in allowed:
        names = ", ".join(sorted(allowed)) or "none"
        hint = did_you_mean(call.name, allowed)
        return Refused(
            "unknown_tool", f"unknown tool {call.name!r}{hint}; tools available: {names}"
        )
    too_big = arguments_too_big(call.arguments)
    if too_big:
        return Refused("invalid_arguments", too_big)
    problems = schema_problems(spec.parameters, call.arguments, steps=steps)
    if problems:
        message = "arguments do not match the schema: " + "; ".join(problems)
        return Refused("invalid_arguments", message)
    hidden = placeholder_problem(call.arguments)
    if hidden:
        return Refused("invalid_arguments", hidden)
    return Allowed(spec)


def arguments_too_big(arguments: Mapping[str, Any]) -> str | None:
    """Why arguments are refused unchecked: too long or too deeply nested."""
    if value_depth(arguments) > MAX_DEPTH:
        return f"the arguments are nested deeper than {MAX_DEPTH} levels"
    size = len(canonical_json(arguments))
    if size > MAX_ARGUMENT_CHARS:
        return (
            f"the arguments are {size} characters of JSON, over the limit of {MAX_ARGUMENT_CHARS}"
        )
    return None


def schema_problems(
    schema: Mapping[str, object],
    instance: object,
    *,
    steps: int | None = None,
) -> list[str]:
    """What is wrong with `instance` (nothing: it satisfies `schema`). `steps`: at most that
    many keyword checks, or the check stops, refusing."""
    validator = (
        BoundedValidator(schema)
        if steps is None
        else _CountedValidator(schema, format_checker=_StepBudget(steps))
    )
    try:
        found = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    except _TooManySteps:
        return [
            f"the arguments could not be checked: checking them against the schema takes more"
            f" than {steps:,} steps"
        ]
    except Exception as exc:  # a check that cannot be made lets nothing through
        return [clipped(f"the arguments could not be checked: {type(exc).__name__}: {exc}")]
    return [clipped(_describe(e.absolute_path, e.message)) for e in found[:MAX_SCHEMA_ERRORS]]


def schema_problem(schema: Mapping[str, object]) -> str | None:
    """Why `schema` is no JSON Schema this workflow can check against, or None."""
    try:
        BoundedValidator.check_schema(schema)
        for pattern in _patterns(schema):
            _compiled(pattern)
        for ref in _refs(schema):
            if not _resolves(schema, ref):
                return clipped(f"$ref {ref!r} does not resolve within the schema")
    except SchemaError as exc:
        return clipped(f"not a valid JSON Schema: {exc.message}")
    except re2.error as exc:
        return clipped(f"a pattern RE2 cannot run (no lookaround or backreferences): {exc}")
    except Exception as exc:
        return clipped(f"not a usable JSON Schema: {type(exc).__name__}: {exc}")
    return None


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is reported to the caller, not to stderr


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def objects_in(schema: object) -> Iterator[dict[str, Any]]:
    """Every object in a schema, iteratively (a deep schema cannot exhaust the stack)."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            yield node
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def _patterns(schema: object) -> Iterator[str]:
    """Every regular expression in a schema: `pattern` values and `patternProperties` keys."""
    for node in objects_in(schema):
        if isinstance(node.get("pattern"), str):
            yield node["pattern"]
        if isinstance(node.get("patternProperties"), dict):
            yield from (k for k in node["patternProperties"] if isinstance(k, str))


def _refs(schema: object) -> Iterator[str]:
    for node in objects_in(schema):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]


def _resolves(schema: object, ref: str) -> bool:
    """A `$ref` within the schema (`#`, `#/a/b`); nothing is ever fetched from elsewhere."""
    return ref_target(schema, ref) is not NOWHERE


NOWHERE = object()


def ref_target(schema: object, ref: str) -> object:
    """What a `$ref` within the schema points at, or `NOWHERE`."""
    if not ref.startswith("#"):
        return NOWHERE
    node = schema
    for part in (p for p in ref[1:].split("/") if p):
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return NOWHERE
    return node


def _pattern(
    validator: Any, pattern: str, instance: object, schema: object
) -> Iterator[ValidationError]:
    if isinstance(instance, str) and not _compiled(pattern).search(instance):
        yield ValidationError(f"{clipped(repr(instance), 80)} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: object, schema: object
) -> Iterator[ValidationError]:
    if not isinstance(instance, dict):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _compiled(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


BoundedValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    {"pattern": _pattern, "patternProperties": _pattern_properties},
)
"""JSON Schema 2020-12 with its regular expressions on RE2 (linear time, deterministic)."""


class _TooManySteps(Exception):
    pass


class _StepBudget(FormatChecker):
    """The keyword checks one check may still take, carried by its validator: jsonschema hands
    a validator's format checker on to every validator it descends into, so each counts
    against the same budget (workflows run on several threads: nothing global could). It
    checks no format: `format` stays an annotation, as without it."""

    def __init__(self, steps: int) -> None:
        super().__init__(formats=())
        self.left = steps


Keyword = Callable[[Any, Any, Any, Any], Any]


def _counted(name: str, keyword: Keyword) -> Keyword:
    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = validator.format_checker
        if isinstance(budget, _StepBudget):
            budget.left -= _steps_of(name, value, instance)
            if budget.left < 0:
                raise _TooManySteps
        return keyword(validator, value, instance, schema)

    return check


def _steps_of(name: str, value: Any, instance: Any) -> int:
    """What one keyword check costs, in steps: one, but `uniqueItems` compares every pair of
    members it cannot sort (objects, lists): about n²/2 comparisons of a few µs each."""
    if name == "uniqueItems" and value is True and isinstance(instance, list):
        return max(1, len(instance) * len(instance) // 4)
    return 1


def _same_class(validator: Any, **changes: Any) -> Any:
    """`evolve` that keeps the validator's class. jsonschema's picks the class by a
    subschema's `$schema` (or that of the root a `$ref: "#"` goes back to): one such key would
    check the rest on plain jsonschema, with Python's backtracking `re` and no step count."""
    cls = type(validator)
    changes.setdefault("schema", validator.schema)
    for field in cls.__attrs_attrs__:
        if field.init and field.alias not in changes:
            changes[field.alias] = getattr(validator, field.name)
    return cls(**changes)


_CountedValidator = validators.extend(  # type: ignore[no-untyped-call]
    BoundedValidator,
    {name: _counted(name, keyword) for name, keyword in BoundedValidator.VALIDATORS.items()},
)
_CountedValidator.evolve = _same_class
"""`BoundedValidator` counting each keyword it checks against its `_StepBudget`, every
subschema checked by it, whatever `$schema` it names."""


def _describe(path: object, message: str) -> str:
    where = "/".join(str(p) for p in path)  # type: ignore[attr-defined]
    return f"{where}: {message}" if where else message
