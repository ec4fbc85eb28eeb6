"""The inbox in signed mode, in Chromium (issue #44, items 2 and 3): every action it offers is
signed in the browser with the person's key (answers and operators' words as approvals are),
the page says "sent" only for what the run took and shows each refusal the run recorded, and
an unknown write is settled only by the tool's approvers: not offered to anyone else, refused
(403) if posted, and refused by the worker when sent to the run some other way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from agentloop.contract import ResolveRequest
from agentloop.demo.services import ExampleService
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.run_client import RunClient
from agentloop.runtime.config import Settings
from agentloop.runtime.signing import new_private_key_pem
from agentloop.scripted_provider import Script, ScriptedProvider, ScriptTurn
from agentloop.testing.turns import call as scripted_call
from agentloop.worker import running_worker
from tests.inbox.test_inbox_browser import (  # noqa: F401  (the browser fixture)
    APPROVER,
    USER_HEADER,
    Watched,
    booking_input,
    browser,
    unknown_write_waiting_approval,
)
from tests.live import Servers
from tests.loop.test_hardening import refusals
from tests.support import INBOX_REFRESH, result_of, start_run, wait_for_phase

playwright_api = pytest.importorskip("playwright.async_api")

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

OUTSIDER = "mallory"
"""A user of the run's tenant the tool does not name as an approver."""


@pytest.fixture(scope="module")
def approver_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    pem, public = new_private_key_pem()
    key_file = tmp_path_factory.mktemp("keys") / f"{APPROVER}.pem"
    key_file.write_bytes(pem)
    return key_file, public


@pytest.fixture(scope="module")
async def signed_worker(
    client: Client, worker_settings: Settings, approver_key: tuple[Path, str]
) -> AsyncIterator[Settings]:
    """A worker taking only what workshop-lead signed (as production mode requires)."""
    settings = worker_settings.model_copy(
        update={"approver_keys": f"{APPROVER}={approver_key[1]}", "task_queue": "inbox-signed"}
    )
    async with running_worker(client, settings):
        yield settings


@pytest.fixture(scope="module")
async def inbox(client: Client) -> AsyncIterator[InboxServer]:
    tenants = {APPROVER: ["default"], OUTSIDER: ["default"]}
    options = InboxOptions(auth_header=USER_HEADER, tenants=tenants, refresh=INBOX_REFRESH)
    async with InboxServer(client, options, "127.0.0.1", 0) as server:
        yield server


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Watched]:  # noqa: F811
    opened = await browser.new_page()
    yield Watched(opened)
    await opened.close()


async def load_key(page: Watched, key_file: Path) -> None:
    await page.page.locator("#key-file").set_input_files(str(key_file))
    await playwright_api.expect(page.page.locator("#key-status")).to_contain_text("is in this")


async def post_unsigned(
    page: Watched, url: str, form: dict[str, str], user: str = APPROVER
) -> tuple[int, str]:
    """What a page that does not sign would post (a compromised or outdated inbox page)."""
    token = await page.page.locator("meta[name=csrf-token]").get_attribute("content")
    response = await page.page.request.post(
        url, form={"csrf": token or "", **form}, headers={USER_HEADER: user}
    )
    return response.status, await response.text()


async def test_a_question_is_answered_signed_in_the_browser_and_an_unsigned_answer_is_refused(
    servers: Servers,
    signed_worker: Settings,
    inbox: InboxServer,
    page: Watched,
    approver_key: tuple[Path, str],
    run_id: str,
) -> None:
    expect = playwright_api.expect
    ask = scripted_call("ask_user", "c_ask", question="Which seat row?")
    turns = [
        ScriptTurn(tool_calls=[ask], expect_tool_results={"c_ask": "row 7 please"}),
        ScriptTurn(text="Row 7 it is."),
    ]
    servers.provider.register(Script(name=run_id, turns=turns))
    handle = await start_run(
        servers.client, signed_worker, run_id, booking_input(run_id, "Pick a row.")
    )
    view = await wait_for_phase(handle, "awaiting_input")
    assert view.approval_signing == "signed"
    await page.page.goto(f"{inbox.url}/runs/{run_id}")

    # Unsigned, the run refuses the answer: the inbox says so (never "sent"), and the page
    # shows the run's record of it.
    status, text = await post_unsigned(
        page, f"{inbox.url}/runs/{run_id}/answer", {"text": "row 13"}
    )
    assert status == 409 and "answer refused: unsigned: this worker takes only signed" in text
    await page.page.reload()
    refused = page.page.locator("#refused .refusal")
    await expect(refused).to_have_count(1)
    await expect(refused).to_contain_text("message: workshop-lead: row 13")
    await expect(refused).to_contain_text("unsigned")

    question = page.page.locator(".question")
    await question.get_by_label("answer").fill("row 7 please")
    await question.get_by_role("button", name="Answer").click()  # no key loaded yet
    await expect(page.page.locator("#sign-problem")).to_contain_text("load your key file")
    await load_key(page, approver_key[0])
    await question.get_by_role("button", name="Answer").click()
    await expect(page.page.locator("#notice.ok")).to_have_text(f"answer sent as {APPROVER}")
    result = await result_of(handle)  # the scripted model checks it was given the answer
    assert result.status == "completed", result.stop_reason
    assert page.errors == []


