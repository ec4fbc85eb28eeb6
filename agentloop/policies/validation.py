"""Validation of proposed tool calls, before anything runs: whitelist, then JSON Schema.

Pure, run inside the workflow. A refused call becomes a structured error result under its own
call id, so the model can correct itself; nothing is executed for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from jsonschema import Draft202012Validator

from agentloop.events import ToolCall
from agentloop.tool_spec import ToolSpec

MAX_SCHEMA_ERRORS = 5


@dataclass(frozen=True)
class Allowed:
    spec: ToolSpec


@dataclass(frozen=True)
class Refused:
    error_class: str
    """`unknown_tool` or `invalid_arguments`."""
    message: str


Verdict = Allowed | Refused


def validate_call(call: ToolCall, tools: Mapping[str, ToolSpec], allowed: Set[str]) -> Verdict:
    spec = tools.get(call.name)
    if spec is None or call.name not in allowed:
        names = ", ".join(sorted(allowed)) or "none"
        return Refused("unknown_tool", f"unknown tool {call.name!r}; tools available: {names}")
    problems = schema_problems(spec.parameters, call.arguments)
    if problems:
        message = "arguments do not match the schema: " + "; ".join(problems)
        return Refused("invalid_arguments", message)
    return Allowed(spec)


def schema_problems(schema: Mapping[str, object], arguments: Mapping[str, object]) -> list[str]:
    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    return [_describe(e.absolute_path, e.message) for e in errors[:MAX_SCHEMA_ERRORS]]


def _describe(path: object, message: str) -> str:
    where = "/".join(str(p) for p in path)  # type: ignore[attr-defined]
    return f"{where}: {message}" if where else message
