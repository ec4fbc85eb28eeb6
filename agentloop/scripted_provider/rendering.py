"""What every protocol renderer shares: the answer to render, its pieces, and SSE framing.

A renderer gets a `Reply` (a turn to play) or a `Rejection` (an error to answer) and returns
JSON or a `Stream`; how text and tool arguments are cut into deltas, and in which order the
fragments of parallel calls go, is decided here once, so all protocols stream alike.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from agentloop.scripted_provider.conversation import Phase
from agentloop.scripted_provider.scripts import ScriptTurn, ScriptUsage

JSONObject = dict[str, Any]

# Small pieces make every assembler do real work: text arrives in several deltas and each
# argument string in many fragments.
CONTENT_PIECE_CHARS = 6
ARGUMENT_FRAGMENT_CHARS = 5


@dataclass(frozen=True)
class TurnOutput:
    """One scripted turn (placeholders filled) as the provider sends it, or sent it."""

    script: str
    index: int
    turn: ScriptTurn
    phase: Phase = "whole"

    def opaque(self, kind: str) -> str:
        """A deterministic opaque token (reasoning `encrypted_content`, thinking `signature`):
        the same turn always carries the same one, so an echo can be checked statelessly."""
        seed = json.dumps([kind, self.script, self.index, self.turn.reasoning])
        digest = hashlib.sha256(seed.encode()).digest()
        return "scripted:" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class Reply:
    """The answer to a valid request: a turn to play, JSON or streamed."""

    output: TurnOutput
    usage: ScriptUsage
    created: int
    stream: bool
    stream_usage: bool = False
    drop_after: int | None = None
    """Send this many events of the stream, then lose the connection."""

    @property
    def turn(self) -> ScriptTurn:
        return self.output.turn

    @property
    def delay_ms(self) -> int:
        return self.output.turn.delay_ms


@dataclass(frozen=True)
class Rejection:
    """An error answer: a bad request, an unknown model, or a fault the script injects."""

    status: int
    message: str
    code: str | None = None
    param: str | None = None
    retry_after: str | None = None
    retry_after_ms: str | None = None
    delay_ms: int = 0

    def headers(self) -> dict[str, str]:
        headers = {"retry-after": self.retry_after, "retry-after-ms": self.retry_after_ms}
        return {name: value for name, value in headers.items() if value is not None}


@dataclass(frozen=True)
class Stream:
    """SSE frames of one answer; `completion` holds the frames that say it is complete."""

    events: list[bytes]
    completion: list[bytes] = field(default_factory=list)

    def frames(self, cut_after_events: int | None) -> list[bytes]:
        # A cut stream ends cleanly but never says it is complete: the client must notice.
        if cut_after_events is not None:
            return self.events[:cut_after_events]
        return [*self.events, *self.completion]


def sse_frame(data: JSONObject, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event is not None else ""
    try:
        return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
    except UnicodeEncodeError:
        # A script that plays a lone surrogate: sent as the `\\ud800` escape a provider sends.
        return f"{head}data: {json.dumps(data)}\n\n".encode()


def pieces(text: str | None, size: int = CONTENT_PIECE_CHARS) -> list[str]:
    if not text:
        return []
    return [text[start : start + size] for start in range(0, len(text), size)]


@dataclass(frozen=True)
class Fragment:
    """One tool-argument delta: which call it extends, and whether it opens or ends it."""

    call: int
    text: str
    first: bool
    last: bool


def argument_fragments(turn: ScriptTurn) -> tuple[list[Fragment], bool]:
    """The argument deltas of the turn's calls in send order, and whether the stream is cut.

    Interleaved round-robin by default: real providers interleave parallel calls, which breaks
    assemblers that assume one call ends before the next starts. `cut_stream_after_chars` caps
    the argument characters sent over all calls; a call whose arguments were all sent is
    `last` (its closing events follow), a call cut short never is.
    """
    size = turn.fragment_chars or ARGUMENT_FRAGMENT_CHARS
    per_call = [pieces(call.arguments_text(), size) or [""] for call in turn.tool_calls]
    if turn.interleave:
        rounds = max((len(parts) for parts in per_call), default=0)
        order = [
            (c, r) for r in range(rounds) for c in range(len(per_call)) if r < len(per_call[c])
        ]
    else:
        order = [(c, r) for c, parts in enumerate(per_call) for r in range(len(parts))]
    budget = turn.cut_stream_after_chars
    fragments: list[Fragment] = []
    for call, round_no in order:
        piece = per_call[call][round_no]
        if budget is not None:
            if budget <= 0:
                break
            piece, budget = piece[:budget], budget - len(piece[:budget])
        whole = piece == per_call[call][round_no]
        last = whole and round_no == len(per_call[call]) - 1
        fragments.append(Fragment(call, piece, first=round_no == 0, last=last))
        if not whole:
            break
    return fragments, turn.cut_stream_after_chars is not None
