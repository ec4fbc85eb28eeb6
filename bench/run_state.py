"""What one run holds in a worker's cache of its own: the objects AgentRun reaches (its loop
state above all) once a recorded history has been replayed, in bytes (`sys.getsizeof` over
the object graph), by field of the loop state.

Objects every run shares (classes, functions, enum members, interned strings, the tool
registry) are not one run's: the history is replayed twice, and only what the first run
reaches and the second does not is counted. What Temporal's SDK keeps per cached run beside
AgentRun, and what the allocator keeps around both, are not in this figure; the worker's RSS
growth per run is.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from temporalio import workflow
from temporalio.client import WorkflowHistory
from temporalio.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    UnsandboxedWorkflowRunner,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from agentloop.runtime.converter import data_converter
from agentloop.workflows.agent_run import AgentRun

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


@dataclass
class RunState:
    total_bytes: int
    by_field: dict[str, int] = field(default_factory=dict)
    """The loop state's fields, each the bytes only it reaches (largest first)."""

    def largest(self, count: int = 4) -> str:
        """The `count` largest fields, in KiB."""
        top = sorted(self.by_field.items(), key=lambda item: -item[1])[:count]
        return ", ".join(f"{name} {size / 1024:.1f}" for name, size in top)


async def measure(history: WorkflowHistory) -> RunState:
    """Replays `history` twice (no worker, no server) and sizes the first run's own objects."""
    kept: list[Any] = []

    class Keep(WorkflowInboundInterceptor):
        async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
            result = await super().execute_workflow(input)
            kept.append(workflow.instance())
            return result

    class Keeping(Interceptor):
        def workflow_interceptor_class(
            self, input: WorkflowInterceptorClassInput
        ) -> type[WorkflowInboundInterceptor]:
            return Keep

    replayer = Replayer(
        workflows=[AgentRun],
        interceptors=[Keeping()],
        data_converter=data_converter,
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    await replayer.replay_workflow(history)
    await replayer.replay_workflow(history)
    run, other = kept
    shared = _reachable([other])
    state = run._state
    by_field = {
        name: _size([getattr(state, name)], set(shared)) for name in type(state).model_fields
    }
    return RunState(
        total_bytes=_size([run], set(shared)),
        by_field={name: size for name, size in by_field.items() if size},
    )


def _reachable(roots: Iterable[Any]) -> set[int]:
    seen: set[int] = set()
    for _ in _walk(roots, seen):
        pass
    return seen


def _size(roots: Iterable[Any], seen: set[int]) -> int:
    """Bytes of the objects reachable from `roots` and not in `seen` (which it extends)."""
    return sum(sys.getsizeof(item) for item in _walk(roots, seen))


def _walk(roots: Iterable[Any], seen: set[int]) -> Iterator[Any]:
    """Each object reachable from `roots` once, but none in `seen` (which it extends) and no
    class, module or function: those every run shares."""
    pending = list(roots)
    while pending:
        item = pending.pop()
        if id(item) in seen or isinstance(item, _SHARED):
            continue
        seen.add(id(item))
        yield item
        pending.extend(gc.get_referents(item))
