"""The `Harness`: a Temporal dev server, the scripted model and a worker serving the team's
tools, for a test session; its runs, the people they wait for (`approve`, `reject`, `answer`,
`resolve`), and what happened (`history`, `replay`, the model's requests, protocol
violations)."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from agentloop import search
from agentloop.cli.output import PAUSED_PHASES
from agentloop.client import start_run
from agentloop.contract import (
    AgentRunInput,
    AgentRunResult,
    ApprovalDecision,
    PendingApproval,
    Phase,
    Provider,
    ResolveRequest,
    RunStatusView,
    UserMessage,
    WriteAwaitingOperator,
)
from agentloop.run_client import RunClient
from agentloop.run_results import read_result
from agentloop.runtime.config import Settings
from agentloop.runtime.converter import data_converter as agentloop_data_converter
from agentloop.runtime.dev_server import FAST_DEV_SERVER, temporal_binary
from agentloop.scripted_provider import RecordedRequest, Script, ScriptedProvider
from agentloop.scripted_provider.playback import Violation
from agentloop.testing.patience import CEILING_SECONDS, SERVER_START, status_or_why_not
from agentloop.testing.turns import Turn, script_turns
from agentloop.worker import running_worker, workflow_runner
from agentloop.workflows.agent_run import AgentRun

Run = str | WorkflowHandle[Any, AgentRunResult]
"""A run, by its id (`run_id=`) or by the handle `harness.start` returned."""

Shown = TypeVar("Shown", PendingApproval, WriteAwaitingOperator)
"""What `status` lists of a call waiting for a person."""


class Harness:
    """A dev server, the scripted model and a worker with the team's tools, for a test
    session. Every run gets its own workflow id; the model is scripted per run."""

    def __init__(
        self,
        tools: Sequence[str] = (),
        *,
        provider: Provider = "openai-chat",
        settings: Settings | None = None,
        scripts_dir: str | Path | None = None,
    ) -> None:
        """`tools`: the team's tool modules (`module[:attribute]`), loaded beside the
        built-ins as `AGENTLOOP_TOOLS` would. `settings`: any other worker settings (default:
        what a worker reads, the environment and `AGENTLOOP_CONFIG`'s file: its MCP servers,
        keys, tool modules; the server, store, queue and model endpoints are the harness's
        own). `scripts_dir`: script files (`*.json`, `*.toml`) runs may name as `model=`, as
        `agentloop dev --scripts DIR` plays them (default: the settings' `scripts_dir`)."""
        self._tools = list(tools)
        self._provider: Provider = provider
        self._base = settings or Settings.from_env()
        self._exit = AsyncExitStack()
        self.env: WorkflowEnvironment | None = None
        folder = scripts_dir or self._base.scripts_dir
        self.model = ScriptedProvider(builtin=False, scripts_dir=Path(folder) if folder else None)
        self.settings = self._base
        self._models: dict[str, str] = {}
        """The script each run started here plays, by run id."""

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
                dev_server_startup_timeout=SERVER_START,
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
        """Register the model's turns; returns the model name that plays them. (A run
        continuing another plays the earlier run's turns first: its model sees them.)"""
        model = name or f"script-{uuid.uuid4().hex[:10]}"
        self.model.register(Script(name=model, turns=script_turns(turns)))
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
        (`tools`, `principal`, `limits`, `completion_check`, ...). Returns at once: for a
        run that will wait for a person (see `approve`, `answer`, `resolve`, `result`)."""
        workflow_id = run_id or f"test-{uuid.uuid4().hex[:12]}"
        if isinstance(task, AgentRunInput):
            if turns or fields:
                raise ValueError(
                    "an AgentRunInput names its own model and fields: give it alone, or a "
                    "task text with turns=[...] and the fields"
                )
            run_input = task
        else:
            if turns and "model" in fields:
                raise ValueError(
                    "give turns=[...] or model=, not both: turns are what the run's own "
                    "script plays; model= names a script registered with harness.script(...)"
                )
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
        self._models[workflow_id] = run_input.model
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
        """Start a run and wait for its result (see `start`, `result`)."""
        handle = await self.start(task, turns=turns, run_id=run_id, **fields)
        return await self.result(handle)

    # --- the people a run waits for ---------------------------------------------------------

    def handle(self, run: Run) -> WorkflowHandle[Any, AgentRunResult]:
        """The run's workflow handle."""
        if isinstance(run, str):
            return self.client.get_workflow_handle(run, result_type=AgentRunResult)
        return run

    def run_client(self, run: Run) -> RunClient:
        """The run's client (`agentloop.RunClient`): every message the harness sends goes
        through it."""
        return RunClient(self.client, self.handle(run).id)

    async def result(self, run: Run, *, timeout: float = CEILING_SECONDS) -> AgentRunResult:
        """The run's result, once it has finished. Fails (an `AssertionError` naming what the
        run waits for) when it has not finished after `timeout` seconds."""
        handle = self.handle(run)
        try:
            return await asyncio.wait_for(read_result(handle), timeout)
        except TimeoutError:
            view = await status_or_why_not(handle)
            now = view if isinstance(view, str) else waiting_for(view)
            raise AssertionError(
                f"run {handle.id} has not finished after {timeout:g} s: {now}"
            ) from None

    async def status(self, run: Run) -> RunStatusView:
        """The run's `status` query, as an operator sees it."""
        return await self.run_client(run).status()

    async def wait_for(
        self,
        run: Run,
        predicate: Callable[[RunStatusView], bool],
        what: str = "the condition",
        *,
        timeout: float = CEILING_SECONDS,
        never: Callable[[RunStatusView], bool] | None = None,
    ) -> RunStatusView:
        """Poll the run's status until `predicate` holds; returns that status. Fails (an
        `AssertionError` naming what the run waits for instead) when the run finishes first,
        when `never` says the predicate cannot come true any more, or after `timeout`
        seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        run_id = self.handle(run).id
        while True:
            # A query a busy worker did not answer in the server's time is asked again.
            view = await status_or_why_not(self.handle(run))
            if not isinstance(view, str):
                if predicate(view):
                    return view
                if view.phase == "finished":
                    raise AssertionError(
                        f"run {run_id} finished ({view.stop_reason}) before {what}"
                    )
                if never is not None and never(view):
                    raise AssertionError(
                        f"run {run_id} will not get to {what}: {waiting_for(view)}"
                    )
            if loop.time() > deadline:
                now = view if isinstance(view, str) else waiting_for(view)
                raise AssertionError(
                    f"run {run_id} is still not at {what} after {timeout:g} s: {now}"
                )
            await asyncio.sleep(0.05)

    async def wait_for_phase(
        self, run: Run, phase: Phase, *, timeout: float = CEILING_SECONDS
    ) -> RunStatusView:
        """The run's status once it is in `phase` (`awaiting_approval`, `awaiting_input`,
        `awaiting_reconciliation`, `finished`, ...)."""
        return await self.wait_for(
            run, lambda v: v.phase == phase, f"phase {phase}", timeout=timeout
        )

    async def pending_approval(
        self, run: Run, call_id: str | None = None, *, timeout: float = CEILING_SECONDS
    ) -> PendingApproval:
        """A call waiting for approval (`call_id`'s, or the first), as an approver is shown it
        in `status.pending_approvals`: `call_id`, `tool`, `arguments`, `args_digest`, ..."""
        return await self._shown(
            run,
            lambda v: v.pending_approvals,
            call_id,
            f"{call_id or 'a call'} to wait for approval",
            timeout,
        )

    async def approve(
        self,
        run: Run,
        call_id: str,
        *,
        approver: str = "approver",
        reason: str = "",
        timeout: float = CEILING_SECONDS,
        arguments: dict[str, Any] | None = None,
    ) -> PendingApproval:
        """Approve `call_id` once it waits, bound to the arguments shown (their digest from
        `status`); returns what was shown. `arguments`: approve it with these instead (edit,
        then approve; the run checks them again like the model's). Fails when the run does
        not count the decision (an approver the tool does not accept, a worker requiring
        signed decisions, edited arguments the run refuses)."""
        return await self._decide(run, call_id, True, approver, reason, timeout, arguments)

    async def reject(
        self,
        run: Run,
        call_id: str,
        *,
        approver: str = "approver",
        reason: str = "",
        timeout: float = CEILING_SECONDS,
    ) -> PendingApproval:
        """Reject `call_id` once it waits, as `approve` approves it."""
        return await self._decide(run, call_id, False, approver, reason, timeout)

    async def _decide(
        self,
        run: Run,
        call_id: str,
        approved: bool,
        approver: str,
        reason: str,
        timeout: float,
        arguments: dict[str, Any] | None = None,
    ) -> PendingApproval:
        shown = await self.pending_approval(run, call_id, timeout=timeout)
        decision = ApprovalDecision(
            call_id=call_id,
            args_digest=shown.args_digest,
            approved=approved,
            approver=approver,
            reason=reason,
            edited_arguments=arguments,
        )
        verdict = await self.run_client(run).decide(decision)
        if not verdict.accepted:
            raise AssertionError(f"the decision on {call_id} did not count: {verdict.reason}")
        return shown

    async def question(self, run: Run, *, timeout: float = CEILING_SECONDS) -> str:
        """The question the run waits on a person to answer (`awaiting_input`): the model's
        `ask_user`, or `"TOOL asks: ..."` for a tool's `InputNeeded`."""
        view = await self.wait_for(
            run, lambda v: v.question is not None, "a question", timeout=timeout
        )
        assert view.question is not None
        return view.question

    async def answer(
        self, run: Run, text: str, *, sender: str = "user", timeout: float = CEILING_SECONDS
    ) -> str:
        """Answer the run's question once it asks one (the `message` signal); returns the
        question answered."""
        asked = await self.question(run, timeout=timeout)
        await self.run_client(run).answer(UserMessage(text=text, sender=sender))
        return asked

    async def unresolved(
        self, run: Run, call_id: str | None = None, *, timeout: float = CEILING_SECONDS
    ) -> WriteAwaitingOperator:
        """A write whose outcome stayed unknown (`call_id`'s, or the first), waiting for an
        operator (`awaiting_reconciliation`), as `status.unresolved` shows it."""
        return await self._shown(
            run,
            lambda v: v.unresolved,
            call_id,
            f"{call_id or 'a write'} to wait for an operator",
            timeout,
        )

    async def _shown(
        self,
        run: Run,
        listed: Callable[[RunStatusView], Sequence[Shown]],
        call_id: str | None,
        what: str,
        timeout: float,
    ) -> Shown:
        """The entry for `call_id` (or the first) of what `status` lists, once it is there."""
        view = await self.wait_for(
            run,
            lambda v: _find(listed(v), call_id) is not None,
            what,
            timeout=timeout,
            # A paused run lists every call it waits on at once: another call's name there
            # means `call_id` is not coming until someone answers what is listed.
            never=lambda v: v.phase in PAUSED_PHASES and bool(listed(v)),
        )
        found = _find(listed(view), call_id)
        assert found is not None
        return found

    async def resolve(
        self,
        run: Run,
        call_id: str,
        outcome: Literal["applied", "not_applied"],
        *,
        operator: str = "operator",
        note: str = "",
        timeout: float = CEILING_SECONDS,
    ) -> WriteAwaitingOperator:
        """Say whether the unknown write `call_id` happened, once the run waits for it (the
        `resolve` signal); returns what the run showed of it."""
        shown = await self.unresolved(run, call_id, timeout=timeout)
        request = ResolveRequest(call_id=call_id, outcome=outcome, operator=operator, note=note)
        await self.run_client(run).resolve(request)
        return shown

    # --- what happened -----------------------------------------------------------------------

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
        """The requests of one run: those to the script it played (its own when started
        with `turns`; a named script's requests from every run that played it)."""
        model = self._models.get(run_id, run_id)
        return [r for r in self.model.requests if r["script"] == model]

    def violations_for(self, run_id: str) -> list[Violation]:
        """Protocol rules the worker broke towards the model in one run (a call id answered
        twice, or not at all): a test should see none. Use this with a harness shared by
        tests: `violations` is the whole session's."""
        model = self._models.get(run_id, run_id)
        return [v for v in self.model.violations if v["script"] == model]

    @property
    def violations(self) -> list[Violation]:
        """Every protocol violation of the session (every run's): see `violations_for`."""
        return list(self.model.violations)


def waiting_for(view: RunStatusView) -> str:
    """What a run waits for, in words: the calls waiting for approval or an operator (id and
    tool), its question, or its phase when nobody is asked anything."""
    waits = [f"approval of {p.call_id} ({p.tool})" for p in view.pending_approvals]
    waits += [f"an operator to resolve {u.call_id} ({u.tool})" for u in view.unresolved]
    if view.question is not None:
        waits.append(f"an answer to {view.question!r}")
    if not waits:
        return f"it is {view.phase}, waiting for nobody"
    return f"it is {view.phase}, waiting for " + ", ".join(waits)


def _find(entries: Sequence[Shown], call_id: str | None) -> Shown | None:
    return next((e for e in entries if call_id is None or e.call_id == call_id), None)
