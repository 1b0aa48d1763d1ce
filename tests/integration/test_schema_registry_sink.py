"""The registry sinks' subject and schema options through the job: real broker, local Spark, the dev registry.

``subject.name.strategy``, ``auto.register.schemas`` and ``use.latest.version`` are named and
behave as in Confluent's serializers (schema-serializer/.../AbstractKafkaSchemaSerDeConfig.java
and AbstractKafkaAvroSerializer.java, v7.9.9): RecordNameStrategy registers under the record's
full name; with auto-registration off and ``use.latest.version`` on, the subject's latest
schema is the writer's; a ``json_schema`` sink checks each value as ``JSONSerializer`` does. What
is written is read back by confluent-kafka's ``AvroDeserializer`` or ``JSONDeserializer``, an
independent client. A value that does not fit fails its record alone at ``TASK_PUT``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.spark.driver import run_job
from airflow_kerr.spark.spec import PipelineSpec
from tests.registry_orders import dead_letters, failures

pytestmark = pytest.mark.spark

GOOD = 6
#: The last source record: an amount that is no double.
MISFIT = {"id": 99, "amount": "1.50"}


def order_schema(name: str, with_note: bool = False) -> str:
    fields: list[dict[str, Any]] = [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]
    if with_note:
        fields.append({"name": "note", "type": "string", "default": "none"})
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": fields})


def json_order_schema(name: str) -> str:
    properties = {"id": {"type": "integer"}, "amount": {"type": "number"}}
    return json.dumps({"title": name, "type": "object", "properties": properties, "required": ["id", "amount"]})


@pytest.mark.parametrize("options", ["RecordNameStrategy", "use.latest.version", "json_schema"])
def test_the_sink_subject_options_and_a_misfit_at_task_put(
    spark: Any,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    schema_registry: Any,
    options: str,
) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    source, out, dlq = (
        create_topic(unique_topic),
        create_topic(f"{unique_topic}.out"),
        create_topic(f"{unique_topic}.dlq"),
    )
    producer = Producer(kafka_config)
    for value in [*({"id": i, "amount": i + 0.25} for i in range(GOOD)), MISFIT]:
        producer.produce(source, value=json.dumps(value).encode())
    assert producer.flush(30) == 0
    registry = SchemaRegistryClient({"url": schema_registry.url})
    name = f"Order{uuid.uuid4().hex[:8]}"
    if options == "RecordNameStrategy":
        settings: dict[str, Any] = {"subject.name.strategy": "RecordNameStrategy"}
        sink = {"kind": "avro", "topic": out, "schema": order_schema(name)}
        subject = f"shop.{name}"
    elif options == "json_schema":
        settings = {}
        sink = {"kind": "json_schema", "topic": out, "schema": json_order_schema(name)}
        subject = f"{out}-value"
    else:
        settings = {"auto.register.schemas": False, "use.latest.version": True}
        sink = {"kind": "avro", "topic": out}
        subject = f"{out}-value"
        registry.register_schema(subject, Schema(order_schema(name), "AVRO"))
        registry.register_schema(subject, Schema(order_schema(name, with_note=True), "AVRO"))  # the latest
    spec = PipelineSpec.from_dict(
        {
            "name": "sink_options",
            "source": {"topics": [source], "group_id": f"{source}-job"},
            "value_converter": "json",
            "kafka": kafka_config,
            "schema_registry": {"url": schema_registry.url, **settings},
            "metrics_topic": f"{source}.metrics",
            "sink": sink,
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": dlq,
                "errors.deadletterqueue.context.headers.enable": "true",
            },
        }
    )

    run_job(spark, spec, run_id=f"sink-{options}")

    latest = registry.get_latest_version(subject)
    written = read_to_end(kafka_config, out)
    assert {m.value()[1:5] for m in written} == {int(latest.schema_id or -1).to_bytes(4, "big", signed=True)}
    decode = (
        JSONDeserializer(None, schema_registry_client=registry)
        if options == "json_schema"
        else AvroDeserializer(registry)
    )
    values = sorted((decode(m.value(), SerializationContext(out, MessageField.VALUE)) for m in written), key=str)
    note = {"note": "none"} if options == "use.latest.version" else {}
    assert values == sorted(({"id": i, "amount": i + 0.25, **note} for i in range(GOOD)), key=str)
    if options == "RecordNameStrategy":
        assert f"{out}-value" not in registry.get_subjects()
    (letter,) = [parse_dead_letter(m.headers(), m.key(), m.value()) for m in read_to_end(kafka_config, dlq)]
    assert str(letter.stage) == "TASK_PUT" and json.loads(letter.value or b"") == MISFIT
    outer = (
        f"Converting Kafka Connect data to byte[] failed due to serialization error of topic {out}: "
        if options == "json_schema"
        else f"Failed to serialize Avro data from topic {out}: Error serializing Avro message: "
    )
    assert (letter.exception_message or "").startswith(outer), letter.exception_message
    assert "amount" in (letter.exception_message or ""), "the reason names the field that does not fit"


def test_a_json_schema_topic_written_by_confluents_serializer_reads_through_the_job(
    spark: Any,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    schema_registry: Any,
) -> None:
    """The ``json_schema`` converter on the other side: confluent-kafka's ``JSONSerializer`` writes, the job reads
    with ``json.fail.invalid.schema`` on; a value that breaks the schema and one that is not framed fail at
    ``VALUE_CONVERTER`` with the text of Connect's ``JsonSchemaConverter`` (json-schema-converter/.../
    JsonSchemaConverter.java, v7.9.9)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    source, out, dlq = (
        create_topic(unique_topic),
        create_topic(f"{unique_topic}.out"),
        create_topic(f"{unique_topic}.dlq"),
    )
    schema = json_order_schema(f"Order{uuid.uuid4().hex[:8]}")
    serialize = JSONSerializer(schema, SchemaRegistryClient({"url": schema_registry.url}))
    framed = serialize({"id": 1, "amount": 2.5}, SerializationContext(source, MessageField.VALUE))
    assert framed is not None
    values = [
        framed,
        framed[:5] + b'{"id": 2, "amount": "much"}',  # offset 1: framed, but not what the schema allows
        b'{"id": 3, "amount": 1.0}',  # offset 2: not framed
        None,  # offset 3: a tombstone
    ]
    producer = Producer(kafka_config)
    for value in values:
        producer.produce(source, value=value)
    assert producer.flush(30) == 0
    spec = PipelineSpec.from_dict(
        {
            "name": "json_schema_read",
            "source": {"topics": [source], "group_id": f"{source}-job"},
            "value_converter": "json_schema",
            "kafka": kafka_config,
            "schema_registry": {"url": schema_registry.url, "json.fail.invalid.schema": True},
            "metrics_topic": f"{source}.metrics",
            "sink": {"kind": "kafka", "topic": out},
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": dlq,
                "errors.deadletterqueue.context.headers.enable": "true",
            },
        }
    )

    run_job(spark, spec, run_id="json-schema-read")

    outer = f"Converting byte[] to Kafka Connect data failed due to serialization error of topic {source}: "
    found = failures(dead_letters(kafka_config, dlq))
    assert set(found) == {1, 2} and {failure.stage for failure in found.values()} == {"VALUE_CONVERTER"}
    assert {failure.message for failure in found.values()} == {outer}
    schema_id = int.from_bytes(framed[1:5], "big")
    assert found[1].causes[0] == f"Error deserializing JSON message for id {schema_id}"
    assert found[1].causes[1].startswith("Validation error at amount"), found[1]
    assert found[2].causes == ("Error deserializing JSON message for id -1", "Unknown magic byte!")
    written = [None if m.value() is None else json.loads(m.value()) for m in read_to_end(kafka_config, out)]
    assert sorted(written, key=str) == sorted([{"id": 1, "amount": 2.5}, None], key=str)
