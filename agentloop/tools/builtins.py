"""The built-in tools every worker has: `read_artifact` (page through a large tool output kept
in the store), `ask_user` (the run waits for the user's answer), `give_up` (the model cannot
finish: the run stops `blocked`), `roll_back` (the model asks to undo its writes) and
`delegate` (a sub-task for a child run). The runner answers `ask_user`, `give_up` and
`roll_back` and carries out `delegate` itself: no activity ever runs them."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentloop.store import StoreError
from agentloop.tool_spec import ASK_USER, DELEGATE, GIVE_UP, READ_ARTIFACT, ROLL_BACK
from agentloop.tools.contract import BusinessRefusal, ToolContext
from agentloop.tools.decorator import tool

PAGE_CHARS = 4_000
READ_ARTIFACT_MAX_RESULT_CHARS = PAGE_CHARS + 1_000


class ReadArtifactArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ref: str = Field(pattern=r"^sha256:[0-9a-f]{64}$", description="the artifact reference")
    offset: int = Field(default=0, ge=0, description="first character to read")
    limit: int = Field(default=PAGE_CHARS, ge=1, le=PAGE_CHARS, description="characters to read")


@tool(name=READ_ARTIFACT, effect="read", max_result_chars=READ_ARTIFACT_MAX_RESULT_CHARS)
async def read_artifact(ctx: ToolContext[Any], args: ReadArtifactArgs) -> Any:
    """Read part of a large tool output that was cut short; its result names the artifact
    reference and the total size."""
    offset, limit = args.offset, args.limit
    try:
        text, total = await ctx.artifacts.read_text(args.ref, offset, limit)
    except StoreError as exc:
        raise BusinessRefusal(str(exc)) from exc
    while True:
        page = _page(args.ref, offset, text, total)
        # Escaping (quotes, newlines, backslashes) lengthens the page as JSON: a page that
        # would not fit the result is made shorter, and `next_offset` says where to go on,
        # rather than being cut into an artifact of its own.
        overflow = len(json.dumps(page, ensure_ascii=False)) - READ_ARTIFACT_MAX_RESULT_CHARS
        if overflow <= 0 or not text:
            return page
        text = text[: max(0, len(text) - overflow)]


def _page(ref: str, offset: int, text: str, total: int) -> dict[str, Any]:
    end = offset + len(text)
    return {
        "ref": ref,
        "offset": offset,
        "total_chars": total,
        "text": text,
        "next_offset": end if end < total else None,
    }


class AskUserArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1, max_length=2_000, description="what to ask the user")


@tool(name=ASK_USER, effect="read")
async def ask_user(ctx: ToolContext[Any], args: AskUserArgs) -> Any:
    """Ask the user a question when you cannot go on without their answer. The run pauses
    until they reply; the reply is this call's result."""
    raise RuntimeError("ask_user is answered by the runner, never executed")


MAX_GIVE_UP_REASON_CHARS = 2_000


class GiveUpArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(
        min_length=1,
        max_length=MAX_GIVE_UP_REASON_CHARS,
        description="why the task cannot be finished, and what would unblock it",
    )


@tool(name=GIVE_UP, effect="read")  # it changes nothing in the world: never a side effect
async def give_up(ctx: ToolContext[Any], args: GiveUpArgs) -> Any:
    """Stop without finishing when you cannot complete the task (something is missing, not
    allowed or not possible): say why. Use it instead of a final answer that does not do the
    task; the run stops as blocked and a person reads your reason."""
    raise RuntimeError("give_up is answered by the runner, never executed")


class RollBackArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(
        min_length=1, max_length=MAX_GIVE_UP_REASON_CHARS, description="why they must be undone"
    )


@tool(name=ROLL_BACK, effect="read")  # the undos it leads to are writes of their own
async def roll_back(ctx: ToolContext[Any], args: RollBackArgs) -> Any:
    """Undo the writes you made in this run (a booking that turned out wrong, say), then go on:
    each write whose tool can undo it is undone (a person may have to approve it first), and
    this call's result says what was undone and what was left as it is."""
    raise RuntimeError("roll_back is answered by the runner, never executed")


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


@tool(name=DELEGATE, effect="read")
async def delegate(ctx: ToolContext[Any], args: DelegateArgs) -> Any:
    """Hand a self-contained sub-task to a sub-agent that works with the tools you give it and
    reports back. Its model and tool calls come out of your own budget."""
    raise RuntimeError("delegate runs as a child workflow, never as an activity")


BUILTIN_TOOLS = (read_artifact, ask_user, give_up, roll_back, delegate)
