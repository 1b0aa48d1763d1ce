"""Every dead-letter dialect read back by ``parse_dead_letter``, from records written as each writer writes them.

The records come from :mod:`tests.dead_letter_writers`, which follows each writer's own
source, not the product; each test's docstring names the upstream file the record follows.
Connect's records are written out here as a real Connect worker writes them
(``connect/runtime/src/main/java/org/apache/kafka/connect/runtime/errors/DeadLetterQueueReporter.java``).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from typing import Any

import pytest

from airflow_kerr.errors import HeaderSet, SourceRecord, TimestampType, parse_dead_letter
from airflow_kerr.errors.dead_letter import DeadLetterRecord
from airflow_kerr.errors.dialects import header_set_name
from airflow_kerr.errors.header_reader import display
from tests.dead_letter_writers import (
    SPRING_LISTENER_FAILED,
    Header,
    Original,
    avro_wire,
    header_less,
    kip_1191,
    schema_registry_rule,
    spring_dlt,
    streams_bakdata,
)

ORIGINAL = Original(
    topic="orders",
    partition=2,
    offset=41873,
    timestamp=1_795_250_000_000,
    key=b"o-1009",
    value=b'{"id": 1009}',
    headers=[("trace-id", b"abc"), ("empty", None)],
)
DESERIALIZATION = "org.springframework.kafka.support.serializer.DeserializationException"
SERIALIZATION = "org.apache.kafka.common.errors.SerializationException"


def parse(produced: dict[str, Any], **where: Any) -> DeadLetterRecord:
    """A record as a consumer of its DLQ reads it back: headers (none when the writer set none), key, value."""
    return parse_dead_letter(
        produced.get("headers"),
        produced["key"],
        produced["value"],
        topic=produced["topic"],
        timestamp=produced.get("timestamp"),
        **where,
    )


def connect_headers(
    original: Original, exception: str = "org.apache.kafka.connect.errors.DataException"
) -> list[Header]:
    """Connect's ten headers, as ``DeadLetterQueueReporter.populateContextHeaders`` writes them (decimal text)."""
    return [
        ("__connect.errors.topic", original.topic.encode()),
        ("__connect.errors.partition", str(original.partition).encode()),
        ("__connect.errors.offset", str(original.offset).encode()),
        ("__connect.errors.connector.name", b"orders-sink"),
        ("__connect.errors.task.id", b"0"),
        ("__connect.errors.stage", b"VALUE_CONVERTER"),
        ("__connect.errors.class.name", b"org.apache.kafka.connect.json.JsonConverter"),
        ("__connect.errors.exception.class.name", exception.encode()),
        ("__connect.errors.exception.message", b"Converting byte[] to Kafka Connect data failed"),
        ("__connect.errors.exception.stacktrace", f"{exception}: Converting byte[]\n\tat ...".encode()),
    ]


def java_big_integer(value: int) -> bytes:
    """``BigInteger.valueOf(value).toByteArray()``: the fewest two's-complement bytes, sign bit included."""
    return value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True)


def replace_header(headers: list[Header], name: str, value: bytes | None) -> list[Header]:
    return [(n, value if n == name else v) for n, v in headers]


# ----------------------------------------------------------------------------------------------- Spring


