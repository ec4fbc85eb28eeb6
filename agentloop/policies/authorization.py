"""Authorization lives in code, never in a tool's description: the principal's scopes must
cover what the tool requires. Nothing a tool returns can change the principal."""

from __future__ import annotations

from agentloop.contract import Principal
from agentloop.tool_spec import ToolSpec


def missing_scopes(spec: ToolSpec, principal: Principal) -> list[str]:
    held = set(principal.scopes)
    return [scope for scope in spec.required_scopes if scope not in held]


def denial(spec: ToolSpec, principal: Principal) -> str | None:
    """Why `principal` may not call this tool, or None when it may."""
    missing = missing_scopes(spec, principal)
    if not missing:
        return None
    return (
        f"{principal.subject} (tenant {principal.tenant}) lacks scope "
        f"{', '.join(missing)} required by {spec.name}"
    )
