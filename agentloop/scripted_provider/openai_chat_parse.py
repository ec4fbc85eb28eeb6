"""OpenAI Chat Completions request -> the neutral `Conversation`, with this API's own rules.

Rules only this protocol has: roles from a fixed set; `tool` messages carry a string `content`
and a `tool_call_id`, and sit in one run right after the assistant message that issued their
ids (anything else interrupting the run is named); tools are declared as
`{"type": "function", "function": {"name", ...}}`. Each assistant message is one model turn.
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
    ToolResult,
    output_limit,
    role_of,
)

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def parse_request(body: Mapping[str, Any]) -> Conversation:
    messages = body.get("messages")
    options = body.get("stream_options")
    conversation = Conversation(
        declared_tools=_declared_tools(body.get("tools")),
        prompt_chars=len(json.dumps(messages)),
        stream_usage=isinstance(options, dict) and options.get("include_usage") is True,
        max_output_tokens=output_limit(body.get("max_completion_tokens", body.get("max_tokens"))),
    )
    if not isinstance(messages, list) or not messages:
        conversation.problems.append("`messages` must be a non-empty list")
        return conversation
    conversation.problems += _check_roles(messages)
    conversation.problems += _check_tool_message_shapes(messages)
    paired: set[int] = set()
    for i, message in enumerate(messages):
        if role_of(message) != "assistant":
            continue
        parts, problems = message_parts(message, f"messages[{i}]")
        conversation.problems += problems
        turn = ModelTurn(where=f"messages[{i}]", parts=parts)
        if turn.calls:
            run = _tool_run_after(messages, i)
            paired.update(run)
            turn.results = [r for j in run if (r := _result(messages[j], j)) is not None]
            turn.missing_hint = _interrupter(messages, i + 1 + len(run))
        conversation.turns.append(turn)
    conversation.problems += [
        f"messages[{j}] is a tool message that does not directly follow "
        "an assistant message with tool_calls"
        for j, message in enumerate(messages)
        if role_of(message) == "tool" and j not in paired
    ]
    conversation.results = [
        r for j, m in enumerate(messages) if role_of(m) == "tool" and (r := _result(m, j))
    ]
    return conversation


def message_parts(message: Any, where: str) -> tuple[list[Part], list[str]]:
    """The function tool calls of an assistant message, and what is malformed about them.

    Only calls are compared on echo: Chat clients may reformat assistant text freely."""
    raw = message.get("tool_calls") if isinstance(message, dict) else None
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [f"{where}.tool_calls must be a list"]
    parts: list[Part] = []
    problems: list[str] = []
    for k, item in enumerate(raw):
        call = _parse_tool_call(item)
        if call is None:
            problems.append(
                f"{where}.tool_calls[{k}] must be "
                '{"id", "type": "function", "function": {"name", "arguments": <string>}}'
            )
        else:
            parts.append(call)
    return parts, problems


def _check_roles(messages: list[Any]) -> list[str]:
    violations: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            violations.append(f"messages[{i}] is not an object")
        elif role_of(message) not in ROLES:
            role = message.get("role")
            violations.append(f"messages[{i}] has role {role!r}, not one of {sorted(ROLES)}")
    return violations


def _check_tool_message_shapes(messages: list[Any]) -> list[str]:
    violations: list[str] = []
    for i, message in enumerate(messages):
        if role_of(message) != "tool":
            continue
        if not isinstance(message.get("content"), str):
            violations.append(f"messages[{i}] (tool) must have a string `content`")
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            violations.append(f"messages[{i}] (tool) must have a `tool_call_id`")
    return violations


def _result(message: Any, j: int) -> ToolResult | None:
    call_id, content = message.get("tool_call_id"), message.get("content")
    if isinstance(call_id, str) and isinstance(content, str):
        return ToolResult(call_id=call_id, content=content, where=f"messages[{j}]")
    return None  # reported by _check_tool_message_shapes


def _parse_tool_call(item: Any) -> Call | None:
    if not isinstance(item, dict) or item.get("type") != "function":
        return None
    function = item.get("function")
    if not isinstance(function, dict):
        return None
    call_id, name, arguments = item.get("id"), function.get("name"), function.get("arguments")
    if isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str):
        return Call(call_id=call_id, name=name, arguments=arguments)
    return None


def _tool_run_after(messages: list[Any], i: int) -> list[int]:
    """Indices of the consecutive tool messages right after `messages[i]`."""
    run: list[int] = []
    for j in range(i + 1, len(messages)):
        if role_of(messages[j]) != "tool":
            break
        run.append(j)
    return run


def _interrupter(messages: list[Any], j: int) -> str:
    # Naming the message that cut the run short points straight at the bug.
    if j >= len(messages):
        return ""
    return f"; messages[{j}] ({role_of(messages[j])}) comes before them"


def _declared_tools(tools: Any) -> set[str]:
    if not isinstance(tools, list):
        return set()
    names: set[str] = set()
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str):
            names.add(name)
    return names
