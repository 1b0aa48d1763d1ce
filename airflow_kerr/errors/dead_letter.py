"""Dead letter queue records: build them as Connect does, and read any of the three header sets back.

The build side copies the original key, value and headers unchanged and appends the
error-context headers as UTF-8 text (numbers in decimal), with Connect's exact names,
order and null handling. The read side accepts Connect's ``__connect.errors.*``,
KIP-1191's ``__dlq.errors.*`` and Kafka Streams' ``__streams.errors.*`` (KIP-1034) sets,
so the replay and the sensors work on a DLQ written by any of them.

A DLQ holds whatever its writers put there, so the read side trusts no header: a topic
name or a number it cannot use (not a Kafka topic name, not decimal, outside Kafka's
range) is never handed on, but named in ``malformed_headers`` so that the replay parks
the record with that reason instead of failing on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from airflow_kerr.errors.config import HeaderFormat
from airflow_kerr.errors.context import ErrorContext, TaskId
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

#: The prefixes of the three error-context header sets.
ERROR_HEADER_PREFIXES = (HEADER_PREFIX, DLQ_HEADER_PREFIX, STREAMS_HEADER_PREFIX)

#: Kafka's rule for topic names (``org.apache.kafka.common.internals.Topic.validate``), less '.' and '..'.
TOPIC_NAME_PATTERN = re.compile(r"[a-zA-Z0-9._-]{1,249}")
TOPIC_NAME_RULE = "1-249 of ASCII letters, digits, '.', '_', '-'"
INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
#: Characters of a bad value quoted in a problem: enough to recognise it, never a megabyte header.
SHOWN_CHARS = 60


def is_topic_name(name: object) -> bool:
    """Whether ``name`` is a name Kafka accepts for a topic; anything else makes librdkafka refuse the topic."""
    return isinstance(name, str) and TOPIC_NAME_PATTERN.fullmatch(name) is not None and name not in (".", "..")


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr`` of a value from outside, cut to ``limit`` characters with its length noted.

    Safe for anything: an integer past Python's digit limit for ``str`` is described rather
    than converted (its ``repr`` would raise ``ValueError``).
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 1000:
        return f"<an integer of about {int(value.bit_length() * 0.30103)} digits>"
    try:
        text = repr(value)
    except ValueError:  # Python will not print an integer of more than 4,300 digits, nested ones included
        return f"<a {type(value).__name__} holding an integer too long to print>"
    except Exception as error:  # a caller's object whose __repr__ fails: describe it instead
        return f"<a {type(value).__name__} whose repr failed: {type(error).__name__}>"
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, str) else f"{len(text):,} characters as text"
    return f"{text[: limit - 1]}\u2026 ({size})"


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


def _as_bytes(name: str, value: object) -> bytes | None:
    """A header value as Kafka holds it: bytes or null (text is UTF-8; a lone surrogate is kept, not raised on)."""
    if value is None or type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8", errors="surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"header {name!r}: value {shown(value)} is not bytes, str or None")


def _decode(name: str, value: object) -> str | None:
    """An error header's text: invalid UTF-8 becomes U+FFFD, so a value is always readable."""
    if value is None or isinstance(value, str):
        return value
    raw = _as_bytes(name, value)
    return None if raw is None else raw.decode("utf-8", errors="replace")


#: Decimal text as Connect, KIP-1191 and Streams write numbers, with surrounding blanks tolerated.
_DECIMAL = re.compile(r"[ \t\r\n]*(-?[0-9]{1,19})[ \t\r\n]*")


