"""The example service the demo tools call over HTTP; see `app` for the entry points."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentloop.demo.services.app import ExampleService

__all__ = ["ExampleService"]


def __getattr__(name: str) -> Any:
    # Imported lazily: importing `.app` eagerly here would make
    # `python -m agentloop.demo.services.app` warn that the module was already imported.
    if name == "ExampleService":
        from agentloop.demo.services.app import ExampleService

        return ExampleService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
