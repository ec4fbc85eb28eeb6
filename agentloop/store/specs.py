"""A run's tool specs by reference: they travel into its first model call only.

Every model call needs the specs (they are part of the provider request), and inline they were
the largest part of each turn's history (3.3 KB a turn for four small tools; tens of KB for
many rich ones). The first call stores the list as an artifact; later calls name it.
Content-addressed, so runs with the same tools share one copy, and a kept copy is never stale.
"""

from __future__ import annotations

from pydantic import TypeAdapter

from agentloop.store.artifacts import artifact_key
from agentloop.store.base import Store, StoreError
from agentloop.store.kept import Kept
from agentloop.tool_spec import ToolSpec

MEDIA_TYPE = "application/vnd.agentloop.tool-specs+json"
KEPT_LISTS = 128
"""Spec lists a worker keeps parsed; beyond it the least recently used is dropped."""

_SPECS = TypeAdapter(list[ToolSpec])


class ToolSpecCache:
    def __init__(self, size: int = KEPT_LISTS) -> None:
        self._lists: Kept[list[ToolSpec]] = Kept(size)

    async def put(self, store: Store, specs: list[ToolSpec]) -> str:
        """Store `specs` (unless this worker already did) and return their reference."""
        data = _SPECS.dump_json(specs)
        ref = artifact_key(data)
        if ref not in self._lists:
            await store.put_artifact(data, MEDIA_TYPE)
        self._lists.keep(ref, specs)
        return ref

    async def get(self, store: Store, ref: str) -> list[ToolSpec]:
        """The specs stored under `ref`; `StoreError` when the store does not have them."""
        specs = self._lists.get(ref)
        if specs is None:
            found = await store.get_artifact(ref)
            if found is None:
                raise StoreError(f"tool specs {ref} are missing from the store")
            specs = _SPECS.validate_json(found[0])
        self._lists.keep(ref, specs)
        return specs
