"""Write dead letters as the error-aware job writes them: sample data for the local UI, the demo and the tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kerr.errors import ErrorContext, HeaderFormat, SourceRecord, Stage, TaskId, build_dead_letter_record


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