def _number(problems: dict[str, str], name: str, text: str | None, low: int, high: int, *, unknown: bool) -> int | None:
    """The integer ``text`` spells when it lies in ``[low, high]``; else ``None``, with the problem noted.

    ``unknown`` accepts -1 as Kafka's "not known" (a Streams punctuation has no source
    partition or offset) and gives ``None`` without a problem. Only ASCII decimal digits
    count, at most 19 of them, so neither ``int``'s 4,300-digit limit nor other scripts'
    digits (which ``int`` would accept) are ever reached.
    """
    if text is None:
        return None
    number: int | None
    if text.isdigit() and text.isascii() and len(text) < 19:
        number = int(text)
    else:
        match = _DECIMAL.fullmatch(text)
        number = int(match[1]) if match else None
    if number is not None and low <= number <= high:
        return number
    if number == -1 and unknown:
        return None
    problems[name] = f"{shown(text)} is not an integer from {low} to {high}"
    return None


#: Topic names already found valid: a DLQ names few source topics, so most records skip the pattern.
_TOPIC_NAMES_SEEN: set[str] = set()
_TOPIC_NAMES_KEPT = 4096


def known_topic_name(text: str) -> bool:
    """:func:`is_topic_name`, remembered: a DLQ names few source topics, so the pattern runs once per name.

    The replay's fast path asks this for every record's source topic, as the parser does.
    """
    if text in _TOPIC_NAMES_SEEN:
        return True
    if not is_topic_name(text):
        return False
    if len(_TOPIC_NAMES_SEEN) >= _TOPIC_NAMES_KEPT:
        _TOPIC_NAMES_SEEN.clear()
    _TOPIC_NAMES_SEEN.add(text)
    return True


def _topic(problems: dict[str, str], name: str, text: str | None) -> str | None:
    """``text`` when it is a topic name Kafka accepts; else ``None``, with the problem noted."""
    if text is None:
        return None
    if known_topic_name(text):
        return text
    problems[name] = f"{shown(text)} is not a topic name ({TOPIC_NAME_RULE})"
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
#: The same, keyed by the header's raw bytes, for a reader that matches the value without decoding it.
STAGES_BY_HEADER_BYTES: dict[bytes, Stage] = {name.encode(): stage for name, stage in _STAGES.items()}
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
    "malformed_headers",
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


def _first(get: Any, names: tuple[str, ...]) -> tuple[str, str | None]:
    """The first of ``names`` whose value is not ``None``, and that value (the last name when none is set)."""
    for name in names:
        value = get(name)
        if value is not None:
            return name, value
    return names[-1], None


_TOPIC_HEADERS = (ERROR_HEADER_ORIG_TOPIC, DLQ_HEADER_TOPIC, STREAMS_HEADER_TOPIC)
_PARTITION_HEADERS = (ERROR_HEADER_ORIG_PARTITION, DLQ_HEADER_PARTITION, STREAMS_HEADER_PARTITION)
_OFFSET_HEADERS = (ERROR_HEADER_ORIG_OFFSET, DLQ_HEADER_OFFSET, STREAMS_HEADER_OFFSET)
_MESSAGE_HEADERS = (ERROR_HEADER_EXCEPTION_MESSAGE, DLQ_HEADER_MESSAGE, STREAMS_HEADER_MESSAGE)


