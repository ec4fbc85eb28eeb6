"""The public tool API without a server: `@agentloop.tool` and its companions, the loading of
tool modules (`AGENTLOOP_TOOLS`), and `agentloop worker` refusing a bad module with exit 2
before it polls."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import agentloop
from agentloop import InvalidArguments, Outcome, Principal, ToolContext
from agentloop.activities.describe import MAX_SPECS_BYTES, RunDescriptions
from agentloop.activities.verify import VerifierActivities
from agentloop.activity_io import DescribeToolsInput, Verdict, VerifyInput
from agentloop.mcp.listing import ListedTool, offer
from agentloop.runtime.config import Settings
from agentloop.runtime.dev_server import free_port
from agentloop.runtime.mcp_config import McpServerConfig
from agentloop.store.memory import MemoryStore
from agentloop.testing import tool_context, verify_context
from agentloop.tool_spec import tool_name_problem
from agentloop.tools.decorator import ToolDefinitionError
from agentloop.tools.plugins import (
    BUILTIN,
    OpenedToolbox,
    Plugin,
    PluginError,
    Toolset,
    build_toolbox,
    load_toolbox,
)
from tests.cli.test_cli import AGENTLOOP, assert_no_traceback, process_env, run_process

# --- the decorator -------------------------------------------------------------------------


@agentloop.tool(effect="read")
async def forecast(
    ctx: ToolContext[Any],
    city: Annotated[str, Field(min_length=1, description="a city")],
    days: int = 3,
) -> dict[str, Any]:
    """The weather of the next days.

    In a city of the caller's choosing."""
    return {"city": city, "days": days, "tenant": ctx.principal.tenant, "call": ctx.call_id}


class RefundArgs(BaseModel):
    order_id: str
    amount: float = Field(gt=0)


async def _refundable(ctx: ToolContext[Any], args: RefundArgs) -> None:
    if args.amount > 100:
        raise agentloop.BusinessRefusal("over the refund limit")


async def _refunded(ctx: ToolContext[Any], args: RefundArgs) -> Outcome:
    return Outcome(state="applied", record={"key": ctx.idempotency_key})


@agentloop.tool(
    effect="write",
    scopes=["orders:write"],
    needs_approval=True,
    approvers=["finance"],
    precondition=_refundable,
    lookup_outcome=_refunded,
    timeout_seconds=12,
)
async def refund(ctx: ToolContext[Any], args: RefundArgs) -> str:
    """Refund an order."""
    return f"refunded {args.amount} on {args.order_id} as {ctx.idempotency_key}"


def test_the_schema_and_description_come_from_the_signature_and_the_docstring() -> None:
    spec = forecast.spec
    assert spec.name == "forecast"
    assert (
        spec.description == "The weather of the next days.\n\nIn a city of the caller's choosing."
    )
    assert spec.parameters["properties"]["city"]["description"] == "a city"
    assert spec.parameters["properties"]["days"]["default"] == 3
    assert spec.parameters["required"] == ["city"]
    assert spec.parameters["additionalProperties"] is False
    assert (spec.effect, spec.has_precondition, spec.has_outcome_lookup) == ("read", False, False)


def test_every_option_of_the_contract_reaches_the_spec() -> None:
    spec = refund.spec
    assert spec.parameters["required"] == ["order_id", "amount"]
    assert (spec.effect, spec.required_scopes, spec.approvers) == (
        "write",
        ["orders:write"],
        ["finance"],
    )
    assert (spec.needs_approval, spec.timeout_seconds) == (True, 12)
    assert spec.has_precondition and spec.has_outcome_lookup


def test_a_tool_that_does_not_say_its_effect_is_a_write() -> None:
    """A forgotten `effect` gets the careful behaviour: one attempt, an idempotency key and
    an outcome looked up or left to an operator, never three blind retries."""

    async def charge_card(ctx: ToolContext[Any], amount: int) -> str:
        return "charged"

    async def charged(ctx: ToolContext[Any], amount: int) -> Outcome:
        return Outcome(state="applied")

    assert agentloop.tool(charge_card).spec.effect == "write"
    assert agentloop.tool()(charge_card).spec.effect == "write"
    looked_up = agentloop.tool(lookup_outcome=charged)(charge_card).spec
    assert (looked_up.effect, looked_up.has_outcome_lookup) == ("write", True)
    activity = agentloop.activity_tool(
        "charge", activity="charge", task_queue="team", parameters={}, description="Charge."
    )
    assert activity.spec.effect == "write"


