"""Keep a chunked scan's consumer between chunks, so the next chunk goes on where the last one stopped.

The DLQ view counts a topic in chunks (:func:`airflow_kerr.inspection.summary.summarize`):
each HTTP call reads for about a second and returns a cursor. Opening a new consumer per
chunk costs a metadata and assign round trip on any broker, and on the embedded noida-db
much more: it ignores ``fetch.max.bytes`` and answers a fetch with every record from the
fetch offset to the partition's end, so each new consumer made it build and send the whole
remainder again, and a 1,000,000-record partition took time in the square of its size.
A kept consumer has that remainder (or its next fetch) already on the way.

The cache is small and forgets: at most :data:`MAX_ENTRIES` consumers, each closed when
unused for :data:`IDLE_S` seconds or pushed out by a newer one. A consumer is taken out
while a chunk uses it (so two threads never share one) and put back keyed by the positions
it stopped at. Nothing depends on it: a miss means a new consumer, assigned at the cursor's
offsets, as without the cache. It imports no Airflow.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Protocol

#: Consumers kept at most (one per scan under way; a page runs one scan at a time).
MAX_ENTRIES = 4
#: Seconds a kept consumer may stay unused before it is closed (the page asks again at once).
IDLE_S = 30.0


class Closable(Protocol):
    def close(self) -> Any: ...


def config_identity(kafka_config: Mapping[str, Any]) -> tuple[str, str]:
    """Which cluster and client settings a consumer was made with: bootstrap servers and a digest of the rest."""
    text = repr(sorted((str(key), repr(value)) for key, value in kafka_config.items()))
    return str(kafka_config.get("bootstrap.servers", "")), hashlib.sha256(text.encode()).hexdigest()[:16]


def scan_key(
    kafka_config: Mapping[str, Any], topic: str, selection: str, partitions: Mapping[int, tuple[int, int]]
) -> Hashable:
    """The key of a scan's consumer: config, topic, selection fingerprint and each partition's (next, end) offsets.

    The ends are part of it so a consumer is only handed to the scan whose partitions it has
    assigned (another scan could reach the same next offsets with other ends).
    """
    return (config_identity(kafka_config), topic, selection, tuple(sorted(partitions.items())))


class ScanConsumers:
    """A thread-safe, bounded, idle-expiring cache of consumers: :meth:`take` removes, :meth:`put` (re)inserts."""

    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        idle_s: float = IDLE_S,
        clock: Callable[[], float] = time.monotonic,
        sweep: bool = True,
    ) -> None:
        self.max_entries = max_entries
        self.idle_s = idle_s
        self._clock = clock
        self._sweep = sweep
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._entries: OrderedDict[Hashable, tuple[Closable, float]] = OrderedDict()
        self._pid = os.getpid()
        self._sweeper: threading.Thread | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def take(self, key: Hashable) -> Any | None:
        """The consumer kept under ``key``, removed from the cache; ``None`` when there is none (or it expired)."""
        with self._lock:
            stale = self._expired_locked()
            entry = self._entries.pop(key, None)
        _close_all(stale)
        return None if entry is None else entry[0]

    def put(self, key: Hashable, consumer: Closable) -> None:
        """Keep ``consumer`` under ``key``; the least recently kept ones beyond :attr:`max_entries` are closed."""
        with self._lock:
            stale = self._expired_locked()
            replaced = self._entries.pop(key, None)
            if replaced is not None:
                stale.append(replaced[0])
            self._entries[key] = (consumer, self._clock())
            while len(self._entries) > self.max_entries:
                stale.append(self._entries.popitem(last=False)[1][0])
            if self._sweep and (self._sweeper is None or not self._sweeper.is_alive()):
                self._sweeper = threading.Thread(target=self._sweep_loop, name="kerr-scan-consumers", daemon=True)
                self._sweeper.start()
        _close_all(stale)

    def close_all(self) -> None:
        """Close every kept consumer (at exit, and in tests)."""
        with self._lock:
            kept = [consumer for consumer, _ in self._entries.values()]
            self._entries.clear()
            self._wake.notify_all()
        _close_all(kept)

    def _expired_locked(self) -> list[Closable]:
        if os.getpid() != self._pid:  # a forked child must not touch its parent's client threads: forget them
            self._entries.clear()
            self._pid = os.getpid()
            self._sweeper = None
            return []
        now = self._clock()
        expired = [key for key, (_, used) in self._entries.items() if now - used >= self.idle_s]
        return [self._entries.pop(key)[0] for key in expired]

    def _sweep_loop(self) -> None:
        """Close consumers that stay unused even when nobody calls again; ends when the cache is empty."""
        while True:
            with self._lock:
                stale = self._expired_locked()
                if not self._entries and not stale:
                    self._sweeper = None
                    return
                if not stale:
                    oldest = min(used for _, used in self._entries.values())
                    self._wake.wait(max(0.05, oldest + self.idle_s - self._clock()))
                    continue
            _close_all(stale)


def _close_all(consumers: list[Closable]) -> None:
    for consumer in consumers:
        with contextlib.suppress(Exception):  # closing a kept consumer is best effort
            consumer.close()


#: The process-wide cache :func:`~airflow_kerr.inspection.summary.summarize` uses.
SCAN_CONSUMERS = ScanConsumers()
atexit.register(SCAN_CONSUMERS.close_all)
