"""DLQ records: Connect's exact headers, the KIP-1191 set, headers-only records, and parsing back."""

from __future__ import annotations

import pytest

from airflow_kerr.errors import (
    ErrorContext,
    HeaderFormat,
    HeaderSet,
    SourceRecord,
    Stage,
    TaskId,
    TimestampType,
    build_dead_letter_record,
    connect_context_headers,
    dlq_context_headers,
    parse_dead_letter,
    streams_context_headers,
)

ORIGINAL = SourceRecord(
    topic="orders",
    partition=2,
    offset=41873,
    timestamp=1795250000000,
    timestamp_type=TimestampType.CREATE_TIME,
    key=b"o-1009",
    value=b'{"id: 1009}',
    headers=[("trace-id", b"abc"), ("empty", None)],
)


def raised(error: Exception) -> Exception:
    try:
        raise error
    except Exception as caught:
        return caught


def context(
    record: SourceRecord | None = ORIGINAL, error: Exception | None = None, delivery_count: int | None = None
) -> ErrorContext:
    return ErrorContext(
        task=TaskId("orders_pipeline", 0),
        stage=Stage.VALUE_CONVERTER,
        executing_class="airflow_kerr.spark.converters.JsonConverter",
        error=error or raised(ValueError("Expecting value")),
        record=record,
        attempt=1,
        time_of_error=1795250004412,
        delivery_count=delivery_count,
    )


def test_connect_headers_have_connects_exact_names_order_and_utf8_values() -> None:
    failure = context()

    headers = connect_context_headers(failure)

    names = [name for name, _ in headers]
    assert names == [
        "__connect.errors.topic",
        "__connect.errors.partition",
        "__connect.errors.offset",
        "__connect.errors.connector.name",
        "__connect.errors.task.id",
        "__connect.errors.stage",
        "__connect.errors.class.name",
        "__connect.errors.exception.class.name",
        "__connect.errors.exception.message",
        "__connect.errors.exception.stacktrace",
    ]
    assert headers[:9] == [
        ("__connect.errors.topic", b"orders"),
        ("__connect.errors.partition", b"2"),
        ("__connect.errors.offset", b"41873"),
        ("__connect.errors.connector.name", b"orders_pipeline"),
        ("__connect.errors.task.id", b"0"),
        ("__connect.errors.stage", b"VALUE_CONVERTER"),
        ("__connect.errors.class.name", b"airflow_kerr.spark.converters.JsonConverter"),
        ("__connect.errors.exception.class.name", b"ValueError"),
        ("__connect.errors.exception.message", b"Expecting value"),
    ]
    stacktrace = headers[9][1]
    assert stacktrace is not None
    assert stacktrace.startswith(b"ValueError: Expecting value\nTraceback (most recent call last):\n")


def test_connect_headers_without_a_source_record_omit_its_coordinates() -> None:
    names = [name for name, _ in connect_context_headers(context(record=None))]

    assert names[0] == "__connect.errors.connector.name"
    assert len(names) == 7


def test_a_null_exception_message_gives_the_header_with_a_null_value() -> None:
    headers = dict(connect_context_headers(context(error=raised(ValueError()))))

    assert "__connect.errors.exception.message" in headers
    assert headers["__connect.errors.exception.message"] is None
    assert headers["__connect.errors.exception.stacktrace"].startswith(b"ValueError\n")  # type: ignore[union-attr]


def test_text_headers_are_utf8() -> None:
    headers = dict(connect_context_headers(context(error=raised(ValueError("prix invalide: 12 €")))))

    assert headers["__connect.errors.exception.message"] == "prix invalide: 12 €".encode()


def test_dlq_record_copies_the_original_and_appends_context_headers() -> None:
    record = build_dead_letter_record(context(), topic="dlq.orders")

    assert record.topic == "dlq.orders"
    assert record.key == ORIGINAL.key
    assert record.value == ORIGINAL.value
    assert record.partition is None
    assert record.timestamp == 1795250000000
    assert record.headers[:2] == ORIGINAL.headers
    assert record.headers[2][0] == "__connect.errors.topic"
    assert len(record.headers) == 12
    assert ORIGINAL.headers == [("trace-id", b"abc"), ("empty", None)]


