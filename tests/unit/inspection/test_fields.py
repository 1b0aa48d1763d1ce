"""The header fast path: what a summary counts a record by, equal to what ``parse_dead_letter`` reads on any input.

The view counts millions of records with a direct header lookup, so the lookup must agree
with the one parsing rule for every header a record may carry.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.errors.dead_letter import ERROR_HEADER_ORIG_PARTITION
from airflow_kerr.errors.dialects import FIELD_HEADERS, header_set_name
from airflow_kerr.inspection.fields import dead_letter_fields
from tests.dead_letter_writers import (
    Original,
    header_less,
    kip_1191,
    schema_registry_rule,
    spring_dlt,
    streams_bakdata,
)
from tests.unit.inspection.connect_records import connect_headers


def test_direct_lookup_equals_parse_for_a_connect_record() -> None:
    """The fast count reads the same class, stage, topic and pipeline as the replay's parser."""
    fields = dead_letter_fields(connect_headers(KeyError("customer")))
    assert (fields.exception_class, fields.stage, fields.source_topic, fields.pipeline, fields.malformed) == (
        "KeyError",
        "TRANSFORMATION",
        "orders",
        "orders_pipeline",
        False,
    )


def _parsed_fields(headers: Any) -> tuple[Any, ...]:
    letter = parse_dead_letter(headers, None, None)
    return (
        letter.exception_class,
        None if letter.stage is None else letter.stage.value,
        letter.source_topic,
        letter.connector_name,
        header_set_name(letter.header_set),
        letter.header_set is None or bool(letter.malformed_headers),
    )


def _counted_fields(headers: Any) -> tuple[Any, ...]:
    fields = dead_letter_fields(headers)
    return (
        fields.exception_class,
        fields.stage,
        fields.source_topic,
        fields.pipeline,
        fields.header_set,
        fields.malformed,
    )


#: Every dialect's field headers (Spring's binary ones among them), its other headers, and others.
_DIALECT_NAMES = sorted({name for names in FIELD_HEADERS.values() for name in names})
_NAMES = st.sampled_from(
    [
        *_DIALECT_NAMES,
        "kafka_dlt-original-timestamp-type",
        "retry_topic-attempts",
        "retry_topic-backoff-timestamp",
        "__streams.errors.task.id",
        "__connect.errors.other",
        "__rule.other",
        "trace-id",
    ]
)
_VALUES = st.one_of(
    st.none(),
    st.sampled_from([b"0", b"7", b"123456789", b"1234567890", b"-1", b" 5", b"orders", b"bad topic", b"TASK_PUT", b""]),
    st.binary(max_size=12),
    st.from_regex(rb"[0-9]{1,20}", fullmatch=True),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: struct.pack(">i", n)),
    st.integers(-(2**63), 2**63 - 1).map(lambda n: struct.pack(">q", n)),
    st.text(max_size=8),
)
_ORIGINAL = Original("orders", 1, 42, 1_795_250_000_000, b"k", b"v", [("trace", b"t")])
#: A record of each dialect as its writer writes it (tests/dead_letter_writers.py), Connect's as the job does.
_WRITTEN = {
    "connect": lambda: connect_headers(),
    "spring": lambda: spring_dlt(_ORIGINAL)["headers"],
    "spring_key": lambda: spring_dlt(_ORIGINAL, key_failure=True, group=None)["headers"],
    "schema_registry": lambda: schema_registry_rule(_ORIGINAL, dlq_topic="orders.dlq")["headers"],
    "kip_1191": lambda: kip_1191(_ORIGINAL, dlq_topic="orders.dlq")["headers"],
    "streams": lambda: streams_bakdata(_ORIGINAL, dlq_topic="orders.dlq")["headers"],
    "none": lambda: header_less(_ORIGINAL, dlq_topic="orders.dlq").get("headers", []),
}


@given(
    bases=st.lists(st.sampled_from(sorted(_WRITTEN)), max_size=3),
    extra=st.lists(st.tuples(_NAMES, _VALUES), max_size=8),
    drop=st.sets(st.integers(0, 30), max_size=4),
    data=st.data(),
)
def test_direct_lookup_agrees_with_parse_dead_letter_on_any_headers(
    bases: list[str], extra: list[tuple[str, Any]], drop: set[int], data: st.DataObject
) -> None:
    """One parsing rule: whatever the headers, of whichever writers, the summary counts a record by what
    parse_dead_letter reads (class, stage, source topic, pipeline, dialect, malformed)."""
    headers: list[tuple[str, Any]] = [pair for base in bases for pair in _WRITTEN[base]()]
    headers = [pair for i, pair in enumerate(headers) if i not in drop] + extra
    headers = data.draw(st.permutations(headers)) if data.draw(st.booleans()) else headers

    assert _counted_fields(headers) == _parsed_fields(headers)
    assert _counted_fields(dict(headers)) == _parsed_fields(dict(headers)), "a mapping, too"


@pytest.mark.parametrize("writer", sorted(_WRITTEN))
def test_each_dialect_is_counted_by_its_name_and_class(writer: str) -> None:
    """The summary names every writer's dead letters by dialect, and by the class parse_dead_letter reads
    (Spring's root cause, Schema Registry's rule), never only Connect's."""
    fields = dead_letter_fields(_WRITTEN[writer]())
    expected = {
        "connect": ("ValueError", "connect", "orders", False),
        "spring": ("java.lang.IllegalStateException", "spring", "orders", False),
        "spring_key": ("java.lang.IllegalStateException", "spring", "orders", False),
        "schema_registry": ("rule:checkSsnLen", "schema_registry", "orders", False),
        "kip_1191": (None, "dlq", "orders", False),
        "streams": ("org.apache.kafka.common.errors.SerializationException", "streams", "orders", False),
        "none": (None, "none", None, True),
    }[writer]
    assert (fields.exception_class, fields.header_set, fields.source_topic, fields.malformed) == expected


def test_malformed_and_plain_records_are_flagged() -> None:
    """A record with a garbage partition header, or with no error headers at all, counts as malformed."""
    headers = [(n, b"x" if n == ERROR_HEADER_ORIG_PARTITION else v) for n, v in connect_headers()]
    assert dead_letter_fields(headers).malformed
    assert dead_letter_fields([("trace", b"1")]).malformed
    assert not dead_letter_fields(connect_headers()).malformed
