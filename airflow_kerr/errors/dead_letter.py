"""Dead letter queue records: build them as Connect does, and read any dialect's back.

The build side copies the original key, value and headers unchanged and appends the
error-context headers as UTF-8 text (numbers in decimal), with Connect's exact names,
order and null handling (or KIP-1191's, with ``header.format=dlq``). The read side,
:func:`parse_dead_letter`, reads every dialect in :mod:`airflow_kerr.errors.dialects`
(Connect, KIP-1191, Kafka Streams, Spring Kafka, Schema Registry rules, header-less)
through the one reader in :mod:`airflow_kerr.errors.header_reader`, so the replay, the
view and the sensors work on a DLQ written by any of them.

A DLQ holds whatever its writers put there, so the read side trusts no header: a topic
name or a number it cannot use (not a Kafka topic name, not decimal, outside Kafka's
range) is never handed on, but named in ``malformed_headers`` so that the replay parks
the record with that reason instead of failing on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from airflow_kerr.errors.config import HeaderFormat
from airflow_kerr.errors.context import ErrorContext, TaskId
from airflow_kerr.errors.dialects import (
    DLQ_HEADER_DELIVERY_COUNT,
    DLQ_HEADER_GROUP,
    DLQ_HEADER_MESSAGE,
    DLQ_HEADER_OFFSET,
    DLQ_HEADER_PARTITION,
    DLQ_HEADER_PREFIX,
    DLQ_HEADER_TOPIC,
    ERROR_HEADER_CONNECTOR_NAME,
    ERROR_HEADER_EXCEPTION,
    ERROR_HEADER_EXCEPTION_MESSAGE,
    ERROR_HEADER_EXCEPTION_STACK_TRACE,
    ERROR_HEADER_EXECUTING_CLASS,
    ERROR_HEADER_ORIG_OFFSET,
    ERROR_HEADER_ORIG_PARTITION,
    ERROR_HEADER_ORIG_TOPIC,
    ERROR_HEADER_STAGE,
    ERROR_HEADER_TASK_ID,
    FIELD_HEADERS,
    HEADER_PREFIX,
    RULE_EXCEPTION_CLASS_PREFIX,
    STREAMS_HEADER_EXCEPTION,
    STREAMS_HEADER_MESSAGE,
    STREAMS_HEADER_OFFSET,
    STREAMS_HEADER_PARTITION,
    STREAMS_HEADER_PREFIX,
    STREAMS_HEADER_STACKTRACE,
    STREAMS_HEADER_TOPIC,
    HeaderSet,
)
from airflow_kerr.errors.dialects import ERROR_HEADER_PREFIXES as DIALECT_ERROR_HEADER_PREFIXES
from airflow_kerr.errors.header_reader import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    SHOWN_CHARS,
    TOPIC_NAME_PATTERN,
    TOPIC_NAME_RULE,
    ErrorHeaders,
    RawHeaders,
    is_topic_name,
    known_topic_name,
    read_error_headers,
    shown,
)
from airflow_kerr.errors.record import Header, SourceRecord, TimestampType
from airflow_kerr.errors.stacktrace import exception_class_name, exception_message, format_stacktrace
from airflow_kerr.errors.stage import Stage

__all__ = [
    "DLQ_HEADER_DELIVERY_COUNT",
    "DLQ_HEADER_GROUP",
    "DLQ_HEADER_MESSAGE",
    "DLQ_HEADER_OFFSET",
    "DLQ_HEADER_PARTITION",
    "DLQ_HEADER_PREFIX",
    "DLQ_HEADER_TOPIC",
    "ERROR_HEADER_CONNECTOR_NAME",
    "ERROR_HEADER_EXCEPTION",
    "ERROR_HEADER_EXCEPTION_MESSAGE",
    "ERROR_HEADER_EXCEPTION_STACK_TRACE",
    "ERROR_HEADER_EXECUTING_CLASS",
    "ERROR_HEADER_ORIG_OFFSET",
    "ERROR_HEADER_ORIG_PARTITION",
    "ERROR_HEADER_ORIG_TOPIC",
    "ERROR_HEADER_PREFIXES",
    "ERROR_HEADER_STAGE",
    "ERROR_HEADER_TASK_ID",
    "HEADER_PREFIX",
    "INT16_MAX",
    "INT32_MAX",
    "INT64_MAX",
    "SHOWN_CHARS",
    "STAGES_BY_HEADER_BYTES",
    "STREAMS_HEADER_EXCEPTION",
    "STREAMS_HEADER_MESSAGE",
    "STREAMS_HEADER_OFFSET",
    "STREAMS_HEADER_PARTITION",
    "STREAMS_HEADER_PREFIX",
    "STREAMS_HEADER_STACKTRACE",
    "STREAMS_HEADER_TOPIC",
    "TOPIC_NAME_PATTERN",
    "TOPIC_NAME_RULE",
    "DeadLetterQueueRecord",
    "DeadLetterRecord",
    "HeaderSet",
    "RawHeaders",
    "build_dead_letter_record",
    "connect_context_headers",
    "dlq_context_headers",
    "is_topic_name",
    "known_topic_name",
    "letter_from",
    "parse_dead_letter",
    "shown",
    "streams_context_headers",
]

#: Every dialect's error-header prefixes (kept under this name for the replay and the view).
ERROR_HEADER_PREFIXES = DIALECT_ERROR_HEADER_PREFIXES


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
    #: ``topic/partition/offset`` of the failed record, for messages about this DLQ write (not written).
    source: str | None = field(default=None, compare=False)

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


#: Sets of executing headers kept at most; past it the cache starts over (a job has a handful of stages).
EXECUTING_HEADERS_CACHE_SIZE = 256
_executing_headers_cache: dict[tuple[str, int, str, str], tuple[Header, ...]] = {}


def _executing_headers(task: TaskId, stage: Stage, executing_class: str) -> tuple[Header, ...]:
    """The connector name, task id, stage and class name headers: the same for every failure of a stage.

    Encoded once per (task, stage, class) rather than once per failed record.
    """
    key = (task.pipeline, task.task, stage, executing_class)
    headers = _executing_headers_cache.get(key)
    if headers is None:
        headers = (
            (ERROR_HEADER_CONNECTOR_NAME, _utf8(task.pipeline)),
            (ERROR_HEADER_TASK_ID, _utf8(str(task.task))),
            (ERROR_HEADER_STAGE, _utf8(stage.value)),
            (ERROR_HEADER_EXECUTING_CLASS, _utf8(executing_class)),
        )
        if len(_executing_headers_cache) >= EXECUTING_HEADERS_CACHE_SIZE:
            _executing_headers_cache.clear()
        _executing_headers_cache[key] = headers
    return headers


def connect_context_headers(context: ErrorContext) -> list[Header]:
    """Connect's ten ``__connect.errors.*`` headers, in Connect's order and with its omissions.

    Topic, partition and offset appear only when the source record is known (an error
    context always has an exception, so the three exception headers are always there);
    an exception without a message gives the message header with a null value.
    """
    headers: list[Header] = []
    record = context.record
    if record is not None:
        headers += (
            (ERROR_HEADER_ORIG_TOPIC, _utf8(record.topic)),
            (ERROR_HEADER_ORIG_PARTITION, str(record.partition).encode("utf-8")),
            (ERROR_HEADER_ORIG_OFFSET, str(record.offset).encode("utf-8")),
        )
    headers += _executing_headers(context.task, context.stage, context.executing_class)
    error = context.error
    class_name = exception_class_name(error)
    message = exception_message(error)
    headers += (
        (ERROR_HEADER_EXCEPTION, class_name.encode("utf-8")),
        (ERROR_HEADER_EXCEPTION_MESSAGE, _utf8(message)),
        (
            ERROR_HEADER_EXCEPTION_STACK_TRACE,
            format_stacktrace(error, class_name=class_name, message=message).encode("utf-8"),
        ),
    )
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
        source=f"{record.topic}/{record.partition}/{record.offset}",
    )


@dataclass(frozen=True)
class DeadLetterRecord:
    """A DLQ record read back: where it came from, why it failed, and the original content.

    Fields a header set does not carry are ``None``. ``headers`` are the original record's
    headers with every error-context header removed, ready to write back on replay;
    ``error_headers`` keeps every recognised error header decoded, for display.

    Every field holds a value Kafka accepts or ``None``: ``source_topic`` is a valid topic
    name, ``source_partition`` and ``task_id`` are int32 >= 0, ``source_offset`` int64 >= 0,
    ``delivery_count`` int16 >= 1. A header the parser read a field from but could not use
    leaves that field ``None`` and appears in ``malformed_headers`` (header name to what is
    wrong, quoting the value cut short), so a caller can tell "absent" from "garbage".

    The last five fields only some dialects carry: Spring's original timestamp and the class
    its error handler received (``exception_class`` is the root cause), and the Schema
    Registry rule's name, mode (``READ``, ``WRITE``, …) and subject.
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
    malformed_headers: Mapping[str, str] = field(default_factory=dict)
    source_timestamp: int | None = None
    wrapper_class: str | None = None
    rule_name: str | None = None
    rule_mode: str | None = None
    rule_subject: str | None = None

    @property
    def is_pointer(self) -> bool:
        """Whether this dead letter points at its original instead of copying it.

        True for a record with neither key nor value that names its source topic, partition
        and offset: KIP-1191's default (``errors.deadletterqueue.copy.record.enable=false``),
        or our job's dead letter of a record too large to copy. The replay reads the original
        from there.
        """
        return (
            self.key is None
            and self.value is None
            and self.source_topic is not None
            and self.source_partition is not None
            and self.source_offset is not None
        )

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


