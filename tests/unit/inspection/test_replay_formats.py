"""Which key and value format "Replay this selection…" prefills: one registry format only when the samples agree.

The replay hands a fix decoded values only in the format it is told, and parks a record that
does not decode in it; so the view proposes a format only when every sampled record with that
part was decoded with it, and ``bytes`` otherwise (the fix then gets the bytes, as before).
"""

from __future__ import annotations

import pytest

from airflow_kerr.inspection.payloads import Payload, SchemaRef, describe_payload
from airflow_kerr.inspection.samples import replay_format


def decoded(fmt: str, schema_id: int = 1) -> Payload:
    return Payload('{"id": 1}', None, True, 12, False, schema=SchemaRef(schema_id, fmt, f"orders-{fmt}", 1))


NULL = describe_payload(None)
PLAIN = describe_payload(b'{"id": 2}')
MISSING = Payload(None, "AAAAACo=", False, 5, False, error="schema 42 not found in the registry at http://sr:8081")
UNDECODABLE = Payload(
    None, "AAAAAAEO", False, 6, False, schema=SchemaRef(1, "avro", "orders-value", 1), error="does not decode"
)


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ([decoded("avro"), decoded("avro", 2)], "avro"),  # two Avro schemas: still one format
        ([decoded("protobuf"), NULL], "protobuf"),  # a null part passes through the replay as it is
        ([decoded("json_schema")], "json_schema"),
        ([decoded("avro"), decoded("protobuf")], "bytes"),
        ([decoded("avro"), PLAIN], "bytes"),
        ([decoded("avro"), MISSING], "bytes"),  # its format is unknown: it may be none of the three
        ([decoded("avro"), UNDECODABLE], "bytes"),  # would be parked as undecodable
        ([NULL, NULL], "bytes"),
        ([], "bytes"),
    ],
)
def test_a_registry_format_only_when_every_sampled_part_was_decoded_with_it(
    parts: list[Payload], expected: str
) -> None:
    assert replay_format(parts) == expected
