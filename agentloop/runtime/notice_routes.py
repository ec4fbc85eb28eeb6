"""Where a worker's notices go: the webhooks of `AGENTLOOP_NOTIFY_WEBHOOKS`.

A webhook URL is a secret: chat incoming webhooks carry their token in the path. Whatever
names a webhook (a failure, a log line, `status`, the inbox, `agentloop config`) names it by
`Webhook.label`: its name and `site`, never its path or query, and the checks here never
echo a URL back.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from agentloop.runtime.config_checks import check_webhooks


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
    """`webhook N` for the Nth of `AGENTLOOP_NOTIFY_WEBHOOKS`."""
    url: str = Field(repr=False)

    @property
    def label(self) -> str:
        return f"{self.name} ({site(self.url)})"


def listed_webhooks(value: str | None) -> list[Webhook]:
    """The webhooks of `AGENTLOOP_NOTIFY_WEBHOOKS` (`URL[,URL...]`), each told of every
    notice."""
    urls = [u.strip() for u in (value or "").split(",") if u.strip()]
    return [Webhook(name=f"webhook {n}", url=url) for n, url in enumerate(urls, start=1)]


def mask_webhooks(value: str) -> str:
    """`AGENTLOOP_NOTIFY_WEBHOOKS` as it may be printed: each URL's site, its path hidden."""
    if check_webhooks(value) is not None:
        return "***"
    return ",".join(f"{site(w.url)}/…" for w in listed_webhooks(value))
