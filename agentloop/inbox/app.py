"""The inbox's web app (Starlette): its pages, its JSON for live updates, and the actions,
each the message the CLI sends (`decide_approval`, `message`, `resolve`, `cancel`).

Who acts is never typed into a decision: behind an authenticating proxy it is the user the
proxy names in `auth_header`; without one (local mode, 127.0.0.1 only) it is the name given
once per browser. A user sees and acts on the runs of their tenants only, and decides only
calls whose tool names them as an approver (or names none)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from agentloop.contract import (
    AgentRunResult,
    ApprovalDecision,
    ApprovalVerdict,
    CancelRequest,
    ResolveRequest,
    UserMessage,
    describe_validation_error,
)
from agentloop.inbox import pages
from agentloop.inbox.live import MEDIA_TYPE, Busy, LiveRuns, end_frame, last_event_id
from agentloop.inbox.pages import Notice, Viewer
from agentloop.inbox.reading import (
    RunInputs,
    RunStory,
    read_story,
    recent_runs,
    tenant_of,
    waiting_items,
)
from agentloop.runtime.signing import APPROVER_NAME, DEFAULT_LIFETIME, signed_bytes

STATIC = Path(__file__).parent / "static"
SESSION_COOKIE = "agentloop_inbox_session"
USER_COOKIE = "agentloop_inbox_user"
LOCAL_HOSTS = ("127.0.0.1", "localhost")
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    # same-origin, not no-referrer: with no-referrer a form's Origin is "null", unverifiable
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


@dataclass(frozen=True)
class InboxOptions:
    auth_header: str | None = None
    """The request header an authenticating proxy names the user in; None: local mode."""
    tenants: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """User -> the tenants whose runs they see (`inbox_tenants`)."""

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


class SecurityHeaders:
    """Every response, the static files' too, says what the browser may run and load."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [
                    (k.encode(), v.encode())
                    for k, v in SECURITY_HEADERS.items()
                    if k.encode() not in present
                ]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, sending)


