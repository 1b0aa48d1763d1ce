"""A large DLQ's count starts with each partition's newest records, and still adds up exactly, on the real broker.

``summary.NEWEST_FIRST`` is lowered (30 records) so a DLQ of 120 is "large"; what is counted
first is checked against the log itself, read back with a plain consumer.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.errors.dead_letter import ERROR_HEADER_EXCEPTION
from airflow_kerr.inspection import summary
from airflow_kerr.inspection.cursor import ScanCursor
from airflow_kerr.inspection.scan_consumers import SCAN_CONSUMERS
from airflow_kerr.inspection.selection import Selection
from airflow_kerr.inspection.summary import DeadLetterSummaryChunk, summarize
from airflow_kerr.local.dead_letters import Failure, write_dead_letters

COUNT = 120
PARTITIONS = 2
NEWEST = 30
T0 = int(time.time() * 1000) - 3_600_000

#: (partition, offset) → (exception class, timestamp) of every record, as the broker holds them.
Log = dict[tuple[int, int], tuple[str, int]]


@pytest.fixture
def dlq(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Log]]:
    topic = create_topic(f"{unique_topic}.dlq", PARTITIONS)
    failures = [
        Failure(
            SourceRecord("orders", i % PARTITIONS, i, T0 + i * 1000, key=b"k%d" % i, value=b"{}"),
            Stage.TRANSFORMATION,
            (ValueError, KeyError, TypeError, OSError)[i * 7 % 4](f"order {i}"),
        )
        for i in range(COUNT)
    ]
    write_dead_letters(kafka_config, topic, failures)
    monkeypatch.setattr(summary, "NEWEST_FIRST", NEWEST)
    SCAN_CONSUMERS.close_all()
    yield topic, _read_back(kafka_config, topic)
    SCAN_CONSUMERS.close_all()


def _read_back(kafka_config: dict[str, Any], topic: str) -> Log:
    consumer = Consumer({**kafka_config, "group.id": "t-newest-first", "enable.auto.commit": False})
    log: Log = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(log) < COUNT and time.monotonic() < deadline:
            for message in consumer.consume(COUNT, 0.5):
                exception = dict(message.headers() or [])[ERROR_HEADER_EXCEPTION]
                assert isinstance(exception, bytes)
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                log[(partition, offset)] = (exception.decode(), message.timestamp()[1])
    finally:
        consumer.close()
    assert len(log) == COUNT
    return log


def _rest(config: dict[str, Any], topic: str, first: DeadLetterSummaryChunk) -> list[DeadLetterSummaryChunk]:
    chunks = [first]
    while not chunks[-1].complete:
        assert len(chunks) < 40
        chunks.append(summarize(config, topic, cursor=chunks[-1].cursor, max_records=25, max_seconds=10.0))
    return chunks


def _classes(chunks: list[DeadLetterSummaryChunk]) -> Counter[str]:
    added: Counter[str] = Counter()
    for chunk in chunks:
        added.update(chunk.counts["exception_class"])
    return added


def test_the_first_chunk_counts_each_partitions_newest_records(
    kafka_config: dict[str, Any], dlq: tuple[str, Log]
) -> None:
    topic, log = dlq
    ends = {p: 1 + max(o for q, o in log if q == p) for p in range(PARTITIONS)}
    share = NEWEST // PARTITIONS
    newest = Counter(cls for (p, o), (cls, _) in log.items() if o >= ends[p] - share)

    first = summarize(kafka_config, topic, max_records=NEWEST, max_seconds=10.0)

    assert (first.read, first.position, first.total, first.complete) == (NEWEST, NEWEST, COUNT, False)
    assert Counter(first.counts["exception_class"]) == newest
    assert first.cursor is not None
    # The rest of the scan is each partition's start up to its newest slice.
    assert ScanCursor.decode(first.cursor, topic, Selection()).partitions == {p: (0, ends[p] - share) for p in ends}
    chunks = _rest(kafka_config, topic, first)
    assert sum(c.read for c in chunks) == COUNT
    assert _classes(chunks) == Counter(cls for cls, _ in log.values())
    stamps = [ts for _, ts in log.values()]
    assert (first.oldest_ms, first.newest_ms) == (min(stamps), max(stamps))
    timeline: Counter[str] = Counter()
    for chunk in chunks:
        timeline.update(chunk.timeline)
    assert timeline == Counter(str(ts - ts % first.bucket_ms) for ts in stamps)


def test_first_timestamps_come_from_the_time_index_not_a_fetch_from_the_start(
    kafka_config: dict[str, Any], dlq: tuple[str, Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """noida-db answers a fetch at a partition's start with the whole partition: the scan must not ask for one."""
    topic, log = dlq
    asked: list[dict[tuple[str, int], int]] = []
    original = summary.first_records

    def recording(consumer: Any, starts: Any, ends: Any, deadline: float) -> Any:
        asked.append(dict(starts))
        return original(consumer, starts, ends, deadline)

    monkeypatch.setattr(summary, "first_records", recording)
    first = summarize(kafka_config, topic, max_records=NEWEST, max_seconds=10.0)

    assert first.oldest_ms == min(ts for (_, o), (_, ts) in log.items() if o == 0)
    assert all(offset > 0 for starts in asked for offset in starts.values()), asked


def test_newest_slices_not_read_in_time_are_left_to_the_scan_from_the_start(
    kafka_config: dict[str, Any], dlq: tuple[str, Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice is counted whole or not at all: with no time left, nothing is counted and nothing is lost."""
    topic, log = dlq
    monkeypatch.setattr(summary, "NEWEST_FIRST_S", 0.0)
    ends = {p: 1 + max(o for q, o in log if q == p) for p in range(PARTITIONS)}

    first = summarize(kafka_config, topic, max_records=NEWEST, max_seconds=1e-9)

    assert (first.read, first.complete, sum(first.counts["exception_class"].values())) == (0, False, 0)
    assert first.cursor is not None
    assert ScanCursor.decode(first.cursor, topic, Selection()).partitions == {p: (0, ends[p]) for p in ends}
    chunks = _rest(kafka_config, topic, first)
    assert _classes(chunks) == Counter(cls for cls, _ in log.values())


def test_newest_slices_are_read_whole_past_a_short_max_seconds(
    kafka_config: dict[str, Any], dlq: tuple[str, Log], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a slow machine the first chunk still shows the newest records: their slices get ``NEWEST_FIRST_S``."""
    topic, log = dlq
    monkeypatch.setattr(summary, "NEWEST_FIRST_S", 60.0)  # generous: what is checked is that they are waited for
    ends = {p: 1 + max(o for q, o in log if q == p) for p in range(PARTITIONS)}
    share = NEWEST // PARTITIONS

    first = summarize(kafka_config, topic, max_records=NEWEST, max_seconds=1e-9)

    assert (first.read, first.complete) == (NEWEST, False)
    assert Counter(first.counts["exception_class"]) == Counter(
        cls for (p, o), (cls, _) in log.items() if o >= ends[p] - share
    )
    chunks = _rest(kafka_config, topic, first)
    assert _classes(chunks) == Counter(cls for cls, _ in log.values())
