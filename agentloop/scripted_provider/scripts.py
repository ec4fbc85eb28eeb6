"""Scenario scripts the provider plays, and the placeholders their text may contain.

Nothing here knows a wire protocol: a script is a list of assistant turns (plus the faults to
inject while playing them), and rendering a placeholder needs only the tool results of the
conversation, keyed by tool-call id.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from agentloop.scripted_provider.script_lines import json_lines, line_of, toml_lines

# The values the Chat Completions API itself may send; anything else would not be realistic.
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]

# `{{CALL_ID}}` or `{{CALL_ID.key.key}}`; call ids never contain dots, so the first dot splits.
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}.\s]+)((?:\.[^{}.\s]+)*)\s*\}\}")

# A rough "4 characters per token" keeps the default usage small, deterministic and plausible.
CHARS_PER_TOKEN = 4


class _Strict(BaseModel):
    # A misspelled key (`tool_call`) would otherwise be dropped, and its turn played as
    # something else (an empty answer): a script says exactly what it means or is refused.
    model_config = ConfigDict(extra="forbid")


class ScriptedToolCall(_Strict):
    id: str
    name: str
    # A str is sent verbatim, which lets a script send arguments that are not valid JSON.
    arguments: dict[str, Any] | str

    def arguments_text(self) -> str:
        """The exact argument string sent on the wire (and expected back when echoed)."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


class ScriptUsage(_Strict):
    """Token counts, in Chat Completions words; each protocol renders them in its own shape
    (`input_tokens` / `output_tokens` for Responses and Anthropic)."""

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ScriptedError(_Strict):
    """An HTTP error answered instead of a turn, in the error shape of the protocol asked."""

    status: int = Field(ge=400, le=599)
    retry_after: str | None = None
    """Sent as the `retry-after` header (seconds, or an HTTP date) when set."""
    retry_after_ms: str | None = None
    """Sent as the `retry-after-ms` header (the OpenAI and Anthropic clients honour it)."""
    message: str = ""
    """The error message; empty picks a stock one for the status."""