def test_dlq_record_without_context_headers_is_the_original_record() -> None:
    record = build_dead_letter_record(context(), topic="dlq.orders", context_headers=False)

    assert (record.key, record.value, record.headers) == (ORIGINAL.key, ORIGINAL.value, ORIGINAL.headers)


@pytest.mark.parametrize(
    ("timestamp", "kind"),
    [(None, TimestampType.CREATE_TIME), (-1, TimestampType.CREATE_TIME), (5, TimestampType.NO_TIMESTAMP_TYPE)],
)
def test_a_record_without_timestamp_lets_the_producer_stamp_it(timestamp: int | None, kind: TimestampType) -> None:
    original = SourceRecord("orders", 0, 1, timestamp, kind, b"k", b"v")

    record = build_dead_letter_record(context(record=original), topic="dlq.orders")

    assert record.timestamp is None
    assert "timestamp" not in record.produce_kwargs()


def test_produce_kwargs_leave_the_partition_to_the_partitioner() -> None:
    kwargs = build_dead_letter_record(context(), topic="dlq.orders").produce_kwargs()

    assert set(kwargs) == {"topic", "key", "value", "headers", "timestamp"}
    assert kwargs["timestamp"] == 1795250000000


def test_kip1191_headers_are_the_dlq_set_with_decimal_text() -> None:
    headers = dlq_context_headers(context(delivery_count=3), group="orders-share")

    assert headers == [
        ("__dlq.errors.topic", b"orders"),
        ("__dlq.errors.partition", b"2"),
        ("__dlq.errors.offset", b"41873"),
        ("__dlq.errors.group", b"orders-share"),
        ("__dlq.errors.delivery.count", b"3"),
        ("__dlq.errors.message", b"Expecting value"),
    ]


def test_kip1191_headers_leave_out_what_is_not_known() -> None:
    headers = dlq_context_headers(context(error=raised(ValueError())))

    assert [name for name, _ in headers] == ["__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset"]


def test_headers_only_record_has_no_key_value_or_original_headers() -> None:
    record = build_dead_letter_record(
        context(), topic="dlq.orders", header_format=HeaderFormat.DLQ, copy_record=False, group="g"
    )

    assert record.key is None
    assert record.value is None
    assert all(name.startswith("__dlq.errors.") for name, _ in record.headers)
    assert record.timestamp == 1795250000000


def test_building_needs_the_failed_record() -> None:
    with pytest.raises(ValueError, match="not known"):
        build_dead_letter_record(context(record=None), topic="dlq.orders")


def test_round_trip_connect_headers() -> None:
    failure = context()
    built = build_dead_letter_record(failure, topic="dlq.orders")

    parsed = parse_dead_letter(built.headers, built.key, built.value, topic="dlq.orders", partition=0, offset=7)

    assert parsed.header_set is HeaderSet.CONNECT
    assert (parsed.source_topic, parsed.source_partition, parsed.source_offset) == ("orders", 2, 41873)
    assert parsed.stage is Stage.VALUE_CONVERTER
    assert parsed.executing_class == "airflow_kerr.spark.converters.JsonConverter"
    assert parsed.exception_class == "ValueError"
    assert parsed.exception_message == "Expecting value"
    assert parsed.exception_stacktrace is not None
    assert parsed.exception_stacktrace.startswith("ValueError: Expecting value\n")
    assert (parsed.connector_name, parsed.task_id) == ("orders_pipeline", 0)
    assert (parsed.group, parsed.delivery_count) == (None, None)
    assert (parsed.key, parsed.value) == (ORIGINAL.key, ORIGINAL.value)
    assert list(parsed.headers) == ORIGINAL.headers
    assert (parsed.topic, parsed.partition, parsed.offset) == ("dlq.orders", 0, 7)


