"""Completion rules: a final answer is only a candidate (DESIGN.md §3, step 3).

Pure, run inside the workflow: with `output_schema` the answer must be JSON satisfying it.
"""

from __future__ import annotations

import json
from typing import Any

from agentloop.policies.validation import schema_problems


def check_output(schema: dict[str, Any], text: str) -> tuple[Any, list[str]]:
    """The parsed answer and what is wrong with it (nothing: it is accepted)."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None, ["the answer is not valid JSON"]
    return parsed, schema_problems(schema, parsed)
