"""The inbox's pages (GET): the inbox and its rows, the recent runs, one run and its live
events, and (local mode) the page asking who is there."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agentloop.client import first_run_of
from agentloop.inbox.access import (
    USER_COOKIE,
    Refused,
    check_tenant,
    cookie,
    finish,
    form_of,
    inbox_of,
    session_of,
    workflow_id_of,
)
from agentloop.inbox.guards import BadHeader
from agentloop.inbox.live import MEDIA_TYPE, Busy, end_frame, last_event_id
from agentloop.inbox.pages import FILTERS, Viewer, error_page, render, rows_context, templates
from agentloop.inbox.reading import Waiting, recent_runs, tenant_of
from agentloop.run_client import RunClient
from agentloop.runtime.signing import APPROVER_NAME
from agentloop.search import Unsearchable


def filters_of(request: Request) -> dict[str, str]:
    return {k: request.query_params.get(k, "") for k in FILTERS}


async def waiting_of(request: Request, viewer: Viewer) -> Waiting:
    """From the inbox's last listing (`listed.WaitingList`): a view never lists itself."""
    return await inbox_of(request).waiting.seen_by(viewer.tenants)


async def inbox_page(request: Request, viewer: Viewer) -> Response:
    waiting = await waiting_of(request, viewer)
    filters = filters_of(request)
    return render(
        request,
        "inbox.html",
        "Inbox",
        viewer,
        filters=filters,
        tools=sorted({i.tool for i in waiting.items if i.tool}),
        tenants=sorted({i.tenant for i in waiting.items}),
        poll_query=urlencode({k: v for k, v in filters.items() if v}),
        **rows_context(waiting, filters, datetime.now(UTC)),
    )


async def inbox_rows(request: Request, viewer: Viewer) -> Response:
    """The inbox's rows as the page shows them, for its script to put in place."""
    waiting = await waiting_of(request, viewer)
    context = rows_context(waiting, filters_of(request), datetime.now(UTC))
    return templates.TemplateResponse(request, "inbox_rows.html", context)


async def runs_page(request: Request, viewer: Viewer) -> Response:
    inbox = inbox_of(request)
    schedule = request.query_params.get("schedule", "")
    try:
        runs = await recent_runs(inbox.client, viewer.tenants, schedule)
    except Unsearchable as exc:
        raise Refused(400, str(exc)) from None
    return render(request, "runs.html", "Runs", viewer, runs=runs, schedule=schedule)


async def run_page(request: Request, viewer: Viewer) -> Response:
    story = await inbox_of(request).story_for(viewer, workflow_id_of(request))
    return render(request, "run.html", f"Run {story.workflow_id}", viewer, story=story)


async def run_events(request: Request, viewer: Viewer) -> Response:
    """The run's stream as server-sent events (`live`), for a run the viewer may see; a run
    that has ended sends only the end (its page shows all of it)."""
    inbox = inbox_of(request)
    workflow_id = workflow_id_of(request)
    try:
        after = last_event_id(request.headers.get("last-event-id"))
    except BadHeader as exc:
        raise Refused(400, str(exc)) from None
    run = RunClient(inbox.client, workflow_id)
    try:
        description = await run.handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise Refused(404, f"no run {workflow_id!r}") from None
        raise
    check_tenant(viewer, tenant_of(await inbox.inputs.of(run, first_run_of(description))))
    if description.status != WorkflowExecutionStatus.RUNNING:
        return Response(end_frame("the run has ended"), media_type=MEDIA_TYPE)
    try:
        inbox.live.check(workflow_id, viewer.user)
    except Busy as busy:
        raise Refused(503, f"no live updates: {busy}") from None
    return inbox.live.stream(workflow_id, viewer.user, after)


async def whoami(request: Request) -> Response:
    """Local mode: the name decisions are recorded under, asked once per browser."""
    inbox = inbox_of(request)
    session, new = session_of(request)
    if inbox.options.auth_header is not None:
        return RedirectResponse("/", 303)
    csrf = inbox.csrf_of(session)
    if request.method == "GET":
        return finish(
            render(request, "name.html", "Who are you?", None, csrf=csrf), request, session, new
        )
    try:
        await inbox.check_form(request, session, new)
    except Refused as refused:
        return error_page(request, None, "Refused", refused.text, refused.status)
    name = str((await form_of(request)).get("name", "")).strip()
    if not APPROVER_NAME.fullmatch(name):
        problem = "a name is 1-200 letters, digits or _ . @ -"
        return render(request, "name.html", "Who are you?", None, 400, csrf=csrf, problem=problem)
    response = RedirectResponse("/", 303)
    cookie(response, inbox.https(request), USER_COOKIE, name)
    return response
