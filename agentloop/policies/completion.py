"""Completion rules: a final answer is only a candidate (docs/concepts/design.md §3, step 3).

Pure, run inside the workflow: with `output_schema` the answer must be JSON satisfying it.
"""

from __future__ import annotations

from typing import Any

from agentloop.policies.bounds import MAX_ANSWER_CHARS, OutOfBounds, loads_bounded
from agentloop.policies.validation import schema_problems


def check_output(
    schema: dict[str, Any], text: str, *, steps: int | None = None
) -> tuple[Any, list[str]]:
    """The parsed answer and what is wrong with it (nothing: it is accepted). An answer too
    long or too deep to parse is refused unparsed; `steps`: the check takes at most that many."""
    try:
        parsed = loads_bounded(text, max_chars=MAX_ANSWER_CHARS)
    except OutOfBounds as exc:
        return None, [f"the answer is {exc}"]
    except (ValueError, RecursionError):
        return None, ["the answer is not valid JSON"]
    return parsed, schema_problems(schema, parsed, steps=steps)
