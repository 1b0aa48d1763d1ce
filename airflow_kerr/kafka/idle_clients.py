"""An idle-expiring cache of Kafka clients a process keeps between uses, and closes when they stay unused.

A client (a consumer in the middle of a scan, a producer with its producer id) costs round
trips to make, so a process keeps one between the calls that use it; kept too long, it holds
connections and threads, and reconnects to a broker that has gone. Both are bounded here: at
most ``max_entries`` are kept, each is closed once unused for ``idle_s`` (by a daemon thread,
whether or not anyone calls again), and what is left at a normal exit is closed by whoever
registers :meth:`IdleClients.close_all` with ``atexit``. No Airflow imports.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol


class Closable(Protocol):
    def close(self) -> Any: ...


class IdleClients:
    """A thread-safe, bounded, idle-expiring cache of clients: :meth:`take` removes, :meth:`put` (re)inserts.

    Closing is outside the lock. With ``sweep``, one daemon thread closes what stays unused
    even when nobody calls again, and ends when the cache is empty.
    """

    def __init__(
        self,
        max_entries: int,
        idle_s: float,
        clock: Callable[[], float] = time.monotonic,
        sweep: bool = True,
        name: str = "kerr-idle-clients",
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
        self._name = name
        #: Clients this cache has closed so far (expired, replaced, pushed out, dropped or at exit): tests' evidence.
        self.closed = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def take(self, key: Hashable) -> Any | None:
        """The client kept under ``key``, removed from the cache; ``None`` when there is none (or it expired)."""
        with self._lock:
            stale = self._expired_locked()
            entry = self._entries.pop(key, None)
        self._close(stale)
        return None if entry is None else entry[0]

    def put(self, key: Hashable, consumer: Closable) -> None:
        """Keep ``consumer`` under ``key``; one it replaces and the least recently kept beyond :attr:`max_entries`
        are closed."""
        with self._lock:
            stale = self._expired_locked()
            replaced = self._entries.pop(key, None)
            if replaced is not None:
                stale.append(replaced[0])
            self._entries[key] = (consumer, self._clock())
            while len(self._entries) > self.max_entries:
                stale.append(self._entries.popitem(last=False)[1][0])
            if self._sweep and (self._sweeper is None or not self._sweeper.is_alive()):
                self._sweeper = threading.Thread(target=self._sweep_loop, name=self._name, daemon=True)
                self._sweeper.start()
        self._close(stale)

    def drop(self, unwanted: Callable[[Hashable], bool]) -> None:
        """Close the clients kept under a key ``unwanted`` accepts."""
        with self._lock:
            dropped = [self._entries.pop(key)[0] for key in [k for k in self._entries if unwanted(k)]]
            self._wake.notify_all()
        self._close(dropped)

    def close_all(self) -> None:
        """Close every kept client (at exit, and in tests)."""
        with self._lock:
            kept = [consumer for consumer, _ in self._entries.values()]
            self._entries.clear()
            self._wake.notify_all()
        self._close(kept)

    def wait_closed(self, count: int, timeout_s: float) -> bool:
        """Wait until the cache has closed ``count`` clients in all; whether it has (tests' evidence)."""
        with self._lock:
            return self._wake.wait_for(lambda: self.closed >= count, timeout_s)

    def _close(self, clients: list[Closable]) -> None:
        """Close clients already taken out of the cache, outside its lock; count them."""
        if not clients:
            return
        for client in clients:
            with contextlib.suppress(Exception):  # closing a kept client is best effort
                client.close()
        with self._lock:
            self.closed += len(clients)
            self._wake.notify_all()

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
        """Close clients that stay unused even when nobody calls again; ends when the cache is empty."""
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
            self._close(stale)
