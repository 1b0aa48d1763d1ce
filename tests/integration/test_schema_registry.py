"""The development Schema Registry, checked over HTTP and through confluent-kafka's own client.

Every test talks to the real stand-in process, which keeps its schemas on the session's
real broker. The expected error codes and texts are Confluent's, copied from
``confluentinc/schema-registry``:
``core/src/main/java/io/confluent/kafka/schemaregistry/rest/exceptions/Errors.java``,
``RestInvalidVersionException.java`` and ``RestInvalidCompatibilityException.java``.
The record layout of the store topic is that of ``storage/SchemaKey.java``,
``SchemaValue.java``, ``ConfigKey.java`` and ``ConfigValue.java`` in the same repository.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.local.schema_registry import LocalSchemaRegistry

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "qty", "type": "int", "default": 1}]}
#: A new field without a default: data written with ORDER_V1 cannot be read with it (not BACKWARD).
ORDER_NO_DEFAULT = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string"}]}


def avro(schema: dict[str, Any]) -> dict[str, Any]:
    return {"schema": json.dumps(schema)}


@pytest.fixture
def registry(schema_registry: LocalSchemaRegistry) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=schema_registry.url, timeout=30) as client:
        yield client


@pytest.fixture
def subject(unique_topic: str) -> str:
    return f"{unique_topic}-value"


def confluent_registry_module() -> Any:
    """confluent-kafka's ``schema_registry`` package; a missing 'schemaregistry' extra fails the test saying so."""
    try:
        from confluent_kafka import schema_registry
    except ImportError as exc:
        extra = "confluent-kafka[schemaregistry,avro]"
        pytest.fail(f"confluent-kafka's Schema Registry client cannot be imported ({exc}): install {extra}")
    return schema_registry


def error(answer: httpx.Response) -> tuple[int, int, str]:
    body = answer.json()
    return answer.status_code, body["error_code"], body["message"]


def test_registers_versions_and_answers_each_read_endpoint(registry: httpx.Client, subject: str) -> None:
    first = registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_V1)).json()["id"]
    second = registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_V2)).json()["id"]
    again = registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_V1)).json()["id"]

    assert second != first and again == first
    assert subject in registry.get("/subjects").json()
    assert registry.get(f"/subjects/{subject}/versions").json() == [1, 2]
    latest = registry.get(f"/subjects/{subject}/versions/latest").json()
    assert (latest["subject"], latest["version"], latest["id"]) == (subject, 2, second)
    assert json.loads(latest["schema"]) == ORDER_V2
    assert registry.get(f"/subjects/{subject}/versions/1/schema").json() == ORDER_V1
    by_id = registry.get(f"/schemas/ids/{first}", params={"fetchMaxId": "false", "subject": subject}).json()
    assert json.loads(by_id["schema"]) == ORDER_V1 and "schemaType" not in by_id
    assert registry.get(f"/schemas/ids/{first}/versions").json() == [{"subject": subject, "version": 1}]
    assert registry.get(f"/schemas/ids/{second}/subjects").json() == [subject]
    found = registry.post(f"/subjects/{subject}", json=avro(ORDER_V2)).json()
    assert (found["version"], found["id"]) == (2, second)
    assert registry.get("/schemas/types").json() == ["AVRO", "PROTOBUF", "JSON"]


def test_one_schema_has_one_id_under_every_subject(registry: httpx.Client, unique_topic: str) -> None:
    schema = {**ORDER_V1, "doc": unique_topic}  # a schema no other test registers
    ids = {registry.post(f"/subjects/{unique_topic}-{n}/versions", json=avro(schema)).json()["id"] for n in range(2)}
    assert len(ids) == 1
    (schema_id,) = ids
    assert registry.get(f"/schemas/ids/{schema_id}/subjects").json() == [f"{unique_topic}-0", f"{unique_topic}-1"]