async def test_the_handler_precondition_and_lookup_take_the_same_arguments() -> None:
    ctx = tool_context(idempotency_key="wf/c1", principal=Principal(subject="s", tenant="acme"))
    assert refund.precondition is not None and refund.lookup_outcome is not None
    args = {"order_id": "17", "amount": 40}
    assert await refund.handler(args, ctx) == "refunded 40.0 on 17 as wf/c1"
    await refund.precondition(args, ctx)
    with pytest.raises(agentloop.BusinessRefusal, match="over the refund limit"):
        await refund.precondition({"order_id": "17", "amount": 400}, ctx)
    looked_up = await refund.lookup_outcome(args, ctx)
    assert looked_up == Outcome(state="applied", record={"key": "wf/c1"})
    # Wrong arguments are the model's to fix, named by field.
    with pytest.raises(InvalidArguments, match="amount"):
        await refund.handler({"order_id": "17", "amount": -1}, ctx)


async def test_a_tool_stays_callable_as_written() -> None:
    ctx = tool_context(principal=Principal(subject="s", tenant="acme"))
    assert await forecast(ctx, city="Oslo") == {
        "city": "Oslo",
        "days": 3,
        "tenant": "acme",
        "call": "call_1",
    }


def test_what_cannot_be_a_tool_is_refused_with_the_function_named() -> None:
    def sync(ctx: ToolContext[Any], city: str) -> str:
        return city

    async def untyped(ctx, city):  # type: ignore[no-untyped-def]
        return city

    async def star(ctx: ToolContext[Any], *cities: str) -> str:
        return ""

    async def other_args(ctx: ToolContext[Any], order: str) -> None:
        return None

    cases = [
        (lambda: agentloop.tool(sync), "must be an `async def`"),
        (lambda: agentloop.tool(untyped), "parameter 'city' has no type"),
        (lambda: agentloop.tool(star), "*cities cannot be described"),
        (
            lambda: agentloop.tool(precondition=other_args)(forecast.function),
            "it must take the tool's arguments",
        ),
        (
            lambda: agentloop.tool(effect="read", lookup_outcome=_refunded)(forecast.function),
            "only a write",
        ),
    ]
    for declare, problem in cases:
        with pytest.raises(ToolDefinitionError, match=problem.replace("*", r"\*")) as caught:
            declare()
        assert "test_plugins" in str(caught.value) or "forecast" in str(caught.value)


# --- loading -------------------------------------------------------------------------------


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path to write tool modules into (forgotten afterwards)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))


GOOD = """
    from collections.abc import AsyncIterator
    import agentloop

    OPENED = []

    @agentloop.dependencies
    async def deps() -> AsyncIterator[dict]:
        OPENED.append("open")
        yield {"db": "ok"}
        OPENED.append("closed")

    @agentloop.tool
    async def lookup_order(ctx: agentloop.ToolContext[dict], order_id: str) -> dict:
        return {"order": order_id, "db": ctx.deps["db"]}

    @agentloop.approval_rule("big_refund")
    def big(arguments, principal) -> bool:
        return arguments.get("amount", 0) > 100

    @agentloop.verifier("order_closed")
    async def closed(ctx) -> bool:
        return True
"""


async def test_a_module_brings_its_tools_rules_verifiers_and_dependencies(modules: Path) -> None:
    write(modules, "good_tools", GOOD)
    box = load_toolbox(["good_tools"])
    assert box.registry.names() == [
        "ask_user",
        "delegate",
        "give_up",
        "lookup_order",
        "read_artifact",
        "roll_back",
    ]
    assert {"always", "for_someone_else", "big_refund"} <= set(box.rules)
    assert box.verifier_names() == ["order_closed", "writes_applied"]
    import good_tools  # type: ignore[import-not-found]

    async with box.opened(Settings()) as opened:
        assert good_tools.OPENED == ["open"]
        ctx = tool_context(opened.deps_of("tool", "lookup_order"))
        assert await box.registry.get("lookup_order").handler({"order_id": "7"}, ctx) == {
            "order": "7",
            "db": "ok",
        }
    assert good_tools.OPENED == ["open", "closed"]
    assert await box.rules["big_refund"].evaluate({"amount": 150}, Principal(subject="s"))
    assert box.rules["big_refund"]({"amount": 50}, Principal(subject="s")) is False  # as written


