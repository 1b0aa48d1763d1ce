"""Confluent's framing and Avro's binary encoding, byte for byte.

The vectors are the writers' own: the header as ``AbstractKafkaAvroSerializer.serializeImpl``
writes it (``out.write(MAGIC_BYTE); out.write(ByteBuffer.allocate(idSize).putInt(id).array())``,
confluentinc/schema-registry v7.9.9 avro-serializer/.../AbstractKafkaAvroSerializer.java), the
message indexes as ``MessageIndexes.toByteArray`` (protobuf-provider/.../MessageIndexes.java: a
lone ``0`` for ``[0]``, else zigzag count and items), and Avro bodies from the examples of the
Avro specification's "Binary Encoding" section (long ``-64`` is ``7f``, ``64`` is ``80 01``, the
record ``{a: 27, b: "foo"}`` is ``36 06 66 6f 6f``). confluent-kafka's own serializers could
not write them here: its schema_registry package needs authlib and fastavro, not installed.
"""

from __future__ import annotations

import pytest

from airflow_kerr.formats import SerializationError, WireFormat
from airflow_kerr.formats.avro_codec import AvroCodec

RECORD = '{"type":"record","name":"Test","fields":[{"name":"a","type":"long"},{"name":"b","type":"string"}]}'


def test_header_is_magic_byte_then_big_endian_id() -> None:
    assert WireFormat.build(42, b"\x36") == b"\x00\x00\x00\x00\x2a\x36"
    assert WireFormat.build(0x01020304, b"") == b"\x00\x01\x02\x03\x04"
    assert WireFormat.schema_id(b"\x00\x00\x00\x01\x00rest") == 256


@pytest.mark.parametrize(
    ("indexes", "encoded"),
    [([0], b"\x00"), ([1], b"\x02\x02"), ([0, 1], b"\x04\x00\x02"), ([2, 0, 70], b"\x06\x04\x00\x8c\x01")],
)
def test_protobuf_message_indexes(indexes: list[int], encoded: bytes) -> None:
    assert WireFormat.encode_message_indexes(indexes) == encoded
    assert WireFormat.read_message_indexes(encoded + b"body", 0) == (indexes, len(encoded))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (b'{"id": 1}', "Unknown magic byte!"),
        (b"\x01\x00\x00\x00\x01\x02", "Unknown magic byte!"),
        (b"{", "Unknown magic byte!"),
        (b"\x00\x00\x01", "Invalid value: 3 bytes, shorter than the 5-byte header (magic byte and schema id)"),
        (b"", "Invalid value: 0 bytes, shorter than the 5-byte header (magic byte and schema id)"),
    ],
)
def test_unframed_values_are_refused_as_confluent_words_it(value: bytes, text: str) -> None:
    with pytest.raises(SerializationError) as raised:
        WireFormat.schema_id(value)
    assert str(raised.value) == text


@pytest.mark.parametrize(
    ("schema", "datum", "encoded"),
    [
        ('"long"', 0, b"\x00"),
        ('"long"', -1, b"\x01"),
        ('"long"', 1, b"\x02"),
        ('"long"', -64, b"\x7f"),
        ('"long"', 64, b"\x80\x01"),
        ('"string"', "foo", b"\x06foo"),
        (RECORD, {"a": 27, "b": "foo"}, b"\x36\x06foo"),
        ('{"type":"array","items":"long"}', [3, 27], b"\x04\x06\x36\x00"),
        ('["null","string"]', None, b"\x00"),
        ('["null","string"]', "a", b"\x02\x02a"),
        ('{"type":"map","values":"long"}', {"a": 1}, b"\x02\x02a\x02\x00"),
        ('"double"', 1.5, b"\x00\x00\x00\x00\x00\x00\xf8\x3f"),
        ('"boolean"', True, b"\x01"),
    ],
)
def test_avro_specification_examples(schema: str, datum: object, encoded: bytes) -> None:
    codec = AvroCodec(schema)
    assert codec.encode(datum) == encoded
    assert codec.decode(b"\x00\x00\x00\x00\x07" + encoded, 5) == datum
