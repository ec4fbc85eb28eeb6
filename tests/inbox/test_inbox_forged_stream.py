"""A run page in Chromium while a plain client forges the run's stream: a `done`, a `call`
(`wire_transfer`), a `waiting` and text saying "Approved by finance". A page open before the
forgery and one opened after it both go on streaming, show none of it, and end on the run's
own end (the inbox's one subscription reads the run's own items only)."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop.inbox import InboxServer
from tests.inbox.test_inbox_browser import Watched, browser, inbox, playwright_api
from tests.live import Live
from tests.people.test_stream_authorship import (
    FIRST_TEXT,
    FORGED,
    decide,
    forge,
    started_waiting,
    stream_offset,
    wait_for_offset,
)
from tests.support import result_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_fakes")]

__all__ = ["browser", "inbox"]  # the browser tests' fixtures, used here by name


async def test_a_forged_done_ends_no_run_page_and_nothing_forged_is_shown(
    live: Live, inbox: InboxServer, browser: Any, run_id: str
) -> None:
    expect = playwright_api.expect
    handle, digest = await started_waiting(live.client, live.worker, live.provider, run_id)
    before = Watched(await browser.new_page())
    await before.page.goto(f"{inbox.url}/runs/{run_id}")
    await expect(before.page.locator("#live-log li.waiting")).to_contain_text("approval")

    offset = await stream_offset(handle)
    await forge(live.client, run_id, FORGED)
    await wait_for_offset(handle, offset + len(FORGED))
    after = Watched(await browser.new_page())
    await after.page.goto(f"{inbox.url}/runs/{run_id}")
    await expect(after.page.locator("#live-log li.waiting")).to_contain_text("approval")
    await decide(handle, digest, approved=False)  # the run's own end, after the forgery
    result = await result_of(handle)

    assert result.status == "rejected", result.stop_reason
    for watched in (before, after):
        log = watched.page.locator("#live-log")
        await expect(log.locator("li.done")).to_contain_text(
            f"ended: rejected ({result.stop_reason})"
        )
        await expect(log.locator("li.done")).to_have_count(1)
        await expect(watched.page.locator("#live-status")).to_have_text("the run has ended")
        await expect(log.locator("li.text")).to_have_count(1)
        await expect(log.locator("li.text")).to_contain_text(FIRST_TEXT)
        shown = await log.text_content() or ""
        assert "wire_transfer" not in shown and "Approved by finance" not in shown
        assert "forged" not in shown
        await expect(log.locator("li.waiting")).to_have_count(1)
        assert watched.errors == [] and watched.dialogs == []
        await watched.page.close()