def test_round_trip_kip1191_headers() -> None:
    built = build_dead_letter_record(
        context(delivery_count=5),
        topic="dlq.orders",
        header_format=HeaderFormat.DLQ,
        copy_record=False,
        group="orders-share",
    )

    parsed = parse_dead_letter(built.headers, built.key, built.value)

    assert parsed.header_set is HeaderSet.DLQ
    assert (parsed.source_topic, parsed.source_partition, parsed.source_offset) == ("orders", 2, 41873)
    assert (parsed.group, parsed.delivery_count) == ("orders-share", 5)
    assert parsed.exception_message == "Expecting value"
    assert (parsed.stage, parsed.exception_class, parsed.connector_name) == (None, None, None)
    assert (parsed.key, parsed.value, parsed.headers) == (None, None, ())


def test_round_trip_kafka_streams_headers() -> None:
    failure = context()
    headers = [*ORIGINAL.headers, *streams_context_headers(failure)]

    parsed = parse_dead_letter(headers, ORIGINAL.key, ORIGINAL.value)

    assert parsed.header_set is HeaderSet.STREAMS
    assert (parsed.source_topic, parsed.source_partition, parsed.source_offset) == ("orders", 2, 41873)
    assert parsed.exception_class == "ValueError"
    assert parsed.exception_message == "Expecting value"
    assert parsed.exception_stacktrace is not None
    assert list(parsed.headers) == ORIGINAL.headers


def test_parse_reads_a_dlq_written_by_a_real_connect_worker() -> None:
    headers = [
        ("__connect.errors.topic", b"page_views"),
        ("__connect.errors.partition", b"0"),
        ("__connect.errors.offset", b"1"),
        ("__connect.errors.connector.name", b"file-sink"),
        ("__connect.errors.task.id", b"0"),
        ("__connect.errors.stage", b"VALUE_CONVERTER"),
        ("__connect.errors.class.name", b"org.apache.kafka.connect.json.JsonConverter"),
        ("__connect.errors.exception.class.name", b"org.apache.kafka.connect.errors.DataException"),
        ("__connect.errors.exception.message", b"Converting byte[] to Kafka Connect data failed"),
        ("__connect.errors.exception.stacktrace", b"org.apache.kafka.connect.errors.DataException: ...\n\tat ..."),
    ]

    parsed = parse_dead_letter(headers, None, b"not json")

    assert parsed.header_set is HeaderSet.CONNECT
    assert parsed.to_source_record() == SourceRecord(
        "page_views", 0, 1, None, TimestampType.NO_TIMESTAMP_TYPE, None, b"not json"
    )
    assert parsed.exception_class == "org.apache.kafka.connect.errors.DataException"


def test_parse_takes_the_newest_of_repeated_headers_and_accepts_mappings_and_text() -> None:
    repeated = [
        ("__connect.errors.exception.message", b"first failure"),
        ("__connect.errors.exception.message", b"second failure"),
    ]
    assert parse_dead_letter(repeated, None, None).exception_message == "second failure"

    mapping = {"__dlq.errors.topic": "orders", "__dlq.errors.partition": "x", "app": "y"}
    parsed = parse_dead_letter(mapping, None, None)
    assert parsed.source_topic == "orders"
    assert parsed.source_partition is None
    assert parsed.headers == (("app", b"y"),)
    assert parsed.error_headers == {"__dlq.errors.topic": "orders", "__dlq.errors.partition": "x"}


def test_parse_without_error_headers_and_an_unknown_stage() -> None:
    plain = parse_dead_letter(None, b"k", b"v")
    assert plain.header_set is None
    with pytest.raises(ValueError, match="source topic"):
        plain.to_source_record()

    future = parse_dead_letter([("__connect.errors.stage", b"TASK_FLUSH")], None, None)
    assert future.stage is None
    assert future.error_headers["__connect.errors.stage"] == "TASK_FLUSH"
