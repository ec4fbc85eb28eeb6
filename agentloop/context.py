"""The context budget: what the model is sent stays within what it can read.

Activity side, applied to the request only: the stored transcript keeps everything. When the
conversation would not fit, the oldest tool results give way first to a short preview (and
their artifact reference, when they have one); the results the model is answering now stay
whole. What must not be lost is then stated from run state (approvals, confirmed writes) —
never only from what a summary kept."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from agentloop.envelope import ENVELOPE_NOTE, enveloped, needs_note
from agentloop.events import Event, ModelOutput, StateUpdate, ToolResult
from agentloop.tool_spec import ToolSpec

PREVIEW_CHARS = 300

CONTEXT_TOKENS: dict[str, int] = {
    "gpt-4o": 112_000,
    "gpt-4.1": 1_000_000,
    "gpt-5": 272_000,
    "o3": 180_000,
    "o4-mini": 180_000,
    "claude-": 180_000,
}
"""Model-name prefix -> input tokens it may be sent (its context window, less room to answer)."""

DEFAULT_CHARS_PER_TOKEN = 3.0
"""Before the provider has counted a request of this run: a cautious guess (JSON and code
run at about 3 characters a token, English prose at about 4)."""

CHARS_PER_TOKEN_RANGE = (1.0, 8.0)
"""A measured ratio outside this range is taken as its nearest bound."""


def budget_chars(
    model: str,
    explicit_chars: int | None,
    explicit_tokens: int | None = None,
    chars_per_token: float | None = None,
) -> int | None:
    """How many characters of events the next request may hold. A budget in tokens (the
    run's, else the model's) becomes characters at the ratio the provider's own token count
    of this run's last request showed: no tokenizer per model needed, and it follows the
    language and shape of this very conversation."""
    if explicit_chars is not None:
        return explicit_chars
    tokens = explicit_tokens
    if tokens is None:
        matches = [prefix for prefix in CONTEXT_TOKENS if model.startswith(prefix)]
        tokens = CONTEXT_TOKENS[max(matches, key=len)] if matches else None
    if tokens is None:
        return None
    low, high = CHARS_PER_TOKEN_RANGE
    ratio = DEFAULT_CHARS_PER_TOKEN if chars_per_token is None else chars_per_token
    return int(tokens * min(max(ratio, low), high))


def chars_per_token(request_chars: int, input_tokens: int) -> float | None:
    """The ratio one request showed: its events' size against the provider's token count
    (which also counts the tool declarations, so the ratio errs on the cautious side)."""
    if request_chars <= 0 or input_tokens <= 0:
        return None
    return request_chars / input_tokens


def size(event: Event) -> int:
    """Characters of the event as compact JSON (pydantic's own serialiser: every event of the
    transcript is measured on every model call, and `canonical_json` costs five times more for
    the same count)."""
    return len(event.model_dump_json())


@dataclass(frozen=True)
class Measured:
    """Events with the `size` of each, measured once: a worker keeps a run's transcript this
    way between model calls, so a turn measures only what is new. (Measuring the whole
    transcript on every call made each turn dearer the longer the run: 9% of worker CPU at
    300 turns.)"""

    events: list[Event]
    sizes: list[int]

    @classmethod
    def of(cls, events: Sequence[Event]) -> Measured:
        return cls(list(events), [size(event) for event in events])

    def plus(self, more: Sequence[Event]) -> Measured:
        return Measured([*self.events, *more], [*self.sizes, *(size(event) for event in more)])


@dataclass(frozen=True)
class Fitted:
    events: list[Event]
    """What the model is sent."""
    chars: int
    """Their size as `size` measures it: the token ratio's numerator."""
    added: list[Event] = field(default_factory=list)
    """What `fit` added that is in no transcript (the facts note)."""
    elided: frozenset[int] = frozenset()
    """The indices of the transcript's events sent shortened."""

    @property
    def elided_through(self) -> int:
        """Every result sent shortened is among the transcript's events before this index (0:
        none was): the next call's `input_token_bound` counts those it sends whole again."""
        return max(self.elided, default=-1) + 1


