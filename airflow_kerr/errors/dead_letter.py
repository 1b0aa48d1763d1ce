"""Dead letter queue records: build them as Connect does, and read any of the three header sets back.

The build side copies the original key, value and headers unchanged and appends the
error-context headers as UTF-8 text (numbers in decimal), with Connect's exact names,
order and null handling. The read side accepts Connect's ``__connect.errors.*``,
KIP-1191's ``__dlq.errors.*`` and Kafka Streams' ``__streams.errors.*`` (KIP-1034) sets,
so the replay and the sensors work on a DLQ written by any of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
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
    if text.isdigit() and text.isascii():
        return int(text)
    try:
        return int(text.strip())
    except ValueError:
        return None


#: The header sets in order of precedence, when a record carries several.
_HEADER_SETS = (HeaderSet.CONNECT, HeaderSet.DLQ, HeaderSet.STREAMS)
#: Every error header the parser reads a field from, and the rank in _HEADER_SETS of its set.
_KNOWN_ERROR_HEADERS: dict[str, int] = {
    **dict.fromkeys(
        (
            ERROR_HEADER_ORIG_TOPIC,
            ERROR_HEADER_ORIG_PARTITION,
            ERROR_HEADER_ORIG_OFFSET,
            ERROR_HEADER_CONNECTOR_NAME,
            ERROR_HEADER_TASK_ID,
            ERROR_HEADER_STAGE,
            ERROR_HEADER_EXECUTING_CLASS,
            ERROR_HEADER_EXCEPTION,
            ERROR_HEADER_EXCEPTION_MESSAGE,
            ERROR_HEADER_EXCEPTION_STACK_TRACE,
        ),
        0,
    ),
    **dict.fromkeys(
        (
            DLQ_HEADER_TOPIC,
            DLQ_HEADER_PARTITION,
            DLQ_HEADER_OFFSET,
            DLQ_HEADER_GROUP,
            DLQ_HEADER_DELIVERY_COUNT,
            DLQ_HEADER_MESSAGE,
        ),
        1,
    ),
    **dict.fromkeys(
        (
            STREAMS_HEADER_EXCEPTION,
            STREAMS_HEADER_MESSAGE,
            STREAMS_HEADER_STACKTRACE,
            STREAMS_HEADER_TOPIC,
            STREAMS_HEADER_PARTITION,
            STREAMS_HEADER_OFFSET,
        ),
        2,
    ),
}
#: A stage header's text and its stage: only a member name is recognised, as Connect writes it.
_STAGES: dict[str, Stage] = {name: Stage(name) for name in Stage.__members__}
_DEAD_LETTER_FIELDS = (
    "header_set",
    "source_topic",
    "source_partition",
    "source_offset",
    "stage",
    "executing_class",
    "exception_class",
    "exception_message",
    "exception_stacktrace",
    "connector_name",
    "task_id",
    "group",
    "delivery_count",
    "key",
    "value",
    "headers",
    "timestamp",
    "topic",
    "partition",
    "offset",
    "error_headers",
)
if tuple(f.name for f in fields(DeadLetterRecord)) != _DEAD_LETTER_FIELDS:  # pragma: no cover - a guard for edits
    raise ImportError("parse_dead_letter builds DeadLetterRecord field by field: update _DEAD_LETTER_FIELDS and it")
_new_object = object.__new__
_set_attribute = object.__setattr__


def _rank_of(name: str) -> int:
    """The rank in :data:`_HEADER_SETS` of an error header the parser has no field for (its prefix says which)."""
    if name.startswith(HEADER_PREFIX):
        return 0
    return 1 if name.startswith(DLQ_HEADER_PREFIX) else 2


def _either(first: str | None, *others: str | None) -> str | None:
    """The first value that is not ``None``."""
    if first is not None:
        return first
    for other in others:
        if other is not None:
            return other
    return None


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

    The replay calls this once per record, so it reads the headers in one pass, decodes
    each error header once, and builds the frozen record without its generated ``__init__``
    (which sets the 21 fields one ``object.__setattr__`` at a time).
    """
    error_headers: dict[str, str | None] = {}
    original: list[Header] = []
    keep = original.append
    known = _KNOWN_ERROR_HEADERS.get
    # The header set found: the lowest rank in _HEADER_SETS (Connect first), 3 for none.
    rank = 3
    pairs: Iterable[tuple[str, bytes | str | None]] = (
        () if headers is None else headers.items() if isinstance(headers, Mapping) else headers
    )
    for name, raw in pairs:
        found = known(name)
        if found is None:
            if not name.startswith(_ERROR_PREFIXES):
                keep((name, raw.encode("utf-8") if isinstance(raw, str) else raw))
                continue
            found = _rank_of(name)
        if found < rank:
            rank = found
        if type(raw) is bytes:
            try:
                error_headers[name] = raw.decode()
            except UnicodeDecodeError:
                error_headers[name] = raw.decode("utf-8", errors="replace")
        else:
            error_headers[name] = _decode(raw)

    fields_of: dict[str, Any]
    if rank == 3:
        fields_of = dict.fromkeys(_DEAD_LETTER_FIELDS[:13])
        fields_of["key"] = key
        fields_of["value"] = value
        fields_of["headers"] = tuple(original)
        fields_of["timestamp"] = timestamp
        fields_of["topic"] = topic
        fields_of["partition"] = partition
        fields_of["offset"] = offset
        fields_of["error_headers"] = error_headers
    else:
        get = error_headers.get
        # Connect's header first; the others are looked up only when it is missing.
        source_topic = get(ERROR_HEADER_ORIG_TOPIC)
        if source_topic is None:
            source_topic = _either(get(DLQ_HEADER_TOPIC), get(STREAMS_HEADER_TOPIC))
        source_partition = get(ERROR_HEADER_ORIG_PARTITION)
        if source_partition is None:
            source_partition = _either(get(DLQ_HEADER_PARTITION), get(STREAMS_HEADER_PARTITION))
        source_offset = get(ERROR_HEADER_ORIG_OFFSET)
        if source_offset is None:
            source_offset = _either(get(DLQ_HEADER_OFFSET), get(STREAMS_HEADER_OFFSET))
        exception_class = get(ERROR_HEADER_EXCEPTION)
        if exception_class is None:
            exception_class = get(STREAMS_HEADER_EXCEPTION)
        message = get(ERROR_HEADER_EXCEPTION_MESSAGE)
        if message is None:
            message = _either(get(DLQ_HEADER_MESSAGE), get(STREAMS_HEADER_MESSAGE))
        stacktrace = get(ERROR_HEADER_EXCEPTION_STACK_TRACE)
        if stacktrace is None:
            stacktrace = get(STREAMS_HEADER_STACKTRACE)
        stage_text = get(ERROR_HEADER_STAGE)
        task_id = get(ERROR_HEADER_TASK_ID)
        delivery_count = get(DLQ_HEADER_DELIVERY_COUNT)
        # One literal in field order: the same dict a dataclass __init__ would fill.
        fields_of = {
            "header_set": _HEADER_SETS[rank],
            "source_topic": source_topic,
            "source_partition": None if source_partition is None else _to_int(source_partition),
            "source_offset": None if source_offset is None else _to_int(source_offset),
            "stage": None if stage_text is None else _STAGES.get(stage_text),
            "executing_class": get(ERROR_HEADER_EXECUTING_CLASS),
            "exception_class": exception_class,
            "exception_message": message,
            "exception_stacktrace": stacktrace,
            "connector_name": get(ERROR_HEADER_CONNECTOR_NAME),
            "task_id": None if task_id is None else _to_int(task_id),
            "group": get(DLQ_HEADER_GROUP),
            "delivery_count": None if delivery_count is None else _to_int(delivery_count),
            "key": key,
            "value": value,
            "headers": tuple(original),
            "timestamp": timestamp,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "error_headers": error_headers,
        }
    # The fields a dataclass __init__ would set, in one assignment; the record stays frozen.
    record: DeadLetterRecord = _new_object(DeadLetterRecord)
    _set_attribute(record, "__dict__", fields_of)
    return record