def test_spring_dead_letter_reads_its_binary_coordinates_root_cause_and_wrapper() -> None:
    """Spring Kafka's DeadLetterPublishingRecoverer with its defaults
    (``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``):
    big-endian coordinates, the root cause as the exception class, Spring's wrapper beside it."""
    produced = spring_dlt(ORIGINAL)

    letter = parse(produced, partition=2, offset=9)

    assert letter.header_set is HeaderSet.SPRING
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("orders", 2, 41873)
    assert letter.source_timestamp == ORIGINAL.timestamp
    assert letter.exception_class == "java.lang.IllegalStateException"
    assert letter.wrapper_class == SPRING_LISTENER_FAILED
    assert letter.exception_message == "Listener method threw exception; bad order"
    assert letter.exception_stacktrace is not None
    assert letter.exception_stacktrace.startswith(f"{SPRING_LISTENER_FAILED}: Listener method threw exception\n")
    assert "Caused by: java.lang.IllegalStateException: bad order" in letter.exception_stacktrace
    assert letter.group == "orders-service"
    assert (letter.stage, letter.executing_class, letter.connector_name, letter.task_id) == (None, None, None, None)
    assert (letter.delivery_count, letter.rule_name, letter.rule_mode, letter.rule_subject) == (None,) * 4
    assert letter.malformed_headers == {}
    assert (letter.key, letter.value) == (ORIGINAL.key, ORIGINAL.value)
    assert list(letter.headers) == ORIGINAL.headers, "the original's headers, in order, null value included"
    assert (letter.topic, letter.partition, letter.offset, letter.timestamp) == ("orders-dlt", 2, 9, ORIGINAL.timestamp)
    assert not letter.is_pointer
    assert letter.to_source_record() == SourceRecord(
        "orders", 2, 41873, ORIGINAL.timestamp, TimestampType.CREATE_TIME, ORIGINAL.key, ORIGINAL.value,
        ORIGINAL.headers,
    )  # fmt: skip


def test_springs_binary_numbers_are_shown_as_numbers() -> None:
    """``DeadLetterRecordManager.maybeAddOriginalHeaders`` writes ``ByteBuffer.putInt``/``putLong``
    (``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``):
    the view and the sample show the decimal value, never the raw bytes."""
    letter = parse(spring_dlt(ORIGINAL))

    assert letter.error_headers["kafka_dlt-original-partition"] == "2"
    assert letter.error_headers["kafka_dlt-original-offset"] == "41873"
    assert letter.error_headers["kafka_dlt-original-timestamp"] == str(ORIGINAL.timestamp)
    assert letter.error_headers["kafka_dlt-original-timestamp-type"] == "CreateTime"
    assert letter.error_headers["kafka_dlt-original-topic"] == "orders"
    assert letter.error_headers["kafka_dlt-exception-cause-fqcn"] == "java.lang.IllegalStateException"


@pytest.mark.parametrize(
    ("name", "raw", "shown"),
    [
        ("kafka_dlt-original-partition", struct.pack(">i", 0), "0"),
        ("kafka_dlt-original-partition", struct.pack(">i", 2**31 - 1), "2147483647"),
        ("kafka_dlt-original-partition", struct.pack(">i", -1), "-1"),
        ("kafka_dlt-original-offset", struct.pack(">q", 2**63 - 1), "9223372036854775807"),
        ("kafka_dlt-original-timestamp", struct.pack(">q", -1), "-1"),
        ("retry_topic-attempts", struct.pack(">i", 3), "3"),
        ("kafka_dlt-original-partition", b"\x00\x02", "0x0002"),
        ("kafka_dlt-original-offset", b"\x00\x00\x00\x07", "0x00000007"),
        ("kafka_dlt-original-partition", b"", "0x"),
        ("kafka_dlt-original-topic", b"orders", "orders"),
        ("kafka_dlt-exception-message", b"bad \xff order", "bad \ufffd order"),
        ("kafka_dlt-original-partition", None, None),
    ],
)
def test_display_of_springs_headers(name: str, raw: bytes | None, shown: str | None) -> None:
    """Spring's numbers (``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``,
    ``retrytopic/DeadLetterPublishingRecovererFactory.java`` for the 4-byte attempts) as signed big-endian
    integers; a wrong width in hex, never as a wrong number; text as text."""
    assert display(name, raw) == shown