def test_errors_carry_confluents_codes_and_texts(registry: httpx.Client, subject: str) -> None:
    registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_V1))

    assert error(registry.get("/subjects/no-such-subject/versions")) == (
        404, 40401, "Subject 'no-such-subject' not found.")  # fmt: skip
    assert error(registry.get(f"/subjects/{subject}/versions/7")) == (404, 40402, "Version 7 not found.")
    assert error(registry.get("/schemas/ids/987654")) == (404, 40403, "Schema 987654 not found")
    assert error(registry.post(f"/subjects/{subject}", json=avro(ORDER_V2))) == (404, 40403, "Schema not found")
    assert error(registry.get(f"/subjects/{subject}/versions/0")) == (
        422, 42202, "The specified version '0' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"')  # fmt: skip
    status, code, message = error(registry.post(f"/subjects/{subject}/versions", json={"schema": '{"type": "recor'}))
    assert (status, code) == (422, 42201) and message.startswith("Invalid schema")
    status, code, message = error(registry.put("/config", json={"compatibility": "SIDEWAYS"}))
    assert (status, code) == (422, 42203) and "Valid values are none, backward" in message
    assert error(registry.get(f"/config/{subject}")) == (
        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "record", "name": "Order"}, "needs a list of 'fields'"),
        ({"type": "record", "name": "Order", "fields": [{"name": "x", "type": "Customer"}]}, "unknown type 'Customer'"),
        ({"type": "enum", "name": "Colour", "symbols": ["RED", "RED"]}, "distinct 'symbols'"),
        (["string", "string"], "two branches of type 'string'"),
    ],
)
def test_an_invalid_avro_schema_is_refused_with_the_reason(
    registry: httpx.Client, subject: str, schema: Any, reason: str
) -> None:
    status, code, message = error(registry.post(f"/subjects/{subject}/versions", json=avro(schema)))
    assert (status, code) == (422, 42201)
    assert reason in message
    assert error(registry.get(f"/subjects/{subject}/versions"))[1] == 40401


def test_backward_compatibility_is_enforced_for_avro_and_none_lifts_it(registry: httpx.Client, subject: str) -> None:
    registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_V1))
    check = registry.post(
        f"/compatibility/subjects/{subject}/versions/latest", params={"verbose": "true"}, json=avro(ORDER_NO_DEFAULT)
    ).json()
    assert check["is_compatible"] is False and "note" in check["messages"][0]

    status, code, message = error(registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_NO_DEFAULT)))
    assert (status, code) == (409, 40901)
    assert f'incompatible with an earlier schema for subject "{subject}"' in message and "note" in message

    assert registry.put(f"/config/{subject}", json={"compatibility": "NONE"}).json() == {"compatibility": "NONE"}
    assert registry.get(f"/config/{subject}").json() == {"compatibilityLevel": "NONE"}
    assert registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_NO_DEFAULT)).status_code == 200
    assert registry.get(f"/subjects/{subject}/versions").json() == [1, 2]


def test_protobuf_and_json_schemas_register_with_references(registry: httpx.Client, unique_topic: str) -> None:
    common = 'syntax = "proto3";\npackage shop;\nmessage Money { int64 cents = 1; }\n'
    order = 'syntax = "proto3";\npackage shop;\nimport "money.proto";\nmessage Order { shop.Money total = 1; }\n'
    money_id = registry.post(
        f"/subjects/{unique_topic}-money/versions", json={"schemaType": "PROTOBUF", "schema": common}
    ).json()["id"]
    without_ref = registry.post(
        f"/subjects/{unique_topic}-value/versions", json={"schemaType": "PROTOBUF", "schema": order}
    )
    assert error(without_ref)[:2] == (422, 42201) and "money.proto" in error(without_ref)[2]
    reference = {"name": "money.proto", "subject": f"{unique_topic}-money", "version": 1}
    body = {"schemaType": "PROTOBUF", "schema": order, "references": [reference]}
    order_id = registry.post(f"/subjects/{unique_topic}-value/versions", json=body).json()["id"]

    answer = registry.get(f"/schemas/ids/{order_id}").json()
    assert answer == {"schemaType": "PROTOBUF", "references": [reference], "schema": order} and order_id != money_id
    garbage = registry.post(f"/subjects/{unique_topic}-x/versions", json={"schemaType": "PROTOBUF", "schema": "hi"})
    assert error(garbage)[:2] == (422, 42201)

    json_schema = {"type": "object", "properties": {"id": {"type": "integer"}}}
    json_body = {"schemaType": "JSON", "schema": json.dumps(json_schema)}
    assert registry.post(f"/subjects/{unique_topic}-json/versions", json=json_body).status_code == 200
    bad = {"schemaType": "JSON", "schema": json.dumps({"type": 12})}
    assert error(registry.post(f"/subjects/{unique_topic}-json/versions", json=bad))[:2] == (422, 42201)


