"""Confluent's Java registry client, inside the real Connect 4.3 worker, reads through the development registry.

A FileStreamSink runs with ``io.confluent.connect.avro.AvroConverter`` (then
``io.confluent.connect.protobuf.ProtobufConverter``, 7.0.16, from the worker's plugin path)
pointed at the stand-in. The Avro records are written by confluent-kafka's
``AvroSerializer``, which registers the schema through the stand-in: two independent clients
meet in it. The Protobuf records are framed as Confluent's serializers frame them
(``AbstractKafkaSchemaSerDe``: magic byte 0, the 4-byte big-endian schema id, the message
indexes, the body) with a text schema registered over REST, the form Java clients send.
The converter fetches the schema by id and looks its version up
(``GET /schemas/ids/{id}?fetchMaxId=false&subject=...``, ``POST /subjects/{s}?deleted=true``):
the sink's file then holds the decoded values, which only those answers make possible.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import urllib.error
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_kerr.local.connect_runtime import DEFAULT_VERSION, GOOGLE_TYPES, PLUGINS, ensure_connect_runtime
from airflow_kerr.local.connect_worker import ConnectWorker, connector_config
from airflow_kerr.local.schema_registry import LocalSchemaRegistry

pytestmark = pytest.mark.connect

ORDERS = [(1, "apple"), (2, "pear"), (3, "plum")]
#: What FileStreamSink writes for each: Connect's ``Struct.toString()`` of the converted value.
EXPECTED_LINES = [f"Struct{{id={order_id},item={item}}}" for order_id, item in ORDERS]


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


def avro_serialized(registry_url: str, topic: str) -> list[bytes]:
    """The orders as confluent-kafka's AvroSerializer writes them, registering the schema through the stand-in."""
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
    except ImportError as exc:
        pytest.fail(f"confluent-kafka's Avro serializer cannot be imported ({exc}): install confluent-kafka[avro]")
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(AVRO_SCHEMA))
    context = SerializationContext(topic, MessageField.VALUE)
    return [serializer({"id": order_id, "item": item}, context) for order_id, item in ORDERS]


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
        values = avro_serialized(schema_registry.url, topic)
        schema_id = int.from_bytes(values[0][1:5], "big")
    else:
        converter = "io.confluent.connect.protobuf.ProtobufConverter"
        body = {"schemaType": "PROTOBUF", "schema": PROTO_SCHEMA}
        answer = httpx.post(f"{schema_registry.url}/subjects/{subject}/versions", json=body, timeout=30)
        schema_id = answer.json()["id"]
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


def test_the_protobuf_plugin_has_each_google_type_class_it_loads_once() -> None:
    """What ``ProtobufSchema`` loads, read from its own class file, is in the plugin's compiled jar, in no other.

    Connect 4.3's wheel brings ``proto-google-common-protos`` 1.17.0, which lacks
    ``com.google.type.DateTimeProto`` among others; the runtime replaces it with the whole
    ``google/type`` set compiled from googleapis-common-protos' ``.proto`` files. A class in two
    jars of one plugin would be loaded from whichever the class loader reads first.
    """
    folder = ensure_connect_runtime(version=DEFAULT_VERSION) / PLUGINS / "kafka-connect-protobuf-converter"
    classes: dict[str, list[str]] = {}
    for jar in sorted(folder.glob("*.jar")):
        with zipfile.ZipFile(jar) as archive:
            for entry in archive.namelist():
                if entry.startswith("com/google/") and entry.endswith(".class"):
                    classes.setdefault(entry.removesuffix(".class"), []).append(jar.name)
    (provider,) = folder.glob("kafka-protobuf-provider-*.jar")
    with zipfile.ZipFile(provider) as archive:
        schema_class = archive.read("io/confluent/kafka/schemaregistry/protobuf/ProtobufSchema.class")
    loaded = sorted({name.decode() for name in re.findall(rb"com/google/type/\w+Proto", schema_class)})
    assert "com/google/type/DateTimeProto" in loaded and len(loaded) >= 16, loaded
    assert {name: classes.get(name) for name in loaded} == {name: [GOOGLE_TYPES.jar] for name in loaded}
    assert not list(folder.glob("proto-google-common-protos-*.jar"))
    assert {name: jars for name, jars in classes.items() if len(jars) > 1} == {}


def _exists(worker: ConnectWorker, name: str) -> bool:
    try:
        worker.status(name)
    except OSError:
        return False
    return True
