"""Client-side: a run's conversation as the store holds it, for `agentloop transcript`.

The workflow keeps only the head of the transcript chain (docs/concepts/design.md §2); every
event lives in the store as a content-addressed node `{event, parent}`. Walking back from the
head gives the whole conversation once, oldest first, including the runs this one continues:
a run started with `continue_from` begins its chain at the previous run's head.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import assert_never

from agentloop.contract import CallRecord
from agentloop.envelope import enveloped
from agentloop.events import (
    Event,
    Instruction,
    ModelOutput,
    StateUpdate,
    ToolCall,
    ToolResult,
    UserInput,
)
from agentloop.reporting import decisions
from agentloop.runtime.codec import KeyRing
from agentloop.store import (
    UNUSABLE,
    SealedStore,
    Store,
    StoreUnavailable,
    load_transcript,
    open_store,
    why_unusable,
)

INDENT = "    "


def open_transcript_store(store_url: str, keys: KeyRing | None) -> SealedStore:
    """The store at `store_url`, read with the codec's `keys`; raises `StoreUnavailable`
    saying why it cannot be opened (no such file, a folder that cannot be made, a file that
    is not a database). A reader never creates a store: an empty one would only hide that it
    is looking in the wrong place."""
    path = _sqlite_path(store_url)
    if path is not None and not path.exists():
        raise StoreUnavailable(
            f"no such file {path}: no worker has written there; set AGENTLOOP_STORE_URL to"
            " the store the workers write to (`agentloop dev` prints it)"
        )
    try:
        return open_store(store_url, keys)
    except UNUSABLE as exc:
        raise StoreUnavailable(why_unusable(exc)) from None


def _sqlite_path(store_url: str) -> Path | None:
    """The file of a SQLite store URL (as `open_store` reads it); None for any other."""
    if store_url.startswith("sqlite:///"):
        return Path(store_url.removeprefix("sqlite:///"))
    if "://" in store_url or not store_url:
        return None
    return Path(store_url)


async def read_transcript(store: Store, head: str) -> list[Event]:
    """The events of the chain ending at `head`, oldest first.

    Raises:
        StoreError: a node is missing (e.g. the store is not the one the workers write to).
        StoreUnavailable: the store cannot be reached.
    """
    try:
        return await load_transcript(store, head)
    except sqlite3.Error as exc:  # e.g. a file that is not a database
        raise StoreUnavailable(str(exc)) from None


def format_transcript(events: Sequence[Event], calls: Sequence[CallRecord] = ()) -> str:
    """One block per event, numbered, blank lines between blocks; then what people decided
    about the calls (`calls`: the run's ledger)."""
    text = "\n\n".join(format_event(number, event) for number, event in enumerate(events, 1))
    decided = decisions(calls)
    if decided:
        text += "\n\ndecisions (from the run's call ledger):\n" + "\n".join(
            textwrap.indent(line, INDENT) for line in decided
        )
    return text


def format_event(number: int, event: Event) -> str:
    """`#N what` and, indented under it, what it said."""
    heading, body = _describe(event)
    lines = [f"#{number} {heading}"]
    lines += [textwrap.indent(part, INDENT) for part in body if part]
    return "\n".join(lines)


def _describe(event: Event) -> tuple[str, list[str]]:
    match event:
        case Instruction():
            return "instructions", [event.text]
        case UserInput():
            return f"user input from {event.sender}", [event.text]
        case ModelOutput():
            return _model_heading(event), [event.text, *map(_call_line, event.tool_calls)]
        case ToolCall():
            return "tool call", [_call_line(event)]
        case ToolResult():
            # As the model was sent it: in its provenance envelope unless its tool is trusted.
            return _result_heading(event), [enveloped(event)]
        case StateUpdate():
            data = json.dumps(event.data, ensure_ascii=False) if event.data else ""
            return f"runner note ({event.kind or 'note'})", [event.text, data]
        case _:
            assert_never(event)


def _model_heading(output: ModelOutput) -> str:
    ref = output.provider_ref
    source = " ".join(part for part in (ref.provider, ref.model) if part)
    detail = output.stop_detail if output.stop_detail not in ("", output.stop) else ""
    stop = f"{output.stop} ({detail})" if detail else output.stop
    usage = output.usage
    parts = [f"model output: {stop}", source, f"{usage.input_tokens}+{usage.output_tokens} tokens"]
    return " · ".join(part for part in parts if part)


def _call_line(call: ToolCall) -> str:
    return f"call {call.call_id} {call.name} {json.dumps(call.arguments, ensure_ascii=False)}"


def _result_heading(result: ToolResult) -> str:
    facts: list[str] = [result.status]
    if result.error_class:
        facts.append(f"error {result.error_class}{' (retryable)' if result.retryable else ''}")
    if result.side_effect:
        facts.append("side effect")
    if result.artifact_ref:
        facts.append(f"artifact {result.artifact_ref}")
    if result.redacted:
        hidden = ", ".join(f"{count} {kind}" for kind, count in sorted(result.redacted.items()))
        kept = f", original kept in {result.original_ref}" if result.original_ref else ""
        facts.append(f"redacted {hidden}{kept}")
    if result.trusted:
        facts.append("trusted")
    return f"tool result {result.call_id} {result.tool}: {', '.join(facts)}"
