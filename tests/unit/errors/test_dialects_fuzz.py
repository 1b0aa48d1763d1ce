"""The one reader on mixed and corrupt header sets of every dialect: a record of the documented types, or ``TypeError``.

A DLQ fed by several writers holds whatever they wrote, and a header can be cut, repeated or
written by a writer of another version. The records start as each writer writes them
(:mod:`tests.dead_letter_writers`, and Connect's headers written out below as
``DeadLetterQueueReporter.java`` writes them), then get mixed, repeated, shuffled and corrupted:
Spring's binary headers of any width and any bytes, non-UTF-8 text, lone surrogates, nulls,
names under every writer's prefix. The contract stated here is written out rather than
imported, so that the test states it instead of restating the product.
"""

from __future__ import annotations

import string
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import DeadLetterRecord, HeaderSet, parse_dead_letter
from airflow_kerr.errors.header_reader import display
from tests.dead_letter_checks import INT32_MAX, INT64_MAX, check_documented_types
from tests.dead_letter_writers import (
    Header,
    Original,
    header_less,
    kip_1191,
    schema_registry_rule,
    spring_dlt,
    streams_bakdata,
)

TOPIC_CHARS = string.ascii_letters + string.digits + "._-"

#: Each writer's header prefixes, in order of precedence: Connect, KIP-1191, Streams, Spring, Schema Registry.
PREFIXES: list[tuple[HeaderSet, tuple[str, ...]]] = [
    (HeaderSet.CONNECT, ("__connect.errors.",)),
    (HeaderSet.DLQ, ("__dlq.errors.",)),
    (HeaderSet.STREAMS, ("__streams.errors.",)),
    (HeaderSet.SPRING, ("kafka_dlt-", "retry_topic-")),
    (HeaderSet.SCHEMA_REGISTRY, ("__rule.",)),
]
ALL_PREFIXES = tuple(prefix for _, prefixes in PREFIXES for prefix in prefixes)
RANK = {header_set: rank for rank, (header_set, _) in enumerate(PREFIXES)}
#: Spring's big-endian headers and their widths (DeadLetterRecordManager.java, DeadLetterPublishingRecovererFactory.java
#: for the attempts).
SPRING_BINARY = {
    "kafka_dlt-original-partition": 4,
    "kafka_dlt-original-offset": 8,
    "kafka_dlt-original-timestamp": 8,
    "retry_topic-attempts": 4,
}
#: The headers each writer writes for a record's fields (a record carrying one is that writer's dead letter).
FIELD_NAMES: dict[HeaderSet, tuple[str, ...]] = {
    HeaderSet.CONNECT: tuple(
        "__connect.errors." + name
        for name in (
            "topic", "partition", "offset", "connector.name", "task.id", "stage", "class.name",
            "exception.class.name", "exception.message", "exception.stacktrace",
        )
    ),
    HeaderSet.DLQ: tuple(
        "__dlq.errors." + name for name in ("topic", "partition", "offset", "group", "delivery.count", "message")
    ),
    HeaderSet.STREAMS: tuple(
        "__streams.errors." + name
        for name in ("exception", "message", "stacktrace", "topic", "partition", "offset", "processor.node.id")
    ),
    HeaderSet.SPRING: tuple(
        "kafka_dlt-" + name
        for name in (
            "original-topic", "original-partition", "original-offset", "original-timestamp",
            "original-consumer-group", "exception-fqcn", "exception-cause-fqcn", "exception-message",
            "exception-stacktrace", "key-exception-fqcn", "key-exception-message", "key-exception-stacktrace",
        )
    ),
    HeaderSet.SCHEMA_REGISTRY: tuple("__rule." + name for name in ("name", "mode", "subject", "topic", "exception")),
}  # fmt: skip
#: Spring headers that are no field: bookkeeping, shown but never read into the record.
SPRING_OTHERS = (
    "kafka_dlt-original-timestamp-type",
    "retry_topic-attempts",
    "retry_topic-backoff-timestamp",
    "retry_topic-original-timestamp",
)
SPRING_NAMES = [*FIELD_NAMES[HeaderSet.SPRING], *SPRING_OTHERS]
#: Every writer's names, names a writer does not write under its prefix, and others.
NAMES = [
    *(name for names in FIELD_NAMES.values() for name in names),
    *SPRING_OTHERS,
    "__streams.errors.task.id",
    "__connect.errors.other",
    "trace-id",
    "kafka_dlt",
    "",
]


