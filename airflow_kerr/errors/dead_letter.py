"""Dead letter queue records: build them as Connect does, and read any of the three header sets back.

The build side copies the original key, value and headers unchanged and appends the
error-context headers as UTF-8 text (numbers in decimal), with Connect's exact names,
order and null handling. The read side accepts Connect's ``__connect.errors.*``,
KIP-1191's ``__dlq.errors.*`` and Kafka Streams' ``__streams.errors.*`` (KIP-1034) sets,
so the replay and the sensors work on a DLQ written by any of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from airflow_kerr.errors.config import HeaderFormat
from airflow_kerr.errors.context import ErrorContext
from airflow_kerr.errors.exceptions import exception_class_name, exception_message, format_stacktrace
from airflow_kerr.errors.record import Header, SourceRecord, TimestampType
from airflow_kerr.errors.stage import Stage

# Kafka Connect, DeadLetterQueueReporter.
HEADER_PREFIX = "__connect.errors."
ERROR_HEADER_ORIG_TOPIC = HEADER_PREFIX + "topic"
ERROR_HEADER_ORIG_PARTITION = HEADER_PREFIX + "partition"
ERROR_HEADER_ORIG_OFFSET = HEADER_PREFIX + "offset"
ERROR_HEADER_CONNECTOR_NAME = HEADER_PREFIX + "connector.name"
ERROR_HEADER_TASK_ID = HEADER_PREFIX + "task.id"
ERROR_HEADER_STAGE = HEADER_PREFIX + "stage"
ERROR_HEADER_EXECUTING_CLASS = HEADER_PREFIX + "class.name"
ERROR_HEADER_EXCEPTION = HEADER_PREFIX + "exception.class.name"
ERROR_HEADER_EXCEPTION_MESSAGE = HEADER_PREFIX + "exception.message"
ERROR_HEADER_EXCEPTION_STACK_TRACE = HEADER_PREFIX + "exception.stacktrace"

# KIP-1191, share-group dead letter queues.
DLQ_HEADER_PREFIX = "__dlq.errors."
DLQ_HEADER_TOPIC = DLQ_HEADER_PREFIX + "topic"
DLQ_HEADER_PARTITION = DLQ_HEADER_PREFIX + "partition"
DLQ_HEADER_OFFSET = DLQ_HEADER_PREFIX + "offset"
DLQ_HEADER_GROUP = DLQ_HEADER_PREFIX + "group"
DLQ_HEADER_DELIVERY_COUNT = DLQ_HEADER_PREFIX + "delivery.count"
DLQ_HEADER_MESSAGE = DLQ_HEADER_PREFIX + "message"

# Kafka Streams, KIP-1034 (ExceptionHandlerUtils).
STREAMS_HEADER_PREFIX = "__streams.errors."
STREAMS_HEADER_EXCEPTION = STREAMS_HEADER_PREFIX + "exception"
STREAMS_HEADER_MESSAGE = STREAMS_HEADER_PREFIX + "message"
STREAMS_HEADER_STACKTRACE = STREAMS_HEADER_PREFIX + "stacktrace"
STREAMS_HEADER_TOPIC = STREAMS_HEADER_PREFIX + "topic"
STREAMS_HEADER_PARTITION = STREAMS_HEADER_PREFIX + "partition"
STREAMS_HEADER_OFFSET = STREAMS_HEADER_PREFIX + "offset"

_ERROR_PREFIXES = (HEADER_PREFIX, DLQ_HEADER_PREFIX, STREAMS_HEADER_PREFIX)


class HeaderSet(StrEnum):
    """Which error-context header set a DLQ record carries."""

    CONNECT = "connect"
    DLQ = "dlq"
    STREAMS = "streams"


@dataclass(slots=True)
class DeadLetterQueueRecord:
    """A record ready to produce to the DLQ topic.

    ``partition`` stays ``None`` so the producer's partitioner decides, as in Connect;
    ``timestamp`` is the original record's, or ``None`` to let the producer stamp it.
    """

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[Header]
    timestamp: int | None
    partition: int | None = None

    def produce_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for confluent-kafka ``Producer.produce``."""
        kwargs: dict[str, Any] = {"topic": self.topic, "key": self.key, "value": self.value, "headers": self.headers}
        if self.timestamp is not None:
            kwargs["timestamp"] = self.timestamp
        if self.partition is not None:
            kwargs["partition"] = self.partition
        return kwargs


def _utf8(value: str | None) -> bytes | None:
    return None if value is None else value.encode("utf-8")