#: A stage header's text and its stage: only a member name is recognised, as Connect writes it.
_STAGES: dict[str, Stage] = {name: Stage(name) for name in Stage.__members__}
#: The same, keyed by the header's raw bytes, for a reader that matches the value without decoding it.
STAGES_BY_HEADER_BYTES: dict[bytes, Stage] = {name.encode(): stage for name, stage in _STAGES.items()}
_DEAD_LETTER_FIELDS = tuple(f.name for f in fields(DeadLetterRecord))
#: Every field unset: a record's own fields are filled in over a copy.
_NO_ERROR_FIELDS: dict[str, Any] = dict.fromkeys(_DEAD_LETTER_FIELDS)
if not set(FIELD_HEADERS) <= set(_DEAD_LETTER_FIELDS):  # pragma: no cover - a guard for edits
    raise ImportError(
        f"dialect fields without a DeadLetterRecord field: {set(FIELD_HEADERS) - set(_DEAD_LETTER_FIELDS)}"
    )
_new_object = object.__new__
_set_attribute = object.__setattr__


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
    """Read a DLQ record of any dialect (see :mod:`airflow_kerr.errors.dialects`).

    ``headers`` is confluent-kafka's list of ``(name, bytes)`` (or a mapping); ``topic``,
    ``partition``, ``offset`` and ``timestamp`` locate the DLQ record itself. When a header
    repeats, the last one wins (Connect appends, so the newest failure is last), except
    Spring's ``original-*`` headers, whose first names the original. When several dialects
    are present, each field comes from the first, in order of precedence, that has it.

    Any header values give a record: invalid UTF-8 is decoded with U+FFFD, and a topic or
    number header that Kafka would not accept leaves its field ``None`` and is named in
    ``malformed_headers``. Only headers that are not ``(str, bytes | str | None)`` pairs
    raise, and only ``TypeError``.

    The record is built without its generated ``__init__`` (which sets the fields one
    ``object.__setattr__`` at a time): the replay parses every record it cannot take the
    fast path for.
    """
    return letter_from(
        read_error_headers(headers), key, value, topic=topic, partition=partition, offset=offset, timestamp=timestamp
    )


