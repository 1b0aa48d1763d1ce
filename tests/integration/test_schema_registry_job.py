"""The error-aware job on an Avro topic: real broker, real local Spark, the development Schema Registry.

One topic holds good Avro orders, a JSON value, a schema id the registry does not know, a
truncated body, a tombstone and an order of another schema (``amount`` a string). Each bad
record reaches the DLQ at the stage and with the text Connect's ``AvroConverter`` gives it
(confluentinc/schema-registry v7.9.9, avro-converter/.../AvroConverter.java and
avro-serializer/.../AbstractKafkaAvroDeserializer.java); the good ones and the tombstone
reach the sink. Both paths: per-record (into an Avro sink) and vectorized (a batch
transformation, into a JSON sink).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.formats import RegistryClient, RegistrySettings, WireFormat
from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.spark.driver import run_job
from airflow_kerr.spark.spec import PipelineSpec

pytestmark = pytest.mark.spark

ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
    }
)
LOOSE_ORDER = ORDER.replace('"double"', '"string"').replace('"Order"', '"LooseOrder"')
GOOD = 10
UNKNOWN_ID = 999_999
ERRORS = {"errors.tolerance": "all", "errors.deadletterqueue.context.headers.enable": "true"}


@pytest.fixture
def avro_topic(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, schema_registry: Any
) -> tuple[str, int, int]:
    """The source topic (one partition) and the ids of its two schemas; records at offsets 0..15."""
    topic = create_topic(unique_topic)
    for suffix in (".avro", ".json", ".dlq", ".dlq2", ".metrics"):
        create_topic(topic + suffix)
    client = RegistryClient(RegistrySettings.from_mapping({"url": schema_registry.url}))
    order_id = client.register(f"{topic}-value", ORDER, "AVRO")
    loose_id = client.register(f"{topic}.loose-value", LOOSE_ORDER, "AVRO")
    codec = AvroCodec(ORDER)
    good = [WireFormat.build(order_id, codec.encode({"id": i, "amount": i + 0.5})) for i in range(GOOD)]
    values: list[bytes | None] = [
        *good,
        b'{"id": 10, "amount": 1.0}',  # 10: a JSON value
        WireFormat.build(UNKNOWN_ID, good[0][5:]),  # 11: an id the registry does not know
        good[1][:-3],  # 12: a truncated body
        None,  # 13: a tombstone
        WireFormat.build(loose_id, AvroCodec(LOOSE_ORDER).encode({"id": 14, "amount": "1.50"})),  # 14
    ]
    producer = Producer(kafka_config)
    for offset, value in enumerate(values):
        producer.produce(topic, value=value, key=f"k{offset}".encode())
    assert producer.flush(30) == 0
    return topic, order_id, loose_id


def spec_for(kafka_config: dict[str, Any], registry_url: str, topic: str, **fields: Any) -> PipelineSpec:
    return PipelineSpec.from_dict(
        {
            "name": "orders_avro",
            "source": {"topics": [topic], "group_id": f"{topic}-{fields['sink']['kind']}"},
            "key_converter": "string",
            "value_converter": "avro",
            "kafka": kafka_config,
            "schema_registry": {"url": registry_url},
            "metrics_topic": f"{topic}.metrics",
            "batch_size": 8,
            **fields,
        }
    )


def by_id(value: dict[str, Any] | None) -> float:
    """Sort key: orders by id, the tombstone last (the job splits the partition between two Spark tasks)."""
    return float("inf") if value is None else value["id"]


def dead_letters(kafka_config: dict[str, Any], topic: str) -> dict[int, tuple[str, str]]:
    """Each DLQ record's source offset and its (stage, exception message)."""
    found = {}
    for message in read_to_end(kafka_config, topic):
        letter = parse_dead_letter(message.headers(), message.key(), message.value())
        assert letter.source_offset is not None
        found[letter.source_offset] = (str(letter.stage), letter.exception_message or "")
    return found


def expected_converter_failures(topic: str, order_id: int) -> dict[int, tuple[str, str]]:
    outer = f"Failed to deserialize data for topic {topic} to Avro:"
    return {
        10: ("VALUE_CONVERTER", f"{outer} Unknown magic byte!"),
        11: (
            "VALUE_CONVERTER",
            f"{outer} Error retrieving Avro value schema for id {UNKNOWN_ID}: "
            f"Schema {UNKNOWN_ID} not found; error code: 40403",
        ),
        12: (
            "VALUE_CONVERTER",
            f"{outer} Error deserializing Avro message for id {order_id}: "
            "EOFException: the body ends before its Avro value does",
        ),
    }


def test_per_record_path_into_an_avro_sink(
    spark: Any, kafka_config: dict[str, Any], schema_registry: Any, avro_topic: tuple[str, int, int]
) -> None:
    topic, order_id, _ = avro_topic
    spec = spec_for(
        kafka_config,
        schema_registry.url,
        topic,
        sink={"kind": "avro", "topic": f"{topic}.avro", "schema": ORDER},
        errors={**ERRORS, "errors.deadletterqueue.topic.name": f"{topic}.dlq"},
    )

    run_job(spark, spec, run_id="avro-per-record")

    failures = dead_letters(kafka_config, f"{topic}.dlq")
    assert failures == {
        **expected_converter_failures(topic, order_id),
        14: (
            "TASK_PUT",
            f"Failed to serialize Avro data from topic {topic}.avro: Error serializing Avro message: The value does "
            "not fit the Avro schema: field 'amount': expected double, got str '1.50'",
        ),
    }
    written = read_to_end(kafka_config, f"{topic}.avro")
    codec = AvroCodec(ORDER)
    sink_id = WireFormat.schema_id(written[0].value())
    values = [None if m.value() is None else codec.decode(m.value(), 5) for m in written]
    assert sorted(values, key=by_id) == [*({"id": i, "amount": i + 0.5} for i in range(GOOD)), None]
    assert all(m.value() is None or WireFormat.schema_id(m.value()) == sink_id for m in written)


def test_vectorized_path_into_a_json_sink(
    spark: Any, kafka_config: dict[str, Any], schema_registry: Any, avro_topic: tuple[str, int, int]
) -> None:
    topic, order_id, _ = avro_topic
    spec = spec_for(
        kafka_config,
        schema_registry.url,
        topic,
        transformations=["airflow_kerr.examples.orders.add_amount_cents"],
        sink={"kind": "kafka", "topic": f"{topic}.json"},
        errors={**ERRORS, "errors.deadletterqueue.topic.name": f"{topic}.dlq2"},
    )

    run_job(spark, spec, run_id="avro-vectorized")

    failures = dead_letters(kafka_config, f"{topic}.dlq2")
    assert {offset: failure for offset, failure in failures.items() if offset != 14} == expected_converter_failures(
        topic, order_id
    )
    stage, message = failures[14]  # a string amount among doubles: one Arrow column holds one type
    assert stage == "VALUE_CONVERTER" and "the value does not fit its batch's Arrow column of type struct" in message
    written = [None if m.value() is None else json.loads(m.value()) for m in read_to_end(kafka_config, f"{topic}.json")]
    assert sorted(written, key=by_id) == [
        *({"id": i, "amount": i + 0.5, "amount_cents": round((i + 0.5) * 100)} for i in range(GOOD)),
        None,
    ]
