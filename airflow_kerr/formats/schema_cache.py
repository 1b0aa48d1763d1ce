"""A bounded least-recently-used cache: a process holds each schema (and its compiled codec) once, whatever it reads."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class SchemaCache(Generic[V]):
    """At most ``capacity`` entries; the least recently used goes first. ``loads`` counts the misses.

    ``get_or_load`` calls ``load`` outside the lock: a registry request may take seconds and
    must not hold up readers of other keys (two callers of one missing key may both load it;
    the first result stays).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"cache capacity={capacity}: expected at least 1")
        self.capacity = capacity
        self.loads = 0
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def get_or_load(self, key: Hashable, load: Callable[[], V]) -> V:
        value = self.get(key)
        if value is not None:
            return value
        loaded = load()
        with self._lock:
            self.loads += 1
            value = self._entries.setdefault(key, loaded)
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            return value

    def __len__(self) -> int:
        return len(self._entries)
