"""Partition offsets that are right on every Kafka-protocol broker.

Why not plain ListOffsets: the embedded Tansu broker answers ListOffsets(latest)
with the base offset of the last record batch plus one, so a partition holding
one batch of 500 records reports an end offset of 1. The high watermark carried
in a Fetch response is right there and on Apache Kafka alike, so the end offset
here is the larger of the listed one and the one a fetch from its last listed
record reports. The cost is one small fetch per non-empty partition.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

Partition = tuple[str, int]
#: ``ListOffsets`` timestamps that ask for a partition's start and its end.
EARLIEST, LATEST = -2, -1


class OffsetLookupError(RuntimeError):
    """The broker did not report offsets in time."""


def offset_consumer(config: Mapping[str, Any]) -> Consumer:
    """A consumer that never joins a group nor commits, for offset look-ups only."""
    settings = dict(config)
    settings.setdefault("group.id", f"kerr-offsets-{uuid.uuid4().hex[:12]}")
    settings["enable.auto.commit"] = False
    settings["enable.partition.eof"] = False
    # KIP-714 client metrics push: a look-up client has nothing to report, and brokers
    # without it are asked for a subscription again and again.
    settings.setdefault("enable.metrics.push", False)
    # A look-up reads records that are there already. After them the client sends its next fetch at once,
    # and a broker holds that fetch until new records come or fetch.wait.max.ms passes (500 ms by default);
    # every request after it on the connection (ListOffsets, the next range's fetch) waits as long: a look
    # at the metrics topic took 0.5 s instead of 0.01 s. A look-up client has nothing to wait for.
    settings.setdefault("fetch.wait.max.ms", 10)
    return Consumer(settings)


def group_offsets(
    kafka_config: Mapping[str, Any],
    group: str,
    partitions: Iterable[Partition],
    timeout_s: float = 10.0,
    consumer: Consumer | None = None,
) -> dict[Partition, int]:
    """A consumer group's committed offsets (partitions it never committed are left out).

    ``consumer``, when given, must be an ``offset_consumer`` with ``group.id`` set to ``group``.
    """
    lookup = offset_consumer({**kafka_config, "group.id": group}) if consumer is None else consumer
    try:
        found = lookup.committed([TopicPartition(t, p) for t, p in partitions], timeout=timeout_s)
    finally:
        if consumer is None:
            lookup.close()
    return {(str(tp.topic), int(tp.partition)): int(tp.offset) for tp in found if tp.offset >= 0}


def topic_partitions(client: Consumer | AdminClient, topic: str, timeout_s: float = 10.0) -> list[Partition]:
    """The partitions of ``topic`` (asked of a consumer or an admin client), or an OffsetLookupError naming the
    topic when it does not exist."""
    metadata = client.list_topics(topic, timeout=timeout_s)
    topic_md = metadata.topics.get(topic)
    if topic_md is None or topic_md.error is not None or not topic_md.partitions:
        reason = topic_md.error if topic_md is not None and topic_md.error is not None else "no partitions"
        raise OffsetLookupError(f"topic {topic!r} is not available on the broker: {reason}")
    return [(topic, p) for p in sorted(topic_md.partitions)]


def listed_watermarks(
    consumer: Consumer,
    partitions: Iterable[Partition],
    timeout_s: float = 10.0,
    *,
    low: bool = True,
    skip_errors: bool = False,
) -> dict[Partition, tuple[int, int]]:
    """Low and high watermark of every partition as ``ListOffsets`` reports them, in one request for all their
    starts and one for all their ends (per leader broker), not a pair of requests per partition.

    A pair per partition took seconds once a broker held a few hundred topics. The high is as listed, not
    fetch-verified (:func:`watermarks` verifies it). ``low=False`` asks for the ends only (one request) and
    reports each low as -1. Both requests share ``timeout_s``. A request that failed as a whole or did not
    answer in time raises KafkaException; so does a partition the broker answered with an error (one it did not
    answer: OffsetLookupError), unless ``skip_errors``: then those, and any listed at a negative offset, are
    left out.
    """
    keys = list(dict.fromkeys(partitions))
    if not keys:
        return {}
    deadline = time.monotonic() + timeout_s
    answers: list[dict[Partition, TopicPartition]] = []
    for timestamp in (EARLIEST, LATEST) if low else (LATEST,):
        left = max(0.1, deadline - time.monotonic())
        found = consumer.offsets_for_times([TopicPartition(t, p, timestamp) for t, p in keys], timeout=left)
        answers.append({(str(tp.topic), int(tp.partition)): tp for tp in found})
    listed: dict[Partition, tuple[int, int]] = {}
    for key in keys:
        answered = [answer[key] for answer in answers if key in answer]
        error = next((tp.error for tp in answered if tp.error is not None), None)
        if error is None and len(answered) == len(answers):
            if not skip_errors or all(tp.offset >= 0 for tp in answered):
                listed[key] = (int(answered[0].offset) if low else -1, int(answered[-1].offset))
        elif not skip_errors:
            if error is not None:
                raise KafkaException(error)
            raise OffsetLookupError(f"the broker listed no offsets for partition {key[1]} of {key[0]!r}")
    return listed


def watermarks(
    consumer: Consumer, partitions: Iterable[Partition], timeout_s: float = 10.0
) -> dict[Partition, tuple[int, int]]:
    """Low and (fetch-verified) high watermark of each partition.

    ``consumer`` must be one made by :func:`offset_consumer`: its assignment is
    replaced and the records it fetches are dropped.
    """
    listed = listed_watermarks(consumer, partitions, timeout_s)
    to_verify = [key for key, (low, high) in listed.items() if high > low]
    if not to_verify:
        return listed
    consumer.assign([TopicPartition(t, p, listed[(t, p)][1] - 1) for t, p in to_verify])
    verified: dict[Partition, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(verified) < len(to_verify):
            if time.monotonic() > deadline:
                missing = sorted(set(to_verify) - set(verified))
                raise OffsetLookupError(f"no fetch response for {missing} within {timeout_s:.0f} s")
            consumer.poll(0.05)
            for key in to_verify:
                if key not in verified:
                    _, fetched_high = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
                    if fetched_high != OFFSET_INVALID and fetched_high >= 0:
                        verified[key] = fetched_high
    finally:
        consumer.unassign()
    return {key: (low, max(high, verified.get(key, high))) for key, (low, high) in listed.items()}


def end_offsets(
    config: Mapping[str, Any], partitions: Iterable[Partition], timeout_s: float = 10.0
) -> dict[Partition, int]:
    """The exclusive end offset (next offset to be written) of each partition."""
    consumer = offset_consumer(config)
    try:
        return {key: high for key, (_, high) in watermarks(consumer, partitions, timeout_s).items()}
    finally:
        consumer.close()


def read_range(
    consumer: Consumer, topic: str, starts: Mapping[int, int], ends: Mapping[int, int], timeout_s: float
) -> tuple[list[Any], list[int]]:
    """The records of ``topic`` from ``starts`` up to ``ends`` per partition, in fetch order, and the
    partitions that did not reach their end within ``timeout_s`` (sorted).

    A partition whose last offsets are transaction markers (never delivered) is done
    once the consumer's position reaches its end, rather than at the timeout.
    """
    todo = {p: ends[p] for p, start in starts.items() if start < ends[p]}
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in todo])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while todo and time.monotonic() <= deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            out.append(message)
            partition = int(message.partition() or 0)
            if partition in todo and int(message.offset() or 0) >= todo[partition] - 1:
                todo.pop(partition)
        elif message is None:
            for tp in consumer.position([TopicPartition(topic, p) for p in todo]):
                if tp.offset >= todo[tp.partition]:
                    todo.pop(tp.partition)
    return out, sorted(todo)


def read_to_end(
    kafka_config: Mapping[str, Any], topic: str, isolation_level: str = "read_committed", timeout_s: float = 20.0
) -> list[Any]:
    """Every record of every partition of ``topic`` up to the end offsets seen now, in fetch order.

    Raises OffsetLookupError when the records do not arrive within ``timeout_s``.
    """
    consumer = offset_consumer({**kafka_config, "isolation.level": isolation_level})
    try:
        marks = watermarks(consumer, topic_partitions(consumer, topic, timeout_s), timeout_s)
        starts = {p: low for (_, p), (low, _) in marks.items()}
        ends = {p: high for (_, p), (_, high) in marks.items()}
        out, unfinished = read_range(consumer, topic, starts, ends, timeout_s)
        if unfinished:
            raise OffsetLookupError(f"{topic}: partitions {unfinished} did not reach their end in {timeout_s} s")
        return out
    finally:
        consumer.close()
