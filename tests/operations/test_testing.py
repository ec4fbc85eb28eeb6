"""`agentloop.testing`, as a team uses it: unit tests of a tool and a verifier called
directly, and runs against one shared `Harness` whose tests approve, reject, answer and
resolve like the people a run waits for (tools: `tests/kit_tools.py`)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import ValidationError

import agentloop
from agentloop import testing
from agentloop.contract import AgentRunInput, CallRecord, Limits
from agentloop.testing import Harness, Turn, call, reply
from agentloop.testing.patience import CEILING_SECONDS, PATIENCE_VARIABLE, patience
from tests import kit_tools
from tests.kit_tools import DESK
from tests.replay_audit import replay_before_stop
from tests.support import waited_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
ACME = {"subject": "dana", "tenant": "acme", "scopes": ["desk:read"]}
TOOLS = ["read_note", "send", "close", "post"]


@pytest.fixture(scope="module")
async def harness() -> AsyncIterator[Harness]:
    async with Harness(tools=["tests.kit_tools"]) as harness:
        yield harness
        await replay_before_stop(harness.client)


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


# --- the people a run waits for ---------------------------------------------------------------


async def test_a_call_is_approved_as_shown(harness: Harness) -> None:
    run = await harness.start(
        "Say hi", tools=TOOLS, turns=[[call("send", body="hi")], reply("Sent.")]
    )

    shown = await harness.approve(run, "call_1", approver="boss")

    assert (shown.tool, shown.arguments) == ("send", {"body": "hi"})
    result = await harness.result(run)
    assert (result.status, result.calls[0].decision) == ("completed", "approved by boss")
    assert list(DESK.sent.values()) == ["hi"]
    assert harness.violations_for(run.id) == []


async def test_a_call_is_rejected_by_its_id(harness: Harness) -> None:
    run = await harness.start(
        "Say hi", tools=TOOLS, turns=[[call("send", "s1", body="hi")], reply("Not sent.")]
    )

    await harness.reject(run, "s1", approver="boss", reason="not today")

    result = await harness.result(run)
    assert result.calls[0].decision.startswith("rejected by boss")
    assert DESK.sent == {}


async def test_a_decision_that_does_not_count_fails_the_test(harness: Harness) -> None:
    run = await harness.start(
        "Say hi", tools=TOOLS, turns=[[call("send", body="hi")], reply("Sent.")]
    )

    with pytest.raises(AssertionError, match=r"the decision on call_1 did not count: .*intern"):
        await harness.approve(run, "call_1", approver="intern")  # only the boss may

    await harness.approve(run, "call_1", approver="boss")
    assert (await harness.result(run)).status == "completed"


async def test_a_tools_question_is_answered(harness: Harness) -> None:
    run = await harness.start(
        "Close N-1", tools=TOOLS, turns=[[call("close", note_id="N-1")], reply("Closed.")]
    )

    asked = await harness.answer(run, "FIXED", sender="dana")

    assert asked == "close asks: Which resolution code?"
    assert (await harness.result(run)).status == "completed"
    assert DESK.closed == {"N-1": "FIXED"}


async def test_a_write_of_unknown_outcome_is_resolved(harness: Harness) -> None:
    run = await harness.start(
        "Post it", tools=TOOLS, turns=[[call("post", body="hi")], reply("Posted.")]
    )
    waiting = await harness.wait_for_phase(run, "awaiting_reconciliation")
    assert [u.call_id for u in waiting.unresolved] == ["call_1"]

    shown = await harness.resolve(run, "call_1", "applied", operator="ops")

    assert shown.tool == "post"
    result = await harness.result(run)
    assert result.status == "completed"
    assert "resolved: ops says applied" in result.calls[0].decision


async def test_waiting_for_what_never_comes_fails_when_the_run_ends(harness: Harness) -> None:
    run = await harness.start("Hi", turns=[reply("Hello.")], run_id="kit-no-wait")

    with pytest.raises(AssertionError, match="kit-no-wait finished"):
        await harness.wait_for_phase("kit-no-wait", "awaiting_approval")
    assert (await harness.result(run)).output == "Hello."


# --- scripts -------------------------------------------------------------------------------------


async def test_call_ids_are_numbered_in_each_runs_script(harness: Harness) -> None:
    def read_twice() -> list[Turn]:  # as two tests would each write it
        return [[call("read_note", note_id="N-1")], [call("read_note", note_id="N-1")], "Read."]

    first = await harness.run("Read N-1 twice", tools=TOOLS, principal=ACME, turns=read_twice())
    second = await harness.run("Read N-1 twice", tools=TOOLS, principal=ACME, turns=read_twice())

    assert [c.call_id for c in first.calls] == ["call_1", "call_2"]
    assert [c.call_id for c in second.calls] == ["call_1", "call_2"]


async def test_a_continuing_run_plays_the_earlier_turns_under_the_same_ids(
    harness: Harness,
) -> None:
    def read() -> list[Turn]:
        return [[call("read_note", note_id="N-1")], reply("Read.")]

    await harness.run("Read N-1", tools=TOOLS, principal=ACME, turns=read(), run_id="kit-first")

    # Its model sees the earlier run's turns as its own: the script plays them first.
    later = await harness.run(
        "Read N-1 again",
        tools=TOOLS,
        principal=ACME,
        turns=[*read(), [call("read_note", note_id="N-1")], reply("Read again.")],
        continue_from="kit-first",
        limits=Limits(),
        run_id="kit-later",
    )

    assert (later.status, [c.call_id for c in later.calls]) == ("completed", ["call_2"])
    assert harness.violations_for("kit-later") == []


async def test_a_tool_the_model_invents_is_refused_by_the_loop(harness: Harness) -> None:
    result = await harness.run(
        "Book a flight",
        tools=["read_note"],
        turns=[[testing.invented_call("book_flight", to="Oslo")], reply("I cannot book.")],
        run_id="kit-invented",
    )

    assert result.status == "completed"
    assert [(c.tool, c.decision) for c in result.calls] == [("book_flight", "unknown_tool")]
    assert harness.violations_for("kit-invented") == []


async def test_turns_and_a_named_model_are_refused_together(harness: Harness) -> None:
    model = harness.script([reply("from the named script")])

    with pytest.raises(ValueError, match=r"turns=.* or model=, not both"):
        await harness.start("Hi", turns=[reply("from turns")], model=model)
    whole = AgentRunInput(task="Hi", provider="openai-chat", model=model)
    with pytest.raises(ValueError, match="AgentRunInput"):
        await harness.start(whole, turns=[reply("from turns")])


async def test_violations_are_told_apart_by_run(harness: Harness) -> None:
    # A call to a tool the run does not offer, made with `call`: the script is broken, and
    # the scripted model refuses the request.
    broken = await harness.run(
        "Send", tools=["read_note"], turns=[[call("send", body="x")]], run_id="kit-broken"
    )
    clean = await harness.run("Hi", turns=[reply("Hello.")], run_id="kit-clean")

    assert broken.status == "failed" and clean.status == "completed"
    assert "does not declare it" in harness.violations_for("kit-broken")[0]["message"]
    assert harness.violations_for("kit-clean") == []
    assert harness.violations_for("kit-broken")[0] in harness.violations


# --- what a team installs and configures ---------------------------------------------------------


def test_the_testing_extra_holds_what_the_kit_needs_and_dev_installs_it_too() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {"pytest>=9", "pytest-asyncio>=1.3"} <= set(extras["testing"]) <= set(extras["dev"])


def documented_test() -> dict[str, str]:
    """The testing guide's pytest configuration and its test, and getting started's
    `my_tools.py` that test runs."""
    docs = ROOT / "docs"
    started = (docs / "getting-started.md").read_text(encoding="utf-8")
    tools = started.split("\n## The first tool of your own\n", 1)[1].split("\n## ", 1)[0]
    tests = (docs / "guides" / "testing.md").read_text(encoding="utf-8")
    written = started.split("\n## A write, its approval, its script\n", 1)[1]
    continued = re.search(r"```python\n# my_tools.py, continued\n(.*?)```", written, re.DOTALL)
    assert continued, "getting started has no continuation of my_tools.py"
    blocks = {
        "my_tools.py": re.search(r"```python\n# my_tools.py\n(.*?)```", tools, re.DOTALL),
        "pyproject.toml": re.search(r"```toml\n(.*?)```", tests, re.DOTALL),
        "test_my_tools.py": re.search(r"```python\n(.*?)```", tests, re.DOTALL),
    }
    missing = [name for name, found in blocks.items() if found is None]
    assert not missing, f"the docs have no {missing}"
    texts = {name: found.group(1) for name, found in blocks.items() if found}
    texts["my_tools.py"] += continued.group(1)  # its write with approval
    return texts


async def test_the_documented_test_runs_as_written(tmp_path: Path) -> None:
    """In a project of its own: the testing guide's configuration, its tests (a read, and a
    write with approval, call ids and idempotency keys) and `my_tools.py` against the refunds
    service (on a free port instead of 8790)."""
    spec = importlib.util.spec_from_file_location(
        "readme_refunds_service", ROOT / "examples/refunds/refunds_service.py"
    )
    assert spec and spec.loader
    service_module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(service_module)
    service = service_module.RefundsService()
    url = await service.start()
    try:
        for name, text in documented_test().items():
            (tmp_path / name).write_text(text.replace("http://127.0.0.1:8790", url))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            env={**env, "PYTHONPATH": str(tmp_path)},
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        # A pytest session of its own, not one wait: a dev server and a worker start before
        # its test runs.
        session = process.communicate()
        output, _ = await waited_for(session, "the documented test's session", 2 * CEILING_SECONDS)
    finally:
        await service.stop()
    assert process.returncode == 0, output.decode()
    assert "3 passed" in output.decode(), output.decode()


async def test_approving_another_call_names_the_call_that_waits(harness: Harness) -> None:
    run = await harness.start(
        "Say hi", tools=TOOLS, turns=[[call("send", body="hi")], reply("Sent.")]
    )
    # At once, not at the ceiling: it "will not get to" call_9 ("still not at" at the ceiling).
    will_not = r"will not get to call_9 to wait for approval: .*approval of call_1 \(send\)"
    with pytest.raises(AssertionError, match=will_not):
        await harness.approve(run, "call_9", approver="boss")

    with pytest.raises(AssertionError, match=r"has not finished after 0.5 s: .*approval of call_1"):
        await harness.result(run, timeout=0.5)
    await harness.approve(run, "call_1", approver="boss")
    assert (await harness.result(run)).status == "completed"


def test_the_patience_variable_stretches_the_ceiling_and_refuses_what_is_no_factor() -> None:
    assert patience({}) == 1.0
    assert patience({PATIENCE_VARIABLE: " 2.5 "}) == 2.5
    for bad in ("0", "-1", "slow", "inf", "nan"):
        with pytest.raises(ValueError, match=f"{PATIENCE_VARIABLE}='{bad}': expected a positive"):
            patience({PATIENCE_VARIABLE: bad})


async def test_a_harness_reads_the_workers_configuration_and_plays_script_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "say-hi.toml").write_text(
        '[[turns]]\ntool_calls = [{ id = "call_hi", name = "send", arguments = { body = "hi" } }]'
        '\n\n[[turns]]\ntext = "Sent {{call_hi}}."\n'
    )
    config = tmp_path / "agentloop.toml"
    config.write_text(f'scripts_dir = "{scripts}"\ntools = ["tests.kit_tools"]\n')
    monkeypatch.setenv("AGENTLOOP_CONFIG", str(config))
    async with Harness() as harness:  # its tools and scripts from the file alone
        run = await harness.start("Say hi", tools=TOOLS, model="say-hi")
        await harness.approve(run, "call_hi", approver="boss")
        result = await harness.result(run)
    assert result.status == "completed", result
    assert list(DESK.sent.values()) == ["hi"]
