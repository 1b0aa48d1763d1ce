"""Confluent's Java registry client, inside the real Connect 4.3 worker, reads through the development registry.

A FileStreamSink runs with ``io.confluent.connect.avro.AvroConverter`` (then
``io.confluent.connect.protobuf.ProtobufConverter``, 7.0.16, from the worker's plugin path)
pointed at the stand-in. The records are framed as Confluent's serializers frame them
(``AbstractKafkaSchemaSerDe``: magic byte 0, the 4-byte big-endian schema id, then for
Protobuf the message indexes, then the body), with the schema registered over the
stand-in's REST API. The converter fetches the schema by id and looks its version up
(``GET /schemas/ids/{id}?fetchMaxId=false&subject=...``, ``POST /subjects/{s}?deleted=true``):
the sink's file then holds the decoded values, which only those answers make possible.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_kerr.local.connect_worker import ConnectWorker, connector_config
from airflow_kerr.local.schema_registry import LocalSchemaRegistry

pytestmark = pytest.mark.connect

ORDERS = [(1, "apple"), (2, "pear"), (3, "plum")]
#: What FileStreamSink writes for each: Connect's ``Struct.toString()`` of the converted value.
EXPECTED_LINES = [f"Struct{{id={order_id},item={item}}}" for order_id, item in ORDERS]


def zigzag(value: int) -> bytes:
    """Avro's variable-length zig-zag encoding of an int or long."""
    number = (value << 1) ^ (value >> 63)
    out = bytearray()
    while number > 0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def avro_order(order_id: int, item: str) -> bytes:
    """The Avro binary body of ``{"id": long, "item": string}``."""
    encoded = item.encode()
    return zigzag(order_id) + zigzag(len(encoded)) + encoded


def protobuf_order_class() -> Any:
    """A message class for ``shop.Order {int64 id = 1; string item = 2;}``, built with protobuf's runtime."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # type: ignore[import-untyped]

    file = descriptor_pb2.FileDescriptorProto(name=f"order_{uuid.uuid4().hex}.proto", package="shop", syntax="proto3")
    message = file.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64, label=1)
    message.field.add(name="item", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def framed(schema_id: int, body: bytes, message_indexes: bytes = b"") -> bytes:
    """Confluent's wire format; Protobuf's first message is the index list ``[0]``, written as one 0 byte."""
    return b"\x00" + schema_id.to_bytes(4, "big") + message_indexes + body


AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
PROTO_SCHEMA = 'syntax = "proto3";\npackage shop;\n\nmessage Order {\n  int64 id = 1;\n  string item = 2;\n}\n'


def _wait_until(predicate: Callable[[], Any], what: str, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f} s (last value {value!r})")
        time.sleep(0.2)


@pytest.mark.parametrize("kind", ["avro", "protobuf"])
def test_confluents_converter_reads_records_through_the_development_registry(
    connect_worker: ConnectWorker,
    schema_registry: LocalSchemaRegistry,
    create_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    kind: str,
) -> None:
    from confluent_kafka import Producer

    suffix = uuid.uuid4().hex[:8]
    topic = create_topic(f"registry-{kind}-{suffix}")
    subject = f"{topic}-value"
    if kind == "avro":
        converter = "io.confluent.connect.avro.AvroConverter"
        body: dict[str, Any] = {"schema": json.dumps(AVRO_SCHEMA)}
    else:
        converter = "io.confluent.connect.protobuf.ProtobufConverter"
        body = {"schemaType": "PROTOBUF", "schema": PROTO_SCHEMA}
    schema_id = httpx.post(f"{schema_registry.url}/subjects/{subject}/versions", json=body, timeout=30).json()["id"]
    if kind == "avro":
        values = [framed(schema_id, avro_order(order_id, item)) for order_id, item in ORDERS]
    else:
        order = protobuf_order_class()
        values = [framed(schema_id, order(id=i, item=item).SerializeToString(), b"\x00") for i, item in ORDERS]

    sink = f"registry-sink-{kind}-{suffix}"
    config = connector_config(
        topic,
        f"{sink}.txt",
        **{"value.converter": converter, "value.converter.schema.registry.url": schema_registry.url},
    )
    producer = Producer(kafka_config)
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0, "the broker did not take the records within 30 s"
    try:
        try:
            connect_worker.rest("POST", "/connectors", {"name": sink, "config": config})
        except urllib.error.HTTPError as exc:
            pytest.fail(f"Connect refused the {converter} sink: {exc.code} {exc.read().decode(errors='replace')}")
        output: Path = connect_worker.output_file(f"{sink}.txt")

        def written() -> list[str]:
            lines = output.read_text().splitlines() if output.exists() else []
            if len(lines) < len(ORDERS):
                status = connect_worker.status(sink) if _exists(connect_worker, sink) else {}
                failed = [task.get("trace", "") for task in status.get("tasks", []) if task["state"] == "FAILED"]
                if failed:
                    pytest.fail(f"the {converter} task failed:\n{failed[0][:3000]}")
                return []
            return lines

        assert _wait_until(written, f"{sink} did not write the {len(ORDERS)} orders") == EXPECTED_LINES
    finally:
        with contextlib.suppress(OSError):
            connect_worker.rest("DELETE", f"/connectors/{sink}")
    log = (schema_registry.log_path or Path("/nonexistent")).read_text()
    assert f"GET /schemas/ids/{schema_id}?fetchMaxId=false&subject={subject}" in log, "the Java client's fetch"


def _exists(worker: ConnectWorker, name: str) -> bool:
    try:
        worker.status(name)
    except OSError:
        return False
    return True
