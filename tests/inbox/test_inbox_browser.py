"""The inbox in a real browser (Playwright driving Debian's Chromium, headless) against the
real dev server, worker, scripted provider and example service: what a person sees of a
waiting run, and each action reaching the run (counted at the system of record).

The inbox runs behind a stand-in for an authenticating proxy: the browser context sends the
user header the proxy would set."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from agentloop.contract import AgentRunInput, AgentRunResult, Principal, UserMessage
from agentloop.demo.services import ExampleService
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.policies.bounds import clipped
from agentloop.runtime.config import Settings
from agentloop.runtime.signing import new_private_key_pem
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptedToolCall, ScriptTurn
from agentloop.testing.patience import CEILING_SECONDS
from agentloop.testing.turns import call as scripted_call
from agentloop.waiting import MAX_MEMO_TEXT_CHARS
from agentloop.worker import running_worker
from tests.live import Live, Servers, agent_input, scripted
from tests.support import INBOX_REFRESH, result_of, start_run, wait_for_phase, wait_until

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
USER_HEADER = "X-Inbox-User"
APPROVER = "workshop-lead"
RESERVE = {"workshop_id": "ws-101", "participant_id": "p-carol"}
PRINCIPAL = Principal(subject="p-alice", scopes=["workshops:read", "workshops:write"])


@pytest.fixture(scope="module")
async def inbox(client: Client, worker: Settings) -> AsyncIterator[InboxServer]:
    options = InboxOptions(
        auth_header=USER_HEADER, tenants={APPROVER: ["default"]}, refresh=INBOX_REFRESH
    )
    async with InboxServer(client, options, "127.0.0.1", 0) as server:
        yield server


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (CI installs Debian's chromium): browser tests")
    async with playwright_api.async_playwright() as playwright:
        # A fresh profile each launch; Playwright never downloads a browser of its own here.
        with tempfile.TemporaryDirectory(prefix="agentloop-chromium-") as profile:
            context = await playwright.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_ARGS,
                extra_http_headers={USER_HEADER: APPROVER},
            )
            # Playwright's own waits (5 s for an `expect`, 30 s for an action) made the ceiling
            # every other wait has: a page on a busy machine is slow, not wrong.
            context.set_default_timeout(CEILING_SECONDS * 1000)
            playwright_api.expect.set_options(timeout=CEILING_SECONDS * 1000)
            yield context
            await context.close()


class Watched:
    """A page, with every dialog it opened and every script error it raised."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    async def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        await dialog.dismiss()

    async def pwned(self) -> Any:
        return await self.page.evaluate("() => window.__pwned")


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Watched]:
    opened = await browser.new_page()
    yield Watched(opened)
    await opened.close()


def booking(name: str, last: str = "Booked.") -> Script:
    return scripted(
        name,
        [scripted_call("reserve_seat", "c_res", **RESERVE)],
        ScriptTurn(text=last),
    )


def booking_input(model: str, task: str = "Book p-carol into ws-101.") -> AgentRunInput:
    return agent_input(
        model, "openai-chat", task, ["check_workshop", "reserve_seat"], principal=PRINCIPAL
    )


async def waiting_booking(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    workflow_id: str,
    model: str | None = None,
) -> WorkflowHandle[Any, AgentRunResult]:
    """A booking run (its script named `model`, the workflow id by default) waiting for the
    approval of its reservation."""
    scripted_provider.register(booking(model or workflow_id))
    handle = await start_run(client, worker, workflow_id, booking_input(model or workflow_id))
    await wait_for_phase(handle, "awaiting_approval")
    return handle


async def unknown_write_waiting_approval(
    client: Client,
    worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    workflow_id: str,
) -> WorkflowHandle[Any, AgentRunResult]:
    """A booking run waiting for the approval of a write whose outcome will stay unknown: it
    commits but its answer is lost, and no lookup can tell."""
    scripted_provider.register(booking(workflow_id))
    example_service.inject_fault("workshops.reserve", "commit_then_drop")
    example_service.inject_fault("workshops.operation", "unavailable", count=50)
    handle = await start_run(client, worker, workflow_id, booking_input(workflow_id))
    await wait_for_phase(handle, "awaiting_approval")
    return handle