def test_module_colon_attribute_names_one_toolset(modules: Path) -> None:
    write(
        modules,
        "two_sets",
        """
        import agentloop

        @agentloop.tool
        async def first(ctx: agentloop.ToolContext[None]) -> str:
            return "1"

        @agentloop.tool
        async def second(ctx: agentloop.ToolContext[None]) -> str:
            return "2"

        ONLY_FIRST = agentloop.Toolset(tools=[first])
        """,
    )
    assert "second" not in load_toolbox(["two_sets:ONLY_FIRST"]).registry.names()
    assert {"first", "second"} <= set(load_toolbox(["two_sets"]).registry.names())
    assert isinstance(Toolset(), Toolset)


BAD_MODULES: Mapping[str, tuple[str, str]] = {
    "broken_import": (
        "import no_such_dependency_anywhere\n",
        "cannot be imported: ModuleNotFoundError",
    ),
    "bad_syntax": (
        """
        import agentloop

        async def strange(ctx, a: int) -> int
            return a
        """,
        "bad_syntax.py:4)",  # the team's file and line, not agentloop's own
    ),
    "sync_dependencies": (
        """
        import agentloop

        @agentloop.dependencies
        def conn():
            yield {"db": 1}
        """,
        "dependencies sync_dependencies.conn is a generator, not an async one",
    ),
    "returning_dependencies": (
        """
        import agentloop

        @agentloop.dependencies
        async def conn():
            return {"db": 1}
        """,
        "dependencies returning_dependencies.conn is an `async def` that returns",
    ),
    "plain_dependencies": (
        """
        import agentloop

        @agentloop.dependencies
        def conn() -> dict:
            return {"db": 1}
        """,
        "dependencies plain_dependencies.conn returns dict, not an async context manager",
    ),
    "shadows_builtin": (
        """
        import agentloop

        @agentloop.tool(name="read_artifact")
        async def mine(ctx: agentloop.ToolContext[None]) -> str:
            return ""
        """,
        "tool 'read_artifact' is a built-in",
    ),
    "no_schema": (
        """
        import agentloop

        class Opaque:
            pass

        @agentloop.tool
        async def strange(ctx: agentloop.ToolContext[None], thing: Opaque) -> str:
            return ""
        """,
        "tool no_schema.strange: ",
    ),
    "rule_twice": (
        """
        import agentloop

        @agentloop.approval_rule("always")
        def mine(arguments, principal) -> bool:
            return True

        @agentloop.tool
        async def t(ctx: agentloop.ToolContext[None]) -> str:
            return ""
        """,
        "approval rule 'always' is a built-in",
    ),
    "verifier_twice": (
        """
        import agentloop

        @agentloop.verifier("writes_applied")
        async def mine(ctx) -> bool:
            return True
        """,
        "verifier 'writes_applied' is a built-in",
    ),
    "unknown_rule": (
        """
        import agentloop

        @agentloop.tool(effect="write", needs_approval="nobody_declared_it")
        async def t(ctx: agentloop.ToolContext[None]) -> str:
            return ""
        """,
        "names approval rule 'nobody_declared_it', which no module declares",
    ),
    "nothing_here": ("X = 1\n", "declares no tool, approval rule or verifier"),
    "fanning_out": (
        """
        import agentloop

        STEPS = {
            f"s{i}": {"allOf": [{"$ref": f"#/$defs/s{i + 1}"}, {"$ref": f"#/$defs/s{i + 1}"}]}
            for i in range(30)
        }
        fanning = agentloop.activity_tool(
            "fanning",
            activity="fan",
            task_queue="team",
            description="Checking its arguments would visit 2^30 schema nodes.",
            parameters={
                "type": "object",
                "$defs": {**STEPS, "s30": {"type": "string"}},
                "properties": {"x": {"$ref": "#/$defs/s0"}},
            },
        )
        """,
        "tool 'fanning': its parameters: checking a value against it could visit more than",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_MODULES))
