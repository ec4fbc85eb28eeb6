"""Pure checks of a Chat Completions request against the script being played.

Every function takes the parsed request as untrusted JSON (`Any`) and returns violation
strings instead of raising: the provider reports *all* that is wrong with a request at once,
which is what a developer debugging an agent loop wants to see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentloop.demo.scripted_provider.scripts import Script, ScriptTurn

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})

# Tool results are quoted in violation messages; long ones only need their start.
_QUOTE_CHARS = 200


@dataclass(frozen=True)
class EchoedCall:
    """A tool call as the client sent it back inside an assistant message."""

    id: str
    name: str
    arguments: str


def turn_index(messages: list[Any]) -> int:
    """The script turn a request asks for: one turn per assistant message already answered.

    Derived from the request alone, so a retried request replays the same turn.
    """
    return sum(1 for message in messages if _role(message) == "assistant")


def tool_results(messages: list[Any]) -> dict[str, str]:
    """The string content of every well-formed tool message, by `tool_call_id`."""
    results: dict[str, str] = {}
    for message in messages:
        if _role(message) != "tool":
            continue
        call_id, content = message.get("tool_call_id"), message.get("content")
        if isinstance(call_id, str) and isinstance(content, str):
            results[call_id] = content
    return results


def check_chat_request(body: Mapping[str, Any], script: Script) -> list[str]:
    """Every protocol violation in `body`, a Chat Completions request playing `script`."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["`messages` must be a non-empty list"]
    turn = turn_index(messages)
    return [
        *_check_roles(messages),
        *_check_tool_message_shapes(messages),
        *_check_tool_pairing(messages),
        *_check_echoes(messages, script),
        *_check_expected_results(messages, script, turn),
        *_check_tools_declared(body.get("tools"), script, turn),
    ]


def _role(message: Any) -> str | None:
    role = message.get("role") if isinstance(message, dict) else None
    return role if isinstance(role, str) else None


def _check_roles(messages: list[Any]) -> list[str]:
    violations: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            violations.append(f"messages[{i}] is not an object")
        elif _role(message) not in ROLES:
            role = message.get("role")
            violations.append(f"messages[{i}] has role {role!r}, not one of {sorted(ROLES)}")
    return violations


def _check_tool_message_shapes(messages: list[Any]) -> list[str]:
    violations: list[str] = []
    for i, message in enumerate(messages):
        if _role(message) != "tool":
            continue
        if not isinstance(message.get("content"), str):
            violations.append(f"messages[{i}] (tool) must have a string `content`")
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            violations.append(f"messages[{i}] (tool) must have a `tool_call_id`")
    return violations


def parse_tool_calls(message: Any, where: str) -> tuple[list[EchoedCall], list[str]]:
    """The function tool calls of an assistant message, and what is malformed about them."""
    raw = message.get("tool_calls") if isinstance(message, dict) else None
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [f"{where}.tool_calls must be a list"]
    calls: list[EchoedCall] = []
    problems: list[str] = []
    for k, item in enumerate(raw):
        call = _parse_tool_call(item)
        if call is None:
            problems.append(
                f"{where}.tool_calls[{k}] must be "
                '{"id", "type": "function", "function": {"name", "arguments": <string>}}'
            )
        else:
            calls.append(call)
    return calls, problems


def _parse_tool_call(item: Any) -> EchoedCall | None:
    if not isinstance(item, dict) or item.get("type") != "function":
        return None
    function = item.get("function")
    if not isinstance(function, dict):
        return None
    call_id, name, arguments = item.get("id"), function.get("name"), function.get("arguments")
    if isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str):
        return EchoedCall(id=call_id, name=name, arguments=arguments)
    return None


def _check_tool_pairing(messages: list[Any]) -> list[str]:
    """Tool messages must come right after the assistant message that issued their ids."""
    violations: list[str] = []
    paired: set[int] = set()
    for i, message in enumerate(messages):
        if _role(message) != "assistant":
            continue
        calls, _ = parse_tool_calls(message, f"messages[{i}]")  # malformed: see _check_echoes
        if not calls:
            continue
        run = _tool_run_after(messages, i)
        paired.update(run)
        violations += _check_tool_run(messages, i, [call.id for call in calls], run)
    violations += [
        f"messages[{j}] is a tool message that does not directly follow "
        "an assistant message with tool_calls"
        for j, message in enumerate(messages)
        if _role(message) == "tool" and j not in paired
    ]
    return violations


