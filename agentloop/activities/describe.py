"""`describe_run`: what the worker tells a run as it starts, recorded in its history so that
replay never asks again: its tools' specs (a tool or completion check this worker lacks fails
the run at once), whether it may index itself, how approvals are taken, whether notices are
sent, what checks against its `output_schema` would cost, whether its model is priced, and
whether its principal may be taken."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Literal

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentloop.activities.heartbeat import keep_heartbeating
from agentloop.activities.principals import check_principal
from agentloop.activity_io import DESCRIBE_RUN, DescribeToolsInput, RunDescription
from agentloop.notice_timers import NoticeTimers
from agentloop.policies.schema_cost import output_schema_cost_problem
from agentloop.pricing import PriceTable
from agentloop.runtime.audit import audit
from agentloop.runtime.indexing import Registration
from agentloop.runtime.start_signing import PrincipalSignatures
from agentloop.store.base import StartNonces
from agentloop.store.memory import MemoryStore
from agentloop.tool_spec import ROLL_BACK, ToolSpec
from agentloop.tools.plugins import OpenedToolbox
from agentloop.tools.source import ToolSource, ToolSourceError

MAX_SPECS_BYTES = 500_000
"""What the specs of one run's tools may come to: they are recorded in its history as the
worker's answer to `describe_run` and ride in the state continue-as-new hands on, each a
payload Temporal refuses past 2 MiB (and a workflow task whose completion it refuses fails
again on every retry). 256 tools of the largest schemas taken would be 17 MB."""


class RunDescriptions:
    def __init__(
        self,
        toolbox: OpenedToolbox,
        registration: Registration | None = None,
        *,
        sources: Sequence[ToolSource] = (),
        approvals_signed: bool = False,
        operators: Sequence[str] = (),
        prices: PriceTable | None = None,
        principals: PrincipalSignatures | None = None,
        nonces: StartNonces | None = None,
        notify: bool = False,
        notice_timers: Sequence[NoticeTimers] = (),
        failed_runs_complete: bool = False,
        verification_required: Callable[[str | None], bool] = lambda family: False,
    ) -> None:
        """`registration` tells whether a run's namespace has agentloop's search attributes
        (None: never, as for a worker with no server to ask); `sources`, the tool sources of
        this worker beside its toolbox's (its MCP servers); `approvals_signed`, whether the
        worker has approver keys (a run's `status` says so from its start); `operators`, who
        may settle any unknown write besides its tool's approvers; `prices`, what the
        worker's model calls are charged (default: the built-in table); `principals`, how a
        run's principal is taken (by default as given); `nonces`, where the nonces of signed
        starts are remembered (the store the workers share; by default this process's
        memory); `notify`, whether the worker sends notices of runs waiting for a person;
        `notice_timers`, the reminders and escalations of its notice routes;
        `failed_runs_complete`, whether a run ending `failed` completes its workflow (the
        worker's `failed_runs`); `verification_required`, whether the worker requires
        verification of a run of a task family (`Settings.requires_verification`)."""
        self._toolbox = toolbox
        self._tools = toolbox.registry.routing(*sources)
        self._registration = registration
        self._signing: Literal["signed", "unsigned"] = "signed" if approvals_signed else "unsigned"
        self._operators = list(operators)
        self._prices = prices or PriceTable()
        self._principals = principals or PrincipalSignatures()
        self._nonces = nonces or MemoryStore()
        self._notify = notify
        self._notice_timers = list(notice_timers)
        self._failed_runs_complete = failed_runs_complete
        self._verification_required = verification_required

    @activity.defn(name=DESCRIBE_RUN)
    async def describe_run(self, request: DescribeToolsInput) -> RunDescription:
        """Its tools' specs (`describe_tools`), and what else a run learns from the worker as it
        starts: for a run started without agentloop's search attributes, whether its namespace has
        them registered (only then may it upsert them); how approvals are taken; whether its
        principal may be taken. It heartbeats: an MCP server's listing may be waited for
        for as long as the server's start budget."""
        async with keep_heartbeating():
            tools = await self.describe_tools(request)
        registration = self._registration
        namespace = activity.info().namespace
        indexable = family = False
        if request.indexing and registration is not None:
            indexable = await registration.indexable(namespace)
            family = await registration.family_indexable(namespace)
        problem = None
        if request.output_schema is not None:
            problem = await asyncio.to_thread(output_schema_cost_problem, request.output_schema)
        unpriced = None
        if request.priced_model is not None:
            priced = [request.priced_model, *request.priced_fallbacks]
            unpriced = next(filter(None, map(self._prices.unpriced_problem, priced)), None)
        return RunDescription(
            tools=tools,
            indexable=indexable,
            family_indexable=family,
            approval_signing=self._signing,
            operators=self._operators,
            notify=self._notify,
            notice_timers=self._notice_timers,
            failed_runs_complete=self._failed_runs_complete,
            require_verification=self._verification_required(request.task_family),
            output_schema_problem=problem,
            unpriced_problem=unpriced,
            principal=(
                None
                if request.principal is None
                else await check_principal(self._principals, self._nonces, request.principal)
            ),
        )

    async def describe_tools(self, request: DescribeToolsInput) -> list[ToolSpec]:
        """The specs in force when the run starts; recorded in history, so replay is stable.
        A run naming a tool or a completion check this worker lacks fails here, at once."""
        try:
            offered = await self._tools.offer(request.names)
            # The undos the run's writes declare come with them: the run calls them only to
            # undo (docs/concepts/compensation.md), never offers them to the model; it offers
            # it `roll_back` instead.
            undos = [s.compensate for s in offered.specs if s.compensate]
            extra = [*undos, ROLL_BACK] if undos else []
            extra = list(dict.fromkeys(u for u in extra if u not in request.names))
            undo_specs = (await self._tools.offer(extra)).specs if extra else []
        except Exception as exc:
            # Never retried: `describe_run` has no end to its retries, and a run must not
            # wait forever on a source's answer it cannot use.
            why = f"tools: they could not be listed: {type(exc).__name__}: {exc}"
            if isinstance(exc, ToolSourceError):
                why = str(exc)
            raise ApplicationError(why, type="InvalidInput", non_retryable=True) from None
        for source, absent in offered.absent.items():
            audit(f"{source}.tools_absent", workflow_id=activity.info().workflow_id, absent=absent)
        specs = [*offered.specs, *undo_specs]
        # As a payload carries them: JSON with what is not ASCII escaped (6 bytes a character).
        size = sum(len(json.dumps(spec.model_dump(mode="json"))) for spec in specs)
        if size > MAX_SPECS_BYTES:
            raise ApplicationError(
                f"tools: their specs are {size:,} bytes of JSON, over the {MAX_SPECS_BYTES:,}"
                " a run carries (in its history and in what continue-as-new hands on); name"
                " fewer tools",
                type="InvalidInput",
                non_retryable=True,
            )
        check = request.completion_check
        if check is not None and f"verifier:{check}" not in self._toolbox.box.origin:
            known = ", ".join(sorted(self._toolbox.box.verifier_names()))
            raise ApplicationError(
                f"completion_check: no verifier {check!r}; this worker has: {known}",
                type="InvalidInput",
                non_retryable=True,
            )
        return specs
