"""Watermarks of many partitions against a real broker: right offsets, in two ``ListOffsets`` requests in all.

The consumer is a real one; a thin wrapper counts the look-ups it is asked for, which is the
evidence that the partitions are listed together rather than one pair of requests each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from airflow_kerr.kafka.offsets import listed_watermarks, offset_consumer, watermarks

#: Records written per partition: one batch of several (whose end a plain ListOffsets may report as its base
#: offset plus one, see offsets.py), none, and a batch a record.
WRITTEN = {0: 7, 1: 0, 2: 3}


class CountingConsumer:
    """A real consumer that counts its ``offsets_for_times`` and uncached ``get_watermark_offsets`` calls."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.calls: Counter[str] = Counter()

    def offsets_for_times(self, partitions: Any, timeout: float) -> Any:
        self.calls["offsets_for_times"] += 1
        return self.consumer.offsets_for_times(partitions, timeout=timeout)

    def get_watermark_offsets(self, partition: Any, timeout: float | None = None, cached: bool = False) -> Any:
        if not cached:
            self.calls["get_watermark_offsets"] += 1
        if timeout is None:
            return self.consumer.get_watermark_offsets(partition, cached=cached)
        return self.consumer.get_watermark_offsets(partition, timeout=timeout, cached=cached)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.consumer, name)


@pytest.fixture
def topic(kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str) -> str:
    create_topic(unique_topic, partitions=len(WRITTEN))
    producer = Producer({**kafka_config, "linger.ms": 100})
    for partition, count in WRITTEN.items():
        for i in range(count):
            producer.produce(unique_topic, value=f"{partition}-{i}".encode(), partition=partition)
            if partition == 2:
                assert producer.flush(30) == 0  # one batch a record
    assert producer.flush(30) == 0
    return unique_topic


@pytest.fixture
def consumer(kafka_config: dict[str, Any]) -> Iterator[CountingConsumer]:
    real = offset_consumer(kafka_config)
    try:
        yield CountingConsumer(real)
    finally:
        real.close()


def test_watermarks_of_every_partition_are_right_from_two_listings_and_one_fetch(
    topic: str, consumer: CountingConsumer
) -> None:
    partitions = [(topic, p) for p in WRITTEN]

    marks = watermarks(cast(Consumer, consumer), partitions)

    assert marks == {(topic, p): (0, count) for p, count in WRITTEN.items()}
    assert consumer.calls == {"offsets_for_times": 2}


def test_ends_only_are_one_listing_and_lows_read_minus_one(topic: str, consumer: CountingConsumer) -> None:
    listed = listed_watermarks(cast(Consumer, consumer), [(topic, p) for p in WRITTEN], low=False)

    assert set(listed) == {(topic, p) for p in WRITTEN}
    assert {low for low, _ in listed.values()} == {-1}
    assert listed[(topic, 1)] == (-1, 0)
    assert consumer.calls == {"offsets_for_times": 1}


def test_a_partition_the_broker_refuses_raises_or_is_left_out(topic: str, consumer: CountingConsumer) -> None:
    asked = [(topic, 0), (topic, 9)]

    with pytest.raises(KafkaException):
        listed_watermarks(cast(Consumer, consumer), asked, timeout_s=5.0)
    kept = listed_watermarks(cast(Consumer, consumer), asked, timeout_s=5.0, skip_errors=True)

    assert list(kept) == [(topic, 0)]
