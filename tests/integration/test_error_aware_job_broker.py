"""The job's Kafka side against the real broker, without Spark: DLQ writes that fail, DLQ topic creation.

A partition task's processor is driven with Arrow batches made from the topic's records,
exactly as the ``kerr_kafka`` source hands them over, so these run in seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_kerr.errors import DeadLetterQueueError
from airflow_kerr.kafka.offsets import offset_consumer, read_to_end, topic_partitions
from airflow_kerr.spark import driver, failures, partition
from airflow_kerr.spark.kafka_source import messages_to_arrow
from airflow_kerr.spark.spec import PipelineSpec


def make_spec(kafka_config: dict[str, Any], topic: str, **errors: Any) -> PipelineSpec:
    return PipelineSpec.from_dict(
        {
            "name": "orders_pipeline",
            "source": {"topics": [topic], "group_id": f"{topic}-group"},
            "value_converter": "json",
            "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
            "kafka": kafka_config,
            "metrics_topic": f"{topic}.metrics",
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{topic}.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
                **errors,
            },
        }
    )


def produce(kafka_config: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer(kafka_config)
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def test_a_dlq_write_kafka_refuses_fails_the_task_and_says_why(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The producer's message.max.bytes admits the small sink records but not the DLQ record of a large bad one.

    The run used to fail with "Could not produce message to dead letter queue. topic=..." and
    nothing else: the Kafka error was only the exception's cause, which Spark drops.
    """
    topic = create_topic(unique_topic)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    produce(kafka_config, topic, [b'{"id": 1}', b"{not json " + b"x" * 1500, b'{"id": 3}'])
    spec = make_spec(kafka_config, topic)
    spec.kafka["message.max.bytes"] = 1000
    processor = partition.PartitionProcessor(spec, run_id="dlq-too-large", part_name="part-0")
    batch = messages_to_arrow(read_to_end(kafka_config, topic))

    with caplog.at_level(logging.ERROR), pytest.raises(DeadLetterQueueError) as raised:
        processor.process(batch)

    message = str(raised.value)
    assert message.startswith(f"Could not produce message to dead letter queue. topic={topic}.dlq: ")
    assert "KafkaError MSG_SIZE_TOO_LARGE: " in message
    assert any("MSG_SIZE_TOO_LARGE" in record.getMessage() for record in caplog.records)
    assert processor.metrics.deadletterqueue_produce_failures == 1

    failure = str(processor.fail(raised.value))
    summary = failures.failure_summary(f"An exception was thrown from the Python worker:\nTraceback ...\n{failure}")
    assert "MSG_SIZE_TOO_LARGE" in summary[0]
    assert any(line.startswith("caused by KafkaError MSG_SIZE_TOO_LARGE: ") for line in summary)
    assert summary[-1].startswith(failures.ERROR_CONTEXT_MARKER)
    processor.close()


def test_a_task_serves_its_dlq_delivery_reports_while_it_runs(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """The DLQ records of one batch are let go with the next batches, not held until the task's flush.

    confluent-kafka keeps each DLQ record (its delivery callback holds it) until the record's
    report is served, and only ``poll`` or ``flush`` serves reports: a flood of bad records
    used to keep every one of them in memory until the task ended. The producer's length
    counts records not yet delivered and reports not yet served.
    """
    topic = create_topic(unique_topic)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    produce(kafka_config, topic, [b"{bad %d" % i for i in range(50)] + [b'{"id": 1}'])
    processor = partition.PartitionProcessor(make_spec(kafka_config, topic), run_id="reports", part_name="part-0")
    batch = messages_to_arrow(read_to_end(kafka_config, topic))
    dead_letters = processor.channel.dead_letters
    assert dead_letters is not None

    processor.process(batch.slice(0, 50))
    waited = 0
    deadline = time.monotonic() + 30
    while len(dead_letters) and time.monotonic() < deadline:
        processor.process(batch.slice(50, 1))  # the task goes on; its flush is still to come
        waited += 1
        time.sleep(0.05)

    assert len(dead_letters) == 0, f"{len(dead_letters)} DLQ records still held after {waited} more batches"
    processor.finish()
    processor.close()
    assert len(read_to_end(kafka_config, f"{topic}.dlq")) == 50


def partitions_of(kafka_config: dict[str, Any], topic: str) -> int:
    consumer = offset_consumer(kafka_config)
    try:
        return len(topic_partitions(consumer, topic))
    finally:
        consumer.close()


def test_replication_factor_minus_one_creates_the_dlq_topic_with_the_broker_default(
    kafka_config: dict[str, Any], unique_topic: str
) -> None:
    spec = make_spec(kafka_config, unique_topic, **{"errors.deadletterqueue.topic.replication.factor": "-1"})

    driver.ensure_dead_letter_topic(spec, spec.validate())

    assert partitions_of(kafka_config, f"{unique_topic}.dlq") == 1


@pytest.mark.parametrize("factor", [-5, 0, 32767])
def test_a_replication_factor_the_cluster_refuses_fails_when_the_topic_is_created_naming_the_key(
    kafka_config: dict[str, Any], unique_topic: str, factor: int
) -> None:
    """Accepted when parsed, as Connect accepts any short; refused by the client or the broker on creation."""
    spec = make_spec(kafka_config, unique_topic, **{"errors.deadletterqueue.topic.replication.factor": factor})
    config = spec.validate()

    with pytest.raises(driver.DeadLetterTopicUnavailable) as raised:
        driver.ensure_dead_letter_topic(spec, config)

    assert f"errors.deadletterqueue.topic.replication.factor={factor}" in str(raised.value)
    assert f"{unique_topic}.dlq" in str(raised.value)


def test_an_existing_dlq_topic_is_used_whatever_the_replication_factor_says(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Connect reads the factor only to create the topic; an existing topic is used as it is."""
    create_topic(f"{unique_topic}.dlq")
    spec = make_spec(kafka_config, unique_topic, **{"errors.deadletterqueue.topic.replication.factor": 0})

    driver.ensure_dead_letter_topic(spec, spec.validate())

    assert partitions_of(kafka_config, f"{unique_topic}.dlq") == 1
