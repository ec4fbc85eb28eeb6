"""Completion rules: a final answer is only a candidate (docs/concepts/design.md §3, step 3).

Pure, run inside the workflow: with `output_schema` the answer must be JSON satisfying it.
"""

from __future__ import annotations

import json
from typing import Any

from agentloop.policies.bounds import MAX_ANSWER_CHARS, OutOfBounds, loads_bounded
from agentloop.policies.validation import schema_problems


def check_output(
    schema: dict[str, Any], text: str, *, bounded: bool = False, steps: int | None = None
) -> tuple[Any, list[str]]:
    """The parsed answer and what is wrong with it (nothing: it is accepted). `bounded`: an
    answer too long or too deep to parse is refused unparsed (feature `bounded-validation`);
    `steps`: the check takes at most that many (feature `bounded-schema-work`)."""
    try:
        parsed = loads_bounded(text, max_chars=MAX_ANSWER_CHARS) if bounded else json.loads(text)
    except OutOfBounds as exc:
        return None, [f"the answer is {exc}"]
    except (ValueError, RecursionError):
        return None, ["the answer is not valid JSON"]
    return parsed, schema_problems(schema, parsed, bounded=bounded, steps=steps)
