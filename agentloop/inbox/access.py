"""Who is asking and what they may see: the inbox's options, its per-process state, the
session and its CSRF token, and `page`, which every route handler is served through.

Who acts is never typed into a decision: behind an authenticating proxy it is the user the
proxy names in `auth_header`; without one (local mode, 127.0.0.1 only) it is the name given
once per browser. A user sees and acts on the runs of their tenants only."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentloop import stream_seals
from agentloop.inbox.guards import MAX_BODY_BYTES, MAX_FORM_FIELDS
from agentloop.inbox.listed import WaitingList
from agentloop.inbox.live import LiveRuns
from agentloop.inbox.pages import Viewer, error_page
from agentloop.inbox.reading import RunInputs, RunStory, read_story
from agentloop.runtime.signing import APPROVER_NAME
from agentloop.waiting import decode_id, memo_key

SESSION_COOKIE = "agentloop_inbox_session"
SESSION_SHAPE = re.compile(r"[A-Za-z0-9_-]{32,128}")
"""A session `secrets.token_urlsafe` could have made: anything else is a new browser."""
USER_COOKIE = "agentloop_inbox_user"
LOCAL_HOSTS = ("127.0.0.1", "localhost")

Handler = Callable[[Request, Viewer], Awaitable[Response]]


@dataclass(frozen=True)
class InboxOptions:
    auth_header: str | None = None
    """The request header an authenticating proxy names the user in; None: local mode."""
    tenants: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """User -> the tenants whose runs they see (`inbox_tenants`)."""
    key: bytes | None = None
    """The key the runs' memo seals are checked with (`Settings.inbox_memo_key`); None: the
    one of the worker in this process (`agentloop dev`), if any (else no run is listed)."""
    wait: timedelta = timedelta(seconds=2)
    """How long a view waits, in all, for runs to answer (`inbox_wait_seconds`)."""
    refresh: timedelta = timedelta(seconds=2)
    """How long after one listing of the waiting runs the next begins
    (`inbox_refresh_seconds`)."""

    def memo_key(self) -> bytes | None:
        return self.key if self.key is not None else memo_key(stream_seals.worker_key())

    def tenants_of(self, user: str) -> Sequence[str] | None:
        """None: every tenant (an unmapped user in local mode); behind a proxy an unmapped
        user sees none."""
        if user in self.tenants:
            return list(self.tenants[user])
        return None if self.auth_header is None else []


class Refused(Exception):
    """A request the inbox will not serve: its status and the page saying why."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


@dataclass
class Inbox:
    """One inbox process's state, as `app.state.inbox`: its Temporal client, its options, the
    key its CSRF tokens are made with, the run inputs it read, the live feeds, and the list of
    waiting runs it keeps (to be closed with the feeds)."""

    client: Client
    options: InboxOptions
    live: LiveRuns
    inputs: RunInputs = field(default_factory=RunInputs)
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    waiting: WaitingList = field(init=False)

    def __post_init__(self) -> None:
        options = self.options
        self.waiting = WaitingList(self.client, options.memo_key, options.wait, options.refresh)

    def csrf_of(self, session: str) -> str:
        return hmac.new(self.secret, session.encode(), hashlib.sha256).hexdigest()

    def user_of(self, request: Request) -> str | None:
        auth_header = self.options.auth_header
        if auth_header is not None:
            user = request.headers.get(auth_header)
            if not user:
                raise Refused(401, f"no user: the proxy must set {auth_header}")
        else:
            user = request.cookies.get(USER_COOKIE)
            if not user:
                return None
        if not APPROVER_NAME.fullmatch(user):
            raise Refused(403, "a user name is 1-200 letters, digits or _ . @ -")
        return user

    def hosts_of(self, request: Request) -> set[str]:
        """The names this request reached the inbox by: its Host and, behind a proxy (which
        may send the upstream's name as Host), the one the proxy says the browser used."""
        hosts = {request.headers.get("host", "")}
        if self.options.auth_header is not None:
            hosts.add(request.headers.get("x-forwarded-host", ""))
        return hosts - {""}

    def https(self, request: Request) -> bool:
        if self.options.auth_header is not None and request.headers.get("x-forwarded-proto"):
            return request.headers["x-forwarded-proto"] == "https"
        return request.url.scheme == "https"

    async def check_form(self, request: Request, session: str, new: bool) -> None:
        """Every state-changing request carries its session's token (and, when the browser
        says where it comes from, comes from here). What can be refused without the form is
        refused before it is parsed."""
        origin = request.headers.get("origin")
        if origin and urlsplit(origin).netloc not in self.hosts_of(request):
            raise Refused(403, "a form from another site: refused")
        if new:
            raise Refused(403, "the form's token is missing or stale: reload the page")
        token = (await form_of(request)).get("csrf")
        if not isinstance(token, str) or not hmac.compare_digest(token, self.csrf_of(session)):
            raise Refused(403, "the form's token is missing or stale: reload the page")

    async def story_for(self, viewer: Viewer, workflow_id: str) -> RunStory:
        """The run, when it exists and the viewer may see it."""
        try:
            story = await read_story(self.client, self.inputs, workflow_id, self.options.wait)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise Refused(404, f"no run {workflow_id!r}") from None
            raise
        check_tenant(viewer, story.tenant)
        return story


