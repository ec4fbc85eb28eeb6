"""agentloop: a durable AI-agent tool-calling loop that runs as a Temporal service.

The public API, for a team's own tools and its own worker:

    import agentloop

    @agentloop.tool(effect="write", scopes=["tickets:write"], lookup_outcome=...)
    async def send_reply(ctx: agentloop.ToolContext[Deps], ticket_id: str, body: str) -> dict:
        ...

Names are imported when first used, so `import agentloop` stays cheap (workflow code imports
agentloop modules, and must not pull in worker or provider code)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentloop.activity_io import Verdict
    from agentloop.client import connect, start_run
    from agentloop.contract import (
        AgentRunInput,
        AgentRunResult,
        ApprovalDecision,
        FallbackModel,
        Limits,
        Principal,
        ResolveRequest,
        RunStatusView,
        UserMessage,
    )
    from agentloop.operations.schedules import (
        create_schedule,
        delete_schedule,
        list_schedules,
        pause_schedule,
        resume_schedule,
        trigger_schedule,
    )
    from agentloop.run_client import RunClient, watch
    from agentloop.run_events import RunEvent
    from agentloop.run_results import read_result
    from agentloop.runtime.config import Settings
    from agentloop.runtime.signing import (
        load_private_key,
        sign_decision,
        sign_resolution,
        sign_word,
    )
    from agentloop.runtime.start_signing import sign_start
    from agentloop.store import open_store
    from agentloop.tool_spec import Outcome
    from agentloop.tools.activity_results import ActivityToolResults
    from agentloop.tools.activity_tools import activity_tool
    from agentloop.tools.contract import (
        BusinessRefusal,
        InputNeeded,
        InvalidArguments,
        OutcomeUnknown,
        PermissionDenied,
        Reply,
        ToolContext,
        ToolError,
        TransientError,
    )
    from agentloop.tools.decorator import (
        VerifyContext,
        approval_rule,
        dependencies,
        tool,
        verifier,
    )
    from agentloop.tools.plugins import PluginError, Toolset
    from agentloop.worker import WorkerParts, running_worker, worker_parts

_EXPORTS = {
    "Verdict": "agentloop.activity_io",
    "connect": "agentloop.client",
    "start_run": "agentloop.client",
    "watch": "agentloop.run_client",
    "RunClient": "agentloop.run_client",
    "RunEvent": "agentloop.run_events",
    "read_result": "agentloop.run_results",
    "family_stats": "agentloop.client",
    "limits_from": "agentloop.client",
    "AgentRunInput": "agentloop.contract",
    "AgentRunResult": "agentloop.contract",
    "ApprovalDecision": "agentloop.contract",
    "FallbackModel": "agentloop.contract",
    "Limits": "agentloop.contract",
    "Principal": "agentloop.contract",
    "ResolveRequest": "agentloop.contract",
    "RunStatusView": "agentloop.contract",
    "UserMessage": "agentloop.contract",
    "ActivityToolResults": "agentloop.tools.activity_results",
    "open_store": "agentloop.store",
    "Settings": "agentloop.runtime.config",
    "load_private_key": "agentloop.runtime.signing",
    "sign_decision": "agentloop.runtime.signing",
    "sign_resolution": "agentloop.runtime.signing",
    "sign_word": "agentloop.runtime.signing",
    "sign_start": "agentloop.runtime.start_signing",
    "create_schedule": "agentloop.operations.schedules",
    "delete_schedule": "agentloop.operations.schedules",
    "list_schedules": "agentloop.operations.schedules",
    "pause_schedule": "agentloop.operations.schedules",
    "resume_schedule": "agentloop.operations.schedules",
    "trigger_schedule": "agentloop.operations.schedules",
    "Outcome": "agentloop.tool_spec",
    "activity_tool": "agentloop.tools.activity_tools",
    "BusinessRefusal": "agentloop.tools.contract",
    "InputNeeded": "agentloop.tools.contract",
    "InvalidArguments": "agentloop.tools.contract",
    "OutcomeUnknown": "agentloop.tools.contract",
    "PermissionDenied": "agentloop.tools.contract",
    "Reply": "agentloop.tools.contract",
    "ToolContext": "agentloop.tools.contract",
    "ToolError": "agentloop.tools.contract",
    "TransientError": "agentloop.tools.contract",
    "WithState": "agentloop.tools.contract",
    "VerifyContext": "agentloop.tools.decorator",
    "approval_rule": "agentloop.tools.decorator",
    "dependencies": "agentloop.tools.decorator",
    "tool": "agentloop.tools.decorator",
    "verifier": "agentloop.tools.decorator",
    "PluginError": "agentloop.tools.plugins",
    "Toolset": "agentloop.tools.plugins",
    "WorkerParts": "agentloop.worker",
    "running_worker": "agentloop.worker",
    "worker_parts": "agentloop.worker",
}

__all__ = [
    "ActivityToolResults",
    "AgentRunInput",
    "AgentRunResult",
    "ApprovalDecision",
    "BusinessRefusal",
    "FallbackModel",
    "InputNeeded",
    "InvalidArguments",
    "Limits",
    "Outcome",
    "OutcomeUnknown",
    "PermissionDenied",
    "PluginError",
    "Principal",
    "Reply",
    "ResolveRequest",
    "RunClient",
    "RunEvent",
    "RunStatusView",
    "Settings",
    "ToolContext",
    "ToolError",
    "Toolset",
    "TransientError",
    "UserMessage",
    "Verdict",
    "VerifyContext",
    "WithState",
    "WorkerParts",
    "activity_tool",
    "approval_rule",
    "connect",
    "create_schedule",
    "delete_schedule",
    "dependencies",
    "family_stats",
    "limits_from",
    "list_schedules",
    "load_private_key",
    "open_store",
    "pause_schedule",
    "read_result",
    "resume_schedule",
    "running_worker",
    "sign_decision",
    "sign_resolution",
    "sign_start",
    "sign_word",
    "start_run",
    "tool",
    "trigger_schedule",
    "verifier",
    "watch",
    "worker_parts",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentloop' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