def test_springs_retry_topic_headers_are_bookkeeping_removed_with_the_error_headers() -> None:
    """A record that went through Spring's non-blocking retries before its DLT
    (``spring-kafka/src/main/java/org/springframework/kafka/retrytopic/DeadLetterPublishingRecovererFactory.java``,
    ``addHeaders``): ``retry_topic-attempts`` as 4 bytes, the timestamps as ``BigInteger.toByteArray()``.
    None of them is the original's: a replay that kept ``retry_topic-attempts`` would resume the old count."""
    produced = spring_dlt(ORIGINAL)
    produced["headers"] += [
        ("retry_topic-original-timestamp", java_big_integer(ORIGINAL.timestamp)),
        ("retry_topic-attempts", struct.pack(">i", 3)),
        ("retry_topic-backoff-timestamp", java_big_integer(ORIGINAL.timestamp + 5_000)),
    ]

    letter = parse(produced)

    assert list(letter.headers) == ORIGINAL.headers
    assert letter.error_headers["retry_topic-attempts"] == "3"
    assert {"retry_topic-original-timestamp", "retry_topic-backoff-timestamp"} <= set(letter.error_headers)
    assert letter.malformed_headers == {}, "bookkeeping headers are no field: never a reason to park"
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("orders", 2, 41873)
    assert letter.source_timestamp == ORIGINAL.timestamp


def test_a_record_in_a_retry_topic_is_a_spring_dead_letter_by_its_retry_headers_alone() -> None:
    """Only ``retry_topic-*`` headers (``retrytopic/DeadLetterPublishingRecovererFactory.java`` with
    ``kafka_dlt-*`` headers removed by a custom ``HeaderNames``): Spring's by prefix, with nothing to read."""
    headers: list[Header] = [*ORIGINAL.headers, ("retry_topic-attempts", struct.pack(">i", 2))]

    letter = parse_dead_letter(headers, ORIGINAL.key, ORIGINAL.value)

    assert letter.header_set is HeaderSet.SPRING
    assert (letter.source_topic, letter.exception_class, letter.malformed_headers) == (None, None, {})
    assert list(letter.headers) == ORIGINAL.headers


def test_a_dlt_of_a_dlt_names_the_first_topic_as_its_origin_and_the_newest_failure() -> None:
    """Spring appends the ``original-*`` headers each time a record is dead-lettered again
    (``DeadLetterRecordManager.maybeAddHeader`` with ``appendOriginalHeaders`` true, its default;
    ``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``):
    the first names where the data came from; the exception headers are the newest failure's."""
    first = spring_dlt(ORIGINAL)
    in_dlt = Original(first["topic"], 2, 7, ORIGINAL.timestamp, first["key"], first["value"], first["headers"])
    second = spring_dlt(
        in_dlt, dlt_topic="orders-dlt-dlt", cause="java.lang.NullPointerException", cause_message="no customer"
    )
    topics = [value for name, value in second["headers"] if name == "kafka_dlt-original-topic"]
    assert topics == [b"orders", b"orders-dlt"], "the writer appended the second original"

    letter = parse(second)

    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("orders", 2, 41873)
    assert letter.source_timestamp == ORIGINAL.timestamp
    assert letter.exception_class == "java.lang.NullPointerException"
    assert letter.exception_message == "Listener method threw exception; no customer"
    assert letter.error_headers["kafka_dlt-original-topic"] == "orders"
    assert letter.error_headers["kafka_dlt-original-offset"] == "41873"
    assert list(letter.headers) == ORIGINAL.headers, "both failures' headers are removed"
    assert letter.malformed_headers == {}


def test_a_first_original_that_is_malformed_is_not_replaced_by_a_later_one() -> None:
    """First wins also when the first is garbage (``DeadLetterRecordManager.java``'s appended originals):
    it is named, never papered over by the second hop's coordinates."""
    first = spring_dlt(ORIGINAL)
    first["headers"] = replace_header(first["headers"], "kafka_dlt-original-offset", b"\x00\x01")
    in_dlt = Original(first["topic"], 2, 7, ORIGINAL.timestamp, first["key"], first["value"], first["headers"])

    letter = parse(spring_dlt(in_dlt, dlt_topic="orders-dlt-dlt"))

    assert letter.source_topic == "orders" and letter.source_partition == 2
    assert letter.source_offset is None
    assert "is not a 8-byte big-endian integer" in letter.malformed_headers["kafka_dlt-original-offset"]