def connect_headers(original: Original) -> list[Header]:
    """Connect's headers (``connect/runtime/.../errors/DeadLetterQueueReporter.java``), numbers as decimal text."""
    return [
        ("__connect.errors.topic", original.topic.encode()),
        ("__connect.errors.partition", str(original.partition).encode()),
        ("__connect.errors.offset", str(original.offset).encode()),
        ("__connect.errors.connector.name", b"orders-sink"),
        ("__connect.errors.task.id", b"0"),
        ("__connect.errors.stage", b"VALUE_CONVERTER"),
        ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
        ("__connect.errors.exception.message", b"Converting byte[] to Kafka Connect data failed"),
    ]


topics = st.text(alphabet=TOPIC_CHARS, min_size=1, max_size=40).filter(lambda name: name not in (".", ".."))
originals = st.builds(
    Original,
    topic=topics,
    partition=st.integers(0, INT32_MAX),
    offset=st.integers(0, INT64_MAX),
    timestamp=st.integers(0, INT64_MAX),
    key=st.none() | st.binary(max_size=8),
    value=st.none() | st.binary(max_size=8),
    headers=st.lists(st.tuples(st.sampled_from(["trace-id", "app", "kafka_dlt"]), st.none() | st.binary(max_size=8))),
)


@st.composite
def written(draw: st.DrawFn) -> list[Header]:
    """One record's headers as one of the writers writes them (Spring also as a DLT of a DLT, or a key failure)."""
    original = draw(originals)
    kind = draw(st.sampled_from(["connect", "kip_1191", "streams", "spring", "spring_twice", "schema", "none"]))
    if kind == "connect":
        return [*original.headers, *connect_headers(original)]
    if kind == "kip_1191":
        return list(kip_1191(original, dlq_topic="x", copy_record=draw(st.booleans()))["headers"])
    if kind == "streams":
        return list(streams_bakdata(original, dlq_topic="x")["headers"])
    if kind == "schema":
        return list(schema_registry_rule(original, dlq_topic="x")["headers"])
    if kind == "none":
        return list(header_less(original, dlq_topic="x").get("headers", original.headers))
    headers = list(spring_dlt(original, key_failure=draw(st.booleans()))["headers"])
    if kind == "spring_twice":
        again = Original(original.topic + "-dlt", original.partition, 0, original.timestamp, None, None, headers)
        headers = list(spring_dlt(again)["headers"])
    return headers


#: Values a corrupted header can hold: any bytes (any width for Spring's binary ones), non-UTF-8, digits, text,
#: lone surrogates, null, and the right width of a binary header with any content.
values = st.one_of(
    st.none(),
    st.binary(max_size=12),
    st.sampled_from([4, 8]).flatmap(lambda width: st.binary(min_size=width, max_size=width)),
    st.sampled_from([b"\xff\xfe", b"\xc3", b"orders\x80", b"-1", b"0", b" 7 ", b"9" * 30, b"", b"bad topic"]),
    st.integers(-(2**63), 2**63 - 1).map(lambda n: struct.pack(">q", n)),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: struct.pack(">i", n)),
    st.text(max_size=16),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
    topics.map(str.encode),
)
names = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(ALL_PREFIXES).flatmap(lambda prefix: st.text(max_size=8).map(lambda rest: prefix + rest)),
    st.text(max_size=12),
)