def inbox_app(client: Client, options: InboxOptions) -> Starlette:
    """The app for `client`'s namespace. Local mode (no `auth_header`) answers only requests
    addressed to 127.0.0.1 or localhost (a page of another site cannot rebind a name to it).
    Its run pages' live feeds are `app.state.live` (`LiveRuns`), to be closed by whoever
    serves it."""
    secret = secrets.token_bytes(32)
    inputs = RunInputs()
    live = LiveRuns(client)

    def csrf_of(session: str) -> str:
        return hmac.new(secret, session.encode(), hashlib.sha256).hexdigest()

    def session_of(request: Request) -> tuple[str, bool]:
        session = request.cookies.get(SESSION_COOKIE, "")
        if len(session) >= 32:
            return session, False
        return secrets.token_urlsafe(32), True

    def user_of(request: Request) -> str | None:
        if options.auth_header is not None:
            user = request.headers.get(options.auth_header)
            if not user:
                raise Refused(401, f"no user: the proxy must set {options.auth_header}")
        else:
            user = request.cookies.get(USER_COOKIE)
            if not user:
                return None
        if not APPROVER_NAME.fullmatch(user):
            raise Refused(403, "a user name is 1-200 letters, digits or _ . @ -")
        return user

    def hosts_of(request: Request) -> set[str]:
        """The names this request reached the inbox by: its Host and, behind a proxy (which
        may send the upstream's name as Host), the one the proxy says the browser used."""
        hosts = {request.headers.get("host", "")}
        if options.auth_header is not None:
            hosts.add(request.headers.get("x-forwarded-host", ""))
        return hosts - {""}

    def https(request: Request) -> bool:
        if options.auth_header is not None and request.headers.get("x-forwarded-proto"):
            return request.headers["x-forwarded-proto"] == "https"
        return request.url.scheme == "https"

    def finish(response: Response, request: Request, session: str, new: bool) -> Response:
        if new:
            cookie(response, https(request), SESSION_COOKIE, session)
        return response

    def page(
        handler: Callable[[Request, Viewer], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A page for a known user: a new browser gets its session (and, in local mode, is
        asked its name first); a refusal is a page saying why."""

        async def endpoint(request: Request) -> Response:
            session, new = session_of(request)
            viewer = None
            try:
                user = user_of(request)
                if user is None:
                    if request.method != "GET" or request.url.path.startswith("/api/"):
                        raise Refused(403, "say who you are first: open the inbox's home page")
                    return finish(RedirectResponse("/whoami", 303), request, session, new)
                viewer = Viewer(user, csrf_of(session), options.tenants_of(user))
                if request.method == "POST":
                    await check_form(request, session, new)
                response = await handler(request, viewer)
            except Refused as refused:
                response = HTMLResponse(
                    pages.error_page(viewer, "Refused", refused.text), refused.status
                )
            except RPCError as exc:  # e.g. a namespace without agentloop's search attributes
                text = f"Temporal could not answer: {exc.message}"
                response = HTMLResponse(pages.error_page(viewer, "Temporal", text), 502)
            return finish(response, request, session, new)

        return endpoint

    async def check_form(request: Request, session: str, new: bool) -> None:
        """Every state-changing request carries its session's token (and, when the browser
        says where it comes from, comes from here)."""
        origin = request.headers.get("origin")
        if origin and urlsplit(origin).netloc not in hosts_of(request):
            raise Refused(403, "a form from another site: refused")
        form = await request.form()
        token = form.get("csrf")
        if new or not isinstance(token, str) or not hmac.compare_digest(token, csrf_of(session)):
            raise Refused(403, "the form's token is missing or stale: reload the page")

    async def story_for(viewer: Viewer, workflow_id: str) -> RunStory:
        try:
            story = await read_story(client, inputs, workflow_id)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise Refused(404, f"no run {workflow_id!r}") from None
            raise
        if viewer.tenants is not None and story.tenant not in viewer.tenants:
            raise Refused(403, f"{viewer.user} may not see the runs of tenant {story.tenant!r}")
        return story

    def filters_of(request: Request) -> dict[str, str]:
        return {k: request.query_params.get(k, "") for k in ("kind", "tool", "tenant")}

    async def inbox(request: Request, viewer: Viewer) -> Response:
        items = await waiting_items(client, inputs, viewer.tenants)
        now = datetime.now(UTC)
        return HTMLResponse(pages.inbox_page(viewer, items, filters_of(request), now))

    async def inbox_json(request: Request, viewer: Viewer) -> Response:
        items = await waiting_items(client, inputs, viewer.tenants)
        shown = pages.filtered(items, filters_of(request))
        now = datetime.now(UTC)
        return JSONResponse(
            {
                "items": [{**i.as_json(now), "href": pages.run_path(i.workflow_id)} for i in shown],
                "counts": pages.counts_text(shown),
            }
        )

    async def runs(request: Request, viewer: Viewer) -> Response:
        return HTMLResponse(pages.runs_page(viewer, await recent_runs(client, viewer.tenants)))

    async def run(request: Request, viewer: Viewer) -> Response:
        story = await story_for(viewer, request.path_params["workflow_id"])
        return HTMLResponse(pages.run_page(viewer, story, datetime.now(UTC), None))

    async def events(request: Request, viewer: Viewer) -> Response:
        """The run's stream as server-sent events (`live`), for a run the viewer may see; a
        run that has ended sends only the end (its page shows all of it)."""
        workflow_id = request.path_params["workflow_id"]
        try:
            description = await client.get_workflow_handle(workflow_id).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise Refused(404, f"no run {workflow_id!r}") from None
            raise
        run_input = await inputs.of(client, workflow_id, description.run_id)
        tenant = tenant_of(run_input)
        if viewer.tenants is not None and tenant not in viewer.tenants:
            raise Refused(403, f"{viewer.user} may not see the runs of tenant {tenant!r}")
        if description.status != WorkflowExecutionStatus.RUNNING:
            return Response(end_frame("the run has ended"), media_type=MEDIA_TYPE)
        try:
            live.check(workflow_id)
        except Busy as busy:
            raise Refused(503, f"no live updates: {busy}") from None
        return live.stream(workflow_id, last_event_id(request.headers.get("last-event-id")))

    def action(
        act: Callable[[Viewer, RunStory, Mapping[str, Any]], Awaitable[Notice]],
    ) -> Callable[[Request, Viewer], Awaitable[Response]]:
        """A POST on a running run the viewer may see: `act` sends the message; the run's
        page, read again, shows what became of it."""

        async def acting(request: Request, viewer: Viewer) -> Response:
            workflow_id = request.path_params["workflow_id"]
            story = await story_for(viewer, workflow_id)
            if story.view is None:
                notice = Notice(False, f"the run has ended ({story.execution.lower()})")
            else:
                try:
                    notice = await act(viewer, story, await request.form())
                except ValidationError as exc:
                    notice = Notice(False, f"not sent: {describe_validation_error(exc)}")
                except WorkflowUpdateFailedError as exc:
                    notice = Notice(False, f"refused by the run: {exc.cause or exc}")
                except RPCError as exc:
                    if exc.status != RPCStatusCode.NOT_FOUND:
                        raise
                    notice = Notice(False, "the run has ended")
            story = await story_for(viewer, workflow_id)
            status = 200 if notice.ok else 409
            return HTMLResponse(
                pages.run_page(viewer, story, datetime.now(UTC), notice), status_code=status
            )

        return acting

    def handle_of(story: RunStory) -> Any:
        return client.get_workflow_handle(story.workflow_id, result_type=AgentRunResult)

    def check_approver(viewer: Viewer, story: RunStory, call_id: str) -> None:
        """Refused before the run is asked: the tool names its approvers, and not this user."""
        assert story.view is not None
        pending = next((p for p in story.view.pending_approvals if p.call_id == call_id), None)
        approvers = pending.approvers if pending is not None else []
        if approvers and viewer.user not in approvers:
            raise Refused(403, f"only {', '.join(approvers)} may decide {call_id}")

    async def signing_message(request: Request, viewer: Viewer) -> Response:
        """Signed mode: the exact bytes `agentloop.runtime.signing` checks, for the decision
        the form describes on the run the page showed, so the browser signs only bytes."""
        story = await story_for(viewer, request.path_params["workflow_id"])
        if story.view is None:
            raise Refused(409, "the run has ended")
        form = await request.form()
        check_approver(viewer, story, str(form.get("call_id", "")))
        expires = datetime.now(UTC) + DEFAULT_LIFETIME
        try:
            decision = decision_of(viewer, {**form, "expires_at": expires.isoformat()})
        except ValidationError as exc:
            raise Refused(400, describe_validation_error(exc)) from None
        run = story.view.run_chain[0] if story.view.run_chain else ""
        message = signed_bytes(decision, workflow_id=story.workflow_id, run=run)
        return JSONResponse(
            {
                "message": base64.b64encode(message).decode(),
                "expires_at": expires.isoformat(),
            }
        )

    async def decide(viewer: Viewer, story: RunStory, form: Mapping[str, Any]) -> Notice:
        call_id = str(form.get("call_id", ""))
        check_approver(viewer, story, call_id)
        approved = form.get("verdict") == "approve"
        decision = decision_of(viewer, form).model_copy(
            update={"signature": str(form.get("signature", ""))}
        )
        verdict: ApprovalVerdict = await handle_of(story).execute_update(
            "decide_approval", decision, result_type=ApprovalVerdict
        )
        word = "approved" if approved else "rejected"
        if not verdict.accepted:
            return Notice(False, f"decision refused: {verdict.reason}")
        return Notice(True, f"{word} {call_id} as {viewer.user}")

    def decision_of(viewer: Viewer, form: Mapping[str, Any]) -> ApprovalDecision:
        """The decision a form describes, by the viewer; raises ValidationError."""
        return ApprovalDecision(
            call_id=str(form.get("call_id", "")),
            args_digest=str(form.get("args_digest", "")),
            approved=form.get("verdict") == "approve",
            approver=viewer.user,
            reason=str(form.get("reason", "")),
            expires_at=form.get("expires_at") or None,
        )

    async def answer(viewer: Viewer, story: RunStory, form: Mapping[str, Any]) -> Notice:
        message = UserMessage(text=str(form.get("text", "")), sender=viewer.user)
        await handle_of(story).signal("message", message)
        return Notice(True, f"answer sent as {viewer.user}")

    async def resolve(viewer: Viewer, story: RunStory, form: Mapping[str, Any]) -> Notice:
        outcome = str(form.get("outcome", ""))
        request = ResolveRequest(
            call_id=str(form.get("call_id", "")),
            outcome=outcome,
            operator=viewer.user,
            note=str(form.get("note", "")),
        )
        await handle_of(story).signal("resolve", request)
        return Notice(True, f"resolution sent for {request.call_id}: {outcome}")

    async def cancel(viewer: Viewer, story: RunStory, form: Mapping[str, Any]) -> Notice:
        await handle_of(story).signal("cancel", CancelRequest(reason=str(form.get("reason", ""))))
        return Notice(True, f"cancel requested by {viewer.user}")

    async def whoami(request: Request) -> Response:
        session, new = session_of(request)
        if options.auth_header is not None:
            return RedirectResponse("/", 303)
        if request.method == "GET":
            response: Response = HTMLResponse(pages.name_page(csrf_of(session)))
            return finish(response, request, session, new)
        try:
            await check_form(request, session, new)
        except Refused as refused:
            return HTMLResponse(pages.error_page(None, "Refused", refused.text), refused.status)
        name = str((await request.form()).get("name", "")).strip()
        if not APPROVER_NAME.fullmatch(name):
            problem = "a name is 1-200 letters, digits or _ . @ -"
            return HTMLResponse(pages.name_page(csrf_of(session), problem), 400)
        response = RedirectResponse("/", 303)
        cookie(response, https(request), USER_COOKIE, name)
        return response

    routes = [
        Route("/", page(inbox)),
        Route("/api/inbox", page(inbox_json)),
        Route("/runs", page(runs)),
        Route("/runs/{workflow_id}", page(run)),
        Route("/api/runs/{workflow_id}/events", page(events)),
        Route("/runs/{workflow_id}/decide", page(action(decide)), methods=["POST"]),
        Route("/runs/{workflow_id}/signing-message", page(signing_message), methods=["POST"]),
        Route("/runs/{workflow_id}/answer", page(action(answer)), methods=["POST"]),
        Route("/runs/{workflow_id}/resolve", page(action(resolve)), methods=["POST"]),
        Route("/runs/{workflow_id}/cancel", page(action(cancel)), methods=["POST"]),
        Route("/whoami", whoami, methods=["GET", "POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders)]
    if options.auth_header is None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(LOCAL_HOSTS)))
    app = Starlette(routes=routes, middleware=middleware)
    app.state.live = live
    return app


def cookie(response: Response, secure: bool, name: str, value: str) -> None:
    response.set_cookie(
        name,
        value,
        httponly=True,
        samesite="strict",
        secure=secure,
        max_age=30 * 86400,
    )