def connect_context_headers(context: ErrorContext) -> list[Header]:
    """Connect's ten ``__connect.errors.*`` headers, in Connect's order and with its omissions.

    Topic, partition and offset appear only when the source record is known (an error
    context always has an exception, so the three exception headers are always there);
    an exception without a message gives the message header with a null value.
    """
    headers: list[Header] = []
    record = context.record
    if record is not None:
        headers.append((ERROR_HEADER_ORIG_TOPIC, _utf8(record.topic)))
        headers.append((ERROR_HEADER_ORIG_PARTITION, _utf8(str(record.partition))))
        headers.append((ERROR_HEADER_ORIG_OFFSET, _utf8(str(record.offset))))
    headers.append((ERROR_HEADER_CONNECTOR_NAME, _utf8(context.task.pipeline)))
    headers.append((ERROR_HEADER_TASK_ID, _utf8(str(context.task.task))))
    headers.append((ERROR_HEADER_STAGE, _utf8(context.stage.value)))
    headers.append((ERROR_HEADER_EXECUTING_CLASS, _utf8(context.executing_class)))
    error = context.error
    headers.append((ERROR_HEADER_EXCEPTION, _utf8(exception_class_name(error))))
    headers.append((ERROR_HEADER_EXCEPTION_MESSAGE, _utf8(exception_message(error))))
    headers.append((ERROR_HEADER_EXCEPTION_STACK_TRACE, _utf8(format_stacktrace(error))))
    return headers


def dlq_context_headers(context: ErrorContext, *, group: str | None = None) -> list[Header]:
    """KIP-1191's ``__dlq.errors.*`` headers; group, delivery count and message only when known."""
    headers: list[Header] = []
    record = context.record
    if record is not None:
        headers.append((DLQ_HEADER_TOPIC, _utf8(record.topic)))
        headers.append((DLQ_HEADER_PARTITION, _utf8(str(record.partition))))
        headers.append((DLQ_HEADER_OFFSET, _utf8(str(record.offset))))
    if group is not None:
        headers.append((DLQ_HEADER_GROUP, _utf8(group)))
    if context.delivery_count is not None:
        headers.append((DLQ_HEADER_DELIVERY_COUNT, _utf8(str(context.delivery_count))))
    message = exception_message(context.error)
    if message is not None:
        headers.append((DLQ_HEADER_MESSAGE, _utf8(message)))
    return headers


def streams_context_headers(context: ErrorContext) -> list[Header]:
    """Kafka Streams' KIP-1034 headers, as ``ExceptionHandlerUtils`` writes them.

    Not a ``header.format`` choice for our jobs; it lets tests and tools produce a
    Streams-style DLQ record that :func:`parse_dead_letter` must read.
    """
    error = context.error
    headers: list[Header] = [
        (STREAMS_HEADER_EXCEPTION, _utf8(exception_class_name(error))),
        (STREAMS_HEADER_MESSAGE, _utf8(exception_message(error))),
        (STREAMS_HEADER_STACKTRACE, _utf8(format_stacktrace(error))),
    ]
    record = context.record
    if record is not None:
        headers.append((STREAMS_HEADER_TOPIC, _utf8(record.topic)))
        headers.append((STREAMS_HEADER_PARTITION, _utf8(str(record.partition))))
        headers.append((STREAMS_HEADER_OFFSET, _utf8(str(record.offset))))
    return headers


def build_dead_letter_record(
    context: ErrorContext,
    *,
    topic: str,
    header_format: HeaderFormat = HeaderFormat.CONNECT,
    context_headers: bool = True,
    copy_record: bool = True,
    group: str | None = None,
) -> DeadLetterQueueRecord:
    """Build the DLQ record for a failed record.

    With ``copy_record`` the original key, value and headers are copied unchanged and the
    context headers appended; without it (KIP-1191 headers-only) the record carries only
    the context headers. Raises ``ValueError`` when the context has no source record.
    """
    record = context.record
    if record is None:
        raise ValueError("cannot build a dead letter record: the failed record is not known")
    timestamp = record.timestamp
    if timestamp is not None and (timestamp < 0 or record.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE):
        timestamp = None
    headers: list[Header] = list(record.headers) if copy_record else []
    if context_headers:
        if header_format is HeaderFormat.DLQ:
            headers.extend(dlq_context_headers(context, group=group))
        else:
            headers.extend(connect_context_headers(context))
    return DeadLetterQueueRecord(
        topic=topic,
        key=record.key if copy_record else None,
        value=record.value if copy_record else None,
        headers=headers,
        timestamp=timestamp,
    )