async def waiting_page(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> WorkflowHandle[Any, AgentRunResult]:
    """A booking run waiting for the approval of its reservation, its page open."""
    handle = await waiting_booking(live.client, live.worker, live.provider, run_id)
    await page.page.goto(f"{inbox.url}/runs/{run_id}")
    return handle


async def approve_on_page(page: Watched) -> None:
    """Approves the call the run page shows, and sees the inbox say so."""
    await page.page.locator(".approval").get_by_role("button", name="Approve").click()
    notice = page.page.locator("#notice")
    await playwright_api.expect(notice).to_have_text(f"approved c_res as {APPROVER}")


async def test_a_waiting_approval_is_listed_shown_whole_and_approved_in_the_browser(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    await page.page.goto(inbox.url + "/")
    live.provider.register(booking(run_id))
    handle = await start_run(live.client, live.worker, run_id, booking_input(run_id))
    await wait_for_phase(handle, "awaiting_approval")

    # The open inbox lists it at its next poll (every 2 s), without a reload.
    row = page.page.locator("#items tr", has_text=run_id)
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text("reserve_seat")
    await expect(row).to_contain_text(APPROVER)
    await expect(row).to_contain_text("Book p-carol into ws-101.")

    await row.get_by_role("link", name=run_id).click()
    approval = page.page.locator(".approval")
    await expect(approval).to_contain_text("reserve_seat")
    for name, value in RESERVE.items():
        await expect(approval.locator("pre.arguments")).to_contain_text(f'"{name}": "{value}"')
    assert live.service.stats()["counts"]["workshops.reserve"] == 0

    await approve_on_page(page)
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert live.service.stats()["counts"]["workshops.reserve"] == 1
    [record] = [c for c in result.calls if c.call_id == "c_res"]
    assert record.decision.startswith(f"approved by {APPROVER}")

    await page.page.reload()  # the ended run's page: its outcome and the ledger's word
    await expect(page.page.locator("#outcome")).to_contain_text("completed")
    await expect(page.page.locator("#calls .decision")).to_contain_text(f"approved by {APPROVER}")
    assert page.errors == [] and page.dialogs == []


async def test_reject_with_a_reason_and_a_stale_digest_is_refused_saying_why(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    handle = await waiting_page(live, inbox, page, run_id)
    approval = page.page.locator(".approval")

    # The arguments the page showed are not the pending call's any more: the run refuses.
    digest = approval.locator("input[name=args_digest]")
    await digest.evaluate("input => { input.value = 'sha256:' + '0'.repeat(64); }")
    await approval.get_by_role("button", name="Approve").click()
    await expect(page.page.locator("#notice.refused")).to_contain_text("stale decision")
    view = await wait_for_phase(handle, "awaiting_approval")
    assert [p.call_id for p in view.pending_approvals] == ["c_res"]

    approval = page.page.locator(".approval")  # the page as it is now, its digest current
    await approval.get_by_label("reason").fill("ws-101 is for staff only")
    await approval.get_by_role("button", name="Reject").click()
    await expect(page.page.locator("#notice.ok")).to_have_text(f"rejected c_res as {APPROVER}")
    result = await result_of(handle)
    assert result.status == "rejected", result.stop_reason
    assert live.service.stats()["counts"]["workshops.reserve"] == 0
    [record] = [c for c in result.calls if c.call_id == "c_res"]
    assert record.decision == f"rejected by {APPROVER}"
    assert "ws-101 is for staff only" in record.result_summary
    await page.page.reload()
    await expect(page.page.locator("#outcome")).to_contain_text("rejected")
    await expect(page.page.locator("#calls")).to_contain_text("ws-101 is for staff only")


async def test_a_question_is_answered_in_the_browser(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                tool_calls=[scripted_call("ask_user", "c_ask", question="Which seat row?")],
                expect_tool_results={"c_ask": "row 7 please"},
            ),
            "Row 7 it is.",
        )
    )
    handle = await start_run(
        live.client, live.worker, run_id, booking_input(run_id, "Pick my row.")
    )
    await wait_for_phase(handle, "awaiting_input")
    await page.page.goto(inbox.url + "/?kind=question")
    row = page.page.locator("#items tr", has_text=run_id)
    await expect(row).to_contain_text("Which seat row?")
    await expect(row).to_contain_text("question")
    await expect(row.locator("td").first).to_have_text(re.compile(r"^\d+ s$"))  # waited since

    await row.get_by_role("link", name=run_id).click()
    question = page.page.locator(".question")
    await expect(question).to_contain_text("Which seat row?")
    await question.get_by_label("answer").fill("row 7 please")
    await question.get_by_role("button", name="Answer").click()
    await expect(page.page.locator("#notice.ok")).to_have_text(f"answer sent as {APPROVER}")
    result = await result_of(handle)  # the scripted model checks it was given the answer
    assert result.status == "completed", result.stop_reason
    assert result.output == "Row 7 it is."


async def test_an_unknown_write_is_resolved_as_applied_in_the_browser(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    handle = await unknown_write_waiting_approval(
        live.client, live.worker, live.provider, live.service, run_id
    )
    await page.page.goto(f"{inbox.url}/runs/{run_id}")
    await page.page.locator(".approval").get_by_role("button", name="Approve").click()
    await expect(page.page.locator("#notice.ok")).to_contain_text("approved c_res")
    await wait_for_phase(handle, "awaiting_reconciliation")

    await page.page.goto(inbox.url + "/?kind=unknown_write")
    row = page.page.locator("#items tr", has_text=run_id)
    await expect(row).to_contain_text("unknown write")
    await row.get_by_role("link", name=run_id).click()
    unresolved = page.page.locator(".unresolved")
    await expect(unresolved).to_contain_text("reserve_seat")
    await unresolved.get_by_label("note").fill("seen in the booking system")
    await unresolved.get_by_role("button", name="Applied", exact=True).click()
    await expect(page.page.locator("#notice.ok")).to_contain_text("c_res: applied")

    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert int(live.service.records()["reservations"]) == 1
    assert live.service.stats()["counts"]["workshops.reserve"] == 1  # never sent again
    [record] = [c for c in result.calls if c.call_id == "c_res"]
    assert record.status == "confirmed_after_query"
    assert "seen in the booking system" in record.decision


HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2; alert(1)">'
HOSTILE_LINK = '<a href="javascript:window.__pwned=3">click me</a>'


async def test_hostile_text_from_the_task_the_model_and_the_tool_arguments_runs_nothing(
    live: Live, inbox: InboxServer, page: Watched, run_id: str
) -> None:
    expect = playwright_api.expect
    arguments = {
        "ticket_id": "T-1001",
        "recipient": "dana@example.com",
        "body": HOSTILE + HOSTILE_LINK,
    }
    live.provider.register(
        scripted(
            run_id,
            [ScriptedToolCall(id="c_reply", name="send_reply", arguments=arguments)],
            ScriptTurn(text=HOSTILE + HOSTILE_LINK),
        )
    )
    run_input = agent_input(
        run_id,
        "openai-chat",
        HOSTILE + HOSTILE_LINK,
        ["send_reply"],
        principal=Principal(subject="p-alice", scopes=["tickets:write"]),
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    view = await wait_for_phase(handle, "awaiting_approval")
    assert view.pending_approvals[0].arguments == arguments

    await page.page.goto(inbox.url + "/")
    row = page.page.locator("#items tr", has_text=run_id)
    listed = clipped(HOSTILE + HOSTILE_LINK, MAX_MEMO_TEXT_CHARS)  # the run's memo holds its start
    await expect(row).to_contain_text(listed)  # the task, as text
    async with page.page.expect_response(lambda r: "/api/inbox" in r.url):
        pass  # the script's next poll puts in the rows the server rendered again
    await expect(row).to_contain_text(listed)
    await page.page.goto(f"{inbox.url}/runs/{run_id}")
    await expect(page.page.locator("#task")).to_have_text(HOSTILE + HOSTILE_LINK)
    shown_body = json.dumps(HOSTILE + HOSTILE_LINK)  # as the arguments' JSON spells it
    await expect(page.page.locator(".approval pre.arguments")).to_contain_text(shown_body)
    assert await page.page.locator(INJECTED).count() == 0

    # Rejected, the model is told and answers with more of the same: the run's answer.
    await page.page.locator(".approval").get_by_role("button", name="Reject").click()
    await expect(page.page.locator("#notice.ok")).to_contain_text("rejected c_reply")
    result = await result_of(handle)
    assert result.output == HOSTILE + HOSTILE_LINK
    await page.page.goto(f"{inbox.url}/runs/{run_id}")
    await expect(page.page.locator("#output")).to_have_text(HOSTILE + HOSTILE_LINK)
    await expect(page.page.locator("#calls pre.arguments")).to_contain_text(shown_body)
    assert await page.page.locator(INJECTED).count() == 0
    assert await page.pwned() is None
    assert page.dialogs == [] and page.errors == []


INJECTED = "main script, main img, main a[href^=javascript]"


async def test_signed_mode_the_browser_signs_with_a_key_the_inbox_never_holds(
    servers: Servers,
    worker_settings: Settings,
    inbox: InboxServer,
    page: Watched,
    run_id: str,
    tmp_path: Path,
) -> None:
    expect = playwright_api.expect
    pem, public = new_private_key_pem()
    key_file = tmp_path / f"{APPROVER}.pem"
    key_file.write_bytes(pem)
    settings = worker_settings.model_copy(
        update={"approver_keys": f"{APPROVER}={public}", "task_queue": f"signed-{run_id[-8:]}"}
    )
    async with running_worker(servers.client, settings):
        servers.provider.register(booking(run_id))
        handle = await start_run(servers.client, settings, run_id, booking_input(run_id))
        view = await wait_for_phase(handle, "awaiting_approval")
        assert view.approval_signing == "signed"
        await page.page.goto(f"{inbox.url}/runs/{run_id}")
        approval = page.page.locator(".approval")

        # Unsigned, a decision does not count: the run refuses it, and the page says why.
        token = await page.page.locator("meta[name=csrf-token]").get_attribute("content")
        digest = view.pending_approvals[0].args_digest
        unsigned = await page.page.request.post(
            f"{inbox.url}/runs/{run_id}/decide",
            form={"csrf": token, "call_id": "c_res", "args_digest": digest, "verdict": "approve"},
        )
        assert unsigned.status == 409 and "unsigned" in await unsigned.text()

        await approval.get_by_role("button", name="Approve").click()  # no key loaded yet
        await expect(page.page.locator("#sign-problem")).to_contain_text("load your key file")
        await page.page.locator("#key-file").set_input_files(str(key_file))
        await expect(page.page.locator("#key-status")).to_contain_text("is in this browser")
        extractable = await page.page.evaluate(KEY_EXTRACTABLE, APPROVER)
        assert extractable is False

        # Edited, then approved: the browser signs the edit too (its digest is in the bytes).
        edited = {**RESERVE, "participant_id": "p-erin"}
        await approval.locator("summary", has_text="Edit, then approve").click()
        await approval.get_by_label("arguments (JSON)").fill(json.dumps(edited))
        await approval.get_by_role("button", name="Approve with these arguments").click()
        await expect(page.page.locator("#notice.ok")).to_have_text(
            f"approved with edited arguments c_res as {APPROVER}"
        )
        result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert servers.service.stats()["counts"]["workshops.reserve"] == 1
    [record] = [c for c in result.calls if c.call_id == "c_res"]
    assert record.decision == f"approved with edited arguments by {APPROVER}"
    assert record.arguments == edited and record.approval and record.approval.signed
    assert page.errors == []


KEY_EXTRACTABLE = """(user) => new Promise((resolve, reject) => {
  const opening = indexedDB.open("agentloop-inbox", 1);
  opening.onerror = () => reject(opening.error);
  opening.onsuccess = () => {
    const read = opening.result.transaction("approver-keys").objectStore("approver-keys").get(user);
    read.onsuccess = () => resolve(read.result ? read.result.extractable : null);
  };
})"""


LIVE_FIRST = "Let me look at the train first."
LIVE_ANSWER = "G1234 is on time; a window seat it is. " * 6


async def test_a_run_page_shows_the_run_as_it_happens_from_one_subscription_per_run(
    live: Live, inbox: InboxServer, browser: Any, run_id: str
) -> None:
    """Two pages on one running run: both show the model's text, the call and its result and
    the wait as they happen, from ONE subscription on the run; the subscription ends when
    the last page leaves, a page coming back starts one again, and the run's last text and
    its end arrive on the open page without a reload."""
    expect = playwright_api.expect
    live.provider.register(
        scripted(
            run_id,
            ScriptTurn(
                text=LIVE_FIRST,
                event_delay_ms=20,
                tool_calls=[
                    scripted_call(
                        "get_train_status", "c_train", train_number="G1234", date="2026-12-01"
                    )
                ],
            ),
            ScriptTurn(  # the run waits for a person: it cannot end before the answer
                tool_calls=[scripted_call("ask_user", "c_ask", question="Window or aisle?")],
                expect_tool_results={"c_ask": "window please"},
            ),
            ScriptTurn(text=LIVE_ANSWER, event_delay_ms=20),
        )
    )
    run_input = agent_input(
        run_id,
        "openai-chat",
        "Is G1234 on time? Book me a seat.",
        ["get_train_status"],
        principal=PRINCIPAL,
    )
    handle = await start_run(live.client, live.worker, run_id, run_input)
    pages = [Watched(await browser.new_page()) for _ in range(2)]
    for watched in pages:
        await watched.page.goto(f"{inbox.url}/runs/{run_id}")
    for watched in pages:
        log = watched.page.locator("#live-log")
        await expect(log.locator("li.text").first).to_contain_text(LIVE_FIRST)
        await expect(log.locator("li.call").first).to_have_text(
            "turn 1: call c_train: get_train_status"
        )
        await expect(log.locator("li.result").first).to_contain_text("c_train: succeeded")
        await expect(log.locator("li.waiting")).to_contain_text("waiting for a person: input")
        await expect(watched.page.locator("#live-status")).to_have_text("live")
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
    assert inbox.live.watching()[run_id] == 2  # (earlier tests' runs may be followed too)
    assert inbox.live.subscriptions[run_id] == 1  # two browsers, one subscription

    # The last page leaves: the subscription ends (a moment later: a reload would come back).
    await pages[1].page.close()
    await wait_until(lambda: inbox.live.watching()[run_id] == 1, "the closed page to leave")
    first = pages[0]
    await first.page.goto(inbox.url + "/")
    await wait_until(lambda: run_id not in inbox.live.watching(), "the subscription to end")
    assert inbox.live.subscriptions[run_id] == 1

    # Back on the run: a subscription again, from what the run kept, then the rest live.
    await first.page.goto(f"{inbox.url}/runs/{run_id}")
    log = first.page.locator("#live-log")
    await expect(log.locator("li.waiting")).to_contain_text("waiting for a person: input")
    assert inbox.live.subscriptions[run_id] == 2
    await first.page.evaluate("() => { window.__samePage = true; }")
    await handle.signal("message", UserMessage(text="window please", sender=APPROVER))
    await expect(log.locator("li.done")).to_contain_text("ended: completed")
    await expect(first.page.locator("#live-status")).to_have_text("the run has ended")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert await log.locator("li.text pre").last.text_content() == result.output == LIVE_ANSWER
    assert await first.page.evaluate("() => window.__samePage") is True  # never reloaded
    await wait_until(lambda: run_id not in inbox.live.watching(), "the ended run's feed to go")
    assert inbox.live.subscriptions[run_id] == 2
    assert first.errors == [] and first.dialogs == []
    await first.page.close()
