"""librdkafka statistics collector for benchmarks: the latest request counts of every client, by request type.

Named in a ``kafka`` connection's extra as ``"stats_cb": "kafka_stats.record"`` (and
in ``[apache_kafka] callback_allowlist``), so clients built by the provider's hooks
report how many requests they sent to the brokers.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

_LOCK = threading.Lock()
LATEST: dict[str, Counter[str]] = {}


def record(stats_json: str) -> None:
    """Keep the newest cumulative request counts of the client that sent these statistics."""
    stats = json.loads(stats_json)
    counts: Counter[str] = Counter()
    for broker in stats.get("brokers", {}).values():
        counts.update({name: int(n) for name, n in (broker.get("req") or {}).items()})
    with _LOCK:
        LATEST[stats["name"]] = counts


def totals() -> Counter[str]:
    with _LOCK:
        total: Counter[str] = Counter()
        for counts in LATEST.values():
            total.update(counts)
        return total