class ScriptTurn(_Strict):
    """One model turn, protocol-neutral: the same turn plays over every wire protocol."""

    text: str | None = None
    tool_calls: list[ScriptedToolCall] = Field(default_factory=list)
    refusal: str | None = None
    finish_reason: FinishReason | None = None
    """In Chat Completions words; mapped to Responses `status` / Anthropic `stop_reason`."""
    stop_sequence: str | None = None
    """With finish `stop`: Anthropic answers `stop_reason: "stop_sequence"` with this value."""
    reasoning: str | None = None
    """Sent first, as a Responses `reasoning` item or an Anthropic `thinking` block (with an
    opaque `encrypted_content` / `signature`), and checked to come back. Chat ignores it."""
    cut_stream_after_chars: int | None = Field(default=None, ge=0)
    """Streaming: stop after this many tool-argument characters, without a completion event."""
    cut_stream_after_events: int | None = Field(default=None, ge=0)
    """Streaming: send only the first K SSE events, then end the response cleanly."""
    fragment_chars: int | None = Field(default=None, ge=1)
    """Streaming: tool-argument fragments of exactly this many characters."""
    interleave: bool = True
    """Streaming: interleave the argument fragments of parallel calls (False: call by call)."""
    pause_turn: bool = False
    """Anthropic only: answer `pause_turn` with the turn's reasoning and text first; the
    request that echoes that paused content back gets the rest of the turn."""
    errors: list[ScriptedError] = Field(default_factory=list)
    """The first `len(errors)` valid requests for this turn get these errors, in order
    (counted per script and turn; `register` and `reset` start the count over)."""
    delay_ms: int = Field(default=0, ge=0)
    """Every answer to this turn (injected errors included) waits this long first."""
    drop_stream_after_events: int | None = Field(default=None, ge=0)
    """Streaming: the first `drops` answers to this turn send this many events, then the
    connection is lost (the client's request fails mid-answer; its retry gets the turn)."""
    drops: int = Field(default=1, ge=0)
    event_delay_ms: int = Field(default=0, ge=0, le=10_000)
    """Streaming: wait this long between the events of the answer (a provider streaming
    slowly, as a real one streams tokens)."""
    expect_tool_results: dict[str, str] = Field(default_factory=dict)
    usage: ScriptUsage | None = None
    undeclared_tools: list[str] = Field(default_factory=list)
    """Tools this turn calls although the request does not offer them: a model that
    hallucinates a tool name, which the runner must refuse."""
    served_by: Literal["openai-chat", "openai-responses", "anthropic"] | None = None
    """The protocol another model played this turn over, in a conversation that moved to this
    script's model afterwards (a fallback). Echoed over another protocol, the turn must come
    back translated: the same call ids, names, argument values and text, and nothing that
    only the serving protocol issues (item ids, reasoning, signatures); over its own protocol
    it is checked as usual."""

    @model_validator(mode="after")
    def _expectations_name_own_calls(self) -> ScriptTurn:
        # An expectation about a call this turn never makes could never be met.
        unknown = set(self.expect_tool_results) - {call.id for call in self.tool_calls}
        if unknown:
            raise ValueError(f"expect_tool_results names calls this turn does not make: {unknown}")
        return self

    @model_validator(mode="after")
    def _paused_part_not_empty(self) -> ScriptTurn:
        # The provider is stateless: it tells a continuation from the first request only by
        # the paused content echoed at the end, so that content must not be empty.
        if self.pause_turn and not self.text and self.reasoning is None:
            raise ValueError("pause_turn needs `text` or `reasoning` to pause after")
        return self

    def effective_finish_reason(self) -> FinishReason:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    def completion_chars(self) -> int:
        calls = sum(len(call.name) + len(call.arguments_text()) for call in self.tool_calls)
        texts = (self.text, self.refusal, self.reasoning)
        return sum(len(text or "") for text in texts) + calls

    def usage_for(self, prompt_chars: int) -> ScriptUsage:
        """The scripted usage, or a deterministic estimate so retries report the same numbers."""
        if self.usage is not None:
            return self.usage
        return ScriptUsage(
            prompt_tokens=estimate_tokens(prompt_chars),
            completion_tokens=estimate_tokens(self.completion_chars()),
        )


class Script(_Strict):
    name: str = Field(min_length=1)
    turns: list[ScriptTurn] = Field(min_length=1)

    @model_validator(mode="after")
    def _call_ids_unique(self) -> Script:
        # Placeholders and pairing checks look tool results up by call id across the whole
        # conversation, so an id reused by two calls would make both ambiguous.
        ids = [call.id for turn in self.turns for call in turn.tool_calls]
        duplicates = sorted({call_id for call_id in ids if ids.count(call_id) > 1})
        if duplicates:
            raise ValueError(f"tool call ids must be unique within a script: {duplicates}")
        return self


def estimate_tokens(chars: int) -> int:
    return chars // CHARS_PER_TOKEN + 1


def load_builtin_scripts() -> dict[str, Script]:
    """The scripts shipped in `agentloop/demo/scripts/*.json`, by name."""
    folder = resources.files("agentloop.demo").joinpath("scripts")
    scripts: dict[str, Script] = {}
    for entry in sorted(folder.iterdir(), key=lambda item: item.name):
        if entry.name.endswith(".json"):
            script = Script.model_validate_json(entry.read_text(encoding="utf-8"))
            scripts[script.name] = script
    return scripts


SCRIPT_FILE_SUFFIXES = (".json", ".toml")


class ScriptFileError(ValueError):
    """A script file that cannot be read or is not a valid `Script`; the message names it."""


