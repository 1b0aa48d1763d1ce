"""The error-aware job on an Avro topic: real broker, real local Spark, the development Schema Registry.

One topic holds good Avro orders, a JSON value, a schema id the registry does not know, a
truncated body, a tombstone and an order of another schema (``amount`` a string). Each bad
record reaches the DLQ at the stage, with the message and the chained causes Connect's
``AvroConverter`` gives it (confluentinc/schema-registry v7.0.16, avro-converter/.../AvroConverter.java
and avro-serializer/.../AbstractKafkaAvroDeserializer.java; checked against the real converter in
``test_schema_registry_differential.py``); the good ones and the tombstone reach the sink. Both
paths: per-record (into an Avro sink) and vectorized (a batch transformation, into a JSON sink).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from airflow_kerr.formats import RegistryClient, RegistrySettings, WireFormat
from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.spark.driver import run_job
from tests.registry_orders import (
    ERRORS,
    GOOD,
    ORDER,
    by_id,
    dead_letters,
    expected_avro_failures,
    failures,
    good_order,
    pipeline_spec,
    produce_avro_orders,
)

pytestmark = pytest.mark.spark

LOOSE_ORDER = ORDER.replace('"double"', '"string"').replace('"Order"', '"LooseOrder"')
LOOSE = GOOD + 4  # the offset of the order of another schema, after the shared records


@pytest.fixture
def avro_topic(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, schema_registry: Any
) -> tuple[str, int]:
    """The source topic (one partition) and the id of its orders' schema; records at offsets 0..14."""
    topic = create_topic(unique_topic)
    for suffix in (".avro", ".json", ".dlq", ".dlq2", ".metrics"):
        create_topic(topic + suffix)
    client = RegistryClient(RegistrySettings.from_mapping({"url": schema_registry.url}))
    loose_id = client.register(f"{topic}.loose-value", LOOSE_ORDER, "AVRO")
    loose = WireFormat.build(loose_id, AvroCodec(LOOSE_ORDER).encode({"id": LOOSE, "amount": "1.50"}))
    return topic, produce_avro_orders(kafka_config, schema_registry.url, topic, extra=[loose])


def test_per_record_path_into_an_avro_sink(
    spark: Any, kafka_config: dict[str, Any], schema_registry: Any, avro_topic: tuple[str, int]
) -> None:
    topic, order_id = avro_topic
    spec = pipeline_spec(
        kafka_config,
        schema_registry.url,
        topic,
        sink={"kind": "avro", "topic": f"{topic}.avro", "schema": ORDER},
        errors={**ERRORS, "errors.deadletterqueue.topic.name": f"{topic}.dlq"},
    )

    run_job(spark, spec, run_id="avro-per-record")

    found = failures(dead_letters(kafka_config, f"{topic}.dlq"))
    loose = found.pop(LOOSE)
    assert found == expected_avro_failures(topic, order_id)
    assert (loose.stage, loose.message) == (
        "TASK_PUT",
        f"Failed to serialize Avro data from topic {topic}.avro: Error serializing Avro message: The value does "
        "not fit the Avro schema: field 'amount': expected double, got str '1.50'",
    )
    written = read_to_end(kafka_config, f"{topic}.avro")
    codec = AvroCodec(ORDER)
    sink_id = WireFormat.schema_id(written[0].value())
    values = [None if m.value() is None else codec.decode(m.value(), 5) for m in written]
    assert sorted(values, key=by_id) == [*(good_order(i) for i in range(GOOD)), None]
    assert all(m.value() is None or WireFormat.schema_id(m.value()) == sink_id for m in written)


def test_vectorized_path_into_a_json_sink(
    spark: Any, kafka_config: dict[str, Any], schema_registry: Any, avro_topic: tuple[str, int]
) -> None:
    topic, order_id = avro_topic
    spec = pipeline_spec(
        kafka_config,
        schema_registry.url,
        topic,
        transformations=["airflow_kerr.examples.orders.add_amount_cents"],
        sink={"kind": "kafka", "topic": f"{topic}.json"},
        errors={**ERRORS, "errors.deadletterqueue.topic.name": f"{topic}.dlq2"},
    )

    run_job(spark, spec, run_id="avro-vectorized")

    found = failures(dead_letters(kafka_config, f"{topic}.dlq2"))
    assert {offset: failure for offset, failure in found.items() if offset != LOOSE} == expected_avro_failures(
        topic, order_id
    )
    loose = found[LOOSE]  # a string amount among doubles: one Arrow column holds one type
    assert loose.stage == "VALUE_CONVERTER"
    assert "the value does not fit its batch's Arrow column of type struct" in loose.message
    written = [None if m.value() is None else json.loads(m.value()) for m in read_to_end(kafka_config, f"{topic}.json")]
    assert sorted(written, key=by_id) == [
        *({**good_order(i), "amount_cents": round((i + 0.5) * 100)} for i in range(GOOD)),
        None,
    ]
