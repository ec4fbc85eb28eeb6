"""Anthropic Messages request -> the neutral `Conversation`, with this API's own rules.

Rules only this protocol has: system instructions only as the top-level `system` (a `system`
role inside `messages` is refused); roles alternate user/assistant, starting with user;
`max_tokens` is required; after an assistant message with `tool_use` blocks, the next user
message *starts* with one `tool_result` per `tool_use` id, before any other block; tools are
`{"name", "description", "input_schema"}`. Each assistant message is a model turn, except a
trailing one: that can only be a paused turn sent back to be continued (`pending`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from agentloop.digests import canonical_json
from agentloop.scripted_provider.conversation import (
    Call,
    Conversation,
    ModelTurn,
    Part,
    Reasoning,
    Text,
    ToolResult,
    output_limit,
    role_of,
    text_of,
)

ROLES = ("user", "assistant")
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")
"""The ids the Messages API takes for `tool_use` blocks (`^[a-zA-Z0-9_-]+$`): another
provider's call ids, carried over by a fallback, must be written so."""
_COMPARED = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})


def parse_request(body: Mapping[str, Any]) -> Conversation:
    messages = body.get("messages")
    declared, tool_problems = _declared_tools(body.get("tools"))
    conversation = Conversation(
        declared_tools=declared,
        problems=tool_problems,
        prompt_chars=len(json.dumps([body.get("system"), messages])),
        max_output_tokens=output_limit(body.get("max_tokens")),
    )
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        conversation.problems.append("`max_tokens` is required (an integer)")
    system = body.get("system")
    if system is not None and text_of(system) is None:
        conversation.problems.append("`system` must be a string or a list of text blocks")
    if not isinstance(messages, list) or not messages:
        conversation.problems.append("`messages` must be a non-empty list")
        return conversation
    conversation.problems += _check_roles(messages)
    for i, message in enumerate(messages):
        if role_of(message) == "user":
            conversation.problems += _check_user_blocks(messages, i)
            conversation.results += _results(message, i)
        elif role_of(message) == "assistant":
            parts, problems = content_parts(message.get("content"), f"messages[{i}]")
            conversation.problems += problems
            turn = ModelTurn(where=f"messages[{i}]", parts=parts)
            if i == len(messages) - 1:
                conversation.pending = turn
                continue
            if turn.calls:
                turn.results = _results(messages[i + 1], i + 1, leading_only=True)
                turn.missing_hint = _hint(messages[i + 1], i + 1)
            conversation.turns.append(turn)
    return conversation


def content_parts(content: Any, where: str) -> tuple[list[Part], list[str]]:
    """The text, tool_use and thinking blocks of assistant content, and what is malformed."""
    if isinstance(content, str):
        return ([Text(content)] if content else []), []
    if not isinstance(content, list):
        return [], [f"{where}.content must be a string or a list of blocks"]
    parts: list[Part] = []
    problems: list[str] = []
    for k, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") not in _COMPARED:
            continue  # images, documents, server tool blocks: not part of the echo check
        part = _part(block) if isinstance(block, dict) else None
        if part is None:
            problems.append(f"{where}.content[{k}] is not a well-formed content block")
            continue
        if isinstance(part, Call) and not _TOOL_USE_ID.fullmatch(part.call_id):
            problems.append(
                f"{where}.content[{k}] (tool_use) has id {part.call_id!r}, which does not match"
                " ^[a-zA-Z0-9_-]+$"
            )
        parts.append(part)
    return parts, problems


def _part(block: Mapping[str, Any]) -> Part | None:
    """The block as a `Part`; None when malformed."""
    match block.get("type"):
        case "text":
            text = block.get("text")
            return Text(text) if isinstance(text, str) else None
        case "tool_use":
            call_id, name, tool_input = block.get("id"), block.get("name"), block.get("input")
            if isinstance(call_id, str) and isinstance(name, str) and isinstance(tool_input, dict):
                return Call(call_id=call_id, name=name, arguments=canonical_json(tool_input))
            return None
        case "thinking":
            thinking, signature = block.get("thinking"), block.get("signature")
            if isinstance(thinking, str) and isinstance(signature, str):
                return Reasoning(id=None, text=thinking, signature=signature)
            return None
        case _:  # redacted_thinking
            data = block.get("data")
            if isinstance(data, str):
                return Reasoning(id=None, text=None, signature=data, signature_field="data")
            return None


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _is_block(block: Any, kind: str) -> bool:
    return isinstance(block, dict) and block.get("type") == kind