def test_a_protobuf_descriptor_and_its_proto_text_are_one_schema(registry: httpx.Client, unique_topic: str) -> None:
    """confluent-kafka registers a base64 ``FileDescriptorProto``; Java's client looks it up as ``.proto`` text.

    Confluent's ProtobufConverter 7.0.16, after reading a record, asks ``POST /subjects/{s}``
    with the schema as Wire re-prints the descriptor; ``wire_text`` is that form for this
    schema (the differential test against the stack's Connect worker reads through it). It must
    find the registered version, and registering it must give the same id.
    """
    from tests.registry_orders import PROTO_ORDER

    wire_text = (
        '// Proto schema formatted by Wire, do not edit.\n// Source: shop/order.proto\n\nsyntax = "proto3";\n'
        "package shop;\n\nmessage Order {\n  int64 id = 1;\n  double amount = 2;\n}\n"
    )
    subject = f"{unique_topic}-value"
    schema_id = registry.post(
        f"/subjects/{subject}/versions", json={"schemaType": "PROTOBUF", "schema": PROTO_ORDER}
    ).json()["id"]

    found = registry.post(f"/subjects/{subject}?deleted=true", json={"schemaType": "PROTOBUF", "schema": wire_text})
    assert found.status_code == 200, found.text
    assert (found.json()["id"], found.json()["version"]) == (schema_id, 1)
    again = registry.post(
        f"/subjects/{unique_topic}-other/versions", json={"schemaType": "PROTOBUF", "schema": wire_text}
    )
    assert again.json()["id"] == schema_id
    other = f"/schemas/ids/{schema_id}?subject={unique_topic}-other"
    assert registry.get(other).json()["schema"] == wire_text, "served as registered"
    assert registry.get(f"{other}&format=serialized").json()["schema"] == PROTO_ORDER, "the descriptor when asked"


def test_deletes_are_soft_first_then_permanent(registry: httpx.Client, subject: str) -> None:
    schema_id = registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_V1)).json()["id"]
    registry.post(f"/subjects/{subject}/versions", json=avro(ORDER_V2))

    assert error(registry.delete(f"/subjects/{subject}/versions/1", params={"permanent": "true"}))[:2] == (404, 40407)
    assert registry.delete(f"/subjects/{subject}/versions/1").json() == 1
    assert registry.get(f"/subjects/{subject}/versions").json() == [2]
    assert registry.get(f"/subjects/{subject}/versions", params={"deleted": "true"}).json() == [1, 2]
    assert error(registry.delete(f"/subjects/{subject}", params={"permanent": "true"}))[:2] == (404, 40405)
    assert registry.delete(f"/subjects/{subject}").json() == [2]
    assert error(registry.delete(f"/subjects/{subject}"))[:2] == (404, 40404)
    assert subject not in registry.get("/subjects").json()
    assert subject in registry.get("/subjects", params={"deleted": "true"}).json()
    # A soft-deleted schema still answers by id, as Confluent's does (a reader may meet old records).
    assert json.loads(registry.get(f"/schemas/ids/{schema_id}").json()["schema"]) == ORDER_V1
    assert registry.delete(f"/subjects/{subject}", params={"permanent": "true"}).json() == [1, 2]
    assert subject not in registry.get("/subjects", params={"deleted": "true"}).json()


