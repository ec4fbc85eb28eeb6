"""An MCP server asking a person before a call can complete (`input_required`, MCP
2026-07-28's multi-round-trip requests), as agentloop's `InputNeeded` and back.

The server answers `tools/call` with an `InputRequiredResult`: requests to fulfil and an
opaque state to echo. agentloop answers one elicitation at a time: its message is the
question the run asks (`awaiting_input`); the person's `message` becomes the elicitation's
result, sent with the echoed state on the call's next run. Sampling and roots requests are
not answered (the worker offers no model to the server, and no roots): such a call goes back
to the model as a refusal. Everything here comes from an untrusted server and is bounded.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from pydantic import ValidationError

from agentloop.input_limits import MAX_MESSAGE_CHARS
from agentloop.policies.bounds import loads_bounded
from agentloop.policies.schema_cost import schema_cost_problem
from agentloop.policies.validation import MAX_CHECK_STEPS, schema_problem, schema_problems
from agentloop.tools.contract import BusinessRefusal, InputNeeded, Reply

MAX_PENDING_BYTES = 256_000
"""The most a server may ask agentloop to keep between rounds (its state and schema)."""
MAX_SCHEMA_PROPERTIES = 32
DECLINING = frozenset({"decline", "cancel"})
"""An answer that is exactly one of these words declines the request (or dismisses it)."""


def asking(tool: str, result: types.InputRequiredResult) -> InputNeeded:
    """What the server asks, as the question a run asks a person. Raises `BusinessRefusal`
    for what the run cannot answer: several requests at once, sampling, roots, too much."""
    requests = result.input_requests or {}
    if len(requests) != 1:
        raise BusinessRefusal(
            f"{tool}: the server asks for {len(requests)} inputs at once; a run answers one"
        )
    ((key, request),) = requests.items()
    if not isinstance(request, types.ElicitRequest):
        raise BusinessRefusal(
            f"{tool}: the server asks for {request.method}, which a run gives none"
        )
    params = request.params
    pending: dict[str, Any] = {"key": key, "request_state": result.request_state}
    if isinstance(params, types.ElicitRequestURLParams):
        question = f"{params.message} (open {params.url}, then answer done, or decline)"
        pending |= {"mode": "url", "question": question}
    else:
        question = params.message
        pending |= {"mode": "form", "schema": dict(params.requested_schema), "question": question}
    size = len(json.dumps(pending))
    if size > MAX_PENDING_BYTES:
        raise BusinessRefusal(
            f"{tool}: the server asks agentloop to keep {size:,} bytes"
            f" (at most {MAX_PENDING_BYTES:,})"
        )
    problem = _schema_problem(pending["schema"]) if pending["mode"] == "form" else None
    if problem:
        raise BusinessRefusal(
            f"{tool}: the server asks with a form agentloop cannot use: {problem}"
        )
    return InputNeeded(question, pending)


def answered(tool: str, reply: Reply) -> tuple[types.InputResponses, str | None]:
    """The person's answer as the server's input responses, and the state to echo. An answer
    that does not fit the form raises `InputNeeded` again, saying why (the run asks again)."""
    pending = reply.pending
    key, state = pending.get("key"), pending.get("request_state")
    if not isinstance(key, str) or not (state is None or isinstance(state, str)):
        raise BusinessRefusal(f"{tool}: what the server asked is no longer kept")
    text = reply.text.strip()
    if text.lower() in DECLINING:
        action: Any = text.lower()
        return {key: types.ElicitResult(action=action)}, state
    if pending.get("mode") == "url":
        return {key: types.ElicitResult(action="accept")}, state
    schema = pending.get("schema")
    if not isinstance(schema, dict):
        raise BusinessRefusal(f"{tool}: what the server asked is no longer kept")
    content = _content(text, schema)
    problems = schema_problems(schema, content, steps=MAX_CHECK_STEPS)
    if not problems:
        try:
            return {key: types.ElicitResult(action="accept", content=content)}, state
        except ValidationError as exc:  # values the protocol cannot carry (nested objects)
            problems = [f"{exc.error_count()} values are neither text, numbers nor lists of text"]
    asked = pending.get("question")
    raise InputNeeded(
        f"{asked if isinstance(asked, str) else ''} (That answer does not fit: "
        f"{'; '.join(problems)}. Answer {_form_hint(schema)}, or decline.)".strip(),
        pending,
    )


def _content(text: str, schema: dict[str, Any]) -> Any:
    """A JSON object as it is; any other text is the value of a form's only field."""
    try:  # a person's message, but from outside all the same: bounded
        value = loads_bounded(text, max_chars=MAX_MESSAGE_CHARS)
    except ValueError:  # OutOfBounds included
        value = None
    if isinstance(value, dict):
        return value
    properties = schema.get("properties") or {}
    if len(properties) != 1:
        return text
    ((name, field),) = properties.items()
    return {name: _typed(text, field.get("type") if isinstance(field, dict) else None)}


def _typed(text: str, kind: object) -> Any:
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
    except ValueError:
        return text
    if kind == "boolean" and text.lower() in {"yes", "true", "no", "false"}:
        return text.lower() in {"yes", "true"}
    return text


def _form_hint(schema: dict[str, Any]) -> str:
    names = list(schema.get("properties") or {})[:MAX_SCHEMA_PROPERTIES]
    if len(names) == 1:
        return f"with the {names[0]}"
    return "with a JSON object of " + ", ".join(names)


def _schema_problem(schema: dict[str, Any]) -> str | None:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "it has no fields"
    if len(properties) > MAX_SCHEMA_PROPERTIES:
        return f"{len(properties)} fields (at most {MAX_SCHEMA_PROPERTIES})"
    return schema_problem(schema) or schema_cost_problem(schema)
