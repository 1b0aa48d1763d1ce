"""One client per set of settings, handed to every watch that needs it and closed with the last one.

A watch on the triggerer used to make its own clients: a hundred watches, a hundred
sets of connections, threads and (for HTTP) SSL contexts, each the same as the next.
:class:`Shares` is the reference-counted registry both kinds of shared client use:
the Kafka clients of :mod:`airflow_kerr.kafka.shared_clients` (per cluster and event
loop) and the Kafka Connect client of :mod:`airflow_kerr.hooks.breach_pause` (per
connection settings and process). :func:`settings_key` tells two sets of settings
apart without holding them in clear, and ``KERR_SHARED_WATCH_CLIENTS=0`` turns sharing
off for both. In ``kafka/`` beside the Kafka clients it first served; no Airflow imports, none of ours.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

#: Set to ``0`` to give each watch its own clients again (how watches ran before; ``benchmarks/watch_scale.py``).
SHARING_ENV = "KERR_SHARED_WATCH_CLIENTS"

T = TypeVar("T")


def sharing_enabled() -> bool:
    """Whether watches share their clients (the default), or ``KERR_SHARED_WATCH_CLIENTS=0`` turned it off."""
    return os.environ.get(SHARING_ENV, "1").strip() != "0"


def settings_key(settings: Mapping[str, Any]) -> str:
    """What tells two sets of client settings apart: a SHA-256 digest of all of them.

    A digest, so that a key that is logged or shown in a task name carries no password or
    token in clear; all of them, so that changed settings (a new password, another URL,
    another CA bundle) get a client of their own rather than the one made with the old ones.
    """
    return hashlib.sha256(json.dumps(dict(settings), sort_keys=True, default=str).encode()).hexdigest()


class Shares(Generic[T]):
    """Objects made once per ``(owner, key)`` and counted out; safe to use from any thread.

    ``owner`` scopes the sharing: an event loop for clients bound to one, a process id for
    clients that are not. :meth:`acquire` makes the object on first use (under the lock, so
    two threads asking at once get one object), :meth:`release` hands it back to the caller
    to close when the last reference went.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[Hashable, str], tuple[T, int]] = {}

    def acquire(self, owner: Hashable, key: str, make: Callable[[], T]) -> T:
        """The object of ``(owner, key)``, made by ``make()`` if there is none; one reference more."""
        with self._lock:
            found = self._held.get((owner, key))
            shared, refs = found if found is not None else (make(), 0)
            self._held[(owner, key)] = (shared, refs + 1)
            return shared

    def release(self, owner: Hashable, key: str) -> T | None:
        """One reference fewer; the object when that was the last one (the caller closes it), else None."""
        with self._lock:
            found = self._held.get((owner, key))
            if found is None:
                return None
            shared, refs = found
            if refs > 1:
                self._held[(owner, key)] = (shared, refs - 1)
                return None
            del self._held[(owner, key)]
            return shared

    def refs(self, owner: Hashable, key: str) -> int:
        """How many references ``(owner, key)`` has (0: none, or closed)."""
        with self._lock:
            found = self._held.get((owner, key))
            return found[1] if found is not None else 0

    def held(self, owner: Hashable) -> list[T]:
        """The objects alive for ``owner`` (tests and benchmarks count them)."""
        with self._lock:
            return [shared for (holder, _), (shared, _) in self._held.items() if holder == owner]