def test_confluent_kafka_client_registers_reads_looks_up_and_deletes(
    schema_registry: LocalSchemaRegistry, subject: str
) -> None:
    sr = confluent_registry_module()
    Schema, SchemaRegistryError = sr.Schema, sr.error.SchemaRegistryError
    client = sr.SchemaRegistryClient({"url": schema_registry.url})
    first = client.register_schema(subject, Schema(json.dumps(ORDER_V1), "AVRO"))
    second = client.register_schema(subject, Schema(json.dumps(ORDER_V2), "AVRO"))

    assert json.loads(client.get_schema(first).schema_str) == ORDER_V1
    latest = client.get_latest_version(subject)
    assert (latest.schema_id, latest.version, latest.subject) == (second, 2, subject)
    assert client.get_version(subject, 1).schema_id == first
    assert client.get_versions(subject) == [1, 2]
    assert subject in client.get_subjects()
    assert client.lookup_schema(subject, Schema(json.dumps(ORDER_V2), "AVRO")).version == 2
    assert client.set_compatibility(subject, "FULL") == {"compatibility": "FULL"}
    assert client.get_compatibility(subject) == "FULL"
    assert client.test_compatibility(subject, Schema(json.dumps(ORDER_NO_DEFAULT), "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as raised:
        client.register_schema(subject, Schema(json.dumps(ORDER_NO_DEFAULT), "AVRO"))
    assert (raised.value.http_status_code, raised.value.error_code) == (409, 40901)
    assert client.delete_version(subject, 1) == 1
    assert client.delete_subject(subject) == [2]
    with pytest.raises(SchemaRegistryError) as raised:
        client.get_versions(subject)
    assert (raised.value.http_status_code, raised.value.error_code) == (404, 40401)
    assert raised.value.error_message == f"Subject '{subject}' not found."
    with pytest.raises(SchemaRegistryError) as raised:
        client.get_schema(987654)
    assert raised.value.error_code == 40403


def test_a_restarted_registry_reads_its_schemas_back_from_the_topic(kafka_bootstrap: str, unique_topic: str) -> None:
    store = f"_schemas-{unique_topic}"
    subject = f"{unique_topic}-value"
    with LocalSchemaRegistry(kafka_bootstrap, topic=store) as first:
        client = httpx.Client(base_url=first.url, timeout=30)
        old_id = client.post(f"/subjects/{subject}/versions", json=avro(ORDER_V1)).json()["id"]
        client.post(f"/subjects/{subject}/versions", json=avro(ORDER_V2))
        client.put(f"/config/{subject}", json={"compatibility": "FULL_TRANSITIVE"})
        client.delete(f"/subjects/{subject}/versions/2")

    with LocalSchemaRegistry(kafka_bootstrap, topic=store) as second:
        client = httpx.Client(base_url=second.url, timeout=30)
        assert second.url != first.url
        assert client.get(f"/subjects/{subject}/versions").json() == [1]
        assert client.get(f"/subjects/{subject}/versions", params={"deleted": "true"}).json() == [1, 2]
        assert json.loads(client.get(f"/schemas/ids/{old_id}").json()["schema"]) == ORDER_V1
        assert client.get(f"/config/{subject}").json() == {"compatibilityLevel": "FULL_TRANSITIVE"}
        # Ids keep counting from the highest stored one: a new schema never takes an old id.
        new_id = client.post(f"/subjects/{unique_topic}-other/versions", json=avro(ORDER_NO_DEFAULT)).json()["id"]
        assert new_id > old_id

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_topic})
    consumer.assign([TopicPartition(store, 0, 0)])
    keys: list[dict[str, Any]] = []
    while len(keys) < 5 and (message := consumer.poll(10)) is not None:
        keys.append(json.loads(message.key() or b"null"))
    consumer.close()
    assert keys[0] == {"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1}
    assert {"keytype": "CONFIG", "subject": subject, "magic": 0} in keys


def test_confluent_kafkas_serializers_round_trip_through_the_registry(
    schema_registry: LocalSchemaRegistry, unique_topic: str, registry: httpx.Client
) -> None:
    """AvroSerializer and ProtobufSerializer auto-register; their deserializers fetch the schema back by id.

    The Protobuf serializer registers a base64 ``FileDescriptorProto`` and its deserializer asks
    for ``format=serialized``: the stand-in stores and serves that form as it was registered.
    """
    sr = confluent_registry_module()
    from confluent_kafka.schema_registry import avro, protobuf
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.integration.test_schema_registry_converters import protobuf_order_class

    client = sr.SchemaRegistryClient({"url": schema_registry.url})
    context = SerializationContext(unique_topic, MessageField.VALUE)
    avro_serializer = avro.AvroSerializer(client, json.dumps(ORDER_V2))
    framed = avro_serializer({"id": 7, "qty": 3}, context)
    assert framed[0] == 0
    assert avro.AvroDeserializer(client)(framed, context) == {"id": 7, "qty": 3}
    avro_id = int.from_bytes(framed[1:5], "big")
    assert registry.get(f"/subjects/{unique_topic}-value/versions/latest").json()["id"] == avro_id

    order = protobuf_order_class()
    proto_context = SerializationContext(f"{unique_topic}-pb", MessageField.VALUE)
    proto_serializer = protobuf.ProtobufSerializer(order, client, {"use.deprecated.format": False})
    framed = proto_serializer(order(id=9, item="fig"), proto_context)
    decoded = protobuf.ProtobufDeserializer(order, {"use.deprecated.format": False})(framed, proto_context)
    assert (decoded.id, decoded.item) == (9, "fig")
    stored = registry.get(f"/subjects/{unique_topic}-pb-value/versions/latest").json()
    assert stored["schemaType"] == "PROTOBUF" and stored["id"] == int.from_bytes(framed[1:5], "big")