def _tool_run_after(messages: list[Any], i: int) -> list[int]:
    """Indices of the consecutive tool messages right after `messages[i]`."""
    run: list[int] = []
    for j in range(i + 1, len(messages)):
        if _role(messages[j]) != "tool":
            break
        run.append(j)
    return run


def _check_tool_run(messages: list[Any], i: int, issued: list[str], run: list[int]) -> list[str]:
    violations: list[str] = []
    seen: set[str] = set()
    for j in run:
        call_id = messages[j].get("tool_call_id")
        if not isinstance(call_id, str):
            continue  # reported by _check_tool_message_shapes
        if call_id not in issued:
            violations.append(
                f"messages[{j}] answers tool call id {call_id!r}, which messages[{i}] "
                f"did not issue (it issued {issued})"
            )
        elif call_id in seen:
            violations.append(f"messages[{j}] is a duplicate tool result for call id {call_id!r}")
        seen.add(call_id)
    missing = [call_id for call_id in issued if call_id not in seen]
    if missing:
        interrupted = _interrupter(messages, i + 1 + len(run))
        violations.append(f"no tool result for call id(s) {missing} of messages[{i}]{interrupted}")
    return violations


def _interrupter(messages: list[Any], j: int) -> str:
    # Naming the message that cut the run short points straight at the bug.
    if j >= len(messages):
        return ""
    return f"; messages[{j}] ({_role(messages[j])}) comes before them"


def _check_echoes(messages: list[Any], script: Script) -> list[str]:
    """Each assistant message must be what the script sent at that turn (tool calls verbatim)."""
    violations: list[str] = []
    turn = 0
    for i, message in enumerate(messages):
        if _role(message) != "assistant":
            continue
        calls, problems = parse_tool_calls(message, f"messages[{i}]")
        violations += problems
        if turn < len(script.turns):
            violations += _compare_echo(calls, script.turns[turn], f"messages[{i}] (turn {turn})")
        turn += 1
    return violations


def _compare_echo(echoed: list[EchoedCall], scripted: ScriptTurn, where: str) -> list[str]:
    expected = {call.id: call for call in scripted.tool_calls}
    got: dict[str, EchoedCall] = {}
    violations: list[str] = []
    for call in echoed:
        if call.id in got:
            violations.append(f"{where} repeats tool call id {call.id!r}")
        got[call.id] = call
    missing, extra = expected.keys() - got.keys(), got.keys() - expected.keys()
    violations += [f"{where} lacks the scripted tool call {i!r}" for i in sorted(missing)]
    violations += [f"{where} has tool call {i!r}, not in the script" for i in sorted(extra)]
    for call_id in sorted(expected.keys() & got.keys()):
        want, have = expected[call_id], got[call_id]
        if have.name != want.name:
            violations.append(
                f"{where} tool call {call_id!r} is named {have.name!r}, scripted {want.name!r}"
            )
        if have.arguments != want.arguments_text():
            violations.append(
                f"{where} tool call {call_id!r} has arguments {have.arguments!r}, "
                f"the script sent {want.arguments_text()!r} (must be echoed verbatim)"
            )
    return violations


def _check_expected_results(messages: list[Any], script: Script, turn: int) -> list[str]:
    """The previous turn's `expect_tool_results`: proves each result went to the right call."""
    if not 0 < turn <= len(script.turns):
        return []
    results = tool_results(messages)
    violations: list[str] = []
    for call_id, needle in sorted(script.turns[turn - 1].expect_tool_results.items()):
        content = results.get(call_id)
        if content is None:
            violations.append(
                f"expected a tool result for {call_id!r} containing {needle!r}; there is none"
            )
        elif needle not in content:
            violations.append(
                f"tool result for {call_id!r} should contain {needle!r} "
                f"(is it paired with the wrong call?), got {content[:_QUOTE_CHARS]!r}"
            )
    return violations


def _check_tools_declared(tools: Any, script: Script, turn: int) -> list[str]:
    """A model may only call tools the request offers, so the script may not either."""
    if turn >= len(script.turns):
        return []
    declared = _declared_tool_names(tools)
    scripted = script.turns[turn]
    called = sorted({c.name for c in scripted.tool_calls} - set(scripted.undeclared_tools))
    return [
        f"turn {turn} calls tool {name!r}, but the request's `tools` does not declare it"
        for name in called
        if name not in declared
    ]


def _declared_tool_names(tools: Any) -> set[str]:
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
