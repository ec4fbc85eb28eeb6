"""Where a worker's notices go: the webhooks of `AGENTLOOP_NOTIFY_WEBHOOKS` (every notice) and
the named routes of `AGENTLOOP_NOTIFY_ROUTES` (the notices of some tools, of some tenants).

```toml
[notify_routes.workshops]
url = "https://hooks.example.com/services/T000/B000/XXXX"
tools = ["reserve_seat"]          # only the calls of these tools (none: every tool)
tenants = ["tenant-b"]            # only the runs of these tenants (none: every tenant)
remind_after_seconds = 3600       # remind this webhook of a call unanswered this long
escalate_after_seconds = 14400    # then tell `escalate_to` of it, this long after its notice
escalate_to = "leads"              # also where an approval timeout that escalates goes

[notify_routes.leads]
url = "https://hooks.example.com/services/T000/B000/YYYY"
escalation_only = true            # told only of escalations sent to it by name
```

A route's timers run inside each waiting run (`agentloop.policies.reminders`): the worker
tells a run them as it starts (without the URLs).

A webhook URL is a secret: chat incoming webhooks carry their token in the path. Whatever
names a webhook (a failure, a log line, `status`, the inbox, `agentloop config`) names it by
`Webhook.label`: its name and `site`, never its path or query, and the checks here never
echo a URL back.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentloop.input_limits import MAX_WAIT_SECONDS
from agentloop.notice_timers import MAX_ROUTES, NoticeTimers, routes_call
from agentloop.runtime.config_checks import check_webhooks, http_url_check

ROUTE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
"""A route's name: lower case, no space (so it is never taken for a listed `webhook N`)."""
ROUTES_SHAPE = (
    'expected a JSON object of route name -> {"url": URL, "tools": [...], "tenants": [...],'
    ' "remind_after_seconds": S, "escalate_after_seconds": S, "escalate_to": ROUTE,'
    ' "escalation_only": BOOL}'
)

check_webhook_url = http_url_check("https://hooks.example.com/services/T000/B000/XXXX")


def site(url: str) -> str:
    """`scheme://host[:port]` of `url`: all of a webhook that may be shown."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:  # a port that is no number: the check refuses it; show none of it
        port = ""
    return f"{parts.scheme}://{host}{port}"


class Webhook(BaseModel):
    """One receiver of notices."""

    model_config = ConfigDict(frozen=True)

    name: str
    """`webhook N` for the Nth of `AGENTLOOP_NOTIFY_WEBHOOKS`, else the route's name."""
    url: str = Field(repr=False)
    tools: tuple[str, ...] = ()
    """The tools whose calls it is told of (empty: every tool's)."""
    tenants: tuple[str, ...] = ()
    """The tenants whose runs it is told of (empty: every tenant's)."""
    remind_after_seconds: float | None = None
    escalate_after_seconds: float | None = None
    escalate_to: str | None = None
    escalation_only: bool = False
    """Told only of the escalations sent to it by name, never of a first notice."""

    @property
    def label(self) -> str:
        return f"{self.name} ({site(self.url)})"

    def takes(self, tenant: str | None, tool: str) -> bool:
        """Whether a call of `tool` in a run of `tenant` is routed here (a notice from before
        notices carried the tenant, None, only to webhooks for every tenant)."""
        return routes_call(self.tools, self.tenants, tenant, tool)

    def timers(self) -> NoticeTimers | None:
        """What a run needs of this route to remind and escalate (None: it does neither)."""
        if self.remind_after_seconds is None and self.escalate_to is None:
            return None
        return NoticeTimers(
            route=self.name,
            tools=self.tools,
            tenants=self.tenants,
            remind_after_seconds=self.remind_after_seconds,
            escalate_after_seconds=self.escalate_after_seconds,
            escalate_to=self.escalate_to,
        )


def notice_timers(webhooks: list[Webhook]) -> list[NoticeTimers]:
    """The timers of the routes that have some, as each run is told them."""
    return [t for t in (w.timers() for w in webhooks) if t is not None]


