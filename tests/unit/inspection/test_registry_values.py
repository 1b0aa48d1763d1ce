"""The pure parts of the DLQ view's Schema Registry values: which bytes are framed, URLs shown bare, JSON-ready values.

The decoding itself runs against the development registry in
``tests/integration/test_dead_letter_view_registry.py``.
"""

from __future__ import annotations

import base64
import json

import pytest

from airflow_kerr.inspection.registry_values import RegistryValues, is_framed, json_ready, shown_url


def test_framed_means_magic_byte_zero_and_a_whole_schema_id() -> None:
    assert is_framed(b"\x00\x00\x00\x00\x2a\x02")
    assert is_framed(b"\x00\x00\x00\x00\x2a")  # an empty body still names its schema
    assert not is_framed(b"\x00\x00\x00\x2a")  # shorter than the header
    assert not is_framed(b'{"id": 1}') and not is_framed(b"") and not is_framed(None)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://svc:pw-123@registry.example.com:8081", "http://registry.example.com:8081"),
        ("https://svc@registry.example.com/", "https://registry.example.com"),
        ("http://u:p@[::1]:8081/prefix/", "http://[::1]:8081/prefix"),
        ("http://127.0.0.1:8081", "http://127.0.0.1:8081"),
    ],
)
def test_a_registry_url_is_shown_without_credentials(url: str, shown: str) -> None:
    assert shown_url(url) == shown


def test_bytes_follow_each_formats_json_mapping() -> None:
    """Avro's JSON encoding: code points 0-255 (what kafka-avro-console-consumer prints); Protobuf's: base64."""
    raw = b"\x00\xffok"
    assert json_ready({"b": raw}, "avro") == {"b": "\x00\xffok"}
    assert json_ready({"b": raw}, "protobuf") == {"b": base64.b64encode(raw).decode()}
    assert json_ready({2: [raw], False: None}, "protobuf") == {"2": ["AP9vaw=="], "false": None}
    # Whatever a codec returns, the result is JSON.
    json.dumps(json_ready({"nested": [{"x": (b"a", 1.5)}]}, "avro"))


def test_without_a_client_a_reason_is_required() -> None:
    with pytest.raises(ValueError, match="needs a client, or the reason"):
        RegistryValues(None)
    absent = RegistryValues(None, absent="no connection")
    shown = absent.describe(b"\x00\x00\x00\x00\x07\x02", is_key=False, source_topic="orders")
    assert shown.error == "schema 7 not decoded: no connection" and shown.base64
    assert absent.describe(b'{"a": 1}', is_key=False, source_topic=None).json
