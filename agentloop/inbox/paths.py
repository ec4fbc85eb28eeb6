"""A run's path in the inbox."""

from __future__ import annotations

from urllib.parse import quote


def run_path(workflow_id: str) -> str:
    return "/runs/" + quote(workflow_id, safe="")
