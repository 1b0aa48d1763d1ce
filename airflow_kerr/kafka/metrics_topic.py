"""Read the job's metrics records back from the metrics topic.

The job publishes one JSON record per partition task (``scope="task"``) and one
per run (``scope="run"``), keyed by pipeline name. Readers start at the first
offset at or after a timestamp (ListOffsets by time), so they never scan the
whole topic.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import TopicPartition

from airflow_kerr.kafka.offsets import offset_consumer, read_range, topic_partitions, watermarks


def read_metrics_records(
    kafka_config: Mapping[str, Any],
    topic: str,
    since_ms: int,
    accept: Callable[[dict[str, Any]], bool] = lambda record: True,
    timeout_s: float = 30.0,
) -> list[dict[str, Any]]:
    """Every metrics record written at or after ``since_ms`` that ``accept`` keeps, oldest first."""
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
        return sorted(records, key=lambda r: (r.get("window_end_ms", 0), r.get("window_start_ms", 0)))
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