def letter_from(
    read: ErrorHeaders,
    key: bytes | None,
    value: bytes | None,
    *,
    topic: str | None = None,
    partition: int | None = None,
    offset: int | None = None,
    timestamp: int | None = None,
) -> DeadLetterRecord:
    """:func:`parse_dead_letter` of headers already read: for a caller that looked at them first (the view's count)."""
    original = tuple(read.kept)
    dialect = read.dialect
    problems: dict[str, str] = {}
    fields_of = dict(_NO_ERROR_FIELDS)
    if dialect is None:
        error_headers: dict[str, str | None] = {}
    else:
        fields_of.update(read.fields(problems))
        fields_of["header_set"] = dialect.header_set
        stage = fields_of["stage"]
        if stage is not None:
            fields_of["stage"] = _STAGES.get(stage)
        if fields_of["exception_class"] is None and fields_of["rule_name"] is not None:
            fields_of["exception_class"] = RULE_EXCEPTION_CLASS_PREFIX + fields_of["rule_name"]
        error_headers = read.error_headers()
    fields_of["key"] = key
    fields_of["value"] = value
    fields_of["headers"] = original
    fields_of["timestamp"] = timestamp
    fields_of["topic"] = topic
    fields_of["partition"] = partition
    fields_of["offset"] = offset
    fields_of["error_headers"] = error_headers
    fields_of["malformed_headers"] = problems
    # The fields a dataclass __init__ would set, in one assignment; the record stays frozen.
    record: DeadLetterRecord = _new_object(DeadLetterRecord)
    _set_attribute(record, "__dict__", fields_of)
    return record
