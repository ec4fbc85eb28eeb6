"""`delegate`: hand a sub-task to a child `AgentRun` with a slice of this run's budget.

The runner carries it out as a Temporal child workflow, never as an activity: the child is a
full run of its own (validation, approvals, exactly-once writes), under the same principal,
with a subset of this run's tools, and its usage is charged to this run. A run may delegate
only when its input names `delegate` among its tools; a child may not delegate again."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentloop.tool_spec import DELEGATE
from agentloop.tools.contract import ToolContext, define_tool


class DelegateArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1, max_length=8_000, description="the sub-task, self-contained")
    tools: list[str] = Field(
        default_factory=list, description="tools the sub-agent may use (a subset of yours)"
    )
    instructions: str = Field(default="", max_length=8_000)
    max_model_calls: int | None = Field(
        default=None, ge=1, description="model calls for the sub-agent (default: a fair share)"
    )
    max_tool_calls: int | None = Field(
        default=None, ge=0, description="tool calls for the sub-agent (default: a fair share)"
    )


async def _run_by_the_runner(args: dict[str, Any], ctx: ToolContext) -> Any:
    raise RuntimeError("delegate runs as a child workflow, never as an activity")


delegate = define_tool(
    DELEGATE,
    DelegateArgs,
    _run_by_the_runner,
    description="Hand a self-contained sub-task to a sub-agent that works with the tools you "
    "give it and reports back. Its model and tool calls come out of your own budget.",
)
