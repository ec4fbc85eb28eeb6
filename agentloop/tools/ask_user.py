"""`ask_user`: the built-in tool a model calls to ask the user a question. The runner answers
it (the run waits in `awaiting_input` for a `message` signal); no activity ever runs it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentloop.tools.contract import ToolContext, define_tool


class AskUserArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, max_length=2_000, description="what to ask the user")


async def _answered_by_the_runner(args: dict[str, Any], ctx: ToolContext) -> Any:
    raise RuntimeError("ask_user is answered by the runner, never executed")


ask_user = define_tool(
    "ask_user",
    AskUserArgs,
    _answered_by_the_runner,
    description="Ask the user a question when you cannot go on without their answer. "
    "The run pauses until they reply; the reply is this call's result.",
)
