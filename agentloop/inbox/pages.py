"""The inbox's HTML: Jinja2 templates (templates/), rendered on the server with autoescaping
on, so every value from outside (task, arguments, model and tool text, names, ids) is text.
No page holds an inline script or style (the Content-Security-Policy forbids them), and links
are only ever to the inbox's own paths (`waiting.run_path`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from agentloop.inbox.reading import KIND_NAMES, Waiting, WaitingItem, duration, from_now
from agentloop.waiting import WAITING_PHASES, run_path

TEMPLATES = Path(__file__).parent / "templates"
FILTERS = ("kind", "tool", "tenant")


def pretty(value: Any) -> str:
    """Every value, nothing cut: what the approver decides on is what the run would send."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every template, whatever its name ends in
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["run_path"] = run_path
    env.filters["pretty"] = pretty
    env.filters["from_now"] = lambda moment: from_now(moment, datetime.now(UTC))
    env.globals["kind_names"] = KIND_NAMES
    env.globals["waiting_phases"] = WAITING_PHASES
    return env


templates = Jinja2Templates(env=environment())


@dataclass(frozen=True)
class Viewer:
    """Who looks, and the token their forms carry."""

    user: str
    csrf: str
    tenants: Sequence[str] | None
    """The tenants they see (None: every one)."""

    @property
    def tenants_text(self) -> str:
        return "all tenants" if self.tenants is None else ", ".join(self.tenants) or "none"


@dataclass(frozen=True)
class Notice:
    """The outcome of an action, shown on top of the page it led to."""

    ok: bool
    text: str


def render(
    request: Request,
    template: str,
    title: str,
    viewer: Viewer | None,
    status: int = 200,
    **context: Any,
) -> Response:
    return templates.TemplateResponse(
        request,
        template,
        {"title": title, "viewer": viewer, **context},
        status_code=status,
    )


def error_page(
    request: Request, viewer: Viewer | None, title: str, text: str, status: int
) -> Response:
    return render(request, "error.html", title, viewer, status, text=text)


def filtered(items: list[WaitingItem], filters: dict[str, str]) -> list[WaitingItem]:
    return [
        i
        for i in items
        if all(not filters.get(name) or getattr(i, name) == filters[name] for name in FILTERS)
    ]


def counts_text(items: list[WaitingItem], waiting: Waiting, now: datetime) -> str:
    """What the rows show and leave out, and how old the listing they come from is."""
    if waiting.listed_at is None:
        return "the waiting runs are still being listed: they show here in a moment"
    age = duration((now - waiting.listed_at).total_seconds())
    counts = {k: sum(1 for i in items if i.kind == k) for k in KIND_NAMES}
    parts = [f"{n} {KIND_NAMES[k]}{'s' if n != 1 else ''}" for k, n in counts.items()]
    text = f"listed {age} ago: {len(items)} waiting: " + ", ".join(parts)
    if waiting.silent:
        runs = ", ".join(waiting.silent[:MAX_SILENT_NAMED])
        more = len(waiting.silent) - MAX_SILENT_NAMED
        text += f"; not answering, shown from what they last wrote: {runs}"
        text += f" and {more} more" if more > 0 else ""
    if waiting.unvouched:
        n = waiting.unvouched
        text += (
            f"; {n:,} run{'s' if n != 1 else ''} said to wait that no worker vouches for"
            " (not listed)"
        )
        if waiting.keyless:
            text += ": this inbox has no AGENTLOOP_INBOX_KEY to check them with"
    return text


MAX_SILENT_NAMED = 5


def rows_context(waiting: Waiting, filters: dict[str, str], now: datetime) -> dict[str, Any]:
    """What the inbox's rows (inbox_rows.html) are rendered from, on the page and when polled."""
    shown = filtered(waiting.items, filters)
    return {"items": shown, "counts": counts_text(shown, waiting, now), "now": now}
