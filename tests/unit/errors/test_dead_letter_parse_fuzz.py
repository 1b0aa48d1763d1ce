"""``parse_dead_letter`` on any header bytes: a record with fields of the documented types, or ``TypeError``.

A DLQ holds whatever its writers put there. These properties pin the parser's contract for
every input, not only for the examples that once broke a replay (a 600-byte topic header that
librdkafka refused, an offset of 5,000 digits past ``int``'s limit).
"""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.errors.dead_letter import (
    DLQ_HEADER_DELIVERY_COUNT,
    DLQ_HEADER_TOPIC,
    ERROR_HEADER_ORIG_OFFSET,
    ERROR_HEADER_ORIG_PARTITION,
    ERROR_HEADER_ORIG_TOPIC,
    ERROR_HEADER_TASK_ID,
    STREAMS_HEADER_PARTITION,
)
from airflow_kerr.errors.dialects import ERROR_HEADER_PREFIXES, FIELD_HEADERS
from tests.dead_letter_checks import INT16_MAX, INT32_MAX, INT64_MAX, check_documented_types

ERROR_NAMES = sorted({name for names in FIELD_HEADERS.values() for name in names})
TOPIC_CHARS = string.ascii_letters + string.digits + "._-"

#: Header names: every error header the parser reads, unknown ones under the error prefixes, and others.
names = st.one_of(
    st.sampled_from(ERROR_NAMES),
    st.sampled_from(ERROR_HEADER_PREFIXES).flatmap(lambda prefix: st.text(max_size=10).map(lambda rest: prefix + rest)),
    st.text(max_size=20),
)
#: Header values as a DLQ can hold them: raw bytes, text of digits (past int's 4,300-digit limit too),
#: other scripts' digits, long topic-like text, null.
values = st.one_of(
    st.none(),
    st.binary(max_size=64),
    st.text(max_size=64).map(lambda text: text.encode("utf-8", errors="surrogatepass")),
    st.text(alphabet="0123456789", min_size=1, max_size=6000).map(str.encode),
    st.from_regex(r"\A[ \t]*-?[0-9]{1,25}[ \t]*\Z").map(str.encode),
    st.text(alphabet="\u0660\u0661\u0663\u00b2\uff11", min_size=1, max_size=5).map(str.encode),
    st.text(alphabet=TOPIC_CHARS, min_size=0, max_size=700).map(str.encode),
    st.text(max_size=32),
)
header_lists = st.lists(st.tuples(names, values), max_size=12)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(header_lists)
def test_any_header_bytes_give_a_record_with_the_documented_types(headers: list[tuple[str, Any]]) -> None:
    record = parse_dead_letter(headers, b"k", b"v", topic="orders.dlq", partition=0, offset=1, timestamp=2)

    check_documented_types(record, headers)


@settings(max_examples=200)
@given(st.dictionaries(names, values, max_size=8))
def test_a_mapping_of_any_header_values_gives_a_record_too(headers: dict[str, Any]) -> None:
    check_documented_types(parse_dead_letter(headers, None, None), list(headers.items()))


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            names,
            st.one_of(
                st.integers(),
                st.floats(allow_nan=True),
                st.lists(st.integers(), max_size=2),
                st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
            ),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_header_values_that_are_not_bytes_or_text_raise_only_type_error(headers: list[tuple[str, Any]]) -> None:
    with pytest.raises(TypeError):
        parse_dead_letter(headers, None, None)


@pytest.mark.parametrize(
    "headers",
    [
        "__connect.errors.topic",
        b"abc",
        [("only-a-name",)],
        [("a", b"1", "extra")],
        [(7, b"x")],
        [(None, b"x")],
        [(b"__connect.errors.topic", b"x")],
    ],
)
def test_headers_that_are_not_name_value_pairs_raise_type_error(headers: Any) -> None:
    with pytest.raises(TypeError):
        parse_dead_letter(headers, None, None)


