"""A bounded map of what a worker keeps between calls, least recently used dropped first.

Only for values named by content hash (transcript heads, artifact keys): a kept value is never
stale, and a worker that does not have one simply loads it from the store.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")


class Kept(Generic[V]):
    def __init__(self, size: int) -> None:
        self._size = size
        self._values: OrderedDict[str, V] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def get(self, key: str) -> V | None:
        return self._values.get(key)

    def pop(self, key: str) -> V | None:
        return self._values.pop(key, None)

    def keep(self, key: str, value: V) -> None:
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self._size:
            self._values.popitem(last=False)
