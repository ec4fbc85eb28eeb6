"""Edit, then approve, in a real browser (issue 47, item 1): the approver changes the proposed
arguments; the run validates the edited call again like a model's (schema in the workflow,
the tool's precondition in the worker), runs it once with the edited arguments, keeps both
versions in the ledger and tells the model. A user who may not decide the call cannot edit it.

Fixtures from `test_inbox_browser` (Chromium, the user header of a stand-in proxy)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.client import Client

from agentloop.inbox import InboxOptions, InboxServer
from agentloop.runtime.config import Settings
from tests.inbox.test_inbox_browser import (
    APPROVER,
    RESERVE,
    USER_HEADER,
    Watched,
    browser,
    page,
    playwright_api,
    waiting_booking,
    waiting_page,
)
from tests.live import Live
from tests.support import result_of, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

__all__ = ["browser", "page"]  # fixtures, used by name

INTERN = "intern"
"""Sees the run (same tenant) but is not one of `reserve_seat`'s approvers."""
EDITED = {"workshop_id": "ws-101", "participant_id": "p-erin"}


@pytest.fixture(scope="module")
async def inbox(client: Client, worker: Settings) -> AsyncIterator[InboxServer]:
    options = InboxOptions(
        auth_header=USER_HEADER, tenants={APPROVER: ["default"], INTERN: ["default"]}
    )
    async with InboxServer(client, options, "127.0.0.1", 0) as server:
        yield server


async def approve_edited(page: Watched, arguments: dict[str, Any]) -> Any:
    """Opens the edit, writes `arguments` and approves with them; the page's notice."""
    approval = page.page.locator(".approval")
    await approval.locator("summary", has_text="Edit, then approve").click()
    await approval.get_by_label("arguments (JSON)").fill(json.dumps(arguments))
    await approval.get_by_role("button", name="Approve with these arguments").click()
    return page.page.locator("#notice")


async def test_an_approver_edits_the_call_and_it_runs_once_with_the_edited_arguments(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    handle = await waiting_page(live, inbox, page, run_id)

    # Broken schema: refused by the run with the reason; the call still waits.
    notice = await approve_edited(page, {**RESERVE, "workshop_id": "workshop one"})
    await expect(notice).to_have_class("notice refused")
    await expect(notice).to_contain_text("the edited call is refused")
    await expect(notice).to_contain_text("schema")
    # A precondition that fails (ws-102 is full): the worker's check refuses it.
    notice = await approve_edited(page, {**RESERVE, "workshop_id": "ws-102"})
    await expect(notice).to_have_class("notice refused")
    await expect(notice).to_contain_text("precondition failed")
    view = await wait_for_phase(handle, "awaiting_approval")
    assert [p.call_id for p in view.pending_approvals] == ["c_res"]
    assert len(view.refused_decisions) == 2
    assert live.service.stats()["counts"]["workshops.reserve"] == 0

    notice = await approve_edited(page, EDITED)
    await expect(notice).to_have_text(f"approved with edited arguments c_res as {APPROVER}")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    # The service saw the edited call, once; never the proposed one.
    assert live.service.stats()["counts"]["workshops.reserve"] == 1
    assert live.service.records()["reservations_by_workshop"] == {"ws-101": {"p-erin": 1}}
    # The ledger holds both versions.
    [record] = [c for c in result.calls if c.call_id == "c_res"]
    assert record.arguments == EDITED
    assert record.approval is not None and record.approval.proposed_arguments == RESERVE
    assert record.approval.proposed_digest not in ("", record.args_digest)
    assert record.decision == f"approved with edited arguments by {APPROVER}"
    # The model's next request says the call ran with the approver's arguments, and which.
    requests = [r for r in live.provider.requests if r["script"] == run_id]
    assert len(requests) == 2
    said = json.dumps(requests[1]["body"]["messages"])
    assert "ran with the arguments its approver" in said
    assert "changed: participant_id" in said
    assert page.errors == [] and page.dialogs == []


async def test_a_user_who_may_not_decide_the_call_cannot_edit_it(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    handle = await waiting_booking(live.client, live.worker, live.provider, run_id)
    await page.page.set_extra_http_headers({USER_HEADER: INTERN})
    await page.page.goto(f"{inbox.url}/runs/{run_id}")
    approval = page.page.locator(".approval")
    await expect(approval).to_contain_text(f"{INTERN} may not decide this call")
    assert await approval.locator("textarea").count() == 0

    # A forged form (the intern's own session token) is refused before the run is asked.
    view = await wait_for_phase(handle, "awaiting_approval")
    [pending] = view.pending_approvals
    response = await page.page.evaluate(
        """async ([path, digest, edited]) => {
            const fields = new FormData();
            fields.set("csrf", document.querySelector("input[name=csrf]").value);
            fields.set("call_id", "c_res");
            fields.set("args_digest", digest);
            fields.set("verdict", "approve_edited");
            fields.set("edited_arguments", edited);
            const answer = await fetch(path, {method: "POST", body: fields});
            return [answer.status, await answer.text()];
        }""",
        [f"/runs/{run_id}/decide", pending.args_digest, json.dumps(EDITED)],
    )
    assert response[0] == 403, response
    assert f"only {APPROVER} may decide c_res" in response[1]
    view = await wait_for_phase(handle, "awaiting_approval")
    assert view.pending_approvals == [pending] and view.refused_decisions == []
    assert live.service.stats()["counts"]["workshops.reserve"] == 0


async def test_after_approve_the_run_page_shows_the_new_state_without_a_reload(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    handle = await waiting_page(live, inbox, page, run_id)
    # A wait within a day says how long is left and the clock time, no date.
    await expect(page.page.locator("#phase")).to_contain_text(
        re.compile(r"times out in \d+ h \d+ min \(\d\d:\d\d\)")
    )
    await page.page.locator(".approval").get_by_role("button", name="Approve").click()
    await expect(page.page.locator("#notice.ok")).to_have_text(f"approved c_res as {APPROVER}")
    await page.page.evaluate("() => { window.__same_page = true; }")  # gone on any reload

    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    # The header, the ledger and the live section all say the run ended, with no reload.
    await expect(page.page.locator("#outcome")).to_contain_text("completed")
    await expect(page.page.locator(".facts")).to_contain_text("COMPLETED")
    await expect(page.page.locator("#phase")).to_have_count(0)
    await expect(page.page.locator(".approval")).to_have_count(0)
    await expect(page.page.locator("#calls .decision")).to_contain_text(f"approved by {APPROVER}")
    await expect(page.page.locator("#live-status")).to_have_text("the run has ended")
    assert await page.page.evaluate("() => window.__same_page") is True
    assert page.errors == [] and page.dialogs == []


async def test_respond_instead_answers_the_model_and_the_call_never_runs(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    handle = await waiting_page(live, inbox, page, run_id)
    approval = page.page.locator(".approval")
    await approval.locator("summary", has_text="Respond instead").click()
    await approval.get_by_label("answer to the model").fill("Ask Carol which date first.")
    await approval.get_by_role("button", name="Send instead of the call").click()
    await expect(page.page.locator("#notice.ok")).to_have_text(
        f"answered instead of c_res as {APPROVER}"
    )
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert live.service.stats()["counts"]["workshops.reserve"] == 0
    [record] = result.calls
    assert record.decision == f"answered instead by {APPROVER}"
    assert "Ask Carol which date first." in record.result_summary
