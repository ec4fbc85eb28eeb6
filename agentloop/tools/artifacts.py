"""`read_artifact`: the built-in tool that pages through a large tool output kept in the store.

Every run may call it (it reads nothing outside the run: the runner only allows references
to artifacts of this run's own results)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentloop.store import StoreError, load_artifact_text
from agentloop.tools.contract import ToolContext, ToolError, define_tool

PAGE_CHARS = 4_000


class ReadArtifactArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ref: str = Field(pattern=r"^sha256:[0-9a-f]{64}$", description="the artifact reference")
    offset: int = Field(default=0, ge=0, description="first character to read")
    limit: int = Field(default=PAGE_CHARS, ge=1, le=PAGE_CHARS, description="characters to read")


MAX_RESULT_CHARS = PAGE_CHARS + 1_000


async def _read(args: dict[str, Any], ctx: ToolContext) -> Any:
    offset, limit = args.get("offset", 0), args.get("limit", PAGE_CHARS)
    try:
        text, total = await load_artifact_text(ctx.services.store, args["ref"], offset, limit)
    except StoreError as exc:
        raise ToolError(str(exc), error_class="business") from exc
    while True:
        page = _page(args["ref"], offset, text, total)
        # Escaping (quotes, newlines, backslashes) lengthens the page as JSON: a page that
        # would not fit the result is made shorter, and `next_offset` says where to go on,
        # rather than being cut into an artifact of its own.
        overflow = len(json.dumps(page, ensure_ascii=False)) - MAX_RESULT_CHARS
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


read_artifact = define_tool(
    "read_artifact",
    ReadArtifactArgs,
    _read,
    description="Read part of a large tool output that was cut short; its result names the "
    "artifact reference and the total size.",
    max_result_chars=MAX_RESULT_CHARS,
)
