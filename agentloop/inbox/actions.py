"""The inbox's actions (POST), each the message the CLI sends: `decide_approval`, `message`,
`resolve`, `cancel`; and, in signed mode, the bytes a browser signs a decision over.

A user decides only calls whose tool names them as an approver (or names none)."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from agentloop.contract import (
    ApprovalDecision,
    CancelRequest,
    ResolveRequest,
    UserMessage,
    describe_validation_error,
)
from agentloop.inbox.access import Handler, Refused, form_of, inbox_of, workflow_id_of
from agentloop.inbox.pages import Notice, Viewer, render
from agentloop.inbox.reading import RunStory
from agentloop.run_client import RunClient
from agentloop.runtime.signing import DEFAULT_LIFETIME, signed_bytes


@dataclass(frozen=True)
class Acting:
    """An action's request: who acts, on which run, with what form."""

    viewer: Viewer
    story: RunStory
    form: Mapping[str, Any]
    run: RunClient

    def field(self, name: str) -> str:
        return str(self.form.get(name, ""))


Act = Callable[[Acting], Awaitable[Notice]]


def action(act: Act) -> Handler:
    """A POST on a running run the viewer may see: `act` sends the message; the run's page,
    read again, shows what became of it."""

    async def acting(request: Request, viewer: Viewer) -> Response:
        inbox = inbox_of(request)
        workflow_id = workflow_id_of(request)
        story = await inbox.story_for(viewer, workflow_id)
        if story.view is None:
            notice = Notice(False, f"the run has ended ({story.execution.lower()})")
        else:
            try:
                form = await form_of(request)
                run = RunClient(inbox.client, story.workflow_id)
                notice = await act(Acting(viewer, story, form, run))
            except ValidationError as exc:
                notice = Notice(False, f"not sent: {describe_validation_error(exc)}")
            except WorkflowUpdateFailedError as exc:
                notice = Notice(False, f"refused by the run: {exc.cause or exc}")
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                notice = Notice(False, "the run has ended")
        story = await inbox.story_for(viewer, workflow_id)
        title = f"Run {story.workflow_id}"
        status = 200 if notice.ok else 409
        return render(request, "run.html", title, viewer, status, story=story, notice=notice)

    acting.__name__ = act.__name__
    return acting


def check_approver(viewer: Viewer, story: RunStory, call_id: str) -> None:
    """Refused before the run is asked: the tool names its approvers, and not this user."""
    assert story.view is not None
    pending = next((p for p in story.view.pending_approvals if p.call_id == call_id), None)
    approvers = pending.approvers if pending is not None else []
    if approvers and viewer.user not in approvers:
        raise Refused(403, f"only {', '.join(approvers)} may decide {call_id}")


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


async def signing_message(request: Request, viewer: Viewer) -> Response:
    """Signed mode: the exact bytes `agentloop.runtime.signing` checks, for the decision the
    form describes on the run the page showed, so the browser signs only bytes."""
    story = await inbox_of(request).story_for(viewer, workflow_id_of(request))
    if story.view is None:
        raise Refused(409, "the run has ended")
    form = await form_of(request)
    check_approver(viewer, story, str(form.get("call_id", "")))
    expires = datetime.now(UTC) + DEFAULT_LIFETIME
    try:
        decision = decision_of(viewer, {**form, "expires_at": expires.isoformat()})
    except ValidationError as exc:
        raise Refused(400, describe_validation_error(exc)) from None
    run = story.view.run_chain[0] if story.view.run_chain else ""
    message = signed_bytes(decision, workflow_id=story.workflow_id, run=run)
    return JSONResponse(
        {"message": base64.b64encode(message).decode(), "expires_at": expires.isoformat()}
    )


async def decide(acting: Acting) -> Notice:
    viewer, call_id = acting.viewer, acting.field("call_id")
    check_approver(viewer, acting.story, call_id)
    decision = decision_of(viewer, acting.form).model_copy(
        update={"signature": acting.field("signature")}
    )
    verdict = await acting.run.decide(decision)
    if not verdict.accepted:
        return Notice(False, f"decision refused: {verdict.reason}")
    word = "approved" if decision.approved else "rejected"
    return Notice(True, f"{word} {call_id} as {viewer.user}")


async def answer(acting: Acting) -> Notice:
    message = UserMessage(text=acting.field("text"), sender=acting.viewer.user)
    await acting.run.answer(message)
    return Notice(True, f"answer sent as {acting.viewer.user}")


async def resolve(acting: Acting) -> Notice:
    outcome, call_id = acting.field("outcome"), acting.field("call_id")
    operator, note = acting.viewer.user, acting.field("note")
    resolution = ResolveRequest(call_id=call_id, outcome=outcome, operator=operator, note=note)
    await acting.run.resolve(resolution)
    return Notice(True, f"resolution sent for {call_id}: {outcome}")


async def cancel(acting: Acting) -> Notice:
    await acting.run.cancel(CancelRequest(reason=acting.field("reason")))
    return Notice(True, f"cancel requested by {acting.viewer.user}")
