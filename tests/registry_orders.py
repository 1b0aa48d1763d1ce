"""Orders on a topic, good and bad, and how their dead letters are read: shared by the Schema Registry tests.

``tests/integration/test_schema_registry_job.py`` (the job alone) and
``tests/integration/test_schema_registry_differential.py`` (the job beside Kafka Connect) read the
same records at the same offsets: ten good orders, a JSON value, a schema id the registry does not
know, a truncated body and a tombstone, then whatever a test adds. In Avro, or in Protobuf with
the schema registered as confluent-kafka's serializer registers it (a base64 ``FileDescriptorProto``).
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_kerr.errors import DeadLetterRecord, parse_dead_letter
from airflow_kerr.formats import RegistryClient, RegistrySettings, WireFormat
from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.spark.spec import PipelineSpec

ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
    }
)
GOOD = 10
UNKNOWN_ID = 999_999
#: The offsets of the bad records and of the tombstone, after the good ones.
JSON_VALUE, UNKNOWN_SCHEMA, TRUNCATED, TOMBSTONE = range(GOOD, GOOD + 4)
ERRORS = {"errors.tolerance": "all", "errors.deadletterqueue.context.headers.enable": "true"}


def _order_file() -> str:
    """``shop.Order {int64 id = 1; double amount = 2;}`` as a base64 ``FileDescriptorProto``."""
    from google.protobuf import descriptor_pb2  # type: ignore[import-untyped]

    file = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    message = file.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64, label=1)
    message.field.add(name="amount", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE, label=1)
    return base64.b64encode(file.SerializeToString()).decode()


PROTO_ORDER = _order_file()


def good_order(index: int) -> dict[str, Any]:
    """The good order at offset ``index``; its amount prints alike in Java and Python (``0.5``)."""
    return {"id": index, "amount": index + 0.5}


def produce_avro_orders(
    kafka_config: dict[str, Any], registry_url: str, topic: str, extra: Sequence[bytes | None] = ()
) -> int:
    """Register ``ORDER`` under ``<topic>-value``, produce the records (keys ``k<offset>``); the schema's id."""
    codec = AvroCodec(ORDER)
    return _produce_orders(kafka_config, registry_url, topic, "AVRO", ORDER, codec.encode, None, extra)


def produce_protobuf_orders(kafka_config: dict[str, Any], registry_url: str, topic: str) -> int:
    """The same records in Protobuf (message indexes ``[0]``); the schema's id."""
    from airflow_kerr.formats.protobuf_codec import ProtobufCodec, file_descriptor

    codec = ProtobufCodec(file_descriptor(PROTO_ORDER))
    return _produce_orders(
        kafka_config, registry_url, topic, "PROTOBUF", PROTO_ORDER, lambda order: codec.encode(order, [0]), [0]
    )


def _produce_orders(
    kafka_config: dict[str, Any],
    registry_url: str,
    topic: str,
    schema_type: str,
    schema: str,
    encode: Callable[[dict[str, Any]], bytes],
    indexes: list[int] | None,
    extra: Sequence[bytes | None] = (),
) -> int:
    client = RegistryClient(RegistrySettings.from_mapping({"url": registry_url}))
    schema_id = client.register(f"{topic}-value", schema, schema_type)
    good = [WireFormat.build(schema_id, encode(good_order(i)), indexes) for i in range(GOOD)]
    header = len(WireFormat.build(schema_id, b"", indexes))
    values: list[bytes | None] = [
        *good,
        b'{"id": 10, "amount": 1.0}',  # JSON_VALUE
        WireFormat.build(UNKNOWN_ID, good[0][header:], indexes),  # UNKNOWN_SCHEMA
        good[1][:-3],  # TRUNCATED: the amount's 8 bytes cut short
        None,  # TOMBSTONE
        *extra,
    ]
    produce(kafka_config, topic, values)
    return schema_id


def produce(kafka_config: dict[str, Any], topic: str, values: Sequence[bytes | None]) -> None:
    """Each value to partition 0 of ``topic`` in order, keyed ``k<offset>``."""
    producer = Producer(kafka_config)
    for offset, value in enumerate(values):
        producer.produce(topic, value=value, key=f"k{offset}".encode(), partition=0)
    assert producer.flush(30) == 0, "the broker did not take the records within 30 s"


@dataclass(frozen=True)
class ConverterFailure:
    """How a record fails in a converter: the stage, the DLQ message and the chained causes' texts."""

    stage: str
    message: str
    causes: tuple[str, ...]


