"""The inbox's screenshots in the docs (docs/images/inbox.png and docs/images/run.png), made
from scripted runs: `make screenshots` (Playwright and Chromium at /usr/bin/chromium).

A dev stack on free ports (Temporal dev server, worker, scripted provider, example service),
the inbox behind a stand-in for an authenticating proxy (the browser sends the user header),
five runs waiting for a person (approvals, a question, a write of unknown outcome), and the
page of one of them as it shows the run's stream live.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
from pathlib import Path

from playwright.async_api import async_playwright
from temporalio.client import Client

from agentloop.cli.dev import DevStack, DevStackPorts
from agentloop.contract import AgentRunInput, ApprovalDecision, Principal, RunStatusView
from agentloop.inbox import InboxOptions, InboxServer
from agentloop.run_client import RunClient
from agentloop.scripted_provider import Script, ScriptedToolCall, ScriptTurn

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
HEADER = "X-Forwarded-User"
USER = "workshop-lead"
VIEWPORT = {"width": 1280, "height": 820}


def workshop_run(task: str, tenant: str) -> AgentRunInput:
    return AgentRunInput(
        task=task,
        provider="openai-chat",
        model="screenshot",  # replaced by each run's script name
        tools=["check_workshop", "reserve_seat", "send_reply"],
        principal=Principal(
            subject="p-alice",
            tenant=tenant,
            scopes=["workshops:read", "workshops:write", "tickets:write"],
        ),
    )


def booking(name: str, workshop: str, participant: str) -> Script:
    """The model checks the workshop, says what it will do, and asks to reserve the seat."""
    reserve = {"workshop_id": workshop, "participant_id": participant}
    return Script(
        name=name,
        turns=[
            ScriptTurn(
                text=f"I'll check that {workshop} still has a seat for {participant}.",
                event_delay_ms=40,
                tool_calls=[
                    ScriptedToolCall(
                        id="call_check",
                        name="check_workshop",
                        arguments={"workshop_id": workshop},
                    )
                ],
            ),
            ScriptTurn(
                text=f"{workshop} has seats left. Reserving one for {participant}; this needs"
                " the workshop lead's approval.",
                event_delay_ms=40,
                tool_calls=[
                    ScriptedToolCall(id="call_reserve", name="reserve_seat", arguments=reserve)
                ],
            ),
            ScriptTurn(text="Booked."),
        ],
    )


SCRIPTS = {
    "book-carol-ws-101": (booking("shot-carol", "ws-101", "p-carol"), "acme"),
    "book-dave-ws-103": (booking("shot-dave", "ws-103", "p-dave"), "globex"),
    "reply-T-1001": (
        Script(
            name="shot-reply",
            turns=[
                ScriptTurn(
                    text="Drafting the answer to ticket T-1001.",
                    tool_calls=[
                        ScriptedToolCall(
                            id="call_reply",
                            name="send_reply",
                            arguments={
                                "ticket_id": "T-1001",
                                "recipient": "dana@example.com",
                                "body": "Your refund was approved; it reaches you in 3 days.",
                            },
                        )
                    ],
                ),
                ScriptTurn(text="Sent."),
            ],
        ),
        "acme",
    ),
    "pick-row": (
        Script(
            name="shot-question",
            turns=[
                ScriptTurn(
                    tool_calls=[
                        ScriptedToolCall(
                            id="call_ask",
                            name="ask_user",
                            arguments={"question": "Which row would p-erin like: front or back?"},
                        )
                    ]
                ),
                ScriptTurn(text="Noted."),
            ],
        ),
        "globex",
    ),
}
TASKS = {
    "book-carol-ws-101": "Book p-carol into ws-101.",
    "book-dave-ws-103": "Book p-dave into ws-103.",
    "reply-T-1001": "Answer ticket T-1001: the refund was approved.",
    "pick-row": "Seat p-erin at the workshop.",
    "book-bob-ws-101": "Book p-bob into ws-101.",
}
UNKNOWN = "book-bob-ws-101"
"""Its write's answer is lost and no lookup answers: it waits for an operator."""


async def phase(run: RunClient, *wanted: str) -> RunStatusView:
    for _ in range(600):
        view = await run.status()
        if view.phase in wanted:
            return view
        await asyncio.sleep(0.05)
    raise TimeoutError(f"{run.id} never reached {wanted}")


async def start(stack: DevStack, workflow_id: str, script: Script, tenant: str) -> RunClient:
    assert stack.client is not None and stack.scripted_provider is not None
    stack.scripted_provider.register(script)
    run_input = workshop_run(TASKS[workflow_id], tenant).model_copy(update={"model": script.name})
    return await RunClient.start(
        stack.client, run_input, id=workflow_id, task_queue=stack.settings.task_queue
    )


async def waiting_runs(stack: DevStack) -> None:
    """Four runs waiting for an approval or an answer, and one for an unknown write."""
    runs = [await start(stack, wid, script, tenant) for wid, (script, tenant) in SCRIPTS.items()]
    for run in runs:
        await phase(run, "awaiting_approval", "awaiting_input")
    assert stack.example_service is not None
    stack.example_service.inject_fault("workshops.reserve", "commit_then_drop")
    stack.example_service.inject_fault("workshops.operation", "unavailable", count=50)
    unknown = await start(stack, UNKNOWN, booking("shot-bob", "ws-101", "p-bob"), "acme")
    [pending] = (await phase(unknown, "awaiting_approval")).pending_approvals
    decision = ApprovalDecision(
        call_id=pending.call_id, args_digest=pending.args_digest, approved=True, approver=USER
    )
    await unknown.send_decision(decision)
    await phase(unknown, "awaiting_reconciliation")


async def photograph(inbox_url: str, out: Path) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        context = await browser.new_context(
            viewport=VIEWPORT, extra_http_headers={HEADER: USER}, device_scale_factor=1
        )
        page = await context.new_page()
        await page.goto(inbox_url + "/")
        await page.locator("#items tr").nth(len(TASKS) - 1).wait_for()
        await page.screenshot(path=str(out / "inbox.png"))
        await page.goto(f"{inbox_url}/runs/book-carol-ws-101")
        await page.locator("#live-log li.waiting").wait_for()
        await page.locator("#live-status", has_text="live").wait_for()
        await page.screenshot(path=str(out / "run.png"), full_page=True)
        await browser.close()


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # The unknown write's failed lookups are on purpose: the worker's warnings about them are not.
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="agentloop-screenshots-") as state:
        async with DevStack(DevStackPorts.free(), state_dir=Path(state), quiet=True) as stack:
            await waiting_runs(stack)
            client: Client | None = stack.client
            assert client is not None
            options = InboxOptions(auth_header=HEADER, tenants={USER: ["acme", "globex"]})
            async with InboxServer(client, options, "127.0.0.1", 0) as inbox:
                await photograph(inbox.url, out)
    print(f"wrote {out / 'inbox.png'} and {out / 'run.png'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMAGES, help="folder for the PNGs")
    asyncio.run(main(parser.parse_args().out))
