"""Issue #24: a failed record whose DLQ record is too large for Kafka, in the job's real partition processing.

Connect (3.9 ``DeadLetterQueueReporter``) sends the DLQ record with a callback that only logs
a failure and counts it: the record is lost and the task goes on. Here the DLQ record is
written again without the failed record's key and value, with a marker saying why and
where the record is, counted in ``deadletterqueue-produce-failures``; the task goes on.
Driven without Spark, with Arrow batches as the ``kerr_kafka`` source hands them over.
"""

from __future__ import annotations

import random
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.kafka.record_size import record_size
from airflow_kerr.spark import partition
from airflow_kerr.spark.kafka_source import messages_to_arrow
from airflow_kerr.spark.sinks import HEADER_RECORD_OMITTED
from airflow_kerr.spark.spec import PipelineSpec


def make_spec(kafka_config: dict[str, Any], topic: str) -> PipelineSpec:
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
            },
        }
    )


def topics(kafka_config: dict[str, Any], topic: str, dlq_max_message_bytes: int | None = None) -> str:
    admin = AdminClient(kafka_config)
    dlq_config = {} if dlq_max_message_bytes is None else {"max.message.bytes": str(dlq_max_message_bytes)}
    new = [NewTopic(topic, 1, 1), NewTopic(f"{topic}.dlq", 1, 1, config=dlq_config)]
    new += [NewTopic(f"{topic}{suffix}", 1, 1) for suffix in (".clean", ".metrics")]
    for future in admin.create_topics(new).values():
        future.result(timeout=30)
    return topic


def run(kafka_config: dict[str, Any], topic: str, values: list[bytes], **kafka: Any) -> partition.PartitionProcessor:
    """Produce ``values`` to ``topic`` and process them as one partition task; the task's outcome is its finish."""
    producer = Producer({**kafka_config, "message.max.bytes": 10_000_000})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    spec = make_spec(kafka_config, topic)
    spec.kafka.update(kafka)
    processor = partition.PartitionProcessor(spec, run_id="too-large", part_name="part-0")
    processor.process(messages_to_arrow(read_to_end(kafka_config, topic)))
    processor.finish()
    processor.close()
    return processor


def header(message: Any, name: str) -> bytes | None:
    values = [value for key, value in message.headers() or [] if key == name]
    return values[-1] if values else None


def bad(length: int) -> bytes:
    """A value the JSON converter refuses, ``length`` bytes long."""
    return b"{" + b"x" * (length - 1)


def incompressible_bad(length: int) -> bytes:
    """A value the JSON converter refuses, ``length`` bytes of random hex after ``{``: lz4 cannot shrink it."""
    return b"{" + random.Random(length).randbytes(length).hex().encode()[: length - 1]


def test_dlq_records_under_at_and_over_the_producers_limit(kafka_config: dict[str, Any], unique_topic: str) -> None:
    """message.max.bytes=20,000: DLQ records of 19,999 and 20,000 bytes are written whole, 20,001 without its value."""
    limit = 20_000
    # The DLQ record's headers (topic, offset, exception, stacktrace) are measured on a probe run of the same shape.
    probe = topics(kafka_config, unique_topic[:-1] + "p")
    run(kafka_config, probe, [b'{"id": 0}', bad(10_000)])
    (measured,) = read_to_end(kafka_config, f"{probe}.dlq")
    overhead = record_size(measured.key(), measured.value(), measured.headers()) - 10_000
    topic = topics(kafka_config, unique_topic[:-1] + "t")

    processor = run(
        kafka_config,
        topic,
        [b'{"id": 0}', bad(limit - overhead - 1), bad(limit - overhead), bad(limit - overhead + 1), b'{"id": 4}'],
        **{"message.max.bytes": limit},
    )

    dlq = read_to_end(kafka_config, f"{topic}.dlq")
    assert [record_size(m.key(), m.value(), m.headers()) for m in dlq[:2]] == [limit - 1, limit]
    assert [header(m, "__connect.errors.offset") for m in dlq] == [b"1", b"2", b"3"]
    whole, omitted = dlq[:2], dlq[2]
    assert [m.value() for m in whole] == [bad(limit - overhead - 1), bad(limit - overhead)]
    assert omitted.key() is None and omitted.value() is None
    marker = f"too_large: {limit + 1:,} bytes > {limit:,}; key and value of {topic}/0/3 omitted".encode()
    assert header(omitted, HEADER_RECORD_OMITTED) == marker
    assert header(omitted, "__connect.errors.exception.class.name") is not None
    metrics = processor.metrics
    assert (metrics.deadletterqueue_produce_requests, metrics.deadletterqueue_produce_failures) == (3, 1)
    assert metrics.total_records_skipped == 3
    assert [m.value() for m in read_to_end(kafka_config, f"{topic}.clean")] == [b'{"id":0}', b'{"id":4}']


def test_a_dlq_record_the_broker_refuses_is_written_without_its_value(
    kafka_config: dict[str, Any], unique_topic: str
) -> None:
    """The DLQ topic takes 20,000-byte batches: its MESSAGE_TOO_LARGE comes in the delivery report, at flush.

    The broker measures the batch as sent, compressed: the value is one lz4 cannot shrink.
    """
    topic = topics(kafka_config, unique_topic, dlq_max_message_bytes=20_000)

    processor = run(kafka_config, topic, [b'{"id": 0}', incompressible_bad(25_000), b'{"id": 2}'])

    (omitted,) = read_to_end(kafka_config, f"{topic}.dlq")
    assert omitted.key() is None and omitted.value() is None
    marker = (header(omitted, HEADER_RECORD_OMITTED) or b"").decode()
    assert marker.startswith("too_large: ") and "bytes refused by the broker" in marker
    assert marker.endswith(f"; key and value of {topic}/0/1 omitted")
    assert header(omitted, "__connect.errors.topic") == topic.encode()
    assert processor.metrics.deadletterqueue_produce_failures == 1
    assert len(read_to_end(kafka_config, f"{topic}.clean")) == 2


def test_a_dlq_record_over_the_topics_limit_but_not_compressed_is_written_whole(
    kafka_config: dict[str, Any], unique_topic: str
) -> None:
    """DLQ records are sent lz4-compressed, so a 25,000-byte record that compresses fits a 20,000-byte DLQ topic."""
    topic = topics(kafka_config, unique_topic, dlq_max_message_bytes=20_000)

    processor = run(kafka_config, topic, [b'{"id": 0}', bad(25_000), b'{"id": 2}'])

    (whole,) = read_to_end(kafka_config, f"{topic}.dlq")
    assert whole.value() == bad(25_000)
    assert header(whole, HEADER_RECORD_OMITTED) is None
    assert header(whole, "__connect.errors.offset") == b"1"
    assert processor.metrics.deadletterqueue_produce_failures == 0
    assert len(read_to_end(kafka_config, f"{topic}.clean")) == 2
