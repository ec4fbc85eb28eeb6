"""How much outside input the workflow will look at: sizes and nesting, checked before any
parse or schema check whose cost depends on the input. Pure.

Everything that reaches the workflow from outside (signals, updates, the run's input, model
output, tool output) is untrusted; what is over a bound is refused with the reason, never
parsed. JSON nested deeper than `MAX_DEPTH` is refused before `json.loads` sees it (Python's
parser recurses: 50,000 `[` raise `RecursionError`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 32
"""Nesting of objects and arrays in anything parsed from outside."""
MAX_SIGNAL_BYTES = 256_000
"""A signal's or update's payload."""
MAX_UPDATE_REQUEST_BYTES = 2 * MAX_SIGNAL_BYTES
"""An update's whole request (arguments, headers, id) a worker answers. Temporal's answer,
accepted or rejected, carries the request back, and one over the server's payload limit
(2 MiB by default) fails every workflow task of the run; a larger update is never answered."""
MAX_ARGUMENT_CHARS = 256_000
"""A tool call's arguments, as JSON text."""
MAX_OUTPUT_ARGUMENT_BYTES = 512_000
"""The arguments of all the tool calls of one model output, as UTF-8 JSON text: what one
output may bring into the workflow stays well under Temporal's payload limit."""
MAX_ANSWER_CHARS = 1_000_000
"""A final answer parsed as JSON against `output_schema`."""
MAX_INLINE_ANSWER_CHARS = 100_000
"""A model output's text that travels inline to the workflow (and into the run's result);
longer text travels by reference through the store, like large tool output."""
MAX_INLINE_TEXT_CHARS = 4_000
"""A task, instructions or message longer than this is stored once, and from then on a model
call's input, the state a continue-as-new carries and a result's `unsent` name it by its store
key instead of carrying it."""
MAX_LEDGER_ARGUMENT_BYTES = 640_000
"""The arguments of all the calls a run's ledger holds, as UTF-8 JSON text: the ledger rides
in the state a continue-as-new carries and in the run's result, so what the model may propose
over a whole run is bounded too (a batch that would pass it stops the run)."""
MAX_RUN_CALLS = 1_000
"""`limits.max_model_calls` and `limits.max_tool_calls` at most (checked at start): the ledger
and the progress record grow with each call."""
MAX_SCHEMA_CHARS = 64_000
"""An `output_schema` (or a tool's parameters) as JSON text."""
MAX_ERROR_CHARS = 300
"""One validation problem as the model or an operator is told it."""


class OutOfBounds(ValueError):
    """Input over a bound: refused unparsed, with the bound named."""


def nesting_depth(text: str, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of `[`/`{` in JSON text, not counting brackets inside strings;
    stops counting (returns `limit + 1`) as soon as `limit` is passed."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def value_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """The deepest nesting of dicts and lists in a parsed value (iteratively; stops past
    `limit`)."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            pending.extend((v, depth) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def loads_bounded(
    text: str,
    *,
    max_chars: int,
    max_depth: int = MAX_DEPTH,
    parse_constant: Callable[[str], Any] | None = None,
) -> Any:
    """`json.loads`, for text from outside: raises `OutOfBounds` for text longer than
    `max_chars` or nested deeper than `max_depth`, `ValueError` for text that is not JSON."""
    if len(text) > max_chars:
        raise OutOfBounds(f"{len(text)} characters, over the limit of {max_chars}")
    if nesting_depth(text, max_depth) > max_depth:
        raise OutOfBounds(f"nested deeper than {max_depth} levels")
    return json.loads(text, parse_constant=parse_constant)


NOT_TEXT = "holds a lone surrogate (such as the escape \\ud800), which is not text"


def is_text(text: str) -> bool:
    """Whether `text` is Unicode text: no lone surrogate, which a JSON `\\ud800` escape can
    produce and which no payload, store or provider can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_text_value(value: Any) -> bool:
    """Whether every string in a parsed JSON value is Unicode text."""
    return is_text(json.dumps(value, ensure_ascii=False, default=str))


def as_text(text: str) -> str:
    """`text` with each lone surrogate replaced by `?`."""
    return text if is_text(text) else text.encode("utf-8", "replace").decode("utf-8")


def clipped(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text`, cut to `limit` characters with a mark where it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
