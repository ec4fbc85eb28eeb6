"""The contexts a tool and a verifier get in the worker, made for calling their code directly
in a unit test (`tool_context`, `verify_context`): no server, no worker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentloop.contract import CallRecord, Principal
from agentloop.store.memory import MemoryStore
from agentloop.tool_spec import Outcome
from agentloop.tools.contract import Artifacts, Reply, Tool, ToolContext
from agentloop.tools.decorator import VerifyContext


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