def expected_avro_failures(topic: str, order_id: int) -> dict[int, ConverterFailure]:
    """The bad records' failures as Confluent 7.0.16's AvroConverter reports them, by offset."""
    outer = f"Failed to deserialize data for topic {topic} to Avro: "
    return {
        JSON_VALUE: ConverterFailure("VALUE_CONVERTER", outer, ("Unknown magic byte!",)),
        UNKNOWN_SCHEMA: ConverterFailure(
            "VALUE_CONVERTER",
            outer,
            (
                f"Error retrieving Avro value schema for id {UNKNOWN_ID}",
                f"Schema {UNKNOWN_ID} not found; error code: 40403",
            ),
        ),
        TRUNCATED: ConverterFailure(
            "VALUE_CONVERTER",
            outer,
            (
                f"Error deserializing Avro message for id {order_id}",
                "EOFException: the body ends before its Avro value does",
            ),
        ),
    }


def expected_protobuf_failures(topic: str, order_id: int) -> dict[int, ConverterFailure]:
    """As Confluent 7.0.16's ProtobufConverter reports them; the decoder's own text (last cause) is left out."""
    outer = f"Failed to deserialize data for topic {topic} to Protobuf: "
    return {
        JSON_VALUE: ConverterFailure(
            "VALUE_CONVERTER", outer, ("Error deserializing Protobuf message for id -1", "Unknown magic byte!")
        ),
        UNKNOWN_SCHEMA: ConverterFailure(
            "VALUE_CONVERTER",
            outer,
            (
                f"Error retrieving Protobuf schema for id {UNKNOWN_ID}",
                f"Schema {UNKNOWN_ID} not found; error code: 40403",
            ),
        ),
        TRUNCATED: ConverterFailure(
            "VALUE_CONVERTER", outer, (f"Error deserializing Protobuf message for id {order_id}",)
        ),
    }


def pipeline_spec(
    kafka_config: dict[str, Any],
    registry_url: str,
    topic: str,
    name: str = "orders_avro",
    value_converter: str = "avro",
    **fields: Any,
) -> PipelineSpec:
    """The job reading ``topic`` with a registry value converter; ``fields`` add the sink, errors, and so on."""
    return PipelineSpec.from_dict(
        {
            "name": name,
            "source": {"topics": [topic], "group_id": f"{topic}-{fields['sink']['kind']}"},
            "key_converter": "string",
            "value_converter": value_converter,
            "kafka": kafka_config,
            "schema_registry": {"url": registry_url},
            "metrics_topic": f"{topic}.metrics",
            "batch_size": 8,
            **fields,
        }
    )


def by_id(value: dict[str, Any] | None) -> float:
    """Sort key: orders by id, the tombstone last (the job may split a partition between Spark tasks)."""
    return float("inf") if value is None else value["id"]


def dead_letters(kafka_config: dict[str, Any], topic: str) -> dict[int, DeadLetterRecord]:
    """The DLQ records of ``topic`` by their source record's offset."""
    found = {}
    for message in read_to_end(kafka_config, topic):
        letter = parse_dead_letter(message.headers() or [], message.key(), message.value())
        assert letter.source_offset is not None, letter
        found[letter.source_offset] = letter
    return found


def failures(letters: dict[int, DeadLetterRecord]) -> dict[int, ConverterFailure]:
    """What each dead letter says: its stage, message and the causes its (Python) stack trace names."""
    return {
        offset: ConverterFailure(
            str(letter.stage), letter.exception_message or "", tuple(m for _, m in exception_chain(letter)[1:])
        )
        for offset, letter in letters.items()
    }


_JAVA_CAUSE = re.compile(r"^Caused by: ([\w.$]+)(?:: (.*))?$")
_PYTHON_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*): (.*)$|^([A-Za-z_][\w.]*)$")
_PYTHON_CHAIN = ("Traceback (most recent call last):", "The above exception", "During handling of the above")


def exception_chain(letter: DeadLetterRecord) -> list[tuple[str, str]]:
    """``(class, message)`` of the exception and each cause under it, outermost first, from the stack trace header.

    A Java trace (Connect's) lists them as its first line and ``Caused by:`` lines; a Python one (the
    job's) as its first line, then each exception of the chain innermost first, between tracebacks.
    """
    lines = (letter.exception_stacktrace or "").splitlines()
    if not lines:
        return []
    if any(line.startswith("Caused by: ") or line.startswith("\tat ") for line in lines):
        chain = [_split(lines[0])]
        chain += [(m.group(1), m.group(2) or "") for line in lines if (m := _JAVA_CAUSE.match(line))]
        return chain
    found = [
        _split(line) for line in lines[1:] if line and not line[0].isspace() and not line.startswith(_PYTHON_CHAIN)
    ]
    return [_split(lines[0]), *reversed(found[:-1])]


def _split(line: str) -> tuple[str, str]:
    name, _, message = line.partition(": ")
    return name, message


def wait_until(predicate: Callable[[], Any], what: str, timeout_s: float = 240.0) -> Any:
    """Poll ``predicate`` until truthy; fail naming ``what`` and the last value. The bound only ends a hung test."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f} s (last value {value!r})")
        time.sleep(0.2)
