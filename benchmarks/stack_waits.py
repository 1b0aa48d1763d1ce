"""The waits the breach → PAUSED benchmarks share: a condition, a connector PAUSED, and Airflow's timestamps.

Shared by ``watcher_latency.py`` (one watch, the whole DAG path) and ``watch_scale.py``
(1 vs 100 + 100 watches on one triggerer), so both read "PAUSED" the same way: ``/status``
polled every 50 ms, the moment the connector reads PAUSED and the moment all its tasks do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

#: How often ``/connectors/<name>/status`` is asked while a pause is awaited.
STATUS_POLL_S = 0.05

T = TypeVar("T")


class BenchmarkError(RuntimeError):
    """The stack did not do what the benchmark waits for."""


def wait_for(description: str, condition: Callable[[], T | None], timeout_s: float, interval_s: float = 0.5) -> T:
    """``condition()``'s first truthy value, asked every ``interval_s``; :class:`BenchmarkError` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchmarkError(f"{description}: not within {timeout_s:.0f} s")
        time.sleep(interval_s)


def epoch_s(value: object) -> float | None:
    """A timestamp as Unix seconds: the REST API's ISO 8601 (``Z`` or an offset) or SQLite's naive UTC text.

    Airflow stores UTC; SQLite hands it back without an offset, so a naive value is read as UTC.
    """
    if value is None or value == "":
        return None
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def wait_until_paused(
    status: Callable[[], Mapping[str, Any]], connector: str, timeout_s: float, poll_s: float = STATUS_POLL_S
) -> tuple[float, float]:
    """Poll ``status()`` (a connector's ``/status``) every ``poll_s``: when the connector read PAUSED, and when its
    tasks did too (Unix seconds, as seen here)."""
    deadline = time.monotonic() + timeout_s
    connector_at: float | None = None
    last: Mapping[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            last = status()
        except Exception:  # a worker busy rebalancing answers 409; keep polling
            last = {}
        seen = time.time()
        state = (last.get("connector") or {}).get("state")
        if state == "PAUSED" and connector_at is None:
            connector_at = seen
        tasks = [task["state"] for task in last.get("tasks") or []]
        if connector_at is not None and tasks and set(tasks) == {"PAUSED"}:
            return connector_at, seen
        time.sleep(poll_s)
    raise BenchmarkError(f"{connector} not PAUSED within {timeout_s:.0f} s (last status: {dict(last)})")
