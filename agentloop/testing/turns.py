"""What the scripted model says in a test: `call`, `invented_call` and `reply`, and the turns
they make, numbered as the scripted model plays them (`script_turns`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentloop.scripted_provider import ScriptedToolCall, ScriptTurn


class InventedCall(ScriptedToolCall):
    """A call to a tool the run does not offer (`invented_call`)."""


def call(name: str, call_id: str | None = None, /, **arguments: Any) -> ScriptedToolCall:
    """A tool call the scripted model makes: `call("refund", order_id="17", amount=40)`.
    Without `call_id`, the harness numbers it in its script: `call_1`, `call_2`, ..."""
    return ScriptedToolCall(id=call_id or "", name=name, arguments=arguments)


def invented_call(name: str, call_id: str | None = None, /, **arguments: Any) -> InventedCall:
    """A call to a tool the run does not offer, as a model inventing a tool name makes it:
    the scripted model sends it anyway (a `call` to it would be refused as a broken script),
    and the loop must refuse it."""
    return InventedCall(id=call_id or "", name=name, arguments=arguments)


def reply(text: str) -> ScriptTurn:
    """A final answer (a candidate: the run's checks decide whether it completes)."""
    return ScriptTurn(text=text)


Turn = ScriptTurn | Sequence[ScriptedToolCall] | str
"""A model turn: a `ScriptTurn`, a list of `call(...)`s made together, or a final text."""


def as_turn(turn: Turn) -> ScriptTurn:
    if isinstance(turn, ScriptTurn):
        return turn
    if isinstance(turn, str):
        return reply(turn)
    return ScriptTurn(tool_calls=list(turn))


def script_turns(turns: Sequence[Turn]) -> list[ScriptTurn]:
    """The turns as the scripted model plays them: each call without an id numbered in
    script order (`call_1`, `call_2`, ..., past the ids given), and each `invented_call`
    among its turn's `undeclared_tools`."""
    played = [as_turn(t) for t in turns]
    used = {c.id for t in played for c in t.tool_calls if c.id}
    number = 0
    out = []
    for turn in played:
        calls = []
        for c in turn.tool_calls:
            call_id = c.id
            if not call_id:
                number += 1
                while f"call_{number}" in used:
                    number += 1
                call_id = f"call_{number}"
                used.add(call_id)
            calls.append(ScriptedToolCall(id=call_id, name=c.name, arguments=c.arguments))
        invented = [c.name for c in turn.tool_calls if isinstance(c, InventedCall)]
        undeclared = list(dict.fromkeys([*turn.undeclared_tools, *invented]))
        out.append(turn.model_copy(update={"tool_calls": calls, "undeclared_tools": undeclared}))
    return out
