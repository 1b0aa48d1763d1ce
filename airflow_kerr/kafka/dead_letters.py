"""What the DLQ sensor measures, as plain functions over confluent-kafka (no Airflow).

The sensors and their triggers share these: poke mode calls them directly, the
triggers call them in a worker thread so the event loop never blocks. Growth is
read from end offsets, never by consuming the topic; only the few newest records
are read, for a sample of what went wrong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer

from airflow_kerr.errors import mask_text, parse_dead_letter
from airflow_kerr.errors.dialects import header_set_name
from airflow_kerr.kafka.offsets import group_offsets, offset_consumer, read_range, topic_partitions, watermarks

SINCE_TASK_START = "task_start"
SINCE_GROUP_PREFIX = "group:"


class SinceError(ValueError):
    """A ``since`` value outside what the DLQ sensor accepts."""


def validate_since(since: str | Mapping[str | int, int]) -> None:
    """Accept ``task_start``, ``group:<id>`` or a mapping of partition to offset; name the value otherwise."""
    if isinstance(since, Mapping):
        bad = {k: v for k, v in since.items() if not str(k).isdigit() or not isinstance(v, int) or v < 0}
        if bad:
            raise SinceError(f"since={dict(since)!r}: explicit offsets map a partition number to an offset >= 0")
        return
    if since == SINCE_TASK_START or (since.startswith(SINCE_GROUP_PREFIX) and len(since) > len(SINCE_GROUP_PREFIX)):
        return
    raise SinceError(f"since={since!r}: expected 'task_start', 'group:<consumer group id>' or {{partition: offset}}")


def dlq_end_offsets(
    kafka_config: Mapping[str, Any], topic: str, timeout_s: float = 10.0, consumer: Consumer | None = None
) -> dict[int, int]:
    """End offset of each partition of the DLQ topic, keyed by partition number.

    A long-running watcher passes its own ``consumer`` (from ``offset_consumer``) so
    each poll reuses one connection instead of opening a new client.
    """
    own = consumer is None
    lookup = offset_consumer(kafka_config) if consumer is None else consumer
    try:
        marks = watermarks(lookup, topic_partitions(lookup, topic, timeout_s), timeout_s)
    finally:
        if own:
            lookup.close()
    return {partition: high for (_, partition), (_, high) in marks.items()}


def baseline_offsets(
    kafka_config: Mapping[str, Any], topic: str, since: str | Mapping[str | int, int]
) -> dict[int, int]:
    """Where counting starts: the end offsets now, a group's committed offsets, or the given offsets."""
    validate_since(since)
    if isinstance(since, Mapping):
        return {int(partition): int(offset) for partition, offset in since.items()}
    ends = dlq_end_offsets(kafka_config, topic)
    if since == SINCE_TASK_START:
        return ends
    group = since[len(SINCE_GROUP_PREFIX) :]
    committed = group_offsets(kafka_config, group, [(topic, p) for p in ends])
    return {partition: committed.get((topic, partition), 0) for partition in ends}


@dataclass(frozen=True)
class DeadLetterGrowth:
    """How many records the DLQ gained since the baseline, per partition and in all."""

    count: int
    ends: dict[int, int]
    baseline: dict[int, int]


def dlq_growth(
    kafka_config: Mapping[str, Any], topic: str, baseline: Mapping[int, int], consumer: Consumer | None = None
) -> DeadLetterGrowth:
    ends = dlq_end_offsets(kafka_config, topic, consumer=consumer)
    count = sum(max(0, end - baseline.get(partition, 0)) for partition, end in ends.items())
    return DeadLetterGrowth(count, ends, dict(baseline))


