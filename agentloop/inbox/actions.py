"""The inbox's actions (POST), each the message the CLI sends: `decide_approval`, and
`message`, `resolve`, `cancel` by the `deliver` update (each answered with the run's verdict);
and, in signed mode, the bytes a browser signs each over.

A user decides, and settles the unknown writes of, only calls whose tool names them as an
approver (or names none)."""

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

from agentloop.argument_edits import EditError, json_object
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
from agentloop.runtime.signing import (
    DEFAULT_LIFETIME,
    resolution_bytes,
    signed_bytes,
    word_bytes,
)
from agentloop.signed_words import word_of


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
            except EditError as exc:
                notice = Notice(False, f"not sent: {exc}")
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


def check_settler(viewer: Viewer, story: RunStory, call_id: str) -> None:
    """Refused before the run is asked: who may settle an unknown write is who may approve
    it, the tool's approvers (the worker checks it again in the run)."""
    assert story.view is not None
    unknown = next((u for u in story.view.unresolved if u.call_id == call_id), None)
    approvers = unknown.approvers if unknown is not None else []
    if approvers and viewer.user not in approvers:
        raise Refused(403, f"only {', '.join(approvers)} may settle {call_id}")


def decision_of(viewer: Viewer, form: Mapping[str, Any]) -> ApprovalDecision:
    """The decision a form describes, by the viewer (`approve_edited`: approved with the
    arguments of its `edited_arguments` field; `respond`: not run, its `response` answers the
    model instead); raises ValidationError, or EditError for
    edited arguments that are not a JSON object."""
    verdict = form.get("verdict")
    edited = None
    if verdict == "approve_edited":
        edited = json_object(str(form.get("edited_arguments", "")))
    return ApprovalDecision(
        call_id=str(form.get("call_id", "")),
        args_digest=str(form.get("args_digest", "")),
        approved=verdict in ("approve", "approve_edited"),
        approver=viewer.user,
        reason=str(form.get("reason", "")),
        **signed_fields(form),
        edited_arguments=edited,
        response=str(form.get("response", "")) if verdict == "respond" else "",
    )


def signed_fields(form: Mapping[str, Any]) -> dict[str, Any]:
    """The expiry and signature a signed-mode page sends with its form (none: unsigned)."""
    return {
        "expires_at": form.get("expires_at") or None,
        "signature": str(form.get("signature", "")),
    }


def answer_of(viewer: Viewer, form: Mapping[str, Any]) -> UserMessage:
    return UserMessage(
        text=str(form.get("text", "")),
        sender=viewer.user,
        **signed_fields(form),
    )


def resolution_of(viewer: Viewer, form: Mapping[str, Any]) -> ResolveRequest:
    return ResolveRequest(
        call_id=str(form.get("call_id", "")),
        outcome=form.get("outcome"),  # validated here
        operator=viewer.user,
        note=str(form.get("note", "")),
        **signed_fields(form),
    )


def cancel_of(viewer: Viewer, form: Mapping[str, Any]) -> CancelRequest:
    return CancelRequest(
        reason=str(form.get("reason", "")),
        requested_by=viewer.user,
        **signed_fields(form),
    )


def _signed(kind: str, viewer: Viewer, story: RunStory, form: Mapping[str, Any]) -> bytes:
    """The bytes the worker checks for the action `kind` the form describes."""
    assert story.view is not None
    run = story.view.run_chain[0] if story.view.run_chain else ""
    chain = {"workflow_id": story.workflow_id, "run": run}
    if kind == "answer":
        return word_bytes(word_of(answer_of(viewer, form)), **chain)
    if kind == "cancel":
        return word_bytes(word_of(cancel_of(viewer, form)), **chain)
    if kind == "resolve":
        check_settler(viewer, story, str(form.get("call_id", "")))
        return resolution_bytes(resolution_of(viewer, form), **chain)
    if kind == "decide":
        check_approver(viewer, story, str(form.get("call_id", "")))
        return signed_bytes(decision_of(viewer, form), **chain)
    raise Refused(400, f"no action {kind!r} to sign: decide, answer, resolve or cancel")


async def signing_message(request: Request, viewer: Viewer) -> Response:
    """Signed mode: the exact bytes `agentloop.runtime.signing` checks, for the action
    (`?for=decide|answer|resolve|cancel`) the form describes on the run the page showed, so
    the browser signs only bytes."""
    story = await inbox_of(request).story_for(viewer, workflow_id_of(request))
    if story.view is None:
        raise Refused(409, "the run has ended")
    form = await form_of(request)
    expires = datetime.now(UTC) + DEFAULT_LIFETIME
    kind = request.query_params.get("for", "decide")
    try:
        message = _signed(kind, viewer, story, {**form, "expires_at": expires.isoformat()})
    except ValidationError as exc:
        raise Refused(400, describe_validation_error(exc)) from None
    except EditError as exc:
        raise Refused(400, str(exc)) from None
    return JSONResponse(
        {"message": base64.b64encode(message).decode(), "expires_at": expires.isoformat()}
    )


async def decide(acting: Acting) -> Notice:
    viewer, call_id = acting.viewer, acting.field("call_id")
    check_approver(viewer, acting.story, call_id)
    decision = decision_of(viewer, acting.form)
    verdict = await acting.run.decide(decision)
    if not verdict.accepted:
        return Notice(False, f"decision refused: {verdict.reason}")
    word = "approved" if decision.approved else "rejected"
    if decision.edited_arguments is not None:
        word = "approved with edited arguments"
    elif decision.response:
        word = "answered instead of"
    return Notice(True, f"{word} {call_id} as {viewer.user}")


# Answers, resolutions and cancels go by the `deliver` update: the page says "sent" only for
# what the run took (after the worker's check of its signature, in signed mode), and otherwise
# the run's reason, which its record of refusals keeps too.


async def answer(acting: Acting) -> Notice:
    verdict = await acting.run.deliver(answer_of(acting.viewer, acting.form))
    if not verdict.accepted:
        return Notice(False, f"answer refused: {verdict.reason}")
    return Notice(True, f"answer sent as {acting.viewer.user}")


async def resolve(acting: Acting) -> Notice:
    check_settler(acting.viewer, acting.story, acting.field("call_id"))
    resolution = resolution_of(acting.viewer, acting.form)
    verdict = await acting.run.deliver(resolution)
    if not verdict.accepted:
        return Notice(False, f"resolution refused: {verdict.reason}")
    return Notice(True, f"resolution sent for {resolution.call_id}: {resolution.outcome}")


async def cancel(acting: Acting) -> Notice:
    verdict = await acting.run.deliver(cancel_of(acting.viewer, acting.form))
    if not verdict.accepted:
        return Notice(False, f"cancel refused: {verdict.reason}")
    return Notice(True, f"cancel requested by {acting.viewer.user}")
