"""The three real parts together: a real broker, real Spark through spark-submit, real Airflow."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


def test_smoke_dag_counts_seeded_records(
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    load_dag: Callable[[str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    java_home: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = create_topic(unique_topic, partitions=3)
    result_topic = create_topic(f"{unique_topic}.result")
    producer = Producer({**kafka_config, "linger.ms": 5})
    for i in range(1000):
        producer.produce(topic, key=f"k{i}".encode(), value=f"record {i}".encode())
    assert producer.flush(30) == 0
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))

    states = run_dag(load_dag("smoke_spark_kafka"), topic=topic, result_topic=result_topic)

    assert states == {"count_records": "success", "read_result": "success"}
    consumer = Consumer({**kafka_config, "group.id": "smoke-test-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(result_topic, 0, 0)])
    message = consumer.poll(30)
    consumer.close()
    assert message is not None and message.error() is None
    assert json.loads(cast(bytes, message.value())) == {"topic": topic, "count": 1000}
    assert os.environ["PYSPARK_PYTHON"]