def _pairs(headers: RawHeaders) -> Iterable[tuple[str, bytes | str | None]]:
    if type(headers) is list:  # what confluent-kafka returns: no ABC check (a tenth of a parse) needed
        return headers
    if headers is None:
        return ()
    if isinstance(headers, Mapping):
        return headers.items()
    if isinstance(headers, (str, bytes, bytearray)):
        raise TypeError(f"headers must be a list of (name, value) pairs or a mapping, not {type(headers).__name__}")
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

    Any header values give a record: invalid UTF-8 is decoded with U+FFFD, and a topic or
    number header that Kafka would not accept leaves its field ``None`` and is named in
    ``malformed_headers``. Only headers that are not ``(str, bytes | str | None)`` pairs
    raise, and only ``TypeError``.

    The replay calls this once per record, so it reads the headers in one pass, decodes
    each error header once, and builds the frozen record without its generated ``__init__``
    (which sets the 22 fields one ``object.__setattr__`` at a time).
    """
    error_headers: dict[str, str | None] = {}
    original: list[Header] = []
    keep = original.append
    known = _KNOWN_ERROR_HEADERS.get
    # The header set found: the lowest rank in _HEADER_SETS (Connect first), 3 for none.
    rank = 3
    try:
        for name, raw in _pairs(headers):
            found = known(name)
            if found is None:
                if type(name) is not str:
                    raise TypeError(f"header name {shown(name)} is not a str")
                if not name.startswith(ERROR_HEADER_PREFIXES):
                    keep((name, raw if raw is None or type(raw) is bytes else _as_bytes(name, raw)))
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
                error_headers[name] = _decode(name, raw)
    except ValueError as error:  # a pair that is not two items
        raise TypeError(f"headers must be (name, value) pairs: {error}") from None

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
        fields_of["malformed_headers"] = {}
    else:
        get = error_headers.get
        problems: dict[str, str] = {}
        # Connect's header first, and the common case inline (plain digits short enough to be
        # in range); the others, and any value that needs a closer look, go through the checks.
        source_topic = get(ERROR_HEADER_ORIG_TOPIC)
        if source_topic is None or source_topic not in _TOPIC_NAMES_SEEN:
            source_topic = _topic(problems, *_first(get, _TOPIC_HEADERS))
        text = get(ERROR_HEADER_ORIG_PARTITION)
        if text is not None and text.isdigit() and text.isascii() and len(text) < 10:
            source_partition: int | None = int(text)
        else:
            source_partition = _number(problems, *_first(get, _PARTITION_HEADERS), 0, INT32_MAX, unknown=True)
        text = get(ERROR_HEADER_ORIG_OFFSET)
        if text is not None and text.isdigit() and text.isascii() and len(text) < 19:
            source_offset: int | None = int(text)
        else:
            source_offset = _number(problems, *_first(get, _OFFSET_HEADERS), 0, INT64_MAX, unknown=True)
        exception_class = get(ERROR_HEADER_EXCEPTION)
        if exception_class is None:
            exception_class = get(STREAMS_HEADER_EXCEPTION)
        message = get(ERROR_HEADER_EXCEPTION_MESSAGE)
        if message is None:
            message = _first(get, _MESSAGE_HEADERS)[1]
        stacktrace = get(ERROR_HEADER_EXCEPTION_STACK_TRACE)
        if stacktrace is None:
            stacktrace = get(STREAMS_HEADER_STACKTRACE)
        stage_text = get(ERROR_HEADER_STAGE)
        text = get(ERROR_HEADER_TASK_ID)
        if text is not None and text.isdigit() and text.isascii() and len(text) < 10:
            task_id: int | None = int(text)
        else:
            task_id = _number(problems, ERROR_HEADER_TASK_ID, text, 0, INT32_MAX, unknown=False)
        delivery_count = get(DLQ_HEADER_DELIVERY_COUNT)
        # One literal in field order: the same dict a dataclass __init__ would fill.
        fields_of = {
            "header_set": _HEADER_SETS[rank],
            "source_topic": source_topic,
            "source_partition": source_partition,
            "source_offset": source_offset,
            "stage": None if stage_text is None else _STAGES.get(stage_text),
            "executing_class": get(ERROR_HEADER_EXECUTING_CLASS),
            "exception_class": exception_class,
            "exception_message": message,
            "exception_stacktrace": stacktrace,
            "connector_name": get(ERROR_HEADER_CONNECTOR_NAME),
            "task_id": task_id,
            "group": get(DLQ_HEADER_GROUP),
            "delivery_count": None
            if delivery_count is None
            else _number(problems, DLQ_HEADER_DELIVERY_COUNT, delivery_count, 1, INT16_MAX, unknown=False),
            "key": key,
            "value": value,
            "headers": tuple(original),
            "timestamp": timestamp,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "error_headers": error_headers,
            "malformed_headers": problems,
        }
    # The fields a dataclass __init__ would set, in one assignment; the record stays frozen.
    record: DeadLetterRecord = _new_object(DeadLetterRecord)
    _set_attribute(record, "__dict__", fields_of)
    return record
