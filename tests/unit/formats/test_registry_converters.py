"""The registry converters and the sink's serializer against a real HTTP registry: values, failures and their texts.

The texts are Connect's, from confluentinc/schema-registry v7.0.16 (the converters the stack's
worker runs; ``tests/integration/test_schema_registry_differential.py`` checks them against it):
avro-converter/.../AvroConverter.java (``toConnectData``: "Failed to deserialize data for topic %s to Avro: "),
protobuf-converter/.../ProtobufConverter.java ("... to Protobuf: "),
json-schema-converter/.../JsonSchemaConverter.java ("Converting byte[] to Kafka Connect data failed due to
serialization error of topic %s: "), over schema-serializer/.../AbstractKafkaSchemaSerDe.java ("Unknown magic
byte!", ``toKafkaException``: 408/500/503/504 a TimeoutException, hence Connect's RetriableException) and
avro-serializer/.../AbstractKafkaAvroDeserializer.java ("Error retrieving Avro value schema for id ",
"Error deserializing Avro message for id "). As in Java, the converter's exception carries its own
text only, and the serde's exception is chained under it. The registry is the loopback server of conftest.py.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # type: ignore[import-untyped]

from airflow_kerr.errors import (
    ErrorHandlingConfig,
    PipelineStage,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
    is_retriable,
)
from airflow_kerr.formats import (
    ConverterDataError,
    ConverterRetriableError,
    RegistryClient,
    RegistryDeserializer,
    RegistrySerializer,
    RegistrySettings,
    WireFormat,
)
from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.formats.registry_settings import InvalidRegistrySettings

ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
    }
)
OUTER = "Failed to deserialize data for topic orders to Avro: "


def causes(error: BaseException) -> list[str]:
    """The messages of the exceptions chained under ``error`` (``__cause__``), outermost first."""
    found = []
    while (cause := error.__cause__) is not None:
        found.append(str(cause))
        error = cause
    return found


def client_for(url: str, **settings: Any) -> tuple[RegistryClient, RegistrySettings]:
    parsed = RegistrySettings.from_mapping({"url": url, **settings})
    return RegistryClient(parsed), parsed


def avro_converter(url: str, **settings: Any) -> RegistryDeserializer:
    client, _ = client_for(url, **settings)
    converter = RegistryDeserializer("avro", client, is_key=False)
    converter.topic = "orders"
    return converter


def test_avro_values_convert_and_a_tombstone_is_null(registry: Any) -> None:
    url, state = registry
    schema_id = state.add(ORDER, subject="orders-value")
    converter = avro_converter(url)
    framed = WireFormat.build(schema_id, AvroCodec(ORDER).encode({"id": 1, "amount": 2.5}))
    assert converter(framed) == {"id": 1, "amount": 2.5}
    assert converter(None) is None


@pytest.mark.parametrize(
    ("value", "chain"),
    [
        (b'{"id": 1, "amount": 2.5}', ["Unknown magic byte!"]),
        (b"\x00\x00\x01", ["Invalid value: 3 bytes, shorter than the 5-byte header (magic byte and schema id)"]),
        (
            WireFormat.build(42, b"\x02"),
            ["Error retrieving Avro value schema for id 42", "Schema 42 not found; error code: 40403"],
        ),
        (
            WireFormat.build(1, b"\x02\x00\x00"),
            ["Error deserializing Avro message for id 1", "EOFException: the body ends before its Avro value does"],
        ),
    ],
)
def test_bad_values_fail_as_connect_words_them(registry: Any, value: bytes, chain: list[str]) -> None:
    url, state = registry
    state.add(ORDER)
    with pytest.raises(ConverterDataError) as raised:
        avro_converter(url)(value)
    assert str(raised.value) == OUTER  # Connect's DataException message: its text alone
    assert not is_retriable(raised.value)
    assert causes(raised.value) == chain  # the serde's exceptions, as Connect chains them


def test_avro_fast_function_reads_a_loaded_schema_and_refuses_the_rest(registry: Any) -> None:
    """The per-record path maps ``fast`` over a batch; whatever it raises for goes to the converter itself."""
    url, state = registry
    schema_id = state.add(ORDER)
    converter = avro_converter(url)
    framed = WireFormat.build(schema_id, AvroCodec(ORDER).encode({"id": 4, "amount": 1.25}))
    with pytest.raises(KeyError):  # no schema loaded yet: the converter loads it
        converter.fast(framed)
    assert converter(framed) == {"id": 4, "amount": 1.25}
    assert converter.fast(framed) == {"id": 4, "amount": 1.25}
    for refused in (None, WireFormat.build(schema_id + 1, framed[5:]), b'{"id": 4}', framed[:-3]):
        with pytest.raises((KeyError, TypeError, IndexError, struct.error)):  # none read: the converter takes them
            converter.fast(refused)  # type: ignore[arg-type]
    with pytest.raises(ConverterDataError) as raised:
        converter(framed[:-3])
    assert "EOFException" in causes(raised.value)[-1], causes(raised.value)


def test_key_converter_says_key(registry: Any) -> None:
    url, _ = registry
    client, _ = client_for(url)
    converter = RegistryDeserializer("avro", client, is_key=True)
    converter.topic = "orders"
    with pytest.raises(ConverterDataError) as raised:
        converter(WireFormat.build(9, b""))
    assert causes(raised.value)[0] == "Error retrieving Avro key schema for id 9"


def test_each_schema_is_fetched_once_per_process(registry: Any) -> None:
    url, state = registry
    ids = [state.add(ORDER.replace("Order", f"Order{n}")) for n in range(3)]
    converter = avro_converter(url, **{"cache.capacity": 2})
    body = AvroCodec(ORDER).encode({"id": 1, "amount": 1.0})
    for _ in range(500):
        converter(WireFormat.build(ids[0], body))
    assert converter.client.requests == 1
    for schema_id in ids:  # three schemas through a cache of two: the first one goes
        converter(WireFormat.build(schema_id, body))
    assert len(converter.client.codecs) == 2
    requests = converter.client.requests
    second = avro_converter(url)  # another converter of the process shares nothing but its client's cache
    second.client = converter.client
    second(WireFormat.build(ids[2], body))
    assert converter.client.requests == requests


def test_registry_503_is_retriable_then_retried_to_success(registry: Any) -> None:
    url, state = registry
    schema_id = state.add(ORDER)
    framed = WireFormat.build(schema_id, AvroCodec(ORDER).encode({"id": 3, "amount": 0.5}))
    state.unavailable = 1
    with pytest.raises(ConverterRetriableError) as raised:
        avro_converter(url)(framed)
    assert is_retriable(raised.value) and str(raised.value) == OUTER
    retrieving, answer = causes(raised.value)
    assert retrieving == f"Error retrieving Avro value schema for id {schema_id}"
    assert answer.startswith(f"GET {url}/schemas/ids/{schema_id}: HTTP 503")
    state.unavailable = 2
    converter = avro_converter(url)
    config = ErrorHandlingConfig.from_properties(
        {"errors.retry.timeout": "60000", "errors.retry.delay.max.ms": "1", "errors.tolerance": "none"}
    )
    retry = RetryWithTolerance(config, task=TaskId("formats", 0), sleep=lambda _: None)
    stage = PipelineStage(Stage.VALUE_CONVERTER, "airflow_kerr.formats.RegistryDeserializer")
    record = SourceRecord("orders", 0, 0, value=framed)
    assert retry.execute(stage, converter, record, framed) == {"id": 3, "amount": 0.5}
    # one 503 for the first converter, two for the second, then the schema: each retry asked again
    assert state.requests.count(f"GET /schemas/ids/{schema_id}") == 4


def test_a_registry_that_hangs_or_is_down_is_retriable(registry: Any) -> None:
    url, state = registry
    state.hang.set()
    with pytest.raises(ConverterRetriableError) as hung:
        avro_converter(url, timeout=0.2)(WireFormat.build(1, b""))
    assert causes(hung.value)[0] == "Error retrieving Avro value schema for id 1"
    assert "timed out" in causes(hung.value)[1]
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(ConverterRetriableError) as refused:
        avro_converter(closed)(WireFormat.build(1, b""))
    assert "ConnectionRefusedError" in causes(refused.value)[1]


def test_several_urls_are_tried_in_turn(registry: Any) -> None:
    url, state = registry
    state.add(ORDER)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    converter = avro_converter(f"{closed},{url}")
    assert converter(WireFormat.build(1, AvroCodec(ORDER).encode({"id": 1, "amount": 0.0}))) == {"id": 1, "amount": 0.0}
    assert converter.client.requests == 2 and state.requests == ["GET /schemas/ids/1"]


def test_json_schema_converter(registry: Any) -> None:
    url, state = registry
    schema = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})
    schema_id = state.add(schema, "JSON")
    client, _ = client_for(url)
    strict = RegistryDeserializer("json_schema", client, is_key=False, validate_json=True)
    strict.topic = "orders"
    assert strict(WireFormat.build(schema_id, b'{"id": 5}')) == {"id": 5}
    outer = "Converting byte[] to Kafka Connect data failed due to serialization error of topic orders: "
    with pytest.raises(ConverterDataError) as raised:
        strict(WireFormat.build(schema_id, b'{"id": "x"}'))
    assert str(raised.value) == outer
    assert causes(raised.value) == [
        f"Error deserializing JSON message for id {schema_id}",
        "Validation error at id: 'x' is not of type 'integer'",
    ]
    lenient = RegistryDeserializer(
        "json_schema", client, is_key=False
    )  # json.fail.invalid.schema=false, Confluent's default
    assert lenient(WireFormat.build(schema_id, b'{"id": "x"}')) == {"id": "x"}
    with pytest.raises(ConverterDataError) as invalid:
        lenient(WireFormat.build(schema_id, b'{"id": '))
    assert causes(invalid.value)[0] == f"Error deserializing JSON message for id {schema_id}"
    assert causes(invalid.value)[1].startswith("Invalid JSON")


def order_proto() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    order = proto.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)
    order.field.add(name="customer", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    return proto


def test_protobuf_converter_reads_the_real_writers_bytes(registry: Any) -> None:
    url, state = registry
    proto = order_proto()
    schema_id = state.add(base64.b64encode(proto.SerializeToString()).decode(), "PROTOBUF")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    order_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    line_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order.Line"))
    client, _ = client_for(url)
    converter = RegistryDeserializer("protobuf", client, is_key=False)
    converter.topic = "orders"
    body = order_class(id=2**40, customer="ada").SerializeToString()
    assert converter(WireFormat.build(schema_id, body, [0])) == {"id": 2**40, "customer": "ada"}
    nested = line_class(sku="a-1").SerializeToString()
    assert converter(WireFormat.build(schema_id, nested, [0, 0])) == {"sku": "a-1"}
    assert state.requests == [f"GET /schemas/ids/{schema_id}?format=serialized"]
    with pytest.raises(ConverterDataError) as raised:
        converter(WireFormat.build(schema_id, body[:-2], [0]))
    assert str(raised.value) == "Failed to deserialize data for topic orders to Protobuf: "
    assert causes(raised.value)[0] == f"Error deserializing Protobuf message for id {schema_id}"
    with pytest.raises(ConverterDataError) as unframed:  # 7.0.16 reads the header inside its try: id -1
        converter(b'{"id": 1}')
    assert causes(unframed.value) == ["Error deserializing Protobuf message for id -1", "Unknown magic byte!"]


def test_avro_sink_registers_once_and_frames_the_body(registry: Any) -> None:
    url, state = registry
    client, settings = client_for(url)
    serializer = RegistrySerializer("avro", client, settings, topic="orders.avro", is_key=False, schema=ORDER)
    first = serializer({"id": 1, "amount": 1.5})
    serializer({"id": 2, "amount": 2.5})
    schema_id = state.subjects["orders.avro-value"][0]
    assert first == WireFormat.build(schema_id, AvroCodec(ORDER).encode({"id": 1, "amount": 1.5}))
    assert [r for r in state.requests if r.startswith("POST")] == ["POST /subjects/orders.avro-value/versions"]
    assert serializer(None) is None
    with pytest.raises(ConverterDataError) as raised:
        serializer({"id": 3})
    assert str(raised.value) == (
        "Failed to serialize Avro data from topic orders.avro: Error serializing Avro message: The value does not "
        "fit the Avro schema: record shop.Order: field 'amount' is missing and has no default"
    )


def test_avro_sink_fast_function_writes_what_the_serializer_writes(registry: Any) -> None:
    url, _ = registry
    client, settings = client_for(url)
    serializer = RegistrySerializer("avro", client, settings, topic="orders.fast", is_key=False, schema=ORDER)
    assert serializer.fast is None  # the schema id is not known before the first value
    first = serializer({"id": 1, "amount": 1.5})
    assert serializer.fast is not None
    assert serializer.fast({"id": 1, "amount": 1.5}) == first
    with pytest.raises(Exception):  # noqa: B017 - the fast write raises; the serializer words it as Connect does
        serializer.fast({"id": True, "amount": 1.5})
    with pytest.raises(ConverterDataError, match="field 'id': expected long, got bool True"):
        serializer({"id": True, "amount": 1.5})


def test_sink_record_name_strategy_and_latest_version(registry: Any) -> None:
    url, state = registry
    client, settings = client_for(url, **{"subject.name.strategy": "RecordNameStrategy"})
    RegistrySerializer("avro", client, settings, topic="t", is_key=False, schema=ORDER)({"id": 1, "amount": 0.0})
    assert list(state.subjects) == ["shop.Order"]
    client, latest = client_for(url, **{"auto.register.schemas": False, "use.latest.version": True})
    state.add(ORDER, subject="t-value")
    serializer = RegistrySerializer("avro", client, latest, topic="t", is_key=False)
    written = serializer({"id": 1, "amount": 0.0})
    assert written is not None and WireFormat.schema_id(written) == state.subjects["t-value"][-1]


def test_settings_name_the_key_and_hide_secrets() -> None:
    with pytest.raises(InvalidRegistrySettings) as raised:
        RegistrySettings.from_mapping({"url": "localhost:8081", "basic.auth.user.info": 3, "colour": "red"})
    text = str(raised.value)
    assert "schema_registry['url']='localhost:8081': expected an http:// or https:// URL" in text
    assert "schema_registry['basic.auth.user.info']=[hidden]: expected a non-empty string" in text
    assert "schema_registry['colour']: unknown setting; accepted: url," in text
    assert "3" not in text.split("basic.auth.user.info']=")[1].split(":")[0]


def test_basic_auth_reaches_the_registry(registry: Any) -> None:
    url, state = registry
    state.add(ORDER)
    avro_converter(url, **{"basic.auth.user.info": "ada:s3cret"})(
        WireFormat.build(1, AvroCodec(ORDER).encode({"id": 1, "amount": 0.0}))
    )
    assert state.authorizations == ["Basic " + base64.b64encode(b"ada:s3cret").decode()]


def test_protobuf_and_json_schema_sinks_write_what_their_converters_read(registry: Any) -> None:
    url, state = registry
    client, settings = client_for(url)
    proto_schema = base64.b64encode(order_proto().SerializeToString()).decode()
    proto_sink = RegistrySerializer("protobuf", client, settings, topic="p", is_key=False, schema=proto_schema)
    written = proto_sink({"id": 5, "customer": "ada"})
    assert written is not None and written[5:6] == b"\x00"  # message indexes [0]: the first message, one byte
    reader = RegistryDeserializer("protobuf", client, is_key=False)
    assert reader(written) == {"id": 5, "customer": "ada"}
    with pytest.raises(ConverterDataError, match=r"^Failed to serialize Protobuf data from topic p: .*customer"):
        proto_sink({"id": 5, "customer": 7})

    schema = json.dumps({"title": "Order", "type": "object", "properties": {"id": {"type": "integer"}}})
    json_sink = RegistrySerializer("json_schema", client, settings, topic="j", is_key=False, schema=schema)
    framed = json_sink({"id": 6})
    assert framed == WireFormat.build(state.subjects["j-value"][0], b'{"id":6}')
    assert RegistryDeserializer("json_schema", client, is_key=False)(framed) == {"id": 6}
    with pytest.raises(ConverterDataError) as raised:
        json_sink({"id": "six"})
    assert str(raised.value) == (
        "Converting Kafka Connect data to byte[] failed due to serialization error of topic j: Error serializing "
        "JSON message: Validation error at id: 'six' is not of type 'integer'"
    )
