"""A local model provider that plays scenario scripts over real provider wire protocols.

Used by the tests and `make demo` instead of a real model: the official SDKs talk to it
unmodified, and it checks every request it receives (see `checks`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentloop.demo.scripted_provider.scripts import Script, ScriptedToolCall, ScriptTurn

if TYPE_CHECKING:
    from agentloop.demo.scripted_provider.server import ScriptedProvider

__all__ = ["Script", "ScriptTurn", "ScriptedProvider", "ScriptedToolCall"]


def __getattr__(name: str) -> Any:
    # Imported lazily so `python -m agentloop.demo.scripted_provider.server` does not import
    # `server` twice (once via this package, once as __main__), which runpy warns about.
    if name == "ScriptedProvider":
        from agentloop.demo.scripted_provider.server import ScriptedProvider

        return ScriptedProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