def load_script_file(path: Path) -> Script:
    """One script from a `.json` or `.toml` file: a `Script` (`turns`, each with `text` and/or
    `tool_calls` of `id`, `name`, `arguments`); `name` defaults to the file's stem. Raises
    `ScriptFileError` saying, for each problem, the file, the line and what was expected."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptFileError(f"{path}: cannot read it ({exc})") from None
    toml = path.suffix == ".toml"
    try:
        data = tomllib.loads(text) if toml else json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScriptFileError(
            f"{path}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise ScriptFileError(f"{path}:{at.group(1) if at else 1}: not valid TOML: {exc}") from None
    except ValueError as exc:  # JSON that Python's parser refuses otherwise (too deep)
        raise ScriptFileError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ScriptFileError(
            f"{path}:1: expected an object with `turns`, not {type(data).__name__}"
        )
    data.setdefault("name", path.stem)
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        lines = toml_lines(text) if toml else json_lines(text)
        problems = [
            f"{path}:{line_of(lines, error['loc'])}: {_problem(error)}"
            for error in exc.errors(include_url=False)
        ]
        raise ScriptFileError("\n".join(problems)) from None


def _problem(error: ErrorDetails) -> str:
    """One validation error of a script, said with what was expected there."""
    loc = error["loc"]
    field = ".".join(str(part) for part in loc) or "script"
    if error["type"] == "extra_forbidden":
        known = _keys_at(loc[:-1])
        near = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        return f"{field}: unknown key {loc[-1]!r}{hint} (expected one of: {', '.join(known)})"
    got = repr(error.get("input"))
    got = got if len(got) <= 80 else got[:77] + "..."
    if error["type"] == "missing":
        return f"{field}: missing (it is required)"
    return f"{field}: {error['msg']} (got {got})"


def _keys_at(loc: Sequence[str | int]) -> list[str]:
    """The keys a script takes at `loc` (a turn's, a tool call's...)."""
    model: type[BaseModel] = Script
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        inner = _model_in(field.annotation) if field is not None else None
        if inner is None:
            return []
        model = inner
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The script model an annotation holds (`list[ScriptTurn]`, `ScriptUsage | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next(filter(None, map(_model_in, get_args(annotation))), None)


class ScriptFolder:
    """The scripts of a folder's `*.json` and `*.toml` files, one per file, read again when
    a file is added, changed or removed (a stat per file per `load`: cheap enough to do on
    every model request)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: dict[Path, int] = {}
        self._loaded: dict[str, Script] = {}
        self.problems: list[str] = []
        """Why each file that is not a script was skipped, at the last `load`."""

    def load(self) -> tuple[dict[str, Script], bool]:
        """The folder's scripts by name, and whether anything changed since the last call."""
        try:
            files = sorted(p for p in self.path.iterdir() if p.suffix in SCRIPT_FILE_SUFFIXES)
            stamps = {p: p.stat().st_mtime_ns for p in files if p.is_file()}
        except OSError as exc:
            stamps, failure = {}, [f"{self.path}: cannot list it ({exc.strerror or exc})"]
        else:
            failure = []
        if stamps == self._seen and not failure:
            return dict(self._loaded), False
        loaded: dict[str, Script] = {}
        problems = list(failure)
        for path in stamps:
            try:
                script = load_script_file(path)
            except ScriptFileError as exc:
                problems.append(str(exc))
                continue
            if script.name in loaded:
                problems.append(f"{path}: a script named {script.name!r} is in another file too")
                continue
            loaded[script.name] = script
        self._seen, self._loaded, self.problems = stamps, loaded, problems
        return dict(loaded), True


def render_placeholders(text: str, tool_results: Mapping[str, str]) -> tuple[str, list[str]]:
    """Fill `{{CALL_ID.path}}` from tool results; returns the text and the unresolvable ones.

    An unresolvable placeholder renders as `<missing CALL_ID.path>` instead of failing the
    turn, so the run goes on and the caller can report it.
    """
    missing: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        call_id, dotted = match.group(1), match.group(2)
        value = _lookup(tool_results.get(call_id), dotted.split(".")[1:])
        if value is None:
            missing.append(f"{call_id}{dotted}")
            return f"<missing {call_id}{dotted}>"
        return value

    return _PLACEHOLDER.sub(substitute, text), missing


def _lookup(content: str | None, path: list[str]) -> str | None:
    if content is None or not path:
        return content
    try:
        node: Any = json.loads(content)
    except ValueError:
        return None
    for key in path:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    # Strings go in bare; numbers, booleans and objects as the JSON a reader would expect.
    return node if isinstance(node, str) else json.dumps(node, ensure_ascii=False)
