"""Avro keys through the job: real broker, real local Spark, the development Schema Registry.

A bad key fails its record at ``KEY_CONVERTER`` with the text Connect's ``AvroConverter`` writes
for a key (confluentinc/schema-registry v7.9.9, avro-converter/.../AvroConverter.java and
avro-serializer/.../AbstractKafkaAvroDeserializer.java: "Error retrieving Avro key schema for id").
A good key is converted to its record, which the Kafka sink writes as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_kerr.formats import RegistryClient, RegistrySettings, WireFormat
from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.spark.driver import run_job
from airflow_kerr.spark.spec import PipelineSpec
from tests.registry_orders import ConverterFailure, dead_letters, failures

pytestmark = pytest.mark.spark

KEY = json.dumps(
    {"type": "record", "name": "OrderKey", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}
)
UNKNOWN_ID = 999_999_998


def test_avro_keys_convert_and_a_bad_key_fails_at_the_key_converter(
    spark: Any,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    schema_registry: Any,
) -> None:
    topic, out, dlq = (
        create_topic(unique_topic),
        create_topic(f"{unique_topic}.out"),
        create_topic(f"{unique_topic}.dlq"),
    )
    key_id = RegistryClient(RegistrySettings.from_mapping({"url": schema_registry.url})).register(
        f"{topic}-key", KEY, "AVRO"
    )
    codec = AvroCodec(KEY)
    keys = [WireFormat.build(key_id, codec.encode({"id": i})) for i in range(4)]
    keys += [b"o-4", WireFormat.build(UNKNOWN_ID, codec.encode({"id": 5}))]  # offsets 4 and 5: bad keys
    producer = Producer(kafka_config)
    for offset, key in enumerate(keys):
        producer.produce(topic, key=key, value=json.dumps({"n": offset}).encode())
    assert producer.flush(30) == 0
    spec = PipelineSpec.from_dict(
        {
            "name": "avro_keys",
            "source": {"topics": [topic], "group_id": f"{topic}-job"},
            "key_converter": "avro",
            "value_converter": "json",
            "kafka": kafka_config,
            "schema_registry": {"url": schema_registry.url},
            "metrics_topic": f"{topic}.metrics",
            "sink": {"kind": "kafka", "topic": out},
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": dlq,
                "errors.deadletterqueue.context.headers.enable": "true",
            },
        }
    )

    run_job(spark, spec, run_id="avro-keys")

    outer = f"Failed to deserialize data for topic {topic} to Avro: "
    assert failures(dead_letters(kafka_config, dlq)) == {
        4: ConverterFailure("KEY_CONVERTER", outer, ("Unknown magic byte!",)),
        5: ConverterFailure(
            "KEY_CONVERTER",
            outer,
            (
                f"Error retrieving Avro key schema for id {UNKNOWN_ID}",
                f"Schema {UNKNOWN_ID} not found; error code: 40403",
            ),
        ),
    }
    written = {json.loads(m.value())["n"]: json.loads(m.key()) for m in read_to_end(kafka_config, out)}
    assert written == {n: {"id": n} for n in range(4)}
