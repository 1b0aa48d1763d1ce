"""A DLQ record can never stop the replay: garbage in its error headers parks it, with the reason, on a real broker.

Each malformed record below once made every run (dry runs too) fail and the group never move
past it: a topic header longer than librdkafka accepts (``RuntimeError: Unable to create topic
object``), and numeric headers past ``int``'s 4,300-digit limit (``ValueError``). Now the run
completes, parks exactly those records with a reason naming the header, and commits past them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record
from airflow_kerr.kafka.offsets import end_offsets, read_to_end
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.options import ReplayOptions
from airflow_kerr.replay.policy import HEADER_PARKED_REASON
from tests.clock import RECENT_MS

#: An hour ago: the records keep a real event time, well inside the broker's retention (7 days), which
#: deletes a record whose timestamp is older (noida-db within a second of the write; Apache Kafka within 5 min).

#: Header name, value and the text its parked reason must contain.
MALFORMED: list[tuple[str, bytes, str]] = [
    ("__connect.errors.topic", b"t" * 600, "__connect.errors.topic: 'tttt"),
    ("__connect.errors.topic", b"orders/eu\xff", "__connect.errors.topic: 'orders/eu\ufffd' is not a topic name"),
    ("__connect.errors.offset", b"7" * 5000, "__connect.errors.offset: '7777"),
    ("__connect.errors.partition", b"9" * 4400, "__connect.errors.partition: '9999"),
    ("__connect.errors.task.id", b"1" * 6000, "__connect.errors.task.id: '1111"),
    ("__dlq.errors.delivery.count", b"3" * 5000, "__dlq.errors.delivery.count: '3333"),
]
GOOD = 6


@pytest.fixture
def dlq(kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str) -> tuple[str, str]:
    """A source topic and a DLQ holding good records interleaved with one record per malformed header."""
    source, dlq_topic = create_topic(unique_topic), create_topic(f"{unique_topic}.dlq")
    producer = Producer(kafka_config)
    for i in range(GOOD):
        record = SourceRecord(source, 0, i, RECENT_MS, key=f"o-{i}".encode(), value=b'{"amount": 1}')
        context = ErrorContext(TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "v", ValueError("neg"), record)
        producer.produce(**build_dead_letter_record(context, topic=dlq_topic).produce_kwargs())
        if i < len(MALFORMED):
            name, raw, _ = MALFORMED[i]
            headers = [("__connect.errors.topic", source.encode()), ("__connect.errors.stage", b"TRANSFORMATION")]
            producer.produce(dlq_topic, key=f"bad-{i}".encode(), value=b"v", headers=[*headers, (name, raw)])
    assert producer.flush(10) == 0
    return source, dlq_topic


def group_offset(kafka_config: dict[str, Any], group: str, topic: str) -> int:
    consumer = Consumer({**kafka_config, "group.id": group})
    try:
        (found,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    return int(found.offset)


def test_a_dry_run_reports_each_malformed_record_as_would_park(
    kafka_config: dict[str, Any], dlq: tuple[str, str]
) -> None:
    _, dlq_topic = dlq

    summary = DlqReplay(
        kafka_config, ReplayOptions.build(dlq_topic=dlq_topic, dry_run=True), run_id="dry", idle_timeout_s=10
    ).run()

    assert (summary.status, summary.scanned, summary.would_replay, summary.would_park) == (
        "completed",
        GOOD + len(MALFORMED),
        GOOD,
        len(MALFORMED),
    )
    reported = summary.to_dict()
    assert (reported["replayed"], reported["parked"]) == (0, 0), "a dry run writes nothing"
    assert (reported["would_replay"], reported["would_park"]) == (GOOD, len(MALFORMED))
    rows = [row for row in summary.to_dict()["breakdown"] if row["action"] == "park"]
    assert [(row["reason"], row["count"]) for row in rows] == [("malformed_headers", len(MALFORMED))]
    assert len(summary.park_examples) == len(MALFORMED)
    for example, (_, _, named) in zip(summary.park_examples, MALFORMED, strict=True):
        assert f"{dlq_topic}/0/" in example and "malformed_headers: " in example and named in example
        assert len(example) < 300, "the value is quoted cut short"


def test_a_run_parks_the_malformed_records_replays_the_rest_and_moves_past_them(
    kafka_config: dict[str, Any], dlq: tuple[str, str]
) -> None:
    source, dlq_topic = dlq

    summary = DlqReplay(
        kafka_config, ReplayOptions.build(dlq_topic=dlq_topic, batch_size=4), run_id="real", idle_timeout_s=10
    ).run()

    assert (summary.status, summary.replayed, summary.parked) == ("completed", GOOD, len(MALFORMED))
    assert (summary.to_dict()["replayed"], summary.to_dict()["would_replay"]) == (GOOD, 0)
    assert len(read_to_end(kafka_config, source)) == GOOD
    parked = read_to_end(kafka_config, f"{dlq_topic}.parked")
    reasons = sorted(
        (value or b"").decode() for m in parked for name, value in m.headers() or [] if name == HEADER_PARKED_REASON
    )
    assert len(reasons) == len(MALFORMED)
    for (_, _, named), reason in zip(sorted(MALFORMED, key=lambda m: m[2]), reasons, strict=True):
        assert reason.startswith("malformed_headers: ") and named in reason and len(reason) < 300
    end = end_offsets(kafka_config, [(dlq_topic, 0)])[(dlq_topic, 0)]
    assert group_offset(kafka_config, f"kerr-replay.{dlq_topic}", dlq_topic) == end