def newest_dead_letters(
    kafka_config: Mapping[str, Any],
    topic: str,
    growth: DeadLetterGrowth,
    sample_size: int = 5,
    timeout_s: float = 10.0,
) -> list[dict[str, Any]]:
    """The newest ``sample_size`` DLQ records since the baseline, parsed into what an on-call person reads."""
    starts = {
        p: max(growth.baseline.get(p, 0), end - sample_size)
        for p, end in growth.ends.items()
        if end > growth.baseline.get(p, 0)
    }
    if not starts or sample_size <= 0:
        return []
    consumer = offset_consumer(kafka_config)
    found: list[dict[str, Any]] = []
    try:
        messages, _ = read_range(consumer, topic, starts, growth.ends, timeout_s)
        for message in messages:
            letter = parse_dead_letter(
                message.headers() or [],
                message.key(),
                message.value(),
                topic=message.topic(),
                partition=message.partition(),
                offset=message.offset(),
                timestamp=message.timestamp()[1],
            )
            found.append(
                {
                    "dlq_partition": message.partition(),
                    "dlq_offset": message.offset(),
                    "stage": str(letter.stage) if letter.stage else None,
                    "exception_class": letter.exception_class,
                    "exception_message": letter.exception_message,
                    "source_topic": letter.source_topic,
                    "source_partition": letter.source_partition,
                    "source_offset": letter.source_offset,
                    "timestamp": message.timestamp()[1],
                    # Which writer's dead letter it is: a KIP-1191 or header-less one names no class.
                    "header_set": header_set_name(letter.header_set),
                }
            )
    finally:
        consumer.close()
    found.sort(key=lambda item: (item["timestamp"] or 0, item["dlq_offset"]), reverse=True)
    return found[:sample_size]


def growth_summary(
    kafka_config: Mapping[str, Any],
    topic: str,
    growth: DeadLetterGrowth,
    sample_size: int = 5,
    count_limit: int = 1000,
) -> dict[str, Any]:
    """A few of the newest new dead letters, and counts by exception class over at most ``count_limit`` of them.

    The counts read headers of the newest ``count_limit`` records only, so a burst of
    millions costs one bounded read; ``counts_cover`` says how many records they cover
    out of ``growth.count``.
    """
    letters = newest_dead_letters(kafka_config, topic, growth, sample_size=max(sample_size, count_limit))
    by_class = Counter(letter["exception_class"] or "unknown" for letter in letters)
    by_header_set = Counter(letter["header_set"] for letter in letters)
    return {
        "sample": letters[:sample_size],
        "counts_by_class": dict(by_class.most_common()),
        "counts_by_header_set": dict(by_header_set.most_common()),
        "counts_cover": len(letters),
    }


def latest_dead_letters(kafka_config: Mapping[str, Any], topic: str, count: int = 20) -> list[dict[str, Any]]:
    """The newest ``count`` dead letters of ``topic`` (any age), parsed: what a breach alert quotes."""
    ends = dlq_end_offsets(kafka_config, topic)
    window = {partition: max(0, end - count) for partition, end in ends.items()}
    growth = DeadLetterGrowth(sum(ends[p] - window[p] for p in ends), ends, window)
    return newest_dead_letters(kafka_config, topic, growth, sample_size=count)


#: How many of the DLQ's newest dead letters a breach alert counts its top exceptions and stages over.
ALERT_SAMPLE_SIZE = 20


def alert_sample(
    kafka_config: Callable[[], Mapping[str, Any]], dlq_topic: str | None, count: int = ALERT_SAMPLE_SIZE
) -> tuple[list[dict[str, Any]], str | None]:
    """The newest ``count`` dead letters of ``dlq_topic`` for a breach alert, or none and why they could not be read.

    A bounded read with no consumer group (nothing is committed, nobody's lag moves).
    ``kafka_config`` is called inside, so a connection that cannot be read is one more
    reason: any failure becomes the reason the alert prints, since the person paged
    should learn that the sample is missing and why, and the alert must go out all the
    same. No ``dlq_topic``: no sample, and nothing to explain.
    """
    if not dlq_topic:
        return [], None
    try:
        return latest_dead_letters(kafka_config(), dlq_topic, count), None
    except Exception as exc:  # librdkafka, the connection lookup and the parser raise many unrelated types
        return [], mask_text(f"{type(exc).__name__}: {exc}")  # it is printed in an alert