def fit(transcript: Measured, limit_chars: int | None, facts: list[str]) -> Fitted:
    """The transcript as sent to the model: unchanged when it fits, else older results elided
    and the run-state facts restated at the end. Never larger than the transcript: a result
    is elided only if its stub is smaller (for one not much longer than the preview, the stub
    naming it is larger), and eliding must make up for the facts it has to restate."""
    events = transcript.events
    whole = sum(transcript.sizes)
    if limit_chars is None or whole <= limit_chars:
        return Fitted(events, whole)
    # Room is made for the facts too: what is elided is what they must be restated for.
    added: list[Event] = [_facts_note(facts)] if facts else []
    total = whole + sum(size(event) for event in added)
    last_output = max((i for i, e in enumerate(events) if isinstance(e, ModelOutput)), default=-1)
    fitted = list(events)
    elided: set[int] = set()
    for index, event in enumerate(events[:last_output]):
        if total <= limit_chars:
            break
        if _shortenable(event):
            stub = event.model_copy(update={"content": _elided(event)})
            saved = transcript.sizes[index] - size(stub)
            if saved > 0:
                fitted[index] = stub
                total -= saved
                elided.add(index)
    if total >= whole:
        return Fitted(events, whole)
    return Fitted([*fitted, *added], total, added, frozenset(elided))


def _shortenable(event: Event) -> TypeGuard[ToolResult]:
    return isinstance(event, ToolResult) and len(event.content) > PREVIEW_CHARS


def _facts_note(facts: list[str]) -> StateUpdate:
    return StateUpdate(
        kind="facts",
        text="Earlier tool results were shortened to fit your context. Facts from run state, "
        "which stay true: " + "; ".join(facts),
    )


FRAMING_TOKENS = 16
"""Tokens a provider may add around each message or tool it is sent (role, separators):
generous, since the bound below must hold."""


def input_token_bound(
    sent: Fitted,
    new_events: Sequence[Event],
    tools: Sequence[ToolSpec],
    context_tokens: int | None,
    elided_before: int = 0,
) -> int:
    """The most input tokens the request `sent` can take, assuming a token covers at least one
    byte (byte-level BPE, as the providers' tokenizers are): the transcript so far as the
    provider counted it (`context_tokens`, the last call's input and output) plus the bytes of
    what is new, or, before anything was counted, the bytes of the whole request.

    The last call may have sent older results shortened (`elided_before`: its `Fitted`'s
    `elided_through`) that this one sends whole, when its budget grew or the facts to restate
    outgrew what eliding saves: the provider counted their stubs, so their whole bytes are
    added (the stubs, counted twice then, err on the safe side)."""
    # The envelope note, counted as new too: the last call may not have said it.
    note = _note_bytes(sent.events, tools)
    whole = _byte_bound(sent.events) + _byte_bound(tools) + note
    if context_tokens is None:
        return whole
    sent_whole_again = [
        event
        for index, event in enumerate(sent.events[:elided_before])
        if _shortenable(event) and index not in sent.elided
    ]
    new = _byte_bound([*new_events, *sent.added, *sent_whole_again]) + note
    return min(whole, context_tokens + new)


def _byte_bound(items: Sequence[Event | ToolSpec]) -> int:
    return sum(len(_as_sent(item).encode("utf-8", "replace")) + FRAMING_TOKENS for item in items)


def _note_bytes(events: Sequence[Event], tools: Sequence[ToolSpec]) -> int:
    if not needs_note(events, bool(tools)):
        return 0
    return len(ENVELOPE_NOTE.encode("utf-8")) + FRAMING_TOKENS


def _as_sent(item: Event | ToolSpec) -> str:
    """What of `item` a provider is sent (of a tool: its name, description and parameters; of
    a tool's result, its envelope too)."""
    if isinstance(item, ToolSpec):
        return item.name + item.description + json.dumps(item.parameters, ensure_ascii=False)
    sent = item.model_dump_json(exclude_defaults=True)
    if isinstance(item, ToolResult):
        # The envelope's marks: their length does not depend on what they wrap.
        sent += enveloped(item.model_copy(update={"content": ""}))
    return sent


def _elided(result: ToolResult) -> str:
    return json.dumps(
        {
            "elided": True,
            "source": {"tool": result.tool, "call_id": result.call_id},
            "total_chars": len(result.content),
            "artifact": result.artifact_ref,
            "preview": result.content[:PREVIEW_CHARS],
        },
        ensure_ascii=False,
    )
