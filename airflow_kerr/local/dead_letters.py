"""Write what the error-aware job leaves after a batch, without running it: its dead letters and its task metrics
record. Sample data for the local UI, the demo, the tests and the benchmarks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kerr.errors import ErrorContext, HeaderFormat, SourceRecord, Stage, TaskId, build_dead_letter_record
from airflow_kerr.errors.metrics import ErrorMetrics


@dataclass(frozen=True)
class Failure:
    """One record that failed: where it came from, the stage it failed in and the error."""

    record: SourceRecord
    stage: Stage
    error: BaseException
    executing_class: str = "airflow_kerr.examples.orders"


#: The task the sample dead letters name as the one that failed them.
SAMPLE_TASK = TaskId("orders", 0)


def write_dead_letters(
    kafka_config: Mapping[str, Any], dlq_topic: str, failures: Iterable[Failure], task: TaskId = SAMPLE_TASK
) -> int:
    """Produce one DLQ record per failure (Connect's headers, the error context) and flush; the count written.

    Raises ``RuntimeError`` when the broker did not take them all within 30 s.
    """
    from confluent_kafka import Producer

    producer = Producer(dict(kafka_config))
    count = 0
    for failure in failures:
        context = ErrorContext(task, failure.stage, failure.executing_class, failure.error, failure.record)
        letter = build_dead_letter_record(
            context, topic=dlq_topic, header_format=HeaderFormat.CONNECT, context_headers=True, copy_record=True
        )
        producer.produce(**letter.produce_kwargs())
        count += 1
    if producer.flush(30) != 0:
        raise RuntimeError(f"could not write {count} dead letters to {dlq_topic} within 30 s")
    return count


def write_task_metrics(
    kafka_config: Mapping[str, Any], metrics_topic: str, pipeline: str, records_in: int, errors: int, **fields: Any
) -> int:
    """Produce one task's metrics record for a batch of ``records_in`` with ``errors`` failed (all tolerated), as the
    job publishes it on its metrics topic; return the record's ``window_end_ms``. ``fields`` are added to the record
    (``run_id``, ``dead_letter_offsets``...).

    Raises ``RuntimeError`` when the broker did not take it within 30 s.
    """
    import json
    import time

    from confluent_kafka import Producer

    now_ms = int(time.time() * 1000)
    counters = ErrorMetrics(
        total_record_failures=errors, total_record_errors=errors, total_records_skipped=errors, records_in=records_in
    )
    record = {
        **counters.to_record(
            pipeline=pipeline, task=0, run_id=f"r{now_ms}", window_start_ms=now_ms - 100, window_end_ms=now_ms
        ),
        "scope": "task",
        "state": "success",
        **fields,
    }
    producer = Producer(dict(kafka_config))
    producer.produce(metrics_topic, key=pipeline.encode(), value=json.dumps(record).encode())
    if producer.flush(30) != 0:
        raise RuntimeError(f"could not write the metrics record of {pipeline} to {metrics_topic} within 30 s")
    return now_ms
