"""`notify_waiting`: tell the webhooks a notice is routed to that a run waits for a person.

Each webhook (`agentloop.runtime.notice_routes`: every notice, or the calls of some tools in
the runs of some tenants) gets one JSON POST: the run, what it waits on (`kind`: approval,
question, unknown_write), each of its calls with its tool, args digest and who may decide,
the inbox link, and a `text` line for chat tools; its `stage`: the first `notice`, or a
`reminder` or an `escalation` a route's timers sent later (`agentloop.policies.reminders`), each
sent only to the route it names; signed with HMAC-SHA256 over the exact body
under `AGENTLOOP_NOTIFY_SECRET`, in `X-Agentloop-Signature: sha256=HEX`.

Every webhook has its own delivery, all of them at once (`NOTICE_DELIVERY`: its own timeout
per attempt, its own attempts and backoff), so one that hangs never delays another. Only a
2xx delivers; a redirect is not followed but fails the delivery, named: following it would
re-send the signed body wherever a webhook points, internal addresses included. A 3xx or a
4xx other than 408/425/429 is not tried again. The progress of each delivery rides in the
activity's heartbeats, so an attempt after a lost worker sends only to the webhooks not told
yet (a receiver may still see one notice twice, and dedupes by `id`). A webhook that did not
take the notice after its attempts fails the activity (`NoticeNotDelivered`, not retried);
the run records it in `notice_failures` and never waits on it (`agentloop.workflows.steps`).

A webhook URL is a secret: every failure, log line and heartbeat names a webhook by its
`label` (name and host), and no exception's own text is kept (aiohttp's quote the URL).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence

import aiohttp
from pydantic import BaseModel, TypeAdapter, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentloop.activities.heartbeat import keep_heartbeating
from agentloop.activity_io import (
    NOTICE_DELIVERY,
    NOTICE_NOT_DELIVERED,
    NOTIFY_WAITING,
    DeliveryPolicy,
    WaitingNotice,
)
from agentloop.runtime.audit import audit
from agentloop.runtime.notice_routes import Webhook
from agentloop.waiting import run_path

SIGNATURE_HEADER = "X-Agentloop-Signature"
RETRIED_STATUSES = frozenset({408, 425, 429})
"""The 4xx answers that say "later", tried again like a 5xx."""
KIND_WORDS = {
    "approval": "waits for approval of",
    "question": "asks a question in",
    "unknown_write": "needs to know whether this write happened:",
}

STAGE_WORDS = {"reminder": "Reminder, still unanswered", "escalation": "Escalated, unanswered"}


def signature(secret: str, body: bytes) -> str:
    """What the `X-Agentloop-Signature` header holds for `body`: a receiver computes the same
    over the raw body it received and compares (in constant time)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def notice_body(notice: WaitingNotice, inbox_url: str) -> bytes:
    link = inbox_url.rstrip("/") + run_path(notice.workflow_id)
    tools = ", ".join(f"{c.tool} ({c.call_id})" for c in notice.calls)
    deciders = sorted({a for c in notice.calls for a in c.approvers})
    who = f"; who may decide: {', '.join(deciders)}" if deciders else ""
    text = f"Run {notice.workflow_id} {KIND_WORDS[notice.kind]} {tools}{who}. {link}"
    first_call = notice.calls[0].call_id if notice.calls else ""
    notice_id = f"{notice.workflow_id}/{first_call}"
    if notice.stage != "notice":  # a receiver dedupes by id: each stage is a notice of its own
        notice_id += f"/{notice.stage}"
        text = f"{STAGE_WORDS[notice.stage]}: {text}"
    document = {
        "id": notice_id,
        "run": notice.workflow_id,
        "kind": notice.kind,
        "stage": notice.stage,
        "task": notice.task,
        "calls": [c.model_dump() for c in notice.calls],
        "question": notice.question,
        "link": link,
        "text": text,
    }
    return json.dumps(document, sort_keys=True).encode()


def routed(notice: WaitingNotice, webhook: Webhook) -> WaitingNotice | None:
    """The notice as `webhook` is told of it (None: not at all). A reminder or an escalation
    goes to the one route it names, whole (the run routed its calls); a first notice to every
    webhook but the `escalation_only` ones, with only the calls routed there."""
    if notice.to is not None:
        return notice if webhook.name == notice.to else None
    if webhook.escalation_only:
        return None
    calls = [c for c in notice.calls if webhook.takes(notice.tenant, c.tool)]
    return notice.model_copy(update={"calls": calls}) if calls else None