class _Route(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    tools: list[str] = Field(default_factory=list)
    tenants: list[str] = Field(default_factory=list)
    remind_after_seconds: float | None = Field(default=None, gt=0, le=MAX_WAIT_SECONDS)
    escalate_after_seconds: float | None = Field(default=None, gt=0, le=MAX_WAIT_SECONDS)
    escalate_to: str | None = None
    escalation_only: bool = False

    def timer_problem(self, name: str, names: set[str]) -> str | None:
        """What is wrong with the route's reminder and escalation (None: nothing)."""
        timed = self.remind_after_seconds is not None or self.escalate_after_seconds is not None
        if self.escalation_only and timed:
            return "an escalation_only route has no timers of its own"
        if self.escalate_after_seconds is not None and self.escalate_to is None:
            return "escalate_after_seconds needs escalate_to (the route escalated to)"
        if self.escalation_only and self.escalate_to is not None:
            return "an escalation_only route does not escalate further"
        if self.escalate_to is not None and self.escalate_to not in names - {name}:
            return f"escalate_to {self.escalate_to!r} is not another route"
        remind, escalate = self.remind_after_seconds, self.escalate_after_seconds
        if remind is not None and escalate is not None and escalate <= remind:
            return "escalate_after_seconds must be longer than remind_after_seconds"
        return None


def listed_webhooks(value: str | None) -> list[Webhook]:
    """The webhooks of `AGENTLOOP_NOTIFY_WEBHOOKS` (`URL[,URL...]`), each told of every
    notice."""
    urls = [u.strip() for u in (value or "").split(",") if u.strip()]
    return [Webhook(name=f"webhook {n}", url=url) for n, url in enumerate(urls, start=1)]


def parse_routes(value: str | None) -> list[Webhook]:
    """The routes of `AGENTLOOP_NOTIFY_ROUTES` (JSON text, or the file's tables as JSON);
    raises ValueError naming the route and what is wrong, never its URL."""
    if value is None or not value.strip():
        return []
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg}): {ROUTES_SHAPE}") from None
    if not isinstance(data, dict):
        raise ValueError(ROUTES_SHAPE)
    if len(data) > MAX_ROUTES:
        raise ValueError(f"{len(data)} routes: at most {MAX_ROUTES}")
    routes = []
    for name, route in data.items():
        if not ROUTE_NAME.match(name):
            raise ValueError(
                f"route {name!r}: a name is 1-40 lower-case letters, digits, '-' and '_',"
                " starting with a letter"
            )
        try:
            parsed = _Route.model_validate(route)
        except ValidationError as exc:
            # Not `describe_validation_error`: it quotes the input, which may be the URL.
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'route'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ValueError(f"route {name!r}: {problems}: {ROUTES_SHAPE}") from None
        problem = check_webhook_url(parsed.url)
        if problem:
            raise ValueError(f"route {name!r}: url: {problem}")
        problem = parsed.timer_problem(name, set(data))
        if problem:
            raise ValueError(f"route {name!r}: {problem}")
        routes.append(
            Webhook(
                name=name,
                url=parsed.url,
                tools=tuple(parsed.tools),
                tenants=tuple(parsed.tenants),
                remind_after_seconds=parsed.remind_after_seconds,
                escalate_after_seconds=parsed.escalate_after_seconds,
                escalate_to=parsed.escalate_to,
                escalation_only=parsed.escalation_only,
            )
        )
    return routes


def check_routes(value: str) -> str | None:
    """A settings check (`agentloop.runtime.config`): None, or what is wrong."""
    try:
        parse_routes(value)
    except ValueError as exc:
        return str(exc)
    return None


def mask_webhooks(value: str) -> str:
    """`AGENTLOOP_NOTIFY_WEBHOOKS` as it may be printed: each URL's site, its path hidden."""
    if check_webhooks(value) is not None:
        return "***"
    return ",".join(f"{site(w.url)}/…" for w in listed_webhooks(value))


def mask_routes(value: str) -> str:
    """`AGENTLOOP_NOTIFY_ROUTES` as it may be printed: each route's URL as its site."""
    try:
        routes = parse_routes(value)
    except ValueError:
        return "***"
    shown: dict[str, Any] = {
        r.name: {
            **r.model_dump(exclude={"name", "url"}, exclude_defaults=True, mode="json"),
            "url": f"{site(r.url)}/…",
            "tools": list(r.tools),
            "tenants": list(r.tenants),
        }
        for r in routes
    }
    return json.dumps(shown, ensure_ascii=False)
