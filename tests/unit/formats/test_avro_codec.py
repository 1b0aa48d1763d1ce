"""The compiled Avro codec on a realistic schema: every type, named references, and what it says of bad data."""

from __future__ import annotations

import json

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
