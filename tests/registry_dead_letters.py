"""Dead letters of records in Avro, Protobuf and JSON Schema, written for the DLQ view's tests.

The Avro records are written by confluent-kafka's own ``AvroSerializer`` (it registers the
schema through the registry), so the view is checked against Confluent's writer rather
than against the project's; the Protobuf and JSON Schema ones by the project's
``RegistrySerializer``, the job's sink encoder. Each failed record becomes a dead letter as
the error-aware job writes one (:func:`airflow_kerr.local.dead_letters.write_dead_letters`),
its source offset telling the test which record it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.local.dead_letters import Failure, write_dead_letters
from tests.clock import RECENT_MS

#: A schema id no registry here holds: the record "whose schema is missing".
MISSING_SCHEMA_ID = 2_000_000_007
#: The order an Avro dead letter carries; ``card_token`` is a secret by its field name.
AVRO_ORDER = {"id": 7, "item": "pear", "card_token": "tok-4111-secret", "note": "qty must be > 0"}
AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "card_token", "type": "string"},
        {"name": "note", "type": "string"},
    ],
}


def refund_schema() -> str:
    """``shop.Refund`` (``int64 id = 1; string reason = 2``) as the sink takes it: a base64 FileDescriptorProto."""
    import base64

    from google.protobuf import descriptor_pb2  # type: ignore[import-untyped]

    file = descriptor_pb2.FileDescriptorProto(name="shop/refund.proto", package="shop", syntax="proto3")
    message = file.message_type.add(name="Refund")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64, label=1)
    message.field.add(name="reason", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    return base64.b64encode(file.SerializeToString()).decode("ascii")


PROTO_REFUND = {"id": 11, "reason": "damaged"}
JSON_SCHEMA = json.dumps(
    {
        "title": "Shipment",
        "type": "object",
        "properties": {"id": {"type": "integer"}, "api_password": {"type": "string"}},
    }
)
JSON_SHIPMENT = {"id": 12, "api_password": "pw-9000"}


@dataclass(frozen=True)
class RegistryDlq:
    """What was written: the DLQ, the source topics, and each record's source offset and schema id.

    The orders (Avro) come from ``source``, the refunds (Protobuf) from ``<source>.refunds``
    and the shipments (JSON Schema) from ``<source>.shipments``: one schema type per subject,
    as a registry's compatibility check wants.
    """

    dlq: str
    source: str
    #: Source offset of each kind of record.
    avro: int
    protobuf: int
    json_schema: int
    missing: int
    undecodable: int
    plain_json: int
    avro_schema_id: int
    protobuf_schema_id: int
    json_schema_id: int

    @property
    def framed(self) -> tuple[int, ...]:
        """The source offsets of the records in Confluent's wire format."""
        return (self.avro, self.protobuf, self.json_schema, self.missing, self.undecodable)

    @property
    def count(self) -> int:
        return len(self.framed) + 1

    @property
    def refunds(self) -> str:
        return f"{self.source}.refunds"

    @property
    def shipments(self) -> str:
        return f"{self.source}.shipments"


def _avro_serialized(registry_url: str, topic: str, value: Any, schema: Any, *, is_key: bool) -> bytes:
    """``value`` as confluent-kafka's AvroSerializer writes it (registering ``schema`` under TopicNameStrategy)."""
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer
    except ImportError as exc:
        pytest.fail(f"confluent-kafka's Avro serializer cannot be imported ({exc}): install confluent-kafka[avro]")
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(schema))
    framed: bytes = serializer(value, SerializationContext(topic, MessageField.KEY if is_key else MessageField.VALUE))
    return framed


def _registry_serialized(registry_url: str, fmt: str, topic: str, schema: str, value: Any) -> bytes:
    """``value`` as the job's sink writes it in ``fmt`` (registering ``schema`` under ``<topic>-value``)."""
    from airflow_kerr.formats import RegistrySerializer, RegistrySettings, registry_client_for

    settings = RegistrySettings.from_mapping({"url": registry_url})
    serializer = RegistrySerializer(
        fmt, registry_client_for(settings), settings, topic=topic, is_key=False, schema=schema
    )
    framed = serializer(value)
    assert framed is not None
    return framed


def write_registry_dlq(kafka_config: dict[str, Any], registry_url: str, dlq: str, source: str) -> RegistryDlq:
    """A DLQ of six dead letters: Avro (key and value), Protobuf, JSON Schema, a missing schema, a body that does
    not decode with its schema, and plain JSON (the topics are created here)."""
    from airflow_kerr.formats import WireFormat
    from airflow_kerr.local.broker import ensure_topics

    refunds, shipments = f"{source}.refunds", f"{source}.shipments"
    ensure_topics(kafka_config["bootstrap.servers"], {source: 1, refunds: 1, shipments: 1, dlq: 1})

    avro_value = _avro_serialized(registry_url, source, AVRO_ORDER, AVRO_SCHEMA, is_key=False)
    avro_key = _avro_serialized(registry_url, source, "order-7", "string", is_key=True)
    refund = _registry_serialized(registry_url, "protobuf", refunds, refund_schema(), PROTO_REFUND)
    shipment = _registry_serialized(registry_url, "json_schema", shipments, JSON_SCHEMA, JSON_SHIPMENT)
    avro_id = WireFormat.schema_id(avro_value)
    values: list[tuple[str, bytes | None, bytes]] = [
        (source, avro_key, avro_value),
        (refunds, b"refund-11", refund),
        (shipments, b"shipment-12", shipment),
        (source, b"lost-13", WireFormat.build(MISSING_SCHEMA_ID, b"\x02\x08pear")),
        (source, b"cut-14", WireFormat.build(avro_id, b"\x0e")),  # the id, then the body ends inside the record
        (source, b"plain-15", b'{"id": 15, "secret": "s-15"}'),
    ]
    failures = [
        Failure(
            SourceRecord(topic, 0, offset, RECENT_MS + offset, key=key, value=value),
            Stage.VALUE_CONVERTER,
            ValueError(f"record {offset} failed"),
        )
        for offset, (topic, key, value) in enumerate(values)
    ]
    write_dead_letters(kafka_config, dlq, failures)
    return RegistryDlq(
        dlq=dlq,
        source=source,
        avro=0,
        protobuf=1,
        json_schema=2,
        missing=3,
        undecodable=4,
        plain_json=5,
        avro_schema_id=avro_id,
        protobuf_schema_id=WireFormat.schema_id(refund),
        json_schema_id=WireFormat.schema_id(shipment),
    )
