"""Protocol-neutral playback: what to answer to one request, and the logs tests read.

For every protocol alike: pick the script by `model`, derive the turn from the request, run
the shared and protocol checks, inject the turn's scripted faults, fill placeholders, and log
the request and any violation. Faults come after the checks: a broken request is reported as
such at once, never hidden behind an injected error its retry would get past. No HTTP here
(see `server`), no wire format (see `protocols`).

The only state besides the logs is a counter per (script, turn) of the scripted errors already
answered, so "fail twice, then succeed" works; everything else is derived from the request.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, TypedDict

from agentloop.scripted_provider.checks import check_conversation
from agentloop.scripted_provider.conversation import Conversation, Part, Phase
from agentloop.scripted_provider.protocols import WireProtocol
from agentloop.scripted_provider.rendering import Rejection, Reply, TurnOutput
from agentloop.scripted_provider.scripts import (
    CHARS_PER_TOKEN,
    Script,
    ScriptFolder,
    ScriptTurn,
    ScriptUsage,
    estimate_tokens,
    render_placeholders,
)

_STOCK_MESSAGES = {
    429: "Rate limit reached (scripted fault); retry after the delay given.",
    500: "The server had an error while processing your request (scripted fault).",
    503: "The service is temporarily unavailable (scripted fault).",
    529: "Overloaded (scripted fault).",
}


class Violation(TypedDict):
    script: str
    turn: int | None
    message: str
    protocol: str


class RecordedRequest(TypedDict):
    script: Any  # the request's `model`, whatever the client sent
    turn: int | None
    stream: bool
    body: Any
    protocol: str
    received_at: float
    """`time.monotonic()` on arrival: lets a test check that a retry waited."""


class TokenCount(TypedDict):
    """One request to a token counter: the script it named, the protocol, what it was told."""

    script: Any
    protocol: str
    input_tokens: int


class Playback:
    def __init__(self, scripts: Iterable[Script] = (), folder: ScriptFolder | None = None) -> None:
        self._scripts = {script.name: script for script in scripts}
        self._violations: list[Violation] = []
        self._requests: list[RecordedRequest] = []
        self._counts: list[TokenCount] = []
        self._errors_answered: Counter[tuple[str, int]] = Counter()
        self._drops_done: Counter[tuple[str, int]] = Counter()
        self.folder = folder
        """Script files, read again when they change (over the scripts given here)."""
        self._from_folder: set[str] = set()
        self.sync_folder()

    def register(self, script: Script) -> None:
        """Add or replace a script; its fault counters start over."""
        self._scripts[script.name] = script
        for key in [key for key in self._errors_answered if key[0] == script.name]:
            del self._errors_answered[key]
        for key in [key for key in self._drops_done if key[0] == script.name]:
            del self._drops_done[key]

    def sync_folder(self) -> None:
        """Take in the folder's files that changed; a script whose file is gone goes too."""
        if self.folder is None:
            return
        scripts, changed = self.folder.load()
        if not changed:
            return
        for name in self._from_folder - set(scripts):
            self._scripts.pop(name, None)
        for script in scripts.values():
            if self._scripts.get(script.name) != script:
                self.register(script)
        self._from_folder = set(scripts)

    @property
    def scripts(self) -> dict[str, Script]:
        self.sync_folder()
        return dict(self._scripts)

    @property
    def violations(self) -> list[Violation]:
        return list(self._violations)

    @property
    def requests(self) -> list[RecordedRequest]:
        return list(self._requests)

    @property
    def token_counts(self) -> list[TokenCount]:
        return list(self._counts)

    def reset(self) -> None:
        """Clear the logs and every fault counter (scripts stay registered)."""
        self._violations.clear()
        self._requests.clear()
        self._counts.clear()
        self._errors_answered.clear()
        self._drops_done.clear()

    def answer(self, protocol: WireProtocol, body: Any, *, received_at: float) -> Reply | Rejection:
        """The reply (or error) for one request; `body` is the parsed JSON, whatever it is."""
        if not isinstance(body, dict):
            self._log(protocol, body, None, received_at)
            return Rejection(400, "The request body must be a JSON object.", code="invalid_json")
        conversation = protocol.parse(body)
        self._log(protocol, body, conversation, received_at)
        model = body.get("model")
        self.sync_folder()
        script = self._scripts.get(model) if isinstance(model, str) else None
        if script is None:
            message = f"The model `{model}` does not exist ({self._no_such_script()})."
            return Rejection(404, message, code="model_not_found", param="model")
        return self._play(protocol, script, conversation, stream=body.get("stream") is True)

    def _no_such_script(self) -> str:
        """Where scripts were looked for, the ones known, and the files that are not one."""
        known = sorted(self._scripts)
        if self.folder is None:
            where = "no such script; no script folder (`agentloop dev --scripts DIR`)"
        else:
            where = f"no such script in {self.folder.path}"
            if self.folder.problems:
                where += "; skipped: " + "; ".join(self.folder.problems)
        return f"{where}; known: {known}"

    def count(self, protocol: WireProtocol, body: Any) -> int | Rejection:
        """The input tokens of a request (`body` shaped as `protocol`'s model call), counted
        as the turn it would play reports them in its usage; logged in `token_counts`."""
        if not isinstance(body, dict):
            return Rejection(400, "The request body must be a JSON object.", code="invalid_json")
        conversation = protocol.parse(body)
        model = body.get("model")
        script = self._scripts.get(model) if isinstance(model, str) else None
        turn = conversation.turn_index
        if script is None or turn >= len(script.turns):
            tokens = estimate_tokens(conversation.prompt_chars)
        else:
            tokens = script.turns[turn].usage_for(conversation.prompt_chars).prompt_tokens
        self._counts.append(TokenCount(script=model, protocol=protocol.name, input_tokens=tokens))
        return tokens

    def _log(
        self, protocol: WireProtocol, body: Any, conversation: Conversation | None, at: float
    ) -> None:
        fields = body if isinstance(body, dict) else {}
        self._requests.append(
            RecordedRequest(
                script=fields.get("model"),
                turn=conversation.turn_index if conversation is not None else None,
                stream=fields.get("stream") is True,
                body=body,
                protocol=protocol.name,
                received_at=at,
            )
        )

    def _play(
        self, protocol: WireProtocol, script: Script, conversation: Conversation, *, stream: bool
    ) -> Reply | Rejection:
        turn = conversation.turn_index
        results = conversation.result_texts()

        def sent(index: int, phase: Phase) -> list[Part]:
            played, _ = _fill(script.turns[index], results)
            return protocol.sent_parts(TurnOutput(script.name, index, played, phase))

        violations = check_conversation(conversation, script, sent, protocol.name)
        if violations:
            self._record(protocol, script.name, turn, violations)
            message = "Protocol violation: " + "; ".join(violations)
            return Rejection(400, message, code="protocol_violation")
        if turn >= len(script.turns):
            message = (
                f"script {script.name!r} has {len(script.turns)} turn(s); turn {turn} was requested"
            )
            # Recorded too: a loop that asks past the end of its script is misbehaving.
            self._record(protocol, script.name, turn, [message])
            return Rejection(400, message, code="script_exhausted")
        scripted = script.turns[turn]
        fault = self._next_fault(script.name, turn, scripted)
        if fault is not None:
            return fault
        phase: Phase = "whole"
        if conversation.pending is not None:
            phase = "continuation"
        elif protocol.pauses and scripted.pause_turn:
            phase = "paused"
        played, missing = _fill(scripted, results)
        if phase != "continuation":  # a continuation does not send the text again
            # A missing value still answers (the marker is visible in the text) but is recorded.
            notes = [f"placeholder {{{{{m}}}}} has no value" for m in missing]
            self._record(protocol, script.name, turn, notes)
        usage = scripted.usage_for(conversation.prompt_chars)
        played, usage = _within_limit(played, usage, conversation.max_output_tokens)
        drop_after = None
        dropping = stream and scripted.drop_stream_after_events is not None
        if dropping and self._drops_done[(script.name, turn)] < scripted.drops:
            self._drops_done[(script.name, turn)] += 1
            drop_after = scripted.drop_stream_after_events
        return Reply(
            output=TurnOutput(script.name, turn, played, phase),
            usage=usage,
            created=int(time.time()),
            stream=stream,
            stream_usage=conversation.stream_usage,
            drop_after=drop_after,
        )

    def _next_fault(self, script: str, turn: int, scripted: ScriptTurn) -> Rejection | None:
        answered = self._errors_answered[(script, turn)]
        if answered >= len(scripted.errors):
            return None
        self._errors_answered[(script, turn)] += 1
        error = scripted.errors[answered]
        return Rejection(
            error.status,
            error.message or _STOCK_MESSAGES.get(error.status, f"HTTP {error.status} (scripted)"),
            retry_after=error.retry_after,
            retry_after_ms=error.retry_after_ms,
            delay_ms=scripted.delay_ms,
        )

    def _record(
        self, protocol: WireProtocol, script: str, turn: int | None, messages: list[str]
    ) -> None:
        self._violations += [
            Violation(script=script, turn=turn, message=m, protocol=protocol.name) for m in messages
        ]