async def test_an_unknown_write_is_settled_only_by_an_approver_and_signed_in_the_browser(
    client: Client,
    signed_worker: Settings,
    scripted_provider: ScriptedProvider,
    example_service: ExampleService,
    inbox: InboxServer,
    page: Watched,
    browser: Any,  # noqa: F811
    approver_key: tuple[Path, str],
    run_id: str,
) -> None:
    expect = playwright_api.expect
    handle = await unknown_write_waiting_approval(
        client, signed_worker, scripted_provider, example_service, run_id
    )
    run_page = f"{inbox.url}/runs/{run_id}"
    await page.page.goto(run_page)
    await load_key(page, approver_key[0])
    await page.page.locator(".approval").get_by_role("button", name="Approve").click()
    await expect(page.page.locator("#notice.ok")).to_contain_text("approved c_res")
    view = await wait_for_phase(handle, "awaiting_reconciliation")
    assert [u.approvers for u in view.unresolved] == [[APPROVER]]

    # Someone the tool does not name is not offered the form, is refused before the run is
    # asked, and the worker refuses the word sent to the run some other way.
    outsider = Watched(await browser.new_page())
    await outsider.page.set_extra_http_headers({USER_HEADER: OUTSIDER})
    await outsider.page.goto(run_page)
    unresolved = outsider.page.locator(".unresolved")
    await expect(unresolved).to_contain_text(f"{OUTSIDER} may not settle this write")
    await expect(unresolved.locator("form")).to_have_count(0)
    form = {"call_id": "c_res", "outcome": "not_applied"}
    status, text = await post_unsigned(outsider, f"{run_page}/resolve", form, OUTSIDER)
    assert status == 403 and f"only {APPROVER} may settle c_res" in text
    await outsider.page.close()
    word = ResolveRequest(call_id="c_res", outcome="not_applied", operator=OUTSIDER)
    await RunClient(client, run_id).resolve(word)
    [by_outsider] = await refusals(handle, 1)
    assert by_outsider.refused_because == (
        f"'{OUTSIDER}' may not settle this write; approvers: {APPROVER}"
    )

    # The approver's unsigned word is refused by the run; the page says so and shows it.
    status, text = await post_unsigned(page, f"{run_page}/resolve", form)
    assert status == 409 and "resolution refused: unsigned: this worker takes only signed" in text
    await page.page.goto(run_page)
    refused = page.page.locator("#refused .refusal")
    await expect(refused).to_have_count(2)
    await expect(refused.first).to_contain_text(f"resolve by {APPROVER} on c_res")
    await expect(refused.first).to_contain_text("unsigned")
    await expect(refused.last).to_contain_text(f"resolve by {OUTSIDER} on c_res")

    # Signed in the browser, the approver's word settles the write.
    unresolved = page.page.locator(".unresolved")
    await unresolved.get_by_label("note").fill("seen in the booking system")
    await unresolved.get_by_role("button", name="Applied", exact=True).click()
    await expect(page.page.locator("#notice.ok")).to_have_text("resolution sent for c_res: applied")
    result = await result_of(handle)
    assert result.status == "completed", result.stop_reason
    assert example_service.stats()["counts"]["workshops.reserve"] == 1  # never sent again
    [record] = [c for c in result.calls if c.call_id == "c_res"]
    assert record.status == "confirmed_after_query"
    assert record.resolution is not None and record.resolution.operator == APPROVER
    assert "seen in the booking system" in record.decision
    assert page.errors == []
