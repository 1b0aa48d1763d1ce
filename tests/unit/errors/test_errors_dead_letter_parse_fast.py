"""The single-pass ``parse_dead_letter`` builds the same frozen record its dataclass constructor would."""

from __future__ import annotations

import dataclasses

import pytest

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.errors.dead_letter import DeadLetterRecord, HeaderSet


def test_parsed_record_equals_the_constructed_one_and_stays_frozen() -> None:
    headers = [
        ("trace-id", b"abc"),
        ("__streams.errors.topic", b"streams-topic"),
        ("__dlq.errors.group", b"share"),
        ("__connect.errors.partition", b" 3 "),
        ("__connect.errors.unknown", b"kept for display"),
        ("__dlq.errors.partition", b"9"),
    ]
    parsed = parse_dead_letter(headers, b"k", b"v", topic="d", partition=1, offset=2, timestamp=5)

    built = DeadLetterRecord(
        header_set=HeaderSet.CONNECT,
        source_topic="streams-topic",
        source_partition=3,
        source_offset=None,
        stage=None,
        executing_class=None,
        exception_class=None,
        exception_message=None,
        exception_stacktrace=None,
        connector_name=None,
        task_id=None,
        group="share",
        delivery_count=None,
        key=b"k",
        value=b"v",
        headers=(("trace-id", b"abc"),),
        timestamp=5,
        topic="d",
        partition=1,
        offset=2,
        error_headers={name: raw.decode() for name, raw in headers[1:]},
    )
    assert type(parsed) is DeadLetterRecord
    assert parsed == built
    assert repr(parsed) == repr(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.source_topic = "x"  # type: ignore[misc]
    assert dataclasses.replace(parsed, topic="e").topic == "e"
