"""The inspection's consumers: assign-only, never joined, never committed, so looking moves no one's position.

Every read of the DLQ view opens its own short-lived consumer here, in one throwaway group
per process (:data:`SCRATCH_GROUP`), and closes it before it returns (except that a
summary keeps an unfinished scan's consumer for its next chunk,
:mod:`airflow_kerr.inspection.scan_consumers`). The helpers below are the bounded look-ups
every read starts with: a topic's partitions and offset ranges, and the first record at
an offset of each partition.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.kafka.offsets import OffsetLookupError, offset_consumer, watermarks

#: The one group id every consumer here uses: assign only, never joined, never committed to.
SCRATCH_GROUP = f"kerr-dlq-view-{uuid.uuid4().hex[:12]}"
#: Seconds one metadata or offset look-up may take.
LOOKUP_TIMEOUT_S = 10.0
#: How long a broker may hold a fetch with no data (see :func:`scratch_consumer`).
FETCH_WAIT_MAX_MS = 10
#: Records asked of librdkafka per ``consume`` call while counting or sampling.
SCAN_BATCH = 5_000


class TopicNotFound(OffsetLookupError):
    """The topic asked about is not on the broker (a 404 for the view, not a broker failure)."""


def scratch_consumer(kafka_config: Mapping[str, Any]) -> Consumer:
    """An assign-only consumer in :data:`SCRATCH_GROUP`: never commits, never joins; starts over at the
    beginning when an offset it was given has been deleted (retention) rather than skipping to the end.

    ``fetch.wait.max.ms`` is short because these consumers re-assign several times in one call
    (the last records, then the first, then a range): a broker holds a fetch at a partition's
    end for up to that long, and librdkafka sends the next assignment's fetch only after it
    (500 ms by default, which was most of a summary's first second).
    """
    settings = {**kafka_config, "group.id": SCRATCH_GROUP, "enable.auto.offset.store": False}
    settings["auto.offset.reset"] = "earliest"
    settings["fetch.wait.max.ms"] = FETCH_WAIT_MAX_MS
    return offset_consumer(settings)


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[tuple[str, int]]:
    """The topic's partitions from the full topic list (asking for one topic by name may create it)."""
    metadata = consumer.list_topics(timeout=timeout_s)
    found = metadata.topics.get(topic)
    if found is None or not found.partitions:
        raise TopicNotFound(f"topic {topic!r} is not on the broker")
    if found.error is not None:
        raise OffsetLookupError(f"topic {topic!r} is not available: {found.error}")
    return [(topic, partition) for partition in sorted(found.partitions)]


def offset_ranges(consumer: Consumer, topic: str, timeout_s: float = LOOKUP_TIMEOUT_S) -> dict[int, tuple[int, int]]:
    """First and end offset of each partition (end exclusive, fetch-verified)."""
    marks = watermarks(consumer, _partitions(consumer, topic, timeout_s), timeout_s)
    return {partition: (low, high) for (_, partition), (low, high) in marks.items()}


def first_records(
    consumer: Consumer, starts: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int], deadline: float
) -> dict[tuple[str, int], Any]:
    """The first record at or after each start and before its end, per partition, until ``deadline``.

    A partition is unassigned as soon as its record arrives, which drops the rest of its
    prefetched records: otherwise the other partitions' first records wait behind a whole
    fetch of its records. A partition with no record left (transaction markers, aborted
    records) is dropped once the consumer's position reaches its end, rather than waited for.
    """
    todo = {key: ends[key] for key, start in starts.items() if start < ends[key]}
    if not todo:
        return {}
    consumer.assign([TopicPartition(topic, partition, starts[(topic, partition)]) for topic, partition in todo])
    found: dict[tuple[str, int], Any] = {}
    try:
        while todo and time.monotonic() < deadline:
            # librdkafka returns once it has this many records or at the timeout: ask for one per partition left.
            messages: list[Any] = consumer.consume(len(todo), min(0.1, max(0.0, deadline - time.monotonic())))
            finished: list[TopicPartition] = []
            for message in messages:
                key = (message.topic(), message.partition())
                if message.error() is None and key in todo:
                    if message.offset() < todo[key]:
                        found[key] = message
                    todo.pop(key)
                    finished.append(TopicPartition(*key))
            if finished and todo:
                consumer.incremental_unassign(finished)
            if not messages and todo:
                for position in consumer.position([TopicPartition(t, p) for t, p in todo]):
                    key = (position.topic, position.partition)
                    if position.offset >= todo[key]:
                        todo.pop(key)
    finally:
        consumer.unassign()
    return found


def timestamp_of(message: Any) -> int | None:
    """The record's timestamp in epoch milliseconds, ``None`` when it has none (type 0 or a negative value)."""
    kind, value = message.timestamp()
    return value if kind != 0 and value >= 0 else None
