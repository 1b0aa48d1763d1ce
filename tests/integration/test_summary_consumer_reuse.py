"""A chunked summary keeps its consumer between chunks (``airflow_kerr.inspection.scan_consumers``), on the real broker.

noida-db answers each new consumer's first fetch with the partition's whole remainder, so a
new consumer per chunk made a large partition's count quadratic. These tests count the
consumers a scan opens and check the figures are the same with the cache, without it, and
with a cursor the cache never saw.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.inspection import summary
from airflow_kerr.inspection.scan_consumers import SCAN_CONSUMERS
from airflow_kerr.inspection.summary import DeadLetterSummaryChunk, summarize
from airflow_kerr.local.dead_letters import Failure, write_dead_letters

COUNT = 120
T0 = int(time.time() * 1000) - 3_600_000


@pytest.fixture
def dlq(kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str) -> Iterator[str]:
    topic = create_topic(f"{unique_topic}.dlq", 2)
    failures = [
        Failure(
            SourceRecord("orders", i % 2, i, T0 + i * 1000, key=b"k%d" % i, value=b"{}"),
            (Stage.TRANSFORMATION, Stage.VALUE_CONVERTER)[i % 2],
            (ValueError, KeyError, TypeError)[i % 3](f"order {i}"),
        )
        for i in range(COUNT)
    ]
    write_dead_letters(kafka_config, topic, failures)
    SCAN_CONSUMERS.close_all()
    yield topic
    SCAN_CONSUMERS.close_all()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every consumer the summary creates, in order."""
    made: list[object] = []
    original = summary.scratch_consumer

    def counting(kafka_config: Any) -> Any:
        consumer = original(kafka_config)
        made.append(consumer)
        return consumer

    monkeypatch.setattr(summary, "scratch_consumer", counting)
    return made


def _rest(config: dict[str, Any], topic: str, first: DeadLetterSummaryChunk) -> list[DeadLetterSummaryChunk]:
    chunks = [first]
    while not chunks[-1].complete:
        assert len(chunks) < 40
        chunks.append(summarize(config, topic, cursor=chunks[-1].cursor, max_records=25, max_seconds=10.0))
    return chunks


def _figures(chunks: list[DeadLetterSummaryChunk]) -> tuple[int, int, dict[str, Counter[str]], Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    timeline: Counter[str] = Counter()
    for chunk in chunks:
        for name, values in chunk.counts.items():
            counts.setdefault(name, Counter()).update(values)
        timeline.update(chunk.timeline)
    return sum(c.read for c in chunks), sum(c.matched for c in chunks), counts, timeline


def test_a_chunked_summary_reuses_one_consumer_and_adds_up(
    kafka_config: dict[str, Any], dlq: str, opened: list[object]
) -> None:
    whole = summarize(kafka_config, dlq, max_records=10 * COUNT, max_seconds=10.0)
    assert whole.complete and whole.read == COUNT
    assert len(opened) == 2  # the scan's range look-up, then the count
    opened.clear()

    chunks = _rest(kafka_config, dlq, summarize(kafka_config, dlq, max_records=25, max_seconds=10.0))
    assert len(chunks) >= 5
    assert len(opened) == 2, "each chunk after the first must go on with the kept consumer"
    assert len(SCAN_CONSUMERS) == 0, "a complete scan closes its consumer"
    assert _figures(chunks) == _figures([whole])
    assert _figures(chunks)[:2] == (COUNT, COUNT)


def test_a_cursor_the_cache_never_saw_still_counts_right(
    kafka_config: dict[str, Any], dlq: str, opened: list[object]
) -> None:
    """A cursor from another process, an evicted consumer, or one sent twice: a new consumer, same figures."""
    whole = summarize(kafka_config, dlq, max_records=10 * COUNT, max_seconds=10.0)
    first = summarize(kafka_config, dlq, max_records=25, max_seconds=10.0)
    second = summarize(kafka_config, dlq, cursor=first.cursor, max_records=25, max_seconds=10.0)
    again = summarize(kafka_config, dlq, cursor=first.cursor, max_records=25, max_seconds=10.0)  # a retried request
    assert (again.read, again.counts, again.timeline, again.cursor) == (
        second.read,
        second.counts,
        second.timeline,
        second.cursor,
    )
    SCAN_CONSUMERS.close_all()  # as if the next request reached another worker
    opened.clear()
    chunks = [first, second, *_rest(kafka_config, dlq, second)[1:]]
    assert len(opened) == 1, "only the resumed chunk after the miss opens a consumer"
    assert _figures(chunks) == _figures([whole])