@st.composite
def mixed(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Several writers' headers on one record, some replaced by corrupt values, some repeated, extra ones added,
    in any order."""
    headers: list[tuple[str, Any]] = [pair for part in draw(st.lists(written(), max_size=3)) for pair in part]
    if headers:
        for index in draw(st.sets(st.integers(0, len(headers) - 1), max_size=4)):
            headers[index] = (headers[index][0], draw(values))
        headers += draw(st.lists(st.sampled_from(headers), max_size=3))  # repeated names, repeated values
    headers += draw(st.lists(st.tuples(names, values), max_size=6))
    return list(draw(st.permutations(headers)))


def as_bytes(value: Any) -> bytes | None:
    return value.encode("utf-8", errors="surrogatepass") if isinstance(value, str) else value


def check_record(record: DeadLetterRecord, headers: list[tuple[str, Any]]) -> None:
    """The documented types, the documented ranges, and every header accounted for."""
    check_documented_types(record, headers)

    present = {name for name, _ in headers}
    error_names = {name for name in present if name.startswith(ALL_PREFIXES)}
    assert set(record.error_headers) == error_names, "every error header is shown, and nothing else"
    kept = [(name, as_bytes(value)) for name, value in headers if not name.startswith(ALL_PREFIXES)]
    assert list(record.headers) == kept, "the original's headers, in order, and only those"

    if not error_names:
        assert record.header_set is None
        return
    assert record.header_set is not None
    assert any(name.startswith(dict(PREFIXES)[record.header_set]) for name in present), "a set the record carries"
    by_field = [rank for header_set, rank in RANK.items() if not present.isdisjoint(FIELD_NAMES[header_set])]
    if by_field:
        assert RANK[record.header_set] == min(by_field), "the first set, in precedence, with a field header"
    else:
        by_prefix = [RANK[s] for s, prefixes in PREFIXES if any(n.startswith(prefixes) for n in present)]
        assert RANK[record.header_set] == min(by_prefix), "no field header: the first set by prefix"


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mixed())
def test_mixed_and_corrupt_headers_of_every_dialect_give_a_record_of_the_documented_types(
    headers: list[tuple[str, Any]],
) -> None:
    record = parse_dead_letter(headers, b"k", b"v", topic="orders.dlq", partition=0, offset=1, timestamp=2)

    check_record(record, headers)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(mixed())
def test_the_same_headers_as_a_mapping_give_the_same_fields(headers: list[tuple[str, Any]]) -> None:
    """A mapping holds one value per name: the record read from it is the list's with that one value."""
    mapping = dict(headers)
    as_list = list(mapping.items())

    assert parse_dead_letter(mapping, None, None) == parse_dead_letter(as_list, None, None)
    check_record(parse_dead_letter(mapping, None, None), as_list)


@settings(max_examples=200)
@given(original=originals, twice=st.booleans(), key_failure=st.booleans())
def test_every_coordinate_kafka_allows_is_read_back_from_springs_binary_headers(
    original: Original, twice: bool, key_failure: bool
) -> None:
    """Spring's 4- and 8-byte coordinates (``DeadLetterRecordManager.maybeAddOriginalHeaders``) over their whole
    range, the first of a DLT of a DLT included."""
    headers = spring_dlt(original, key_failure=key_failure)["headers"]
    if twice:
        again = Original(original.topic + "-dlt", 0, 0, 0, None, None, headers)
        headers = spring_dlt(again)["headers"]

    record = parse_dead_letter(headers, None, None)

    assert record.header_set is HeaderSet.SPRING
    assert (record.source_topic, record.source_partition, record.source_offset) == (
        original.topic,
        original.partition,
        original.offset,
    )
    assert record.source_timestamp == original.timestamp
    assert record.malformed_headers == {}
    assert list(record.headers) == original.headers
    assert record.error_headers["kafka_dlt-original-offset"] == str(original.offset)


@settings(max_examples=300)
@given(
    partitions=st.lists(
        st.binary(max_size=9) | st.integers(-3, INT32_MAX).map(lambda n: struct.pack(">i", n)), min_size=1, max_size=3
    ),
    others=st.lists(st.tuples(st.sampled_from(SPRING_NAMES), values), max_size=4),
)
def test_springs_first_partition_counts_whatever_its_width(
    partitions: list[bytes], others: list[tuple[str, Any]]
) -> None:
    """The first ``kafka_dlt-original-partition`` is the original's (Spring appends later ones): exactly 4 bytes
    give its signed value (-1, Kafka's "unknown", gives None quietly); anything else is None and named."""
    headers = [("kafka_dlt-original-partition", raw) for raw in partitions]
    headers += [(name, value) for name, value in others if name != "kafka_dlt-original-partition"]
    first = partitions[0]

    record = parse_dead_letter(headers, None, None)

    number = int.from_bytes(first, "big", signed=True) if len(first) == 4 else None
    if number is not None and number >= 0:
        assert record.source_partition == number
        assert "kafka_dlt-original-partition" not in record.malformed_headers
    elif number == -1:
        assert record.source_partition is None
        assert "kafka_dlt-original-partition" not in record.malformed_headers
    else:
        assert record.source_partition is None
        assert "kafka_dlt-original-partition" in record.malformed_headers
    shown = display("kafka_dlt-original-partition", first)
    assert shown == (str(number) if number is not None else f"0x{first.hex()}")
    assert record.error_headers["kafka_dlt-original-partition"] == shown


@settings(max_examples=300)
@given(st.sampled_from(sorted(SPRING_BINARY)), st.binary(max_size=12) | st.text(max_size=6) | st.none())
def test_display_of_a_spring_binary_header_is_its_number_at_its_width_else_hex(name: str, raw: Any) -> None:
    shown = display(name, raw)

    if raw is None:
        assert shown is None
        return
    data = as_bytes(raw)
    assert data is not None
    if len(data) == SPRING_BINARY[name]:
        assert shown == str(int.from_bytes(data, "big", signed=True))
    else:
        assert shown == f"0x{data.hex()}"


#: Items that are no (name, value) pair: the reader must say so with TypeError, never anything else.
not_pairs = st.one_of(
    st.tuples(st.sampled_from(NAMES)),
    st.tuples(st.sampled_from(NAMES), values, values),
    st.integers(),
    st.none(),
    st.tuples(st.integers() | st.binary(max_size=4) | st.none(), values),
)
#: Pairs whose value is neither bytes, text nor null.
bad_values = st.tuples(
    st.sampled_from(NAMES), st.integers() | st.floats(allow_nan=True) | st.lists(st.integers(), max_size=2)
)


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(mixed(), st.lists(not_pairs, min_size=1, max_size=3), st.data())
def test_an_item_that_is_no_pair_raises_type_error_among_any_dialects_headers(
    headers: list[tuple[str, Any]], garbage: list[Any], data: st.DataObject
) -> None:
    for item in garbage:
        headers.insert(data.draw(st.integers(0, len(headers))), item)

    with pytest.raises(TypeError):
        parse_dead_letter(headers, None, None)


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(mixed(), st.lists(bad_values, min_size=1, max_size=3), st.data())
def test_a_value_that_is_not_bytes_or_text_raises_only_type_error(
    headers: list[tuple[str, Any]], garbage: list[tuple[str, Any]], data: st.DataObject
) -> None:
    """A non-bytes value raises ``TypeError`` when it is read; one a later header of its name hides is never read."""
    for item in garbage:
        headers.insert(data.draw(st.integers(0, len(headers))), item)

    try:
        record = parse_dead_letter(headers, None, None)
    except TypeError:
        return
    check_record(record, [(name, value) for name, value in headers if isinstance(value, (bytes, str, type(None)))])


@pytest.mark.parametrize(
    "item",
    [
        "ab",
        b"ab",
        ["name", b"v"],
        {"k": b"1", "v": b"2"},
        {0: "name", 1: b"v"},
        range(2),
        (),
        ("name",),
        ("name", b"v", b"w"),
        ("name", 5),
        (5, b"v"),
        (None, b"v"),
        5,
        None,
    ],
    ids=repr,
)
@pytest.mark.parametrize("where", ["first", "last"])
def test_any_odd_item_among_spring_headers_raises_type_error_or_gives_a_record(item: Any, where: str) -> None:
    """Whatever a caller puts among a Spring dead letter's headers (``DeadLetterRecordManager.java``'s
    record, :func:`tests.dead_letter_writers.spring_dlt`), the reader answers with a record or ``TypeError``,
    never another exception (a ``KeyError`` or ``IndexError`` from looking inside an odd item)."""
    headers: list[Any] = list(spring_dlt(Original("orders", 0, 1, 1, b"k", b"v", [("trace-id", b"t")]))["headers"])
    headers.insert(0 if where == "first" else len(headers), item)

    try:
        record = parse_dead_letter(headers, None, None)
    except TypeError:
        return
    assert type(record) is DeadLetterRecord and record.header_set is HeaderSet.SPRING