def test_a_bad_module_is_refused_naming_the_module_and_the_problem(
    modules: Path, name: str
) -> None:
    source, problem = BAD_MODULES[name]
    write(modules, name, source)
    with pytest.raises(PluginError) as caught:
        load_toolbox([name])
    message = str(caught.value)
    assert message.startswith(name) and problem in message, message


def test_a_module_that_is_not_there_is_named_alone(modules: Path) -> None:
    """Before, the message ended "(at .../agentloop/tools/plugins.py:NNN)": agentloop's own
    file, for a module name misspelled."""
    with pytest.raises(PluginError) as caught:
        load_toolbox(["nowhere_at_all"])
    assert str(caught.value) == (
        "nowhere_at_all: cannot be imported: ModuleNotFoundError: No module named 'nowhere_at_all'"
    )
    write(modules, "needs_more", "import agentloop\nimport nowhere_at_all\n")
    with pytest.raises(PluginError, match=r"\(at .*needs_more\.py:2\)$"):
        load_toolbox(["needs_more"])


ACME = """
    from collections.abc import AsyncIterator
    import agentloop

    OPENED = []

    @agentloop.dependencies
    async def desk() -> AsyncIterator[str]:
        OPENED.append("acme")
        yield "acme's desk"

    @agentloop.tool
    async def read_ticket(ctx: agentloop.ToolContext[str]) -> str:
        return ctx.deps

    @agentloop.verifier("ticket_read")
    async def ticket_read(ctx) -> bool:
        return ctx.deps == "acme's desk"
"""

TEAM_B = """
    from collections.abc import AsyncIterator
    import agentloop
    from acme import read_ticket, ticket_read  # reused, not declared here

    @agentloop.dependencies
    async def b_deps() -> AsyncIterator[str]:
        yield "b's deps"

    @agentloop.tool
    async def b_tool(ctx: agentloop.ToolContext[str]) -> str:
        return ctx.deps
"""


async def deps_given(sources: list[str]) -> dict[str, Any]:
    """What each team tool and verifier gets as `ctx.deps` in a worker loading `sources`."""
    box = load_toolbox(sources)
    async with box.opened(Settings()) as opened:
        return {
            key: opened.deps_of(*key.split(":"))
            for key in box.origin
            if not key.startswith("rule:") and box.origin[key] != BUILTIN
        }


async def test_a_declaration_gets_the_dependencies_of_the_module_declaring_it(
    modules: Path,
) -> None:
    """Before, `acme:read_ticket`, a Toolset without `dependencies=` and a module importing
    `read_ticket` gave it None or the importer's dependencies; acme and team_b together were
    refused as a clash, though both reach the same tool."""
    write(modules, "acme", ACME)
    write(modules, "team_b", TEAM_B)
    write(
        modules,
        "acme_set",
        "import agentloop, acme\nSET = agentloop.Toolset(tools=[acme.read_ticket])\n",
    )
    write(
        modules,
        "acme_fakes",
        """
        from collections.abc import AsyncIterator
        import agentloop, acme

        async def fake_desk(settings) -> AsyncIterator[str]:
            yield "a fake desk"

        SET = agentloop.Toolset(
            tools=[acme.read_ticket], dependencies=agentloop.dependencies(fake_desk)
        )
        """,
    )
    acme_desk = {"tool:read_ticket": "acme's desk"}
    assert await deps_given(["acme:read_ticket"]) == acme_desk
    assert await deps_given(["acme_set:SET"]) == acme_desk
    # A Toolset's own dependencies are given on purpose: they win over the module's.
    assert await deps_given(["acme_fakes:SET"]) == {"tool:read_ticket": "a fake desk"}
    assert await deps_given(["team_b"]) == {
        **acme_desk,
        "verifier:ticket_read": "acme's desk",
        "tool:b_tool": "b's deps",
    }
    import acme  # type: ignore[import-not-found]

    acme.OPENED.clear()
    assert await deps_given(["acme", "team_b", "acme_set:SET"]) == {
        **acme_desk,
        "verifier:ticket_read": "acme's desk",
        "tool:b_tool": "b's deps",
    }
    assert acme.OPENED == ["acme"]  # opened once, however many sources reach it