def test_a_spring_key_deserialization_failure_reads_the_key_exception_headers() -> None:
    """A key that failed to deserialize (``DeadLetterRecordManager.addAndEnhanceHeaders`` with the key's
    ``DeserializationException``,
    ``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``):
    ``kafka_dlt-key-exception-*`` headers, the root cause under the shared ``-exception-cause-fqcn``, no group
    (the listener never ran, so it is not a ListenerExecutionFailedException)."""
    produced = spring_dlt(
        ORIGINAL,
        exception=DESERIALIZATION,
        message="failed to deserialize",
        cause=SERIALIZATION,
        cause_message="Unknown magic byte!",
        key_failure=True,
    )
    assert not any(name.startswith("kafka_dlt-exception-fqcn") for name, _ in produced["headers"])

    letter = parse(produced)

    assert letter.header_set is HeaderSet.SPRING
    assert letter.exception_class == SERIALIZATION
    assert letter.wrapper_class == DESERIALIZATION
    assert letter.exception_message == "failed to deserialize; Unknown magic byte!"
    assert letter.exception_stacktrace is not None
    assert letter.exception_stacktrace.startswith(f"{DESERIALIZATION}: failed to deserialize\n")
    assert letter.group is None
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("orders", 2, 41873)
    assert list(letter.headers) == ORIGINAL.headers and letter.malformed_headers == {}


def test_a_spring_failure_without_a_cause_counts_under_its_own_class() -> None:
    """``ErrorHandlingUtils.findRootCause`` of an exception without a cause is the exception itself
    (``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``):
    the class and the wrapper are the same, the message is its own."""
    produced = spring_dlt(
        ORIGINAL, exception=DESERIALIZATION, message="failed to deserialize", cause=None, key_failure=True
    )

    letter = parse(produced)

    assert letter.exception_class == letter.wrapper_class == DESERIALIZATION
    assert letter.exception_message == "failed to deserialize"


@pytest.mark.parametrize(
    ("name", "raw", "field", "width"),
    [
        ("kafka_dlt-original-partition", b"\x00\x00\x02", "source_partition", 4),
        ("kafka_dlt-original-partition", struct.pack(">q", 2), "source_partition", 4),
        ("kafka_dlt-original-partition", b"2", "source_partition", 4),
        ("kafka_dlt-original-offset", struct.pack(">i", 41873), "source_offset", 8),
        ("kafka_dlt-original-offset", b"", "source_offset", 8),
        ("kafka_dlt-original-timestamp", b"1795250000000", "source_timestamp", 8),
    ],
)
def test_a_spring_binary_header_of_the_wrong_width_is_malformed_and_named(
    name: str, raw: bytes, field: str, width: int
) -> None:
    """Spring writes exactly 4 or 8 bytes (``DeadLetterRecordManager.maybeAddOriginalHeaders``,
    ``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``); any
    other width is not guessed at: the field is None, the header named, the other fields read."""
    produced = spring_dlt(ORIGINAL)
    produced["headers"] = replace_header(produced["headers"], name, raw)

    letter = parse(produced)

    assert getattr(letter, field) is None
    assert set(letter.malformed_headers) == {name}
    assert f"is not a {width}-byte big-endian integer" in letter.malformed_headers[name]
    assert letter.error_headers[name] == f"0x{raw.hex()}", "shown in hex, never as a wrong number"
    assert letter.source_topic == "orders" and letter.exception_class == "java.lang.IllegalStateException"
    if field != "source_partition":
        assert letter.source_partition == 2


@pytest.mark.parametrize(("partition", "offset"), [(-2, 5), (3, -7)])
def test_a_spring_coordinate_kafka_would_not_accept_is_malformed(partition: int, offset: int) -> None:
    """Right width, impossible value (``DeadLetterRecordManager.java`` writes the consumer record's own
    partition and offset, never negative): named, not handed to a replay."""
    produced = spring_dlt(ORIGINAL)
    produced["headers"] = replace_header(
        produced["headers"], "kafka_dlt-original-partition", struct.pack(">i", partition)
    )
    produced["headers"] = replace_header(produced["headers"], "kafka_dlt-original-offset", struct.pack(">q", offset))

    letter = parse(produced)

    bad = "kafka_dlt-original-partition" if partition < 0 else "kafka_dlt-original-offset"
    assert set(letter.malformed_headers) == {bad}
    assert letter.source_partition == (None if partition < 0 else partition)
    assert letter.source_offset == (None if offset < 0 else offset)


