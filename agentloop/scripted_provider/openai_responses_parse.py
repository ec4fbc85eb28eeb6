"""OpenAI Responses request -> the neutral `Conversation`, with this API's own rules.

A model turn is a maximal run of consecutive output-type items in `input` (an assistant
`message`, `function_call`, `reasoning`), so a request sent with `store: false` carries the
whole conversation. Rules only this protocol has: every `function_call_output` comes after the
`function_call` with its `call_id`, anywhere later in `input`; tools are declared flat
(`{"type": "function", "name", "parameters", ...}`), not in the Chat shape; instructions may
come as `instructions` or as system/developer messages. `previous_response_id` is refused: a
stateless provider cannot know what an earlier response held.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentloop.scripted_provider.conversation import (
    Call,
    Conversation,
    ModelTurn,
    Part,
    Reasoning,
    ToolResult,
    output_limit,
    span,
    text_of,
)

MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})


def parse_request(body: Mapping[str, Any]) -> Conversation:
    items = body.get("input")
    declared, tool_problems = _declared_tools(body.get("tools"))
    conversation = Conversation(
        declared_tools=declared,
        problems=tool_problems,
        prompt_chars=len(json.dumps([body.get("instructions"), items])),
        max_output_tokens=output_limit(body.get("max_output_tokens")),
    )
    if body.get("previous_response_id") is not None:
        conversation.problems.append(
            "`previous_response_id` is not supported: send the whole conversation in `input`"
        )
    if isinstance(items, str):
        return conversation  # one user message, no model turn yet
    if not isinstance(items, list) or not items:
        conversation.problems.append("`input` must be a string or a non-empty list of items")
        return conversation
    conversation.problems += _check_items(items)
    runs = _output_runs(items)
    for start, end in runs:
        parts, problems = item_parts(items[start : end + 1], first=start)
        conversation.turns.append(ModelTurn(where=span("input", start, end), parts=parts))
        conversation.problems += problems
    _attach_outputs(items, runs, conversation)
    return conversation


def item_parts(items: list[Any], *, first: int = 0) -> tuple[list[Part], list[str]]:
    """The calls and reasoning of a run of output items, and what is malformed about them.

    Assistant text is not compared on echo: a client may send it back in any message form."""
    parts: list[Part] = []
    problems: list[str] = []
    for k, item in enumerate(items):
        match item.get("type"):
            case "function_call":
                call = _parse_call(item)
                if call is None:
                    problems.append(
                        f"input[{first + k}] (function_call) must have string `call_id`, `name` "
                        "and `arguments`"
                    )
                else:
                    parts.append(call)
            case "reasoning":
                parts.append(
                    Reasoning(
                        id=_str(item.get("id")),
                        text=None,
                        signature=_str(item.get("encrypted_content")),
                        signature_field="encrypted_content",
                    )
                )
    return parts, problems


def _parse_call(item: Mapping[str, Any]) -> Call | None:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str):
        return Call(call_id=call_id, name=name, arguments=arguments, item_id=_str(item.get("id")))
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _is_message(item: Mapping[str, Any]) -> bool:
    # `type` is optional on messages (the "easy input message" form).
    return item.get("type") in (None, "message")


def _is_output(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    if item.get("type") in ("function_call", "reasoning"):
        return True
    return _is_message(item) and item.get("role") == "assistant"


def _output_runs(items: list[Any]) -> list[tuple[int, int]]:
    """(first, last) index of each maximal run of output-type items."""
    runs: list[tuple[int, int]] = []
    for i, item in enumerate(items):
        if not _is_output(item):
            continue
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _check_items(items: list[Any]) -> list[str]:
    problems: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append(f"input[{i}] is not an object")
        elif _is_message(item) and item.get("role") not in MESSAGE_ROLES:
            role = item.get("role")
            problems.append(f"input[{i}] has role {role!r}, not one of {sorted(MESSAGE_ROLES)}")
    return problems


def _attach_outputs(items: list[Any], runs: list[tuple[int, int]], conv: Conversation) -> None:
    """Give each `function_call_output` to the turn that issued its call id.

    An output for an id no turn issued goes to the turn before it, where the shared pairing
    check reports it as unknown; one before its own call is out of order."""
    for j, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") != "function_call_output":
            continue
        call_id, content = item.get("call_id"), text_of(item.get("output"))
        if not isinstance(call_id, str) or not call_id:
            conv.problems.append(f"input[{j}] (function_call_output) must have a `call_id`")
            continue
        if content is None:
            conv.problems.append(
                f"input[{j}] (function_call_output) must have an `output` string "
                "(or a list of input_text parts)"
            )
            continue
        result = ToolResult(call_id=call_id, content=content, where=f"input[{j}]")
        conv.results.append(result)
        issuer = next(
            (k for k, turn in enumerate(conv.turns) if call_id in {c.call_id for c in turn.calls}),
            None,
        )
        before = [k for k, (_, end) in enumerate(runs) if end < j]
        if issuer is not None and issuer not in before:
            conv.problems.append(
                f"input[{j}] is the function_call_output for {call_id!r}, but its "
                f"function_call comes later, at {conv.turns[issuer].where}"
            )
        elif issuer is not None or before:
            conv.turns[issuer if issuer is not None else before[-1]].results.append(result)
        else:
            conv.problems.append(
                f"input[{j}] answers tool call id {call_id!r}, but no function_call precedes it"
            )


def _declared_tools(tools: Any) -> tuple[set[str], list[str]]:
    if tools is None:
        return set(), []
    if not isinstance(tools, list):
        return set(), ["`tools` must be a list"]
    names: set[str] = set()
    problems: list[str] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            problems.append(f"tools[{i}] is not an object")
        elif tool.get("type") != "function":
            continue  # a built-in tool (web_search, ...): nothing to call by name
        elif "function" in tool:
            problems.append(
                f"tools[{i}] nests `function` (the Chat Completions shape); Responses tools "
                'are flat: {"type": "function", "name", "parameters", ...}'
            )
        elif isinstance(name := tool.get("name"), str) and name:
            names.add(name)
        else:
            problems.append(f"tools[{i}] (function) must have a `name`")
    return names, problems
