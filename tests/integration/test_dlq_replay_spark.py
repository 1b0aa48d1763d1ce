"""Replay a DLQ written by the error-aware Spark job, then run the job again over the repaired orders."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.examples.orders import generate_orders
from airflow_kerr.kafka.offsets import end_offsets, read_to_end
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.options import ReplayOptions
from airflow_kerr.replay.policy import (
    HEADER_PARKED_REASON,
    HEADER_REPLAY_COUNT,
    HEADER_REPLAY_RUN,
    HEADER_REPLAY_SOURCE,
)
from airflow_kerr.spark.driver import run_job
from airflow_kerr.spark.spec import PipelineSpec

pytestmark = pytest.mark.spark


def read_all(kafka_config: dict[str, Any], topic: str) -> list[Any]:
    """Every record of ``topic`` up to its end offsets (commit markers included in the range)."""
    return read_to_end(kafka_config, topic)


def header(message: Any, name: str) -> bytes | None:
    values = [value for key, value in message.headers() or [] if key == name]
    return values[-1] if values else None


def spec_for(kafka_config: dict[str, Any], topic: str) -> PipelineSpec:
    return PipelineSpec.from_dict(
        {
            "name": "orders_pipeline",
            "source": {"topics": [topic], "group_id": f"{topic}-group"},
            "key_converter": "string",
            "value_converter": "json",
            "transformations": [
                "airflow_kerr.examples.orders.validate_order",
                "airflow_kerr.examples.orders.enrich_order",
            ],
            "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
            "kafka": kafka_config,
            "metrics_topic": f"{topic}.metrics",
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{topic}.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
                "errors.retry.timeout": "10000",
                "errors.retry.delay.max.ms": "500",
            },
        }
    )


def test_replaying_the_jobs_dlq_puts_repaired_orders_back_and_the_next_run_takes_them(
    spark: Any, kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    topic = create_topic(unique_topic, 2)
    for suffix in (".clean", ".dlq", ".metrics", ".dlq.parked"):
        create_topic(topic + suffix)
    generated = generate_orders(kafka_config, topic, 600, malformed_every=50, invalid_every=70, flaky_every=90)
    spec = spec_for(kafka_config, topic)
    run_job(spark, spec, run_id="before-replay")
    dlq = f"{topic}.dlq"
    dlq_end = end_offsets(kafka_config, [(dlq, 0)])[(dlq, 0)]
    assert dlq_end == generated.bad

    invalid = DlqReplay(
        kafka_config,
        ReplayOptions.build(
            dlq_topic=dlq,
            stages=["TRANSFORMATION"],
            fix="airflow_kerr.examples.orders.repair_order",
            batch_size=4,
        ),
        run_id="replay-invalid",
    ).run()
    malformed = DlqReplay(
        kafka_config,
        ReplayOptions.build(
            dlq_topic=dlq,
            replay_group=f"{dlq}-malformed",
            stages=["VALUE_CONVERTER"],
            fix="airflow_kerr.examples.orders.repair_order",
        ),
        run_id="replay-malformed",
    ).run()

    assert (invalid.selected, invalid.replayed, invalid.parked) == (generated.invalid, generated.invalid, 0)
    assert (malformed.selected, malformed.replayed, malformed.parked) == (generated.malformed, 0, generated.malformed)
    landed = [m for m in read_all(kafka_config, topic) if header(m, HEADER_REPLAY_RUN) == b"replay-invalid"]
    assert len(landed) == generated.invalid
    for message in landed:
        order = json.loads(message.value())
        assert order["amount"] > 0 and order["repaired"] is True
        assert header(message, "kind") == b"invalid" and header(message, "source") == b"orders-generator"
        assert header(message, HEADER_REPLAY_COUNT) == b"1"
        assert (header(message, HEADER_REPLAY_SOURCE) or b"").startswith(f"{dlq}/0/".encode())
        assert not any(name.startswith("__connect.errors.") for name, _ in message.headers())
    parked = read_all(kafka_config, f"{dlq}.parked")
    assert len(parked) == generated.malformed
    assert all(
        (header(m, HEADER_PARKED_REASON) or b"").startswith(b"fix_failed: json.decoder.JSONDecodeError") for m in parked
    )
    consumer = Consumer({**kafka_config, "group.id": f"kerr-replay.{dlq}"})
    try:
        (position,) = consumer.committed([TopicPartition(dlq, 0)], timeout=10)
    finally:
        consumer.close()
    assert position.offset == dlq_end

    run_job(spark, spec, run_id="after-replay")

    clean = read_all(kafka_config, f"{topic}.clean")
    assert len(clean) == generated.good + generated.invalid
    assert sum(1 for m in clean if json.loads(m.value()).get("repaired")) == generated.invalid
    assert end_offsets(kafka_config, [(dlq, 0)])[(dlq, 0)] == dlq_end, "no repaired order failed again"