# ----------------------------------------------------------------------------------------------- Schema Registry


def test_schema_registry_rule_dead_letter_counts_under_its_rule() -> None:
    """Confluent Schema Registry's DLQ rule action on READ
    (``confluent_kafka/schema_registry/rules/dlq/dlq_action.py``, ``_populate_headers``): the rule's name,
    mode, subject and topic, the exception's message; no partition, no offset, no class."""
    original = Original("payments", 1, 5, 1_795_250_000_000, avro_wire(7, b"\x02k"), avro_wire(8, b"\x06ssn"))
    produced = schema_registry_rule(original, dlq_topic="payments.dlq")

    letter = parse(produced)

    assert letter.header_set is HeaderSet.SCHEMA_REGISTRY
    assert letter.source_topic == "payments"
    assert (letter.source_partition, letter.source_offset, letter.source_timestamp) == (None, None, None)
    assert letter.exception_class == "rule:checkSsnLen"
    assert letter.exception_message == "Expr failed: 'message.ssn.size() == 9'"
    assert (letter.rule_name, letter.rule_mode, letter.rule_subject) == ("checkSsnLen", "READ", "payments-value")
    assert (letter.exception_stacktrace, letter.wrapper_class, letter.group, letter.stage) == (None,) * 4
    assert (letter.key, letter.value) == (original.key, original.value), "the wire bytes, schema ids included"
    assert letter.headers == () and letter.malformed_headers == {}
    assert not letter.is_pointer
    with pytest.raises(ValueError, match="source topic, partition and offset"):
        letter.to_source_record()


def test_a_schema_registry_rule_without_an_exception_still_names_its_rule() -> None:
    """``dlq_action.py`` writes ``__rule.exception`` only when there was one
    (``confluent_kafka/schema_registry/rules/dlq/dlq_action.py``); a WRITE-mode rule keeps the headers the
    producer gave it."""
    produced = schema_registry_rule(ORIGINAL, dlq_topic="orders.dlq", rule="encryptPii", mode="WRITE", exception=None)

    letter = parse(produced)

    assert (letter.exception_class, letter.exception_message) == ("rule:encryptPii", None)
    assert letter.rule_mode == "WRITE"
    assert list(letter.headers) == ORIGINAL.headers


# ----------------------------------------------------------------------------------------------- header-less


def test_a_header_less_dead_letter_has_no_error_fields_and_keeps_its_content() -> None:
    """Airflow's ``KafkaSharedStreamTrigger(dlq_topic=...)``
    (``airflow/providers/apache/kafka/triggers/shared_stream.py``, ``_send_to_dlq``): key and value only."""
    produced = header_less(ORIGINAL, dlq_topic="orders.dlq")
    assert "headers" not in produced

    letter = parse(produced, partition=0, offset=3)

    assert letter.header_set is None and header_set_name(letter.header_set) == "none"
    for name in (
        "source_topic", "source_partition", "source_offset", "source_timestamp", "stage", "executing_class",
        "exception_class", "exception_message", "exception_stacktrace", "wrapper_class", "connector_name",
        "task_id", "group", "delivery_count", "rule_name", "rule_mode", "rule_subject",
    ):  # fmt: skip
        assert getattr(letter, name) is None, name
    assert (letter.key, letter.value, letter.headers) == (ORIGINAL.key, ORIGINAL.value, ())
    assert (letter.error_headers, letter.malformed_headers) == ({}, {})
    assert (letter.topic, letter.partition, letter.offset) == ("orders.dlq", 0, 3)
    assert not letter.is_pointer


# ----------------------------------------------------------------------------------------------- KIP-1191


