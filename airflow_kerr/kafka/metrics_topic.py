"""Read the job's metrics records back from the metrics topic, counting each input once.

The job publishes one JSON record per partition task (``scope="task"``) and one
per run (``scope="run"``), keyed by pipeline name; a task that tripped ``errors.outage.*``
adds one ``scope="outage"`` record naming the cause. Readers start at the first
offset at or after a timestamp (ListOffsets by time), so they never scan the
whole topic.

A task record names the input it counted: records ``[start_offset, end_offset)``
of ``source_partition`` of ``source_topic`` (see :class:`InputRange`). The same
input can be counted by more than one task record: a run killed before its commit
is read again by the next run, and Spark runs a failed or slow task again. Summing
every record would count those inputs twice, so :func:`count_inputs_once` lets one
record win wherever ranges overlap: a finished task's over a failed attempt's, then
the latest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from airflow_kerr.kafka.offsets import offset_consumer, read_range, topic_partitions, watermarks

#: The fields of a task record that name its input: offsets ``[start_offset, end_offset)`` of one source partition.
SOURCE_TOPIC = "source_topic"
SOURCE_PARTITION = "source_partition"
START_OFFSET = "start_offset"
END_OFFSET = "end_offset"
#: The ``scope`` of the record a task publishes when its batch tripped ``errors.outage.*``: the guard's outage event.
OUTAGE_SCOPE = "outage"


@dataclass(frozen=True)
class InputRange:
    """The source records one task read: offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> InputRange | None:
        """The range a metrics record names, or None when it names none (a record from an older writer)."""
        try:
            found = cls(
                str(record[SOURCE_TOPIC]),
                int(record[SOURCE_PARTITION]),
                int(record[START_OFFSET]),
                int(record[END_OFFSET]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return found if found.start < found.end else None

    def as_fields(self) -> dict[str, Any]:
        """The range as the fields a task record carries."""
        return {
            SOURCE_TOPIC: self.topic,
            SOURCE_PARTITION: self.partition,
            START_OFFSET: self.start,
            END_OFFSET: self.end,
        }


def input_range_fields(topic: str, partition: int, first_offset: int | None, last_offset: int | None) -> dict[str, Any]:
    """The fields a task record adds to name the offsets it read, first to last; none when it read nothing.

    For the writer: with them the readers can tell when two records counted the same input.
    """
    if first_offset is None or last_offset is None or not 0 <= first_offset <= last_offset:
        return {}
    return InputRange(topic, partition, first_offset, last_offset + 1).as_fields()


def read_metrics_records(
    kafka_config: Mapping[str, Any],
    topic: str,
    since_ms: int,
    accept: Callable[[dict[str, Any]], bool] = lambda record: True,
    timeout_s: float = 30.0,
) -> list[dict[str, Any]]:
    """Every metrics record written at or after ``since_ms`` that ``accept`` keeps, oldest first.

    Oldest by ``window_end_ms``, the time the job wrote the record; records written in
    the same millisecond keep the order they were written in (one pipeline's records
    share a partition), so of two the later one is the latest for :func:`count_inputs_once`.
    """
    consumer = offset_consumer(kafka_config)
    try:
        partitions = topic_partitions(consumer, topic, timeout_s)
        marks = watermarks(consumer, partitions, timeout_s)
        found = consumer.offsets_for_times([TopicPartition(t, p, since_ms) for t, p in partitions], timeout=timeout_s)
        starts: dict[int, int] = {}
        for tp in found:
            low, high = marks[(tp.topic, tp.partition)]
            starts[tp.partition] = max(tp.offset if tp.offset >= 0 else high, low)
        ends = {p: high for (_, p), (_, high) in marks.items()}
        messages, _ = read_range(consumer, topic, starts, ends, timeout_s)
        records: list[dict[str, Any]] = []
        for message in messages:
            try:
                record = json.loads(message.value() or b"")
            except (TypeError, ValueError):
                continue
            if isinstance(record, dict) and accept(record):
                records.append(record)
        return sorted(records, key=lambda r: int(r.get("window_end_ms", 0)))
    finally:
        consumer.close()


def run_summary(
    kafka_config: Mapping[str, Any], topic: str, pipeline: str, run_id: str, since_ms: int
) -> dict[str, Any] | None:
    """The ``scope="run"`` record of one run, or None when the job did not publish it."""
    found = read_metrics_records(
        kafka_config,
        topic,
        since_ms,
        lambda r: r.get("scope") == "run" and r.get("pipeline") == pipeline and r.get("run_id") == run_id,
    )
    return found[-1] if found else None


def count_inputs_once(records: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], float]]:
    """Each task record (in the given order, oldest first) with the share of its input range it counts.

    Every input offset counts once, by the one record that counts it best: a finished
    task's record before that of an attempt that failed (its range runs to the end of
    the batch it failed in, its counters stop at the failure, and a worker of a killed
    run may write it after the rerun wrote its own), then the latest. So a killed run's
    records give way to the rerun's for the offsets both read, and a failed task attempt
    to its retry, whatever the split of the ranges. A record whose offsets all count
    elsewhere gets 0, an untouched one 1, a partly covered one the fraction of its
    offsets left to it: its counters are totals, so its part of them is estimated in
    proportion. Records that name no range keep 1; nothing says what they overlap.
    """
    precedence = sorted(range(len(records)), key=lambda i: (records[i].get("state") != "failed", i), reverse=True)
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    shares = [1.0] * len(records)
    for index in precedence:
        span = InputRange.of(records[index])
        if span is None:
            continue
        spans = covered.get((span.topic, span.partition), [])
        overlap = sum(max(0, min(end, span.end) - max(start, span.start)) for start, end in spans)
        shares[index] = 1.0 - overlap / (span.end - span.start)
        covered[(span.topic, span.partition)] = _merge_span(spans, span.start, span.end)
    return list(zip(records, shares, strict=True))


def _merge_span(spans: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """Sorted disjoint ``spans`` with ``[start, end)`` added, still sorted and disjoint (so overlaps sum exactly)."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted([*spans, (start, end)]):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged
