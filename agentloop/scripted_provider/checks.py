"""The checks every protocol shares, over the neutral view of a request (`conversation`).

Pure functions that return violation strings instead of raising: the provider reports *all*
that is wrong with a request at once, which is what a developer debugging an agent loop wants
to see. What the provider sent at an earlier turn comes from `SentParts`, the protocol's own
output read back by its own parser, so an echo is compared in the protocol's terms.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from agentloop.scripted_provider.conversation import (
    Call,
    Conversation,
    ModelTurn,
    Part,
    Phase,
    Reasoning,
    Text,
)
from agentloop.scripted_provider.scripts import Script

SentParts = Callable[[int, Phase], list[Part]]
"""What the provider sent at turn `k` (placeholders filled), as the protocol's parser sees it."""

_P = TypeVar("_P", Text, Call, Reasoning)

# Tool results are quoted in violation messages; long ones only need their start.
_QUOTE_CHARS = 200


def check_conversation(
    conversation: Conversation, script: Script, sent: SentParts, protocol: str = ""
) -> list[str]:
    """Every violation in a request playing `script` over `protocol`, protocol-specific
    problems first."""
    turn = conversation.turn_index
    return [
        *conversation.problems,
        *[v for model_turn in conversation.turns for v in _check_results(model_turn)],
        *_check_echoes(conversation.turns, script, sent, protocol),
        *_check_pending(conversation.pending, turn, script, sent),
        *_check_expected_results(conversation.result_texts(), script, turn),
        *_check_tools_declared(conversation.declared_tools, script, turn),
    ]


def _check_results(turn: ModelTurn) -> list[str]:
    """One result per call the turn issued: none unknown, none twice, none missing."""
    issued = [call.call_id for call in turn.calls]
    if not issued and not turn.results:
        return []
    violations: list[str] = []
    seen: set[str] = set()
    for result in turn.results:
        if result.call_id not in issued:
            violations.append(
                f"{result.where} answers tool call id {result.call_id!r}, which {turn.where} "
                f"did not issue (it issued {issued})"
            )
        elif result.call_id in seen:
            violations.append(
                f"{result.where} is a duplicate tool result for call id {result.call_id!r}"
            )
        seen.add(result.call_id)
    missing = [call_id for call_id in issued if call_id not in seen]
    if missing:
        violations.append(
            f"no tool result for call id(s) {missing} of {turn.where}{turn.missing_hint}"
        )
    return violations


def _check_echoes(
    turns: list[ModelTurn], script: Script, sent: SentParts, protocol: str
) -> list[str]:
    """Each model turn in the request must be what the provider sent at that turn, or, for a
    turn another protocol served (`ScriptTurn.served_by`), that turn translated."""
    violations: list[str] = []
    for index, turn in enumerate(turns[: len(script.turns)]):
        where = f"{turn.where} (turn {index})"
        served_by = script.turns[index].served_by
        if served_by is None or served_by == protocol:
            violations += _compare_parts(turn.parts, sent(index, "whole"), where)
            continue
        expected = [_translated(p) for p in sent(index, "whole") if not isinstance(p, Reasoning)]
        violations += _compare_parts([_translated(p) for p in turn.parts], expected, where)
    return violations


def _translated(part: Part) -> Part:
    """A part as any protocol may carry over another's turn: a call without the serving
    protocol's item id, its arguments compared as JSON values (each protocol writes them its
    own way)."""
    if not isinstance(part, Call):
        return part
    try:
        arguments = json.dumps(json.loads(part.arguments), sort_keys=True, separators=(",", ":"))
    except ValueError:
        arguments = part.arguments
    return replace(part, arguments=arguments, item_id=None)


def _check_pending(
    pending: ModelTurn | None, turn: int, script: Script, sent: SentParts
) -> list[str]:
    if pending is None:
        return []
    if turn >= len(script.turns) or not script.turns[turn].pause_turn:
        return [
            f"{pending.where} ends the request as an assistant message, but turn {turn} of the "
            "script did not pause (only a `pause_turn` answer is continued that way)"
        ]
    return _compare_parts(
        pending.parts, sent(turn, "paused"), f"{pending.where} (paused turn {turn})"
    )


def _compare_parts(echoed: Sequence[Part], expected: Sequence[Part], where: str) -> list[str]:
    """How an echoed model turn differs from what the provider sent."""
    return [
        *_compare_calls(_of(echoed, Call), _of(expected, Call), where),
        *_compare_reasoning(_of(echoed, Reasoning), _of(expected, Reasoning), where),
        *_compare_texts(_of(echoed, Text), _of(expected, Text), where),
        *_check_reasoning_order(echoed, expected, where),
    ]


