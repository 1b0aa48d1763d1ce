"""How the DLQ view shows a record's key and value: JSON pretty-printed and masked, text, or base64; cut when large."""

from __future__ import annotations

import base64
import json

from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import MASK
from airflow_kerr.inspection.payloads import MAX_SHOWN_BYTES, describe_payload


def test_json_value_is_pretty_printed_and_masked() -> None:
    """A JSON value reads as indented JSON, with its credentials hidden."""
    payload = describe_payload(b'{"id": "o-1", "password": "p", "items": [1, 2]}')
    assert payload.json and payload.base64 is None and not payload.truncated
    assert json.loads(payload.text or "") == {"id": "o-1", "password": MASK, "items": [1, 2]}
    assert payload.text and "\n  " in payload.text
    assert payload.to_dict()["bytes"] == 47


def test_text_and_binary_values() -> None:
    """Plain text shows as text; bytes that are not text (Avro, Protobuf) show as base64."""
    text = describe_payload("naïve order 42".encode())
    assert (text.text, text.base64, text.json) == ("naïve order 42", None, False)
    binary = describe_payload(b"\x00\x00\x00\x00\x01\xff\xfe")
    assert binary.text is None and base64.b64decode(binary.base64 or "") == b"\x00\x00\x00\x00\x01\xff\xfe"
    assert describe_payload(None).to_dict() == {
        "text": None,
        "base64": None,
        "json": False,
        "bytes": 0,
        "truncated": False,
        "schema": None,
        "error": None,
    }
    assert describe_payload(b"42").json is False  # a bare number is text, not a document


def test_large_values_are_cut_and_say_so() -> None:
    """A 1 MB value is cut at 64 KiB, even inside a multi-byte character, and the page says how large it was."""
    raw = ("é" * 600_000).encode()
    payload = describe_payload(raw)
    assert payload.truncated and payload.bytes == len(raw)
    assert payload.text is not None and len(payload.text.encode()) <= MAX_SHOWN_BYTES
    assert not payload.json
    binary = describe_payload(b"\x00" * (MAX_SHOWN_BYTES + 10))
    assert binary.truncated and len(base64.b64decode(binary.base64 or "")) == MAX_SHOWN_BYTES


@given(st.binary(max_size=300))
def test_any_bytes_decode_to_text_or_base64(raw: bytes) -> None:
    """Any key or value can be shown: as text when it is text, else as base64 of exactly its bytes."""
    payload = describe_payload(raw)
    assert (payload.text is None) != (payload.base64 is None)
    if payload.base64 is not None:
        assert base64.b64decode(payload.base64) == raw
    assert payload.bytes == len(raw)
