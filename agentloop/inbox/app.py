"""The inbox's web app (Starlette): its routes, each a named handler (`views` the pages,
`actions` the POSTs, served through `access.page`), and the headers every response carries."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import Client

from agentloop.inbox import actions, views
from agentloop.inbox.access import LOCAL_HOSTS, Inbox, InboxOptions, page
from agentloop.inbox.guards import RequestGuard
from agentloop.inbox.live import LiveRuns

__all__ = ["LOCAL_HOSTS", "InboxOptions", "inbox_app"]

STATIC = Path(__file__).parent / "static"
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


ROUTES = [
    Route("/", page(views.inbox_page)),
    Route("/api/inbox", page(views.inbox_rows)),
    Route("/runs", page(views.runs_page)),
    Route("/runs/{run}", page(views.run_page)),
    Route("/api/runs/{run}/events", page(views.run_events)),
    Route("/runs/{run}/decide", page(actions.action(actions.decide)), methods=["POST"]),
    Route("/runs/{run}/signing-message", page(actions.signing_message), methods=["POST"]),
    Route("/runs/{run}/answer", page(actions.action(actions.answer)), methods=["POST"]),
    Route("/runs/{run}/resolve", page(actions.action(actions.resolve)), methods=["POST"]),
    Route("/runs/{run}/cancel", page(actions.action(actions.cancel)), methods=["POST"]),
    Route("/whoami", views.whoami, methods=["GET", "POST"]),
    Mount("/static", StaticFiles(directory=STATIC), name="static"),
]


def inbox_app(client: Client, options: InboxOptions) -> Starlette:
    """The app for `client`'s namespace. Local mode (no `auth_header`) answers only requests
    addressed to 127.0.0.1 or localhost (a page of another site cannot rebind a name to it).
    Its run pages' live feeds are `app.state.live` (`LiveRuns`), to be closed by whoever
    serves it."""
    middleware = [Middleware(SecurityHeaders)]
    if options.auth_header is None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(LOCAL_HOSTS)))
    middleware.append(Middleware(RequestGuard))  # before any route reads a header or a body
    app = Starlette(routes=ROUTES, middleware=middleware)
    app.state.inbox = Inbox(client, options, LiveRuns(client))
    app.state.live = app.state.inbox.live
    return app
