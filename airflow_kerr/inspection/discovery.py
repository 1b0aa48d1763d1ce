"""Which DLQs exist: the configured ones, and other topics found by the error headers of their newest records.

Discovery is bounded (topics looked at, one newest record per partition, seconds in all)
because a cluster can hold thousands of topics and the view's topic list must answer at once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import TopicPartition

from airflow_kerr.errors.dead_letter import parse_dead_letter
from airflow_kerr.inspection.consumers import first_records, scratch_consumer
from airflow_kerr.kafka.offsets import listed_watermarks


@dataclass(frozen=True)
class DeadLetterQueueTopic:
    """One DLQ the view offers: configured (listed whatever it holds) or discovered by its error headers."""

    name: str
    partitions: int
    records: int
    configured: bool
    discovered: bool
    exists: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Names looked at first: dlq, Spring's ``.DLT`` / ``-dlt``, dead, error, fail.
_DLQ_LIKE = re.compile(r"dlq|dlt|dead|error|fail", re.IGNORECASE)


def list_dead_letter_queues(
    kafka_config: Mapping[str, Any],
    configured: Sequence[str] = (),
    *,
    timeout_s: float = 5.0,
    max_topics: int = 500,
) -> list[DeadLetterQueueTopic]:
    """The configured DLQ topics (always, ``exists`` false when absent) and other topics that look like DLQs.

    A topic is discovered when the newest record of any of its partitions carries an error
    header set :func:`parse_dead_letter` recognises (Connect's, KIP-1191's or Kafka Streams').
    Internal topics (``__`` names) are skipped. The work is bounded: at most ``max_topics``
    other topics are looked at (names that look like a DLQ, with dlq, dead, error or fail in
    them, first; then by name), one newest record per partition, within ``timeout_s`` in
    all; a topic whose newest records did not arrive in time is not discovered. Configured
    topics come first in their given order, then the discovered ones by name.
    """
    deadline = time.monotonic() + timeout_s
    wanted = list(dict.fromkeys(configured))
    consumer = scratch_consumer(kafka_config)
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
        present = {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None and topic.partitions
        }
        others = sorted(
            (name for name in present if not name.startswith("__") and name not in wanted),
            key=lambda name: (_DLQ_LIKE.search(name) is None, name),
        )[: max(0, max_topics)]
        looked = [name for name in wanted if name in present] + others
        # Two ListOffsets requests for all of them: one per partition took the whole budget once a broker held a
        # few hundred topics, so a DLQ that sorted late was never discovered. A partition the broker answers
        # with an error is left out (not discovered), as one whose newest record did not come in time is.
        marks = listed_watermarks(
            consumer,
            [(name, p) for name in looked for p in present[name]],
            max(0.1, deadline - time.monotonic()),
            skip_errors=True,
        )
        newest = first_records(
            consumer,
            {key: max(low, high - 1) for key, (low, high) in marks.items()},
            {key: high for key, (low, high) in marks.items()},
            deadline,
        )
        verified: dict[tuple[str, int], int] = {}
        for key in marks:
            _, fetched = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
            verified[key] = max(marks[key][1], fetched)
    finally:
        consumer.close()
    looks_like_dlq = {
        topic
        for (topic, _), message in newest.items()
        if parse_dead_letter(message.headers() or [], None, None).header_set is not None
    }

    def entry(name: str, is_configured: bool) -> DeadLetterQueueTopic:
        partitions = present.get(name, [])
        records = sum(max(0, verified.get((name, p), 0) - marks.get((name, p), (0, 0))[0]) for p in partitions)
        return DeadLetterQueueTopic(
            name=name,
            partitions=len(partitions),
            records=records,
            configured=is_configured,
            discovered=name in looks_like_dlq,
            exists=name in present,
        )

    return [entry(name, True) for name in wanted] + [
        entry(name, False) for name in sorted(looks_like_dlq) if name not in wanted
    ]
