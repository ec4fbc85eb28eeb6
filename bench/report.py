"""Figures, their table on stdout, and the JSON written beside it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Figure:
    label: str
    value: float | int | str
    baseline: float | int | str | None = None
    ratio: float | None = None
    """`value / baseline`, unless the figure says otherwise in `note`."""
    note: str = ""


@dataclass
class Section:
    key: str
    title: str
    baseline: str
    """What the baseline column is, and where it was measured."""
    figures: list[Figure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """What could not be measured here, and why."""

    def add(self, *figures: Figure) -> None:
        self.figures.extend(figures)


def ratio(value: float, baseline: float) -> float | None:
    return value / baseline if baseline else None


def _cell(value: float | int | str | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool | str):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _ratio_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render(section: Section, index: int) -> str:
    rows = [("figure", "value", "baseline", "ratio", "")]
    rows += [
        (f.label, _cell(f.value), _cell(f.baseline), _ratio_cell(f.ratio), f.note)
        for f in section.figures
    ]
    widths = [max(len(row[col]) for row in rows) for col in range(4)]
    lines = [f"[{index}] {section.title}", f"    baseline: {section.baseline}"]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [row[c].rjust(widths[c]) for c in (1, 2, 3)]
        lines.append(("    " + "  ".join(cells) + ("  " + row[4] if row[4] else "")).rstrip())
    lines += [f"    skipped: {reason}" for reason in section.skipped]
    return "\n".join(lines)


def write_json(path: Path, meta: dict[str, Any], sections: list[Section]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {**meta, "sections": [asdict(section) for section in sections]}
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
