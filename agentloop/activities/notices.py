"""`notify_waiting`: tell the configured webhooks that a run waits for a person.

Each webhook gets one JSON POST: the run, what it waits on (`kind`: approval, question,
unknown_write), each call with its tool, args digest and who may decide, the inbox link, and a
`text` line for chat tools; signed with HMAC-SHA256 over the exact body under
`AGENTLOOP_NOTIFY_SECRET`, in `X-Agentloop-Signature: sha256=HEX`. A webhook that does not
answer 2xx fails the attempt (Temporal retries with backoff; every webhook is sent again, so
a receiver dedupes by `id`). The run never waits on it (`agentloop.workflows.steps`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from urllib.parse import quote, urlsplit

import aiohttp
from temporalio import activity

from agentloop.activity_io import NOTIFY_WAITING, WaitingNotice
from agentloop.runtime.audit import audit

SIGNATURE_HEADER = "X-Agentloop-Signature"
TIMEOUT = aiohttp.ClientTimeout(total=10)
KIND_WORDS = {
    "approval": "waits for approval of",
    "question": "asks a question in",
    "unknown_write": "needs to know whether this write happened:",
}


def signature(secret: str, body: bytes) -> str:
    """What the `X-Agentloop-Signature` header holds for `body`: a receiver computes the same
    over the raw body it received and compares (in constant time)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def site(url: str) -> str:
    """A webhook as a failure names it: its scheme and host (its path may hold a token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def notice_body(notice: WaitingNotice, inbox_url: str) -> bytes:
    link = f"{inbox_url.rstrip('/')}/runs/{quote(notice.workflow_id, safe='')}"
    tools = ", ".join(f"{c.tool} ({c.call_id})" for c in notice.calls)
    deciders = sorted({a for c in notice.calls for a in c.approvers})
    who = f"; who may decide: {', '.join(deciders)}" if deciders else ""
    text = f"Run {notice.workflow_id} {KIND_WORDS[notice.kind]} {tools}{who}. {link}"
    document = {
        "id": f"{notice.workflow_id}/{notice.calls[0].call_id if notice.calls else ''}",
        "run": notice.workflow_id,
        "kind": notice.kind,
        "task": notice.task,
        "calls": [c.model_dump() for c in notice.calls],
        "question": notice.question,
        "link": link,
        "text": text,
    }
    return json.dumps(document, sort_keys=True).encode()


class NoticeActivities:
    def __init__(self, webhooks: Sequence[str], secret: str, inbox_url: str) -> None:
        self._webhooks = list(webhooks)
        self._secret = secret
        self._inbox_url = inbox_url

    @property
    def sends(self) -> bool:
        return bool(self._webhooks)

    @activity.defn(name=NOTIFY_WAITING)
    async def notify_waiting(self, notice: WaitingNotice) -> None:
        body = notice_body(notice, self._inbox_url)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(self._secret, body),
        }
        failed = []
        async with aiohttp.ClientSession(timeout=TIMEOUT) as session:
            for url in self._webhooks:
                try:
                    async with session.post(url, data=body, headers=headers) as response:
                        if response.status // 100 != 2:
                            failed.append(f"{site(url)} answered {response.status}")
                except (aiohttp.ClientError, TimeoutError) as exc:
                    failed.append(f"{site(url)}: {type(exc).__name__} {exc}".strip())
        audit(
            "notice.sent",
            workflow_id=notice.workflow_id,
            kind=notice.kind,
            webhooks=len(self._webhooks),
            failed=len(failed),
        )
        if failed:
            raise RuntimeError("; ".join(failed))