class WebhookProgress(BaseModel):
    """One webhook's delivery so far, heartbeated under the webhook's name."""

    attempts: int = 0
    delivered: bool = False
    failure: str | None = None
    """Why the last attempt failed (the webhook named by host only)."""
    final: bool = False
    """The failure is not worth another attempt (a redirect, a 4xx)."""

    def done(self, policy: DeliveryPolicy) -> bool:
        return self.delivered or self.final or self.attempts >= policy.attempts


PROGRESS = TypeAdapter(dict[str, WebhookProgress])


def resumed_progress() -> dict[str, WebhookProgress]:
    """What the last attempt of this activity heartbeated (nothing on a first attempt)."""
    details = activity.info().heartbeat_details
    if not details:
        return {}
    try:
        return PROGRESS.validate_python(details[0])
    except ValidationError:
        return {}  # not ours to read (another version's): every webhook is told again


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str], timeout: float
) -> tuple[str | None, bool]:
    """One attempt: None when the webhook took the notice, else why not (without its URL)
    and whether another attempt may do better."""
    try:
        async with session.post(
            url,
            data=body,
            headers=headers,
            allow_redirects=False,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            status = response.status
    except TimeoutError:
        return f"no answer within {timeout:g} s", True
    except aiohttp.ClientConnectorError as exc:
        code = errno.errorcode.get(exc.os_error.errno or 0) or type(exc.os_error).__name__
        return f"could not connect ({code})", True
    except aiohttp.ClientError as exc:
        return f"failed ({type(exc).__name__})", True
    if 200 <= status < 300:
        return None, False
    if 300 <= status < 400:
        return f"answered {status}, a redirect (not followed)", False
    return f"answered {status}", status >= 500 or status in RETRIED_STATUSES


class NoticeActivities:
    def __init__(
        self,
        webhooks: Sequence[Webhook],
        secret: str,
        inbox_url: str,
        policy: DeliveryPolicy = NOTICE_DELIVERY,
    ) -> None:
        self._webhooks = list(webhooks)
        self._secret = secret
        self._inbox_url = inbox_url
        self._policy = policy

    @property
    def sends(self) -> bool:
        return bool(self._webhooks)

    @activity.defn(name=NOTIFY_WAITING)
    async def notify_waiting(self, notice: WaitingNotice) -> None:
        progress = resumed_progress()
        deliveries = []
        for webhook in self._webhooks:
            told = routed(notice, webhook)
            if told is not None:
                deliveries.append(
                    (webhook, told, progress.setdefault(webhook.name, WebhookProgress()))
                )

        def details() -> tuple[object]:
            return (PROGRESS.dump_python(progress, mode="json"),)

        def beat() -> None:
            activity.heartbeat(*details())

        # No connection limit: a pool full of hanging webhooks must not hold back another.
        connector = aiohttp.TCPConnector(limit=0)
        async with (
            keep_heartbeating(details=details),
            aiohttp.ClientSession(connector=connector) as session,
        ):
            await asyncio.gather(
                *(self._deliver(session, w, told, step, beat) for w, told, step in deliveries)
            )
        failed = []
        for webhook, _, step in deliveries:
            audit(
                "notice.webhook",
                workflow_id=notice.workflow_id,
                webhook=webhook.label,
                attempts=step.attempts,
                delivered=step.delivered,
                failure=step.failure,
            )
            if not step.delivered:
                tries = f"{step.attempts} attempt{'s' if step.attempts != 1 else ''}"
                failed.append(f"{webhook.label} {step.failure} ({tries})")
        audit(
            "notice.sent",
            workflow_id=notice.workflow_id,
            kind=notice.kind,
            webhooks=len(deliveries),
            failed=len(failed),
        )
        if failed:
            raise ApplicationError("; ".join(failed), type=NOTICE_NOT_DELIVERED, non_retryable=True)

    async def _deliver(
        self,
        session: aiohttp.ClientSession,
        webhook: Webhook,
        notice: WaitingNotice,
        progress: WebhookProgress,
        beat: Callable[[], None],
    ) -> None:
        body = notice_body(notice, self._inbox_url)
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(self._secret, body),
        }
        while not progress.done(self._policy):
            if progress.attempts:
                await asyncio.sleep(self._policy.backoff_seconds(progress.attempts))
            progress.attempts += 1
            failure, again = await post(
                session, webhook.url, body, headers, self._policy.timeout_seconds
            )
            progress.delivered = failure is None
            progress.failure = failure
            progress.final = failure is not None and not again
            beat()  # at once: a retry after a lost worker must not tell this webhook again