async def test_a_package_re_exporting_its_submodules_tools_gives_them_its_dependencies(
    modules: Path,
) -> None:
    (modules / "desk_pkg").mkdir()
    write(
        modules / "desk_pkg",
        "reads",
        "import agentloop\n\n@agentloop.tool\nasync def peek(ctx) -> str:\n    return ctx.deps\n",
    )
    write(
        modules / "desk_pkg",
        "__init__",
        """
        from collections.abc import AsyncIterator
        import agentloop
        from desk_pkg.reads import peek

        @agentloop.dependencies
        async def deps() -> AsyncIterator[str]:
            yield "the package's"
        """,
    )
    assert await deps_given(["desk_pkg"]) == {"tool:peek": "the package's"}
    assert await deps_given(["desk_pkg:peek"]) == {"tool:peek": None}  # no one gives any
    # One tool, two loaders giving it different dependencies: which one it gets is unsaid.
    with pytest.raises(PluginError, match="reached through desk_pkg too, which gives it other"):
        load_toolbox(["desk_pkg", "desk_pkg.reads"])


def test_two_modules_declaring_one_name_are_refused_naming_both(modules: Path) -> None:
    write(modules, "team_a", GOOD)
    write(modules, "team_b", GOOD.replace("OPENED = []", "OPENED = ['b']"))
    with pytest.raises(
        PluginError, match=r"team_b: tool 'lookup_order' is already declared by team_a"
    ):
        load_toolbox(["team_a", "team_b"])


@pytest.fixture
async def unreachable_temporal() -> AsyncIterator[str]:
    """A TEMPORAL_ADDRESS nothing answers on: a worker that got as far as connecting would
    fail differently (and later)."""
    yield f"127.0.0.1:{free_port()}"


@pytest.mark.integration
@pytest.mark.parametrize(
    "name", ["broken_import", "shadows_builtin", "no_schema", "rule_twice", "verifier_twice"]
)
async def test_agentloop_worker_exits_2_before_polling_on_a_bad_module(
    tmp_path: Path, name: str, unreachable_temporal: str
) -> None:
    source, problem = BAD_MODULES[name]
    write(tmp_path, name, source)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    env = process_env(TEMPORAL_ADDRESS=unreachable_temporal, PYTHONPATH=path)
    finished = await run_process(*AGENTLOOP, "worker", "--tools", name, env=env, cwd=tmp_path)
    assert finished.returncode == 2, finished.explain()
    assert_no_traceback(finished)
    assert f"agentloop worker: {name}" in finished.stderr and problem in finished.stderr
    assert "polling" not in finished.stdout and "cannot reach Temporal" not in finished.stderr


async def test_tools_whose_specs_a_run_could_not_carry_are_refused_at_its_start() -> None:
    """A run's specs are recorded in its history and ride in what continue-as-new hands on:
    past `MAX_SPECS_BYTES` the worker's `describe_run` refuses them as the run's bad input
    (it used to hand them over, and a payload past Temporal's 2 MiB fails the workflow task
    on every retry)."""
    wide = {
        "type": "object",
        "properties": {"q": {"type": "string", "description": "d" * 60_000}},
    }
    tools = [
        agentloop.activity_tool(
            f"wide_{i}", activity="wide", task_queue="team", description="Wide.", parameters=wide
        )
        for i in range(10)
    ]
    box = build_toolbox([Plugin("tests", Toolset(tools=tuple(tools)))])
    descriptions = RunDescriptions(OpenedToolbox(box, {"tests": None}))
    names = [t.spec.name for t in tools]
    assert len(await descriptions.describe_tools(DescribeToolsInput(names=names[:5]))) == 5
    with pytest.raises(ApplicationError) as refused:
        await descriptions.describe_tools(DescribeToolsInput(names=names))
    assert refused.value.type == "InvalidInput" and refused.value.non_retryable
    assert f"over the {MAX_SPECS_BYTES:,} a run carries" in refused.value.message


# --- a verifier's answer -------------------------------------------------------------------


async def _not_a_check() -> bool:
    return True


