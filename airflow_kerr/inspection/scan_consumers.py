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
import hashlib
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from airflow_kerr.kafka.idle_clients import IdleClients

#: Consumers kept at most (one per scan under way; a page runs one scan at a time).
MAX_ENTRIES = 4
#: Seconds a kept consumer may stay unused before it is closed (the page asks again at once).
IDLE_S = 30.0


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


class ScanConsumers(IdleClients):
    """The scans' consumers: at most :data:`MAX_ENTRIES`, each closed when unused for :data:`IDLE_S` seconds."""

    def __init__(
        self,
        max_entries: int = MAX_ENTRIES,
        idle_s: float = IDLE_S,
        clock: Callable[[], float] = time.monotonic,
        sweep: bool = True,
    ) -> None:
        super().__init__(max_entries, idle_s, clock, sweep, name="kerr-scan-consumers")


#: The process-wide cache :func:`~airflow_kerr.inspection.summary.summarize` uses.
SCAN_CONSUMERS = ScanConsumers()
atexit.register(SCAN_CONSUMERS.close_all)