def check_tenant(viewer: Viewer, tenant: str | None) -> None:
    """A run's tenant (None: its input is unreadable, its tenant unknown) is one the viewer
    sees."""
    if viewer.tenants is None:
        return
    if tenant is None:
        raise Refused(403, f"{viewer.user} may not see a run of an unknown tenant")
    if tenant not in viewer.tenants:
        raise Refused(403, f"{viewer.user} may not see the runs of tenant {tenant!r}")


async def form_of(request: Request) -> FormData:
    """The request's form (its body was bounded before, `guards.RequestGuard`), of at most
    `MAX_FORM_FIELDS` fields and no file. Parsed once: later calls get the same form."""
    try:
        return await request.form(
            max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_BODY_BYTES
        )
    except HTTPException as exc:  # Starlette's word for a form past these bounds, or broken
        raise Refused(413 if "Too many" in str(exc.detail) else 400, exc.detail) from None


def workflow_id_of(request: Request) -> str:
    """The workflow id the request's path names (`waiting.encode_id`)."""
    workflow_id = decode_id(request.path_params["run"])
    if workflow_id is None:
        raise Refused(404, "no run at this address")
    return workflow_id


def inbox_of(request: Request) -> Inbox:
    inbox: Inbox = request.app.state.inbox
    return inbox


def session_of(request: Request) -> tuple[str, bool]:
    """This browser's session, and whether it is new (its cookie is set with the answer)."""
    session = request.cookies.get(SESSION_COOKIE, "")
    if SESSION_SHAPE.fullmatch(session):
        return session, False
    return secrets.token_urlsafe(32), True


def finish(response: Response, request: Request, session: str, new: bool) -> Response:
    if new:
        cookie(response, inbox_of(request).https(request), SESSION_COOKIE, session)
    return response


def cookie(response: Response, secure: bool, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=secure,
        max_age=30 * 86400,
    )


def page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A route for a known user: a new browser gets its session (and, in local mode, is asked
    its name first); a POST's token is checked before `handler` runs; a refusal is a page
    saying why."""

    async def endpoint(request: Request) -> Response:
        inbox = inbox_of(request)
        session, new = session_of(request)
        viewer = None
        try:
            user = inbox.user_of(request)
            if user is None:
                if request.method != "GET" or request.url.path.startswith("/api/"):
                    raise Refused(403, "say who you are first: open the inbox's home page")
                return finish(RedirectResponse("/whoami", 303), request, session, new)
            viewer = Viewer(user, inbox.csrf_of(session), inbox.options.tenants_of(user))
            if request.method == "POST":
                await inbox.check_form(request, session, new)
            response = await handler(request, viewer)
        except Refused as refused:
            response = error_page(request, viewer, "Refused", refused.text, refused.status)
        except RPCError as exc:  # e.g. a namespace without agentloop's search attributes
            text = f"Temporal could not answer: {exc.message}"
            response = error_page(request, viewer, "Temporal", text, 502)
        return finish(response, request, session, new)

    endpoint.__name__ = handler.__name__
    return endpoint