@settings(max_examples=200)
@given(
    topic=st.text(alphabet=TOPIC_CHARS, min_size=1, max_size=249).filter(lambda name: name not in (".", "..")),
    partition=st.integers(0, INT32_MAX),
    offset=st.integers(0, INT64_MAX),
    task=st.integers(0, INT32_MAX),
    deliveries=st.integers(1, INT16_MAX),
)
def test_every_value_kafka_allows_is_read_back_unchanged(
    topic: str, partition: int, offset: int, task: int, deliveries: int
) -> None:
    headers = [
        (ERROR_HEADER_ORIG_TOPIC, topic.encode()),
        (ERROR_HEADER_ORIG_PARTITION, str(partition).encode()),
        (ERROR_HEADER_ORIG_OFFSET, str(offset).encode()),
        (ERROR_HEADER_TASK_ID, str(task).encode()),
        (DLQ_HEADER_DELIVERY_COUNT, str(deliveries).encode()),
    ]

    record = parse_dead_letter(headers, None, None)

    assert (record.source_topic, record.source_partition, record.source_offset) == (topic, partition, offset)
    assert (record.task_id, record.delivery_count) == (task, deliveries)
    assert record.malformed_headers == {}


@pytest.mark.parametrize(
    ("name", "raw", "quoted"),
    [
        (ERROR_HEADER_ORIG_TOPIC, b"a" * 600, "is not a topic name"),
        (ERROR_HEADER_ORIG_TOPIC, b"orders/eu", "'orders/eu' is not a topic name"),
        (ERROR_HEADER_ORIG_TOPIC, b"\xff\xfe", "is not a topic name"),
        (ERROR_HEADER_ORIG_TOPIC, b"..", "'..' is not a topic name"),
        (ERROR_HEADER_ORIG_OFFSET, b"1" * 5000, "is not an integer from 0 to 9223372036854775807"),
        (ERROR_HEADER_ORIG_OFFSET, b"9223372036854775808", "is not an integer from 0"),
        (ERROR_HEADER_ORIG_PARTITION, b"2147483648", "is not an integer from 0 to 2147483647"),
        (ERROR_HEADER_ORIG_PARTITION, "\u0663".encode(), "is not an integer"),
        (ERROR_HEADER_ORIG_PARTITION, b"-2", "'-2' is not an integer"),
        (ERROR_HEADER_TASK_ID, b"9" * 4301, "is not an integer from 0 to 2147483647"),
        (ERROR_HEADER_TASK_ID, b"-1", "'-1' is not an integer"),
        (DLQ_HEADER_DELIVERY_COUNT, b"0", "'0' is not an integer from 1 to 32767"),
        (STREAMS_HEADER_PARTITION, b"1e3", "'1e3' is not an integer"),
    ],
)
def test_a_malformed_value_leaves_its_field_unset_and_is_named(name: str, raw: bytes, quoted: str) -> None:
    record = parse_dead_letter([(name, raw)], None, None)

    assert quoted in record.malformed_headers[name]
    assert len(record.malformed_headers[name]) < 200, "a long value is quoted cut short"
    assert record.source_topic is None and record.source_partition is None and record.task_id is None


def test_blanks_around_a_number_and_kafkas_unknown_marker_are_not_problems() -> None:
    record = parse_dead_letter(
        [(ERROR_HEADER_ORIG_PARTITION, b" 3 "), (ERROR_HEADER_ORIG_OFFSET, b"-1"), (DLQ_HEADER_TOPIC, b"orders")],
        None,
        None,
    )

    assert (record.source_topic, record.source_partition, record.source_offset) == ("orders", 3, None)
    assert record.malformed_headers == {}


def test_connects_malformed_topic_is_not_replaced_by_another_sets() -> None:
    """Connect's header wins when present, as for every field: its garbage is reported, not papered over."""
    record = parse_dead_letter([(ERROR_HEADER_ORIG_TOPIC, b"bad topic"), (DLQ_HEADER_TOPIC, b"orders")], None, None)

    assert record.source_topic is None
    assert set(record.malformed_headers) == {ERROR_HEADER_ORIG_TOPIC}