@pytest.mark.parametrize(
    ("returned", "named"),
    [
        (lambda: {"passed": False}, "returned a dict"),
        (lambda: {"passed": True}, "returned a dict"),
        (lambda: "no", "returned a str"),
        (lambda: "yes", "returned a str"),
        (lambda: 1, "returned a int"),
        (lambda: None, "returned a NoneType"),
        (lambda: [True], "returned a list"),
        (_not_a_check, "returned a coroutine (an `await` is missing)"),
    ],
)
async def test_a_verifier_answering_anything_but_a_verdict_or_a_bool_fails_saying_what(
    returned: Any, named: str
) -> None:
    """Each of these is truthy or falsy by accident: taken as `bool(value)`, a slip in a
    team's check (a dict for a Verdict, a missing `await`) passed the run unchecked."""

    @agentloop.verifier("sloppy")
    async def sloppy(ctx: agentloop.VerifyContext) -> Any:
        return returned()

    box = build_toolbox([Plugin("tests", Toolset(verifiers=[sloppy]))])
    activities = VerifierActivities(OpenedToolbox(box, {"tests": None}), MemoryStore())
    verdict = await ActivityEnvironment().run(
        activities.verify_completion, VerifyInput(check="sloppy", workflow_id="w", answer="done")
    )
    assert verdict.passed is False
    assert verdict.reason == f"verifier sloppy {named}, not a Verdict or a bool: it fails"


@pytest.mark.parametrize(
    ("returned", "passed"),
    [
        (True, True),
        (False, False),
        (Verdict(passed=True, reason="seen"), True),
        (Verdict(passed=False, reason="not seen"), False),
    ],
)
async def test_a_verifier_answering_a_verdict_or_a_bool_is_taken_at_its_word(
    returned: Verdict | bool, passed: bool
) -> None:
    @agentloop.verifier("careful")
    async def careful(ctx: agentloop.VerifyContext) -> Verdict | bool:
        return returned

    verdict = await careful.evaluate(verify_context(answer="done"))
    assert verdict.passed is passed
    if isinstance(returned, Verdict):
        assert verdict == returned
    else:
        assert verdict.reason == ("" if passed else "careful says no")


# --- tool names ----------------------------------------------------------------------------

REFUSED_NAMES = [
    "a b",
    "x" * 300,
    "x" * 65,
    "weather\U0001f326",
    "../x",
    "tool.with.dots",
    "ok\n",
    "naïve",
]


@pytest.mark.parametrize("name", REFUSED_NAMES)
def test_a_tool_name_a_provider_would_refuse_is_refused_where_it_is_declared(name: str) -> None:
    """Before, such a name loaded without a word and failed the run at its first model call;
    a trailing newline passed the MCP check, which matched with `$`."""
    shown = repr(name) if len(name) <= 80 else repr(name[:80]) + "..."
    said = f"its name {shown} is not 1-64 letters, digits, '_' or '-', as providers need"
    assert tool_name_problem(name) == said

    async def lookup(ctx: ToolContext[None], city: str) -> str:
        return city

    with pytest.raises(ToolDefinitionError) as caught:
        agentloop.tool(name=name)(lookup)
    assert str(caught.value) == f"tool {lookup.__module__}.{lookup.__qualname__}: {said}"
    with pytest.raises(ToolDefinitionError) as caught:
        agentloop.activity_tool(
            name,
            activity="lookup",
            task_queue="team",
            parameters={"type": "object"},
            description="Look up.",
        )
    assert str(caught.value) == f"activity tool: {said}"
    mcp = offer(
        "tickets",
        McpServerConfig(url="http://127.0.0.1:9/mcp"),
        ListedTool(name, "Find.", {"type": "object"}, True),
    )
    assert mcp.spec is None and mcp.problem is not None
    assert "is not 1-64 letters, digits, '_' or '-'" in mcp.problem


@pytest.mark.parametrize("name", ["a", "x" * 64, "get-weather_V2", "_", "-"])
def test_a_tool_name_every_provider_takes_is_taken(name: str) -> None:
    assert tool_name_problem(name) is None

    async def lookup(ctx: ToolContext[None], city: str) -> str:
        return city

    assert agentloop.tool(name=name)(lookup).spec.name == name
    assert (
        agentloop.activity_tool(
            name,
            activity="lookup",
            task_queue="team",
            parameters={"type": "object"},
            description=".",
        ).spec.name
        == name
    )