def _of(parts: Sequence[Part], kind: type[_P]) -> list[_P]:
    return [part for part in parts if isinstance(part, kind)]


def _compare_calls(echoed: list[Call], expected: list[Call], where: str) -> list[str]:
    want_by_id = {call.call_id: call for call in expected}
    got: dict[str, Call] = {}
    violations: list[str] = []
    for call in echoed:
        if call.call_id in got:
            violations.append(f"{where} repeats tool call id {call.call_id!r}")
        got[call.call_id] = call
    missing, extra = want_by_id.keys() - got.keys(), got.keys() - want_by_id.keys()
    violations += [f"{where} lacks the scripted tool call {i!r}" for i in sorted(missing)]
    violations += [f"{where} has tool call {i!r}, not in the script" for i in sorted(extra)]
    for call_id in sorted(want_by_id.keys() & got.keys()):
        want, have = want_by_id[call_id], got[call_id]
        if have.name != want.name:
            violations.append(
                f"{where} tool call {call_id!r} is named {have.name!r}, scripted {want.name!r}"
            )
        if have.arguments != want.arguments:
            violations.append(
                f"{where} tool call {call_id!r} has arguments {have.arguments!r}, "
                f"the provider sent {want.arguments!r} (must be echoed verbatim)"
            )
        if want.item_id is not None and have.item_id != want.item_id:
            violations.append(
                f"{where} tool call {call_id!r} has item id {have.item_id!r}, "
                f"the provider sent {want.item_id!r} (must be echoed verbatim)"
            )
    return violations


def _compare_reasoning(echoed: list[Reasoning], expected: list[Reasoning], where: str) -> list[str]:
    # Matched by position: a turn carries at most one reasoning item or thinking block.
    violations: list[str] = []
    for want, have in zip(expected, echoed, strict=False):
        if have.id != want.id:
            violations.append(f"{where} has {have.label} where the provider sent {want.label}")
        if have.signature != want.signature:
            violations.append(
                f"{where} {want.label} has {want.signature_field} {have.signature!r}, "
                f"the provider sent {want.signature!r} (must be echoed unchanged)"
            )
        if want.text is not None and have.text != want.text:
            violations.append(f"{where} {want.label} text differs from what the provider sent")
    violations += [
        f"{where} lacks the {want.label} the provider sent (it must be echoed back)"
        for want in expected[len(echoed) :]
    ]
    violations += [
        f"{where} has {have.label}, which the provider did not send"
        for have in echoed[len(expected) :]
    ]
    return violations


def _compare_texts(echoed: list[Text], expected: list[Text], where: str) -> list[str]:
    got, want = [part.text for part in echoed], [part.text for part in expected]
    if got == want:
        return []
    return [f"{where} has text {got!r}, the provider sent {want!r} (must be echoed as sent)"]


def _check_reasoning_order(
    echoed: Sequence[Part], expected: Sequence[Part], where: str
) -> list[str]:
    """Reasoning must come back before the calls it preceded (the API ties them together)."""
    wanted = [(i, part) for i, part in enumerate(expected) if isinstance(part, Reasoning)]
    got_at = [i for i, part in enumerate(echoed) if isinstance(part, Reasoning)]
    call_at = {part.call_id: i for i, part in enumerate(echoed) if isinstance(part, Call)}
    violations: list[str] = []
    for (want_at, reasoning), got in zip(wanted, got_at, strict=False):
        followers = [part.call_id for part in expected[want_at + 1 :] if isinstance(part, Call)]
        early = [call_id for call_id in followers if call_at.get(call_id, got) < got]
        if early:
            violations.append(
                f"{where} has tool call(s) {early} before the {reasoning.label} they followed"
            )
    return violations


def _check_expected_results(results: dict[str, str], script: Script, turn: int) -> list[str]:
    """The previous turn's `expect_tool_results`: proves each result went to the right call."""
    if not 0 < turn <= len(script.turns):
        return []
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


def _check_tools_declared(declared: set[str], script: Script, turn: int) -> list[str]:
    """A model may only call tools the request offers, so the script may not either."""
    if turn >= len(script.turns):
        return []
    scripted = script.turns[turn]
    called = sorted({c.name for c in scripted.tool_calls} - set(scripted.undeclared_tools))
    return [
        f"turn {turn} calls tool {name!r}, but the request's `tools` does not declare it"
        for name in called
        if name not in declared
    ]