@dataclass(frozen=True)
class DeadLetterRecord:
    """A DLQ record read back: where it came from, why it failed, and the original content.

    Fields a header set does not carry are ``None``. ``headers`` are the original record's
    headers with every error-context header removed, ready to write back on replay;
    ``error_headers`` keeps every recognised error header decoded, for display.
    """

    header_set: HeaderSet | None
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None
    stage: Stage | None
    executing_class: str | None
    exception_class: str | None
    exception_message: str | None
    exception_stacktrace: str | None
    connector_name: str | None
    task_id: int | None
    group: str | None
    delivery_count: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp: int | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    error_headers: Mapping[str, str | None] = field(default_factory=dict)

    def to_source_record(self) -> SourceRecord:
        """The original record, as it was on its source topic, for replay.

        Raises ``ValueError`` when the headers did not say where the record came from.
        """
        if self.source_topic is None or self.source_partition is None or self.source_offset is None:
            raise ValueError("the dead letter record does not name its source topic, partition and offset")
        return SourceRecord(
            topic=self.source_topic,
            partition=self.source_partition,
            offset=self.source_offset,
            timestamp=self.timestamp,
            timestamp_type=TimestampType.CREATE_TIME if self.timestamp is not None else TimestampType.NO_TIMESTAMP_TYPE,
            key=self.key,
            value=self.value,
            headers=list(self.headers),
        )


RawHeaders = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None


def _decode(value: bytes | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode("utf-8", errors="replace")


def _to_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _first(found: Mapping[str, str | None], *names: str) -> str | None:
    for name in names:
        if name in found and found[name] is not None:
            return found[name]
    return None


def _header_pairs(headers: RawHeaders) -> Iterable[tuple[str, bytes | str | None]]:
    if headers is None:
        return ()
    if isinstance(headers, Mapping):
        return headers.items()
    return headers


def parse_dead_letter(
    headers: RawHeaders,
    key: bytes | None,
    value: bytes | None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    timestamp: int | None = None,
) -> DeadLetterRecord:
    """Read a DLQ record written by Connect, a KIP-1191 broker, Kafka Streams or us.

    ``headers`` is confluent-kafka's list of ``(name, bytes)`` (or a mapping); ``topic``,
    ``partition``, ``offset`` and ``timestamp`` locate the DLQ record itself. When a header
    repeats, the last one wins: Connect appends, so the newest failure is last. When several
    sets are present, Connect's fields take precedence, then KIP-1191's, then Streams'.
    """
    error_headers: dict[str, str | None] = {}
    original: list[Header] = []
    for name, raw in _header_pairs(headers):
        if name.startswith(_ERROR_PREFIXES):
            error_headers[name] = _decode(raw)
        else:
            original.append((name, raw.encode("utf-8") if isinstance(raw, str) else raw))

    header_set: HeaderSet | None = None
    for candidate, prefix in ((HeaderSet.CONNECT, HEADER_PREFIX), (HeaderSet.DLQ, DLQ_HEADER_PREFIX)):
        if any(name.startswith(prefix) for name in error_headers):
            header_set = candidate
            break
    if header_set is None and any(name.startswith(STREAMS_HEADER_PREFIX) for name in error_headers):
        header_set = HeaderSet.STREAMS

    stage_text = error_headers.get(ERROR_HEADER_STAGE)
    stage = Stage(stage_text) if stage_text is not None and stage_text in Stage.__members__ else None
    return DeadLetterRecord(
        header_set=header_set,
        source_topic=_first(error_headers, ERROR_HEADER_ORIG_TOPIC, DLQ_HEADER_TOPIC, STREAMS_HEADER_TOPIC),
        source_partition=_to_int(
            _first(error_headers, ERROR_HEADER_ORIG_PARTITION, DLQ_HEADER_PARTITION, STREAMS_HEADER_PARTITION)
        ),
        source_offset=_to_int(
            _first(error_headers, ERROR_HEADER_ORIG_OFFSET, DLQ_HEADER_OFFSET, STREAMS_HEADER_OFFSET)
        ),
        stage=stage,
        executing_class=error_headers.get(ERROR_HEADER_EXECUTING_CLASS),
        exception_class=_first(error_headers, ERROR_HEADER_EXCEPTION, STREAMS_HEADER_EXCEPTION),
        exception_message=_first(
            error_headers, ERROR_HEADER_EXCEPTION_MESSAGE, DLQ_HEADER_MESSAGE, STREAMS_HEADER_MESSAGE
        ),
        exception_stacktrace=_first(error_headers, ERROR_HEADER_EXCEPTION_STACK_TRACE, STREAMS_HEADER_STACKTRACE),
        connector_name=error_headers.get(ERROR_HEADER_CONNECTOR_NAME),
        task_id=_to_int(error_headers.get(ERROR_HEADER_TASK_ID)),
        group=error_headers.get(DLQ_HEADER_GROUP),
        delivery_count=_to_int(error_headers.get(DLQ_HEADER_DELIVERY_COUNT)),
        key=key,
        value=value,
        headers=tuple(original),
        timestamp=timestamp,
        topic=topic,
        partition=partition,
        offset=offset,
        error_headers=error_headers,
    )