def _is_result(block: Any) -> bool:
    return _is_block(block, "tool_result")


def _check_roles(messages: list[Any]) -> list[str]:
    problems: list[str] = []
    expected = "user"
    for i, message in enumerate(messages):
        role = role_of(message)
        if not isinstance(message, dict):
            problems.append(f"messages[{i}] is not an object")
        elif role == "system":
            problems.append(
                f"messages[{i}] has role 'system': system instructions go only in the "
                "top-level `system` parameter"
            )
        elif role not in ROLES:
            problems.append(f"messages[{i}] has role {role!r}, not 'user' or 'assistant'")
        else:
            if role != expected:
                problems.append(
                    f"messages[{i}] ({role}) is out of turn: roles must alternate "
                    "user/assistant, starting with user"
                )
            expected = "assistant" if role == "user" else "user"
    return problems


def _check_user_blocks(messages: list[Any], j: int) -> list[str]:
    """tool_result blocks come first, and only after an assistant message with tool_use."""
    problems: list[str] = []
    blocks = _blocks(messages[j])
    leading = next((k for k, block in enumerate(blocks) if not _is_result(block)), len(blocks))
    for k, block in enumerate(blocks[leading:], start=leading):
        if _is_result(block):
            kind = blocks[leading].get("type") if isinstance(blocks[leading], dict) else None
            problems.append(
                f"messages[{j}].content[{k}] is a tool_result after a {kind} block: tool_result "
                "blocks must come first in the user message, before any text"
            )
    previous = messages[j - 1] if j > 0 else None
    issued = role_of(previous) == "assistant" and any(
        _is_block(block, "tool_use") for block in _blocks(previous)
    )
    if leading and not issued:
        problems.append(
            f"messages[{j}] starts with tool_result blocks, but the message before it is not "
            "an assistant message with tool_use blocks"
        )
    for k, block in enumerate(blocks):
        if _is_result(block) and not isinstance(block.get("tool_use_id"), str):
            problems.append(f"messages[{j}].content[{k}] (tool_result) must have a `tool_use_id`")
    return problems


def _results(message: Any, j: int, *, leading_only: bool = False) -> list[ToolResult]:
    results: list[ToolResult] = []
    for k, block in enumerate(_blocks(message) if role_of(message) == "user" else []):
        if not _is_result(block):
            if leading_only:
                break
            continue
        call_id = block.get("tool_use_id")
        if isinstance(call_id, str):
            content = _result_text(block.get("content"))
            results.append(ToolResult(call_id, content, f"messages[{j}].content[{k}]"))
    return results


def _result_text(content: Any) -> str:
    # `content` may be absent, a string, or blocks; only their text matters to the checks.
    if isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return text_of(blocks) or ""
    return content if isinstance(content, str) else ""


def _hint(message: Any, j: int) -> str:
    """What stands where the tool results were due."""
    if role_of(message) != "user":
        return f"; messages[{j}] ({role_of(message)}) comes instead of a user message"
    blocks = _blocks(message)
    if not blocks:
        return f"; messages[{j}] has no tool_result blocks"
    first = blocks[0].get("type") if isinstance(blocks[0], dict) else None
    return "" if first == "tool_result" else f"; messages[{j}] starts with a {first} block"


def _declared_tools(tools: Any) -> tuple[set[str], list[str]]:
    if tools is None:
        return set(), []
    if not isinstance(tools, list):
        return set(), ["`tools` must be a list"]
    names: set[str] = set()
    problems: list[str] = []
    shape = '{"name", "description", "input_schema"}'
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            problems.append(f"tools[{i}] is not an object")
        elif tool.get("type") == "function" or "function" in tool or "parameters" in tool:
            problems.append(f"tools[{i}] has the OpenAI shape; Anthropic tools are {shape}")
        elif tool.get("type") not in (None, "custom"):
            continue  # a server tool (web_search, ...): nothing the client answers
        elif not isinstance(name := tool.get("name"), str) or not name:
            problems.append(f"tools[{i}] must have a `name`")
        elif not isinstance(tool.get("input_schema"), dict):
            problems.append(f"tools[{i}] ({name}) must have an `input_schema` object")
        else:
            names.add(name)
    return names, problems
