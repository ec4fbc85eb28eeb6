"""Sensitive values in tool output, replaced before the model or the transcript sees them
(article 001: the tool layer "handles sensitive information before the model sees it";
article 000: what is stored of tool results is "redacted and access-controlled").

Runs activity-side (`run_tool`), over at most `MAX_SCANNED_CHARS` of an output, with RE2's
linear-time patterns. Each kind is a pattern and, where one exists, a check that keeps false
alarms down: card numbers pass the Luhn check, IBANs the ISO 7064 mod-97 check. A match
becomes `[redacted:KIND]` (`policies.placeholders`), and the counts go to the call's ledger
line. The output as it was is kept, by the tool's policy (`keep_redacted`), in an artifact
only the tool's approvers may read (`store.originals.read_original`), or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2

PLACEHOLDER_PREFIX = "[redacted:"
"""How every stand-in for a redacted value begins (`[redacted:KIND]`)."""
MAX_SCANNED_CHARS = 4_000_000
"""The most of one output scanned: what lies past it is cut (and the cut said), never sent
unscanned."""
ORIGINAL_MEDIA_TYPE = "application/vnd.agentloop.redacted-original+json"
"""The media type of an artifact keeping an output as it was before redaction."""

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 8 << 20


def placeholder(kind: str) -> str:
    return f"{PLACEHOLDER_PREFIX}{kind}]"


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def _card(match: str) -> bool:
    digits = "".join(c for c in match if c.isdigit())
    return 13 <= len(digits) <= 19 and _luhn(digits)


def _iban(match: str) -> bool:
    compact = match.replace(" ", "").upper()
    moved = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return 15 <= len(compact) <= 34 and int(number) % 97 == 1


@dataclass(frozen=True)
class Pattern:
    kind: str
    regex: str
    check: Callable[[str], bool] | None = None

    def compiled(self) -> Any:
        return re2.compile(self.regex, _OPTIONS)


PATTERNS: dict[str, Pattern] = {
    p.kind: p
    for p in (
        # An IBAN first: its digits may pass for a card number's.
        Pattern("iban", r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b", _iban),
        Pattern("card_number", r"\b\d(?:[ -]?\d){12,18}\b", _card),
        Pattern(
            "api_key",
            r"\b(?:sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,200}|AKIA[0-9A-Z]{16}"
            r"|gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}"
            r"|xox[abprs]-[A-Za-z0-9-]{10,200}|AIza[0-9A-Za-z_-]{35}"
            r"|sk_(?:live|test)_[A-Za-z0-9]{16,200})",
        ),
        Pattern("email", r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})+\b"),
    )
}
"""The redactors every worker knows, by the name a tool or the worker lists them under, in
the order they run."""
DEFAULT_REDACT = ("card_number", "api_key")
"""On in every worker unless its configuration says otherwise (`AGENTLOOP_REDACT`)."""

_COMPILED: dict[str, Any] = {}


def _compiled(kind: str) -> Any:
    if kind not in _COMPILED:
        _COMPILED[kind] = PATTERNS[kind].compiled()
    return _COMPILED[kind]


def unknown_redactors(names: Iterable[str]) -> list[str]:
    return sorted(set(names) - set(PATTERNS))


def redactor_names(setting: str) -> list[str]:
    """The redactors a setting (`AGENTLOOP_REDACT`) names: `none` (or nothing) turns all off."""
    names = [name.strip() for name in setting.split(",") if name.strip()]
    return [] if names == ["none"] else names


@dataclass(frozen=True)
class Redacted:
    text: str
    counts: dict[str, int] = field(default_factory=dict)


def redact(text: str, kinds: Sequence[str], team: Sequence[Callable[[str], str]] = ()) -> Redacted:
    """`text` with every value of `kinds` (pattern names) replaced by its placeholder, then
    passed through the `team`'s own redactors; and how many of each were hidden. A team's
    redactor that raises withholds the whole output: nothing unscreened is ever sent."""
    if len(text) > MAX_SCANNED_CHARS:
        cut = len(text) - MAX_SCANNED_CHARS
        text = text[:MAX_SCANNED_CHARS] + f"\n[cut: {cut} characters past the redaction scan]"
    counts: dict[str, int] = {}
    for kind in [kind for kind in PATTERNS if kind in kinds]:
        text, found = _replaced(text, PATTERNS[kind], _compiled(kind))
        if found:
            counts[kind] = found
    for function in team:
        kind = getattr(function, "__name__", "team_redactor")
        try:
            screened = function(text)
            if not isinstance(screened, str):
                raise TypeError(f"returned a {type(screened).__name__}, not the text")
        except Exception as exc:
            counts[kind] = 1
            return Redacted(f"{placeholder(kind)} (the whole output: {type(exc).__name__})", counts)
        if screened != text:
            added = screened.count(PLACEHOLDER_PREFIX) - text.count(PLACEHOLDER_PREFIX)
            counts[kind] = max(added, 1)
            text = screened
    return Redacted(text, counts)


def _replaced(text: str, pattern: Pattern, regex: Any) -> tuple[str, int]:
    parts: list[str] = []
    found, start = 0, 0
    for match in regex.finditer(text):
        if pattern.check is not None and not pattern.check(match.group(0)):
            continue
        parts += [text[start : match.start()], placeholder(pattern.kind)]
        start = match.end()
        found += 1
    if not found:
        return text, 0
    parts.append(text[start:])
    return "".join(parts), found


def original_record(
    text: str, *, workflow_id: str, call_id: str, tool: str, readers: Sequence[str]
) -> bytes:
    """The artifact that keeps an output as it was: who may read it travels with it."""
    record = {
        "workflow_id": workflow_id,
        "call_id": call_id,
        "tool": tool,
        "readers": sorted(readers),
        "text": text,
    }
    return json.dumps(record, ensure_ascii=False).encode("utf-8")
