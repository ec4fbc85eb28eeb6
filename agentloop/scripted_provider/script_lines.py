"""Where in a script file each of its values is: the line a problem is reported at. Read from
the text of a file that parsed (JSON exactly; TOML by its table headers and `key =` lines, so a
value inside an inline table is placed at its table's line)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

Path_ = tuple[str | int, ...]
"""A value's place, as pydantic's error `loc` gives it: keys and list indexes."""

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")
_TOML_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")
_TOML_KEY = re.compile(r'^\s*([A-Za-z0-9_-]+|"[^"]*")\s*=')


def line_of(lines: dict[Path_, int], loc: Sequence[str | int]) -> int:
    """The line of the value at `loc`, or of the nearest value holding it (a missing key: the
    object it is missing from)."""
    path = tuple(loc)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return lines.get((), 1)


def json_lines(text: str) -> dict[Path_, int]:
    """The line of every key, list item and value of a JSON text that parses."""
    lines: dict[Path_, int] = {}

    def line(at: int) -> int:
        return text.count("\n", 0, at) + 1

    def skip(at: int) -> int:
        match = _SPACE.match(text, at)
        return match.end() if match else at

    def value(at: int, path: Path_) -> int:
        at = skip(at)
        lines.setdefault(path, line(at))
        opening = text[at : at + 1]
        if opening not in ("{", "["):
            return int(_DECODER.raw_decode(text, at)[1])
        closing = "}" if opening == "{" else "]"
        at, index = skip(at + 1), 0
        while not text.startswith(closing, at):
            if opening == "{":
                key, end = _DECODER.raw_decode(text, at)
                place: Path_ = (*path, str(key))
                lines[place] = line(at)
                at = skip(end) + 1  # the colon
            else:
                place, index = (*path, index), index + 1
            at = skip(value(at, place))
            if text.startswith(",", at):
                at = skip(at + 1)
        return at + 1

    value(0, ())
    return lines


def toml_lines(text: str) -> dict[Path_, int]:
    """The line of every table, array-of-tables item and `key =` of a TOML text."""
    lines: dict[Path_, int] = {(): 1}
    counts: dict[Path_, int] = {}
    current: Path_ = ()
    for number, raw in enumerate(text.splitlines(), start=1):
        header = _TOML_HEADER.match(raw)
        if header:
            names = [name.strip().strip('"') for name in header.group(2).split(".")]
            path: Path_ = ()
            for name in names[:-1]:
                path = (*path, name)
                if path in counts:  # an array of tables: its latest item
                    path = (*path, counts[path] - 1)
            path = (*path, names[-1])
            lines.setdefault(path, number)
            if header.group(1) == "[[":
                index = counts.get(path, 0)
                counts[path] = index + 1
                path = (*path, index)
                lines.setdefault(path, number)
            current = path
            continue
        key = _TOML_KEY.match(raw)
        if key:
            lines.setdefault((*current, key.group(1).strip('"')), number)
    return lines
