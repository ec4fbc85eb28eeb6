"""`agentloop.testing`, as a team uses it: unit tests of a tool and a verifier called
directly, and runs against one shared `Harness` whose tests approve, reject, answer and
resolve like the people a run waits for (tools: `tests/kit_tools.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import ValidationError

import agentloop
from agentloop import testing
from agentloop.contract import CallRecord
from agentloop.testing import Harness
from tests import kit_tools
from tests.kit_tools import DESK

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parent.parent
ACME = {"subject": "dana", "tenant": "acme", "scopes": ["desk:read"]}
TOOLS = ["read_note", "send", "close", "post"]


@pytest.fixture(scope="module")
async def harness() -> AsyncIterator[Harness]:
    async with Harness(tools=["tests.kit_tools"]) as harness:
        yield harness


@pytest.fixture(autouse=True)
def fresh_desk() -> None:
    DESK.__init__()  # type: ignore[misc]


# --- a tool and a verifier, called directly ---------------------------------------------------


async def test_a_tool_is_called_with_a_principal_dict_and_a_reply() -> None:
    ctx = testing.tool_context(DESK, principal={"subject": "dana", "tenant": "acme"})
    assert await kit_tools.read_note(ctx, note_id="N-1") == agentloop.WithState(
        "printer broken", {"note": "N-1"}
    )
    with pytest.raises(agentloop.InputNeeded) as asked:
        await kit_tools.close(ctx, note_id="N-1")

    answered = agentloop.Reply(text="FIXED", sender="dana", pending=asked.value.pending)
    ctx = testing.tool_context(DESK, principal=ACME, reply=answered)
    assert await kit_tools.close(ctx, note_id="N-1") == "closed with FIXED"
    assert DESK.closed == {"N-1": "FIXED"}


def test_a_principal_dict_is_checked_as_a_run_checks_it() -> None:
    with pytest.raises(ValidationError, match="subject"):
        testing.tool_context(principal={"tenant": "acme"})
    with pytest.raises(TypeError, match="Principal or a dict"):
        testing.tool_context(principal="dana")  # type: ignore[arg-type]


async def test_a_verifier_is_called_with_the_run_it_judges() -> None:
    sent = {"call_id": "c1", "tool": "send", "arguments": {"body": "hi"}, "idempotency_key": "k1"}

    nothing = testing.verify_context(DESK, answer="done", calls=[sent], tools=[kit_tools.send])
    assert not (await kit_tools.message_sent(nothing)).passed

    DESK.sent["k1"] = "hi"  # the desk has it: the tool's own lookup finds it by its key
    found = testing.verify_context(DESK, answer="done", calls=[sent], tools=[kit_tools.send])
    verdict = await kit_tools.message_sent(found)
    assert verdict == agentloop.Verdict(passed=True, reason="c1 is at the desk")

    async def never(record: CallRecord) -> agentloop.Outcome:
        return agentloop.Outcome(state="not_applied")

    ctx = testing.verify_context(calls=[sent], task_state={"note": "N-1"}, lookup=never)
    assert ctx.task_state == {"note": "N-1"} and ctx.calls[0].call_id == "c1"
    assert not (await kit_tools.message_sent(ctx)).passed