def _fill(turn: ScriptTurn, results: dict[str, str]) -> tuple[ScriptTurn, list[str]]:
    """The turn with the placeholders of its text and of its calls' string arguments filled
    (a call may use what an earlier one returned, as a model would), and the placeholders
    without a value."""
    missing: list[str] = []
    update: dict[str, Any] = {}
    if turn.text is not None:
        update["text"], missing = render_placeholders(turn.text, results)
    calls = []
    for call in turn.tool_calls:
        if isinstance(call.arguments, dict):
            arguments: dict[str, Any] = {}
            for name, value in call.arguments.items():
                if isinstance(value, str):
                    value, unfilled = render_placeholders(value, results)
                    missing += unfilled
                arguments[name] = value
            call = call.model_copy(update={"arguments": arguments})
        calls.append(call)
    if turn.tool_calls:
        update["tool_calls"] = calls
    return (turn.model_copy(update=update) if update else turn), missing


def _within_limit(
    played: ScriptTurn, usage: ScriptUsage, limit: int | None
) -> tuple[ScriptTurn, ScriptUsage]:
    """What a real model does past the request's output-token limit: it stops there, its
    calls unfinished (`length`), having used exactly the limit."""
    if limit is None or usage.completion_tokens <= limit:
        return played, usage
    cut = played.model_copy(
        update={
            "text": (played.text or "")[: limit * CHARS_PER_TOKEN],
            "tool_calls": [],
            "finish_reason": "length",
        }
    )
    return cut, usage.model_copy(update={"completion_tokens": limit})
