"""A protocol-neutral view of one model request: what the shared checks look at.

Each protocol's `*_parse` module turns its wire request into a `Conversation`: the model turns
the client echoed back (as `Part`s), the tool results its ordering rules attach to each turn,
the tools it declares, and the problems only that protocol can see (roles, shapes, placement).
The same parsers read the provider's own output, so "what the provider sent" and "what came
back" are compared in one vocabulary, whatever the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentloop.envelope import unwrapped


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Call:
    call_id: str
    name: str
    arguments: str
    """As the protocol compares them: the verbatim string (OpenAI), canonical JSON (Anthropic)."""
    item_id: str | None = None
    """The Responses item id (`fc_...`), which must come back too; None elsewhere."""


@dataclass(frozen=True)
class Reasoning:
    id: str | None
    """The Responses item id (`rs_...`); Anthropic thinking blocks have none."""
    text: str | None
    """Compared when not None (Anthropic `thinking`); Responses summaries are not compared."""
    signature: str | None
    """`encrypted_content` (Responses) or `signature` (Anthropic): must come back unchanged."""
    signature_field: str = field(default="signature", compare=False)

    @property
    def label(self) -> str:
        return f"reasoning item {self.id!r}" if self.id else "thinking block"


Part = Text | Call | Reasoning

Phase = Literal["whole", "paused", "continuation"]
"""Which part of a turn an answer carries: all of it, or one side of a `pause_turn`."""


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: str
    where: str
    """Where the result sits in the request, for messages (`messages[3]`, `input[4]`)."""


@dataclass
class ModelTurn:
    """One model turn as the client sent it back: an assistant message, or a run of items."""

    where: str
    parts: list[Part] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    """The results the protocol's ordering rules attach to this turn's calls."""
    missing_hint: str = ""
    """Appended to a "no tool result" violation, e.g. what came where results were due."""

    @property
    def calls(self) -> list[Call]:
        return [part for part in self.parts if isinstance(part, Call)]


def output_limit(value: Any) -> int | None:
    """A request's output-token limit, when it is a positive integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass
class Conversation:
    turns: list[ModelTurn] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    """Every well-formed tool result, wherever it sits: for expectations and placeholders."""
    declared_tools: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    pending: ModelTurn | None = None
    """A trailing model turn not counted in `turns`: only the continuation of a paused turn
    may end a request that way (Anthropic)."""
    prompt_chars: int = 0
    """The size of the conversation, for the default usage estimate."""
    stream_usage: bool = False
    """Chat Completions `stream_options.include_usage`."""
    max_output_tokens: int | None = None
    """The output-token limit the request set (`max_completion_tokens`, `max_output_tokens`,
    `max_tokens`): a longer scripted answer is cut there, as a real model's would be."""

    @property
    def turn_index(self) -> int:
        """The script turn asked for: the model turns already answered. Derived from the
        request alone, so a retried request replays the same turn."""
        return len(self.turns)

    def result_texts(self) -> dict[str, str]:
        """Each call's result as its tool gave it: out of the provenance envelope the runner
        sends it in, so a script's placeholders read the tool's own JSON."""
        return {result.call_id: unwrapped(result.content) for result in self.results}


def role_of(message: Any) -> str | None:
    """A message's `role`, if it is an object with a string role."""
    role = message.get("role") if isinstance(message, dict) else None
    return role if isinstance(role, str) else None


def span(prefix: str, start: int, end: int) -> str:
    """`input[3]` or `input[3..5]`: where a run of items sits."""
    return f"{prefix}[{start}]" if start == end else f"{prefix}[{start}..{end}]"


def text_of(content: Any) -> str | None:
    """A string, or the joined `text` of a list of text parts; None for anything else."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = [part.get("text") if isinstance(part, dict) else None for part in content]
    if not all(isinstance(text, str) for text in texts):
        return None
    return "".join(text for text in texts if isinstance(text, str))
