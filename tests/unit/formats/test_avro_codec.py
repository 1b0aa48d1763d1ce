"""The compiled Avro codec on a realistic schema: every type, named references, and what it says of bad data."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from airflow_kerr.formats import SerializationError
from airflow_kerr.formats.avro_codec import AvroCodec

ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
            {
                "name": "lines",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Line",
                        "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
                    },
                },
            },
            {"name": "tags", "type": {"type": "map", "values": "string"}},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "digest", "type": {"type": "fixed", "name": "MD5", "size": 4}},
            {"name": "next", "type": ["null", "Line"], "default": None},
        ],
    }
)
GOOD = {
    "id": 7,
    "customer": "ada",
    "amount": 12.5,
    "status": "PAID",
    "lines": [{"sku": "a-1", "qty": 2}],
    "tags": {"channel": "web"},
    "note": None,
    "digest": b"\x01\x02\x03\x04",
    "next": {"sku": "b", "qty": -3},
}


def test_round_trip_every_type() -> None:
    codec = AvroCodec(ORDER)
    assert codec.name == "shop.Order"
    body = codec.encode(GOOD)
    assert codec.decode(body) == GOOD


def test_a_missing_field_with_a_default_takes_it() -> None:
    codec = AvroCodec(ORDER)
    given = {key: value for key, value in GOOD.items() if key not in ("note", "next")}
    assert codec.decode(codec.encode(given)) == {**given, "note": None, "next": None}


def test_truncated_body_is_an_eof() -> None:
    codec = AvroCodec(ORDER)
    body = codec.encode(GOOD)
    for cut in (0, 1, len(body) // 2, len(body) - 1):
        with pytest.raises(SerializationError, match=r"^EOFException: the body ends before its Avro value does$"):
            codec.decode(body[:cut])


def test_bad_enum_index_and_union_branch_are_named() -> None:
    with pytest.raises(SerializationError, match=r"Enum s\.E: index 5 beyond its 1 symbols"):
        AvroCodec('{"type":"enum","name":"E","namespace":"s","symbols":["A"]}').decode(b"\x0a")
    with pytest.raises(SerializationError, match="Unknown union branch 3 of 2"):
        AvroCodec('["null","long"]').decode(b"\x06")


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"amount": "12.5"}, "field 'amount': expected double, got str '12.5'"),
        ({"status": "LOST"}, "field 'status': str 'LOST' is not a symbol of enum shop.Status (NEW, PAID)"),
        ({"lines": [{"sku": "a"}]}, "field 'lines': [0]: record shop.Line: field 'qty' is missing and has no default"),
        ({"id": 2**63}, "field 'id': 9223372036854775808 is out of the long range"),
    ],
)
def test_a_value_that_does_not_fit_names_the_field(change: dict[str, object], text: str) -> None:
    with pytest.raises(SerializationError) as raised:
        AvroCodec(ORDER).encode({**GOOD, **change})
    assert str(raised.value) == f"The value does not fit the Avro schema: {text}"


def test_an_invalid_schema_is_refused() -> None:
    with pytest.raises(SerializationError, match="Invalid Avro schema"):
        AvroCodec('{"type":"record","name":"R","fields":[{"name":"x","type":"Nope"}]}')


# The generated record reader: primitives read inline, with the reference readers' checks and texts.

FLAT = json.dumps(
    {
        "type": "record",
        "name": "Flat",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "n", "type": "int"},
            {"name": "amount", "type": "double"},
            {"name": "ratio", "type": "float"},
            {"name": "customer", "type": "string"},
            {"name": "raw", "type": "bytes"},
            {"name": "ok", "type": "boolean"},
            {"name": "nothing", "type": "null"},
            {"name": "tags", "type": {"type": "map", "values": "long"}},
            {"name": "seen", "type": {"type": "array", "items": "string"}},
        ],
    }
)
FLAT_GOOD = {
    "id": -5,
    "n": 2**42,  # an int reads as a long, unchecked, as before
    "amount": 0.25,
    "ratio": 0.5,
    "customer": "ada",
    "raw": b"\x00\xff",
    "ok": True,
    "nothing": None,
    "tags": {"a": 1},
    "seen": ["x"],
}


def test_every_primitive_reads_back_and_from_a_framed_value() -> None:
    codec = AvroCodec(FLAT)
    body = codec.encode({**FLAT_GOOD, "n": 7})
    big = body[:1] + b"\x80\x80\x80\x80\x80\x80\x02" + body[2:]  # a 7-byte varint for n: 2**42
    assert codec.decode(big) == FLAT_GOOD
    assert codec.decode(b"\x00\x00\x00\x00\x07" + body, 5) == {**FLAT_GOOD, "n": 7}
    assert codec.fast_decoder(5)(b"\x00\x00\x00\x00\x07" + body) == {**FLAT_GOOD, "n": 7}
    assert codec.decode(body + b"after") == {**FLAT_GOOD, "n": 7}  # bytes after the value are not checked, as in Java


def flat_body(after_id: bytes) -> bytes:
    """A Flat body whose fields after ``id`` start with ``after_id`` (n, then amount, ...)."""
    return b"\x02" + after_id


@pytest.mark.parametrize(
    ("body", "text"),
    [
        (b"\xff" * 10 + b"\x01", "Invalid long: a varint longer than 10 bytes"),
        (flat_body(b"\x04" + b"\x00" * 12 + b"\xfe" + b"\xff" * 7 + b"\x7f"), "EOFException: the body ends"),
        (flat_body(b"\x04" + b"\x00" * 12 + b"\x03abc"), "Malformed data. Length is negative: -2"),
        (flat_body(b"\x04" + b"\x00" * 12 + b"\x00\x00\x02"), "Invalid boolean byte 2"),
        (flat_body(b"\x04" + b"\x00" * 5), "EOFException: the body ends"),
        (flat_body(b"\x04" + b"\x00" * 12 + b"\x02\xff"), "Invalid UTF-8 in an Avro string"),
    ],
)
def test_bad_bodies_get_the_reference_texts(body: bytes, text: str) -> None:
    with pytest.raises(SerializationError) as raised:
        AvroCodec(FLAT).decode(body)
    assert str(raised.value).startswith(text)


def test_a_block_count_of_items_that_take_no_bytes_is_refused_not_looped() -> None:
    codec = AvroCodec('{"type":"record","name":"Z","fields":[{"name":"xs","type":{"type":"array","items":"null"}}]}')
    with pytest.raises(SerializationError, match="Block count 4611686018427387903 beyond the value's 9 bytes"):
        codec.decode(b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f")


def test_a_field_name_is_data_in_the_generated_reader() -> None:
    name = "x'}, 0; import os #"
    codec = AvroCodec(json.dumps({"type": "record", "name": "Q", "fields": [{"name": name, "type": "long"}]}))
    assert codec.decode(b"\x04") == {name: 2}


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"id": True}, "field 'id': expected long, got bool True"),
        ({"amount": "12.5"}, "field 'amount': expected double, got str '12.5'"),
        ({"id": 1.5}, "field 'id': expected long, got float 1.5"),
        ({"n": 2**31}, "field 'n': 2147483648 is out of the int range"),
        ({"tags": {"a": "1"}}, "field 'tags': ['a']: expected long, got str '1'"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_by_name(change: dict[str, Any], text: str) -> None:
    with pytest.raises(SerializationError) as raised:
        AvroCodec(FLAT).encode({**FLAT_GOOD, "n": 7, **change})
    assert str(raised.value) == f"The value does not fit the Avro schema: {text}"
    with pytest.raises(Exception):  # noqa: B017 - the sink's fast function raises, then the serializer words it
        AvroCodec(FLAT).fast_encoder(b"\x00")({**FLAT_GOOD, "n": 7, **change})


def test_a_logical_type_reads_as_its_underlying_type() -> None:
    codec = AvroCodec(
        '{"type":"record","name":"T","fields":[{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},'
        '{"name":"day","type":{"type":"int","logicalType":"date"}}]}'
    )
    body = codec.encode({"at": 1_764_000_000_000, "day": 20_000})
    assert codec.decode(body) == {"at": 1_764_000_000_000, "day": 20_000}


def test_values_the_generated_writer_leaves_to_the_reference_are_written_alike() -> None:
    """An int subclass, a bytearray, an int for a double, a mapping that is not a dict: the reference writer's bytes."""

    class Count(int):
        pass

    class Frozen(Mapping[str, Any]):
        def __init__(self, data: dict[str, Any]) -> None:
            self.data = data

        def __getitem__(self, key: str) -> Any:
            return self.data[key]

        def __iter__(self) -> Iterator[str]:
            return iter(self.data)

        def __len__(self) -> int:
            return len(self.data)

    codec = AvroCodec(FLAT)
    plain = {**FLAT_GOOD, "n": 7, "amount": 2.0, "raw": b"ab"}
    expected = codec.encode(plain)
    for odd in ({"n": Count(7)}, {"raw": bytearray(b"ab")}, {"amount": 2}):
        assert codec.encode({**plain, **odd}) == expected
    assert codec.encode(Frozen(plain)) == expected
    assert codec.fast_encoder(b"\x00\x00\x00\x00\x01")(plain) == b"\x00\x00\x00\x00\x01" + expected
    assert codec.decode(expected) == plain