def test_a_kip_1191_dead_letter_without_copy_is_a_pointer_to_its_original() -> None:
    """KIP-1191's default, ``errors.deadletterqueue.copy.record.enable=false``
    ("KIP-1191: Dead-letter queues for share groups", ``__dlq.errors.*``): no key, no value, the coordinates."""
    letter = parse(kip_1191(ORIGINAL, dlq_topic="orders.dlq"))

    assert letter.header_set is HeaderSet.DLQ
    assert letter.is_pointer
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("orders", 2, 41873)
    assert (letter.group, letter.delivery_count) == ("orders-share-group", 5)
    assert letter.exception_message == "delivery attempts exhausted"
    assert (letter.exception_class, letter.stage, letter.wrapper_class) == (None, None, None)
    assert (letter.key, letter.value, letter.headers) == (None, None, ())
    assert letter.to_source_record().value is None, "the replay reads the value from the source topic"


def test_a_kip_1191_dead_letter_with_copy_is_no_pointer() -> None:
    """KIP-1191 with ``errors.deadletterqueue.copy.record.enable=true`` ("KIP-1191: Dead-letter queues for
    share groups"): key, value and headers copied, so there is nothing to fetch."""
    letter = parse(kip_1191(ORIGINAL, dlq_topic="orders.dlq", copy_record=True, message=None))

    assert not letter.is_pointer
    assert (letter.key, letter.value, list(letter.headers)) == (ORIGINAL.key, ORIGINAL.value, ORIGINAL.headers)
    assert letter.exception_message is None


@pytest.mark.parametrize("missing", ["__dlq.errors.topic", "__dlq.errors.partition", "__dlq.errors.offset"])
def test_a_record_without_content_that_does_not_name_all_its_coordinates_is_no_pointer(missing: str) -> None:
    """A pointer needs all three coordinates ("KIP-1191: Dead-letter queues for share groups")."""
    produced = kip_1191(ORIGINAL, dlq_topic="orders.dlq")
    produced["headers"] = [(name, value) for name, value in produced["headers"] if name != missing]

    assert not parse(produced).is_pointer


# ----------------------------------------------------------------------------------------------- Streams


def test_a_kafka_streams_dead_letter_with_bakdatas_headers() -> None:
    """Kafka Streams' KIP-1034 headers
    (``streams/src/main/java/org/apache/kafka/streams/errors/internals/ExceptionHandlerUtils.java``) plus
    bakdata's processor node and task ids: the node is the executing class; the task id (``0_1``) is not
    Connect's integer task id, so it is shown, not read."""
    letter = parse(streams_bakdata(ORIGINAL, dlq_topic="orders.dlq"))

    assert letter.header_set is HeaderSet.STREAMS
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("orders", 2, 41873)
    assert letter.exception_class == SERIALIZATION
    assert letter.exception_message == "Unknown magic byte!"
    assert letter.exception_stacktrace == f"{SERIALIZATION}: Unknown magic byte!\n\tat Topology.process\n"
    assert letter.executing_class == "KSTREAM-MAPVALUES-0000000001"
    assert letter.task_id is None and letter.error_headers["__streams.errors.task.id"] == "0_1"
    assert list(letter.headers) == ORIGINAL.headers and letter.malformed_headers == {}


# ----------------------------------------------------------------------------------------------- precedence


def test_a_spring_dead_letter_a_connect_sink_then_failed_on_is_connects() -> None:
    """A Spring DLT (``spring-kafka/.../listener/DeadLetterRecordManager.java``) read by a Connect sink that
    dead-lettered it again (``connect/runtime/.../errors/DeadLetterQueueReporter.java``): Connect's headers
    describe the newest failure and win every field they carry; fields only Spring has come from Spring."""
    dlt = spring_dlt(ORIGINAL)
    in_dlt = Original(dlt["topic"], 2, 11, ORIGINAL.timestamp, dlt["key"], dlt["value"], dlt["headers"])
    headers = [*dlt["headers"], *connect_headers(in_dlt)]

    letter = parse_dead_letter(headers, dlt["key"], dlt["value"])

    assert letter.header_set is HeaderSet.CONNECT
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == ("orders-dlt", 2, 11)
    assert letter.exception_class == "org.apache.kafka.connect.errors.DataException"
    assert letter.exception_message == "Converting byte[] to Kafka Connect data failed"
    assert letter.stage is not None and letter.stage.value == "VALUE_CONVERTER"
    assert (letter.connector_name, letter.task_id) == ("orders-sink", 0)
    # Documented: each field from the first set, in precedence order, that has it.
    assert (letter.group, letter.wrapper_class) == ("orders-service", SPRING_LISTENER_FAILED)
    assert letter.source_timestamp == ORIGINAL.timestamp
    assert list(letter.headers) == ORIGINAL.headers, "every dialect's error headers are removed"
    assert letter.malformed_headers == {}


def _connect(original: Original) -> list[Header]:
    return connect_headers(original)


def _kip_1191(original: Original) -> list[Header]:
    return kip_1191(original, dlq_topic="x")["headers"]


def _streams(original: Original) -> list[Header]:
    return streams_bakdata(original, dlq_topic="x")["headers"]


def _spring(original: Original) -> list[Header]:
    return spring_dlt(original)["headers"]


def _schema_registry(original: Original) -> list[Header]:
    return schema_registry_rule(original, dlq_topic="x")["headers"]


#: Each dialect's headers for an original, in order of precedence (dialects.py's DIALECTS, written out here).
WRITERS: list[tuple[HeaderSet, Callable[[Original], list[Header]]]] = [
    (HeaderSet.CONNECT, _connect),
    (HeaderSet.DLQ, _kip_1191),
    (HeaderSet.STREAMS, _streams),
    (HeaderSet.SPRING, _spring),
    (HeaderSet.SCHEMA_REGISTRY, _schema_registry),
]


@pytest.mark.parametrize(("higher", "lower"), list(itertools.combinations(WRITERS, 2)), ids=lambda w: w[0].value)
@pytest.mark.parametrize("lower_first", [False, True])
def test_with_two_dialects_the_higher_precedence_names_the_set_and_the_source(
    higher: tuple[HeaderSet, Callable[[Original], list[Header]]],
    lower: tuple[HeaderSet, Callable[[Original], list[Header]]],
    lower_first: bool,
) -> None:
    """Connect, KIP-1191, Streams, Spring, Schema Registry, in that order (each set as its writer writes it:
    ``DeadLetterQueueReporter.java``, KIP-1191, ``ExceptionHandlerUtils.java``, ``DeadLetterRecordManager.java``,
    ``dlq_action.py``), whichever order the headers arrive in; the original's headers survive both."""
    (high_set, high_writer), (_, low_writer) = higher, lower
    high = high_writer(Original("from-higher", 1, 10, 1, b"k", b"v"))
    low = low_writer(Original("from-lower", 3, 30, 3, b"k", b"v"))
    headers = [("trace-id", b"abc"), *(low + high if lower_first else high + low)]

    letter = parse_dead_letter(headers, b"k", b"v")

    assert letter.header_set is high_set
    assert letter.source_topic == "from-higher"
    if high_set is not HeaderSet.SCHEMA_REGISTRY:
        assert (letter.source_partition, letter.source_offset) == (1, 10)
    assert letter.headers == (("trace-id", b"abc"),)
    assert letter.malformed_headers == {}


def test_original_headers_that_only_look_like_error_headers_are_kept() -> None:
    """Only each writer's exact prefixes are error headers (``kafka_dlt-`` and ``retry_topic-`` in
    ``spring-kafka/.../support/KafkaHeaders.java``, ``__rule.`` in ``dlq_action.py``, ``__connect.errors.``,
    ``__dlq.errors.``, ``__streams.errors.``): an application's own header a character away is its data."""
    lookalikes: list[Header] = [
        ("kafka_dlt", b"1"),
        ("kafka-dlt-original-topic", b"2"),
        ("retry_topic", b"3"),
        ("__rule", b"4"),
        ("__rules.name", b"5"),
        ("__connect.error.topic", b"6"),
        ("__dlq.error", b"7"),
        ("__streams.errors", b"8"),
        ("KAFKA_DLT-original-topic", b"9"),
    ]
    original = Original("orders", 0, 1, 1, b"k", b"v", lookalikes)

    for produced in (spring_dlt(original), schema_registry_rule(original, dlq_topic="x")):
        assert list(parse(produced).headers) == lookalikes
    assert parse_dead_letter(lookalikes, None, None).header_set is None
