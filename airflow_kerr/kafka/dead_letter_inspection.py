"""Read a dead letter queue for people: which DLQs exist, what failed and when, how much a replay has left, examples.

The DLQ view in the Airflow UI (``plugins/dead_letter_view.py``) calls these functions; they
import no Airflow so they can be tested against a broker alone. Every function opens its own
short-lived consumer that only assigns partitions (it never subscribes, so it never joins
a group and never moves anyone's position), never commits, and is closed before it
returns, except that :func:`summarize` keeps an unfinished scan's consumer for its next
chunk (:mod:`airflow_kerr.kafka.scan_consumers`). All of them use one throwaway group id
per process, :data:`SCRATCH_GROUP`, which is never joined and never committed to; only
:func:`unread_for_group` names a real group, to read its committed offsets.

Each read is bounded (records, seconds, topics), because a DLQ can hold millions of
records and a page must answer in about a second:

- :func:`summarize` counts by exception class, stage, source topic and pipeline, and over
  time, reading headers only, in resumable chunks: the page asks again with the returned
  ``cursor`` and adds the chunks up until ``complete``;
- :func:`sample_dead_letters` reads backwards from the end for the newest matching records,
  decoded for display, with credentials masked (:func:`mask_secrets`, :func:`mask_text`);
- :func:`unread_for_group` reads a group's committed offsets, never joining it;
- :func:`list_dead_letter_queues` lists configured DLQs and finds others by the error
  headers of their newest records.

There is one parsing rule, :func:`airflow_kerr.errors.parse_dead_letter`. The count reads
a handful of headers of a well-formed Connect record directly (a million records must be
counted in seconds) and hands anything else to ``parse_dead_letter``; the unit tests check
that both give the same fields for any headers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.errors.config import MASK, ConfigProblem, is_sensitive_key, parse_integer
from airflow_kerr.errors.dead_letter import (
    DeadLetterRecord,
    HeaderSet,
    RawHeaders,
    letter_from,
    parse_dead_letter,
    shown,
)
from airflow_kerr.errors.dialects import HEADER_LESS, header_set_name
from airflow_kerr.errors.header_reader import display, plain_connect_of, read_error_headers
from airflow_kerr.errors.masking import mask_secrets, mask_text
from airflow_kerr.errors.stage import Stage
from airflow_kerr.kafka.offsets import OffsetLookupError, offset_consumer, watermarks
from airflow_kerr.kafka.scan_consumers import SCAN_CONSUMERS, scan_key

#: The key under which records without a value count (no exception class, stage, source topic or pipeline).
NONE_KEY = "(none)"
#: The one group id every consumer here uses: assign only, never joined, never committed to.
SCRATCH_GROUP = f"kerr-dlq-view-{uuid.uuid4().hex[:12]}"
#: Timeline bucket widths the summary chooses from (milliseconds): round figures a person reads at a glance.
BUCKET_WIDTHS_MS = (
    1_000,
    10_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
    21_600_000,
    86_400_000,
    7 * 86_400_000,
    30 * 86_400_000,
)
#: The summary picks the narrowest width that gives at most this many buckets.
MAX_BUCKETS = 60
#: Key and value bytes shown per sampled record; longer ones are cut and say so.
MAX_SHOWN_BYTES = 64 * 1024
#: Characters of a header value, exception message or stack trace shown per sampled record.
MAX_SHOWN_CHARS = 64 * 1024
#: Seconds one metadata or offset look-up may take.
LOOKUP_TIMEOUT_S = 10.0
#: How long a broker may hold a fetch with no data (see :func:`_consumer`).
FETCH_WAIT_MAX_MS = 10
#: Records asked of librdkafka per ``consume`` call while counting.
SCAN_BATCH = 5_000
#: A cursor longer than this is not one :func:`summarize` wrote (a few dozen bytes per partition).
MAX_CURSOR_CHARS = 200_000
_CURSOR_VERSION = 1
_STAGE_NAMES = frozenset(Stage.__members__)
#: The names a dialect is counted and selected by: each header set's, and "none" for header-less records.
_HEADER_SET_NAMES = (*(h.value for h in HeaderSet), HEADER_LESS)
#: Query keys of a selection, with their aliases (the page sends ``start``/``end``).
_TIME_KEYS = {"start_ms": ("start_ms", "start"), "end_ms": ("end_ms", "end")}
_TEXT_KEYS = ("exception_class", "stage", "source_topic", "pipeline", "header_set")
_TIME_ACCEPTED = (
    "expected epoch milliseconds (e.g. 1795250000000) or an ISO-8601 time "
    "(e.g. 2026-11-23T10:00:00Z; without a zone it is UTC)"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LONG_MAX = 2**63 - 1


class InvalidSelection(ValueError):
    """A selection or cursor the view cannot use: one line per problem, naming the key, its value and what works."""

    def __init__(self, problems: Iterable[ConfigProblem]) -> None:
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


class TopicNotFound(OffsetLookupError):
    """The topic asked about is not on the broker (a 404 for the view, not a broker failure)."""


# --------------------------------------------------------------------------------------------- selection


def _parse_time(value: str) -> int | None:
    """Epoch milliseconds from digits or an ISO-8601 time (naive means UTC); ``None`` when it is neither."""
    number = parse_integer(value, 0, _LONG_MAX)
    if number is not None:
        return number
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


@dataclass(frozen=True)
class Selection:
    """Which dead letters a summary counts and a sample shows; every field set must match.

    Text fields compare exactly with what :func:`parse_dead_letter` reads (``pipeline`` is
    Connect's connector name, which our job sets to its pipeline name); :data:`NONE_KEY`
    selects records without that value, so a count's ``(none)`` row can be selected too.
    ``start_ms`` (inclusive) and ``end_ms`` (exclusive) bound the DLQ record's timestamp;
    a record without a timestamp matches only when neither is set.
    """

    exception_class: str | None = None
    stage: str | None = None
    source_topic: str | None = None
    pipeline: str | None = None
    start_ms: int | None = None
    end_ms: int | None = None
    #: The dialect's name (:class:`HeaderSet` value, or ``"none"`` for header-less records).
    header_set: str | None = None

    @classmethod
    def from_query(cls, mapping: Mapping[str, str | None]) -> Selection:
        """Build from a page's query values, checking each; every problem is raised at once.

        Keys are the field names (``start``/``end`` also name the times); other keys are not
        the selection's (the route's ``cursor``, ``limit``) and are ignored. Empty or blank
        values are unset. Times are epoch milliseconds or ISO-8601; a stage is a Connect stage
        name (any case) or ``(none)``.
        """
        problems: list[ConfigProblem] = []
        texts: dict[str, str | None] = {}
        for key in _TEXT_KEYS:
            raw = mapping.get(key)
            texts[key] = (raw.strip() or None) if isinstance(raw, str) else None
        stage = texts["stage"]
        if stage is not None and stage != NONE_KEY:
            if stage.upper() in _STAGE_NAMES:
                texts["stage"] = stage.upper()
            else:
                names = ", ".join(Stage.__members__)
                problems.append(ConfigProblem("stage", mapping.get("stage"), f"expected one of {names} or {NONE_KEY}"))
        header_set = texts["header_set"]
        if header_set is not None and header_set.lower() not in _HEADER_SET_NAMES:
            accepted = ", ".join(_HEADER_SET_NAMES)
            problems.append(ConfigProblem("header_set", mapping.get("header_set"), f"expected one of {accepted}"))
        elif header_set is not None:
            texts["header_set"] = header_set.lower()
        times: dict[str, int | None] = {}
        for name, keys in _TIME_KEYS.items():
            times[name] = None
            for key in keys:
                raw = mapping.get(key)
                if not isinstance(raw, str) or not raw.strip():
                    continue
                parsed = _parse_time(raw)
                if parsed is None:
                    problems.append(ConfigProblem(key, raw, _TIME_ACCEPTED))
                else:
                    times[name] = parsed
        start, end = times["start_ms"], times["end_ms"]
        if not problems and start is not None and end is not None and start >= end:
            problems.append(
                ConfigProblem(
                    "end", mapping.get("end") or mapping.get("end_ms"), f"expected a time after start ({start} ms)"
                )
            )
        if problems:
            raise InvalidSelection(problems)
        return cls(
            exception_class=texts["exception_class"],
            stage=texts["stage"],
            source_topic=texts["source_topic"],
            pipeline=texts["pipeline"],
            start_ms=start,
            end_ms=end,
            header_set=texts["header_set"],
        )

    def matches(self, letter: DeadLetterRecord, timestamp_ms: int | None) -> bool:
        """Whether a parsed dead letter, written to the DLQ at ``timestamp_ms``, is selected."""
        stage = None if letter.stage is None else letter.stage.value
        return self.matches_time(timestamp_ms) and self.matches_values(
            letter.exception_class,
            stage,
            letter.source_topic,
            letter.connector_name,
            header_set_name(letter.header_set),
        )

    def matches_values(
        self,
        exception_class: str | None,
        stage: str | None,
        source_topic: str | None,
        pipeline: str | None,
        header_set: str,
    ) -> bool:
        """The field part of :meth:`matches`, on the values a summary counts by (``None`` for a missing one)."""
        for wanted, value in (
            (self.exception_class, exception_class),
            (self.stage, stage),
            (self.source_topic, source_topic),
            (self.pipeline, pipeline),
            (self.header_set, header_set),
        ):
            if wanted is not None and wanted != (NONE_KEY if value is None else value):
                return False
        return True

    def matches_time(self, timestamp_ms: int | None) -> bool:
        """The time part of :meth:`matches`: inside ``[start_ms, end_ms)``; no timestamp matches no bound."""
        if self.start_ms is None and self.end_ms is None:
            return True
        if timestamp_ms is None or timestamp_ms < 0:
            return False
        return (self.start_ms is None or timestamp_ms >= self.start_ms) and (
            self.end_ms is None or timestamp_ms < self.end_ms
        )

    @property
    def by_values(self) -> bool:
        """Whether any text field is set (else every record matches on values)."""
        return any(
            v is not None for v in (self.exception_class, self.stage, self.source_topic, self.pipeline, self.header_set)
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fingerprint(self) -> str:
        """A short digest a cursor carries, so a scan resumed with another selection is refused, not mis-added."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------- fields


@dataclass(frozen=True)
class DeadLetterFields:
    """What a summary counts a dead letter by, as :func:`parse_dead_letter` reads it.

    ``header_set`` is the dialect's name (``"none"`` for a header-less record). ``malformed``
    is true when the record is not a dead letter (no dialect's headers) or a header it was
    read from could not be used (``DeadLetterRecord.malformed_headers``).
    """

    exception_class: str | None
    stage: str | None
    source_topic: str | None
    pipeline: str | None
    header_set: str
    malformed: bool


#: Raw field values: (exception class, stage, source topic, pipeline) as bytes or text, the dialect's name, malformed.
_Raw = tuple[bytes | str | None, bytes | str | None, bytes | str | None, bytes | str | None, str, bool]
_CONNECT = HeaderSet.CONNECT.value


def _fields_of_letter(letter: DeadLetterRecord) -> _Raw:
    stage = None if letter.stage is None else letter.stage.value
    malformed = letter.header_set is None or bool(letter.malformed_headers)
    return (
        letter.exception_class,
        stage,
        letter.source_topic,
        letter.connector_name,
        header_set_name(letter.header_set),
        malformed,
    )


def _raw_fields(headers: RawHeaders) -> _Raw:
    """The counted fields of one record's headers, undecoded when they can be, else as ``parse_dead_letter`` reads them.

    A plain Connect dead letter (:func:`plain_connect_of`) gives its fields as they arrive;
    any other record is read by :func:`read_error_headers` and parsed.
    """
    fast = plain_connect_of(headers)
    if fast is None:
        return _fields_of_letter(letter_from(read_error_headers(headers), None, None))
    topic, stage, exception_class, pipeline, _ = fast
    return exception_class, stage, topic, pipeline, _CONNECT, False


def _text(value: bytes | str | None) -> str | None:
    """A header value as ``parse_dead_letter`` decodes it: UTF-8 with U+FFFD for invalid bytes."""
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", errors="replace")


def _stage_text(value: bytes | str | None) -> str | None:
    """A stage header's text when it names a stage (as ``parse_dead_letter`` recognises it), else ``None``."""
    text = _text(value)
    return text if text in _STAGE_NAMES else None


def dead_letter_fields(headers: RawHeaders) -> DeadLetterFields:
    """The fields a summary counts one record by (decoded); the same as ``parse_dead_letter`` reads."""
    exception_class, stage, topic, pipeline, header_set, malformed = _raw_fields(headers)
    return DeadLetterFields(
        _text(exception_class), _stage_text(stage), _text(topic), _text(pipeline), header_set, malformed
    )


# --------------------------------------------------------------------------------------------- consumers


def _consumer(kafka_config: Mapping[str, Any]) -> Consumer:
    """An assign-only consumer in :data:`SCRATCH_GROUP`: never commits, never joins; starts over at the
    beginning when an offset it was given has been deleted (retention) rather than skipping to the end.

    ``fetch.wait.max.ms`` is short because these consumers re-assign several times in one call
    (the last records, then the first, then a range): a broker holds a fetch at a partition's
    end for up to that long, and librdkafka sends the next assignment's fetch only after it
    (500 ms by default, which was most of a summary's first second).
    """
    settings = {**kafka_config, "group.id": SCRATCH_GROUP, "enable.auto.offset.store": False}
    settings["auto.offset.reset"] = "earliest"
    settings["fetch.wait.max.ms"] = FETCH_WAIT_MAX_MS
    return offset_consumer(settings)


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[tuple[str, int]]:
    """The topic's partitions from the full topic list (asking for one topic by name may create it)."""
    metadata = consumer.list_topics(timeout=timeout_s)
    found = metadata.topics.get(topic)
    if found is None or not found.partitions:
        raise TopicNotFound(f"topic {topic!r} is not on the broker")
    if found.error is not None:
        raise OffsetLookupError(f"topic {topic!r} is not available: {found.error}")
    return [(topic, partition) for partition in sorted(found.partitions)]


def _ranges(consumer: Consumer, topic: str, timeout_s: float = LOOKUP_TIMEOUT_S) -> dict[int, tuple[int, int]]:
    """First and end offset of each partition (end exclusive, fetch-verified)."""
    marks = watermarks(consumer, _partitions(consumer, topic, timeout_s), timeout_s)
    return {partition: (low, high) for (_, partition), (low, high) in marks.items()}


def _first_records(
    consumer: Consumer, starts: Mapping[tuple[str, int], int], ends: Mapping[tuple[str, int], int], deadline: float
) -> dict[tuple[str, int], Any]:
    """The first record at or after each start and before its end, per partition, until ``deadline``.

    A partition is unassigned as soon as its record arrives, which drops the rest of its
    prefetched records: otherwise the other partitions' first records wait behind a whole
    fetch of its records. A partition with no record left (transaction markers, aborted
    records) is dropped once the consumer's position reaches its end, rather than waited for.
    """
    todo = {key: ends[key] for key, start in starts.items() if start < ends[key]}
    if not todo:
        return {}
    consumer.assign([TopicPartition(topic, partition, starts[(topic, partition)]) for topic, partition in todo])
    found: dict[tuple[str, int], Any] = {}
    try:
        while todo and time.monotonic() < deadline:
            # librdkafka returns once it has this many records or at the timeout: ask for one per partition left.
            messages: list[Any] = consumer.consume(len(todo), min(0.1, max(0.0, deadline - time.monotonic())))
            finished: list[TopicPartition] = []
            for message in messages:
                key = (message.topic(), message.partition())
                if message.error() is None and key in todo:
                    if message.offset() < todo[key]:
                        found[key] = message
                    todo.pop(key)
                    finished.append(TopicPartition(*key))
            if finished and todo:
                consumer.incremental_unassign(finished)
            if not messages and todo:
                for position in consumer.position([TopicPartition(t, p) for t, p in todo]):
                    key = (position.topic, position.partition)
                    if position.offset >= todo[key]:
                        todo.pop(key)
    finally:
        consumer.unassign()
    return found


def _timestamp(message: Any) -> int | None:
    kind, value = message.timestamp()
    return value if kind != 0 and value >= 0 else None


# --------------------------------------------------------------------------------------------- list


@dataclass(frozen=True)
class DeadLetterQueueTopic:
    """One DLQ the view offers: configured (listed whatever it holds) or discovered by its error headers."""

    name: str
    partitions: int
    records: int
    configured: bool
    discovered: bool
    exists: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_DLQ_LIKE = re.compile(r"dlq|dead|error|fail", re.IGNORECASE)


def list_dead_letter_queues(
    kafka_config: Mapping[str, Any],
    configured: Sequence[str] = (),
    *,
    timeout_s: float = 5.0,
    max_topics: int = 500,
) -> list[DeadLetterQueueTopic]:
    """The configured DLQ topics (always, ``exists`` false when absent) and other topics that look like DLQs.

    A topic is discovered when the newest record of any of its partitions carries an error
    header set :func:`parse_dead_letter` recognises (Connect's, KIP-1191's or Kafka Streams').
    Internal topics (``__`` names) are skipped. The work is bounded: at most ``max_topics``
    other topics are looked at (names that look like a DLQ, with dlq, dead, error or fail in
    them, first; then by name), one newest record per partition, within ``timeout_s`` in
    all; a topic whose newest records did not arrive in time is not discovered. Configured
    topics come first in their given order, then the discovered ones by name.
    """
    deadline = time.monotonic() + timeout_s
    wanted = list(dict.fromkeys(configured))
    consumer = _consumer(kafka_config)
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
        present = {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None and topic.partitions
        }
        others = sorted(
            (name for name in present if not name.startswith("__") and name not in wanted),
            key=lambda name: (_DLQ_LIKE.search(name) is None, name),
        )[: max(0, max_topics)]
        looked = [name for name in wanted if name in present] + others
        marks: dict[tuple[str, int], tuple[int, int]] = {}
        for name in looked:
            for partition in present[name]:
                if time.monotonic() >= deadline:
                    break
                left = max(0.1, deadline - time.monotonic())
                marks[(name, partition)] = consumer.get_watermark_offsets(
                    TopicPartition(name, partition), timeout=left, cached=False
                )
        newest = _first_records(
            consumer,
            {key: max(low, high - 1) for key, (low, high) in marks.items()},
            {key: high for key, (low, high) in marks.items()},
            deadline,
        )
        verified: dict[tuple[str, int], int] = {}
        for key in marks:
            _, fetched = consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
            verified[key] = max(marks[key][1], fetched)
    finally:
        consumer.close()
    looks_like_dlq = {
        topic
        for (topic, _), message in newest.items()
        if parse_dead_letter(message.headers() or [], None, None).header_set is not None
    }

    def entry(name: str, is_configured: bool) -> DeadLetterQueueTopic:
        partitions = present.get(name, [])
        records = sum(max(0, verified.get((name, p), 0) - marks.get((name, p), (0, 0))[0]) for p in partitions)
        return DeadLetterQueueTopic(
            name=name,
            partitions=len(partitions),
            records=records,
            configured=is_configured,
            discovered=name in looks_like_dlq,
            exists=name in present,
        )

    return [entry(name, True) for name in wanted] + [
        entry(name, False) for name in sorted(looks_like_dlq) if name not in wanted
    ]


# --------------------------------------------------------------------------------------------- summary


def choose_bucket_ms(oldest_ms: int | None, newest_ms: int | None) -> int:
    """The narrowest width of :data:`BUCKET_WIDTHS_MS` that spans ``oldest..newest`` in at most 60 buckets."""
    if oldest_ms is None or newest_ms is None or newest_ms <= oldest_ms:
        return BUCKET_WIDTHS_MS[0]
    for width in BUCKET_WIDTHS_MS:
        if newest_ms // width - oldest_ms // width + 1 <= MAX_BUCKETS:
            return width
    return BUCKET_WIDTHS_MS[-1]


@dataclass(frozen=True)
class ScanCursor:
    """Where a chunked summary goes on: per partition the next offset and the fixed end, and the scan's constants."""

    topic: str
    selection: str
    bucket_ms: int
    oldest_ms: int | None
    newest_ms: int | None
    total: int
    position: int
    partitions: Mapping[int, tuple[int, int]]

    def encode(self) -> str:
        """Opaque and URL-safe: base64url (no padding) of compact JSON."""
        data = {
            "v": _CURSOR_VERSION,
            "t": self.topic,
            "s": self.selection,
            "b": self.bucket_ms,
            "o": self.oldest_ms,
            "n": self.newest_ms,
            "T": self.total,
            "P": self.position,
            "p": [[p, nxt, end] for p, (nxt, end) in sorted(self.partitions.items())],
        }
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, text: str, topic: str, selection: Selection) -> ScanCursor:
        """Read a cursor back, checking every part; ``InvalidSelection`` naming ``cursor`` when it is not usable."""

        def bad(why: str) -> InvalidSelection:
            return InvalidSelection(
                [ConfigProblem("cursor", shown(text), f"{why}; expected the cursor of the previous chunk, or none")]
            )

        if not isinstance(text, str) or len(text) > MAX_CURSOR_CHARS or not text.isascii():
            raise bad("not a summary cursor")
        try:
            data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        except (binascii.Error, ValueError, RecursionError):
            raise bad("not a summary cursor") from None

        def integer(value: object) -> bool:
            return type(value) is int and 0 <= value <= _LONG_MAX

        def stamp(value: object) -> bool:
            return value is None or integer(value)

        if not isinstance(data, dict) or data.get("v") != _CURSOR_VERSION:
            raise bad("not a summary cursor")
        rows = data.get("p")
        if (
            not isinstance(data.get("t"), str)
            or not isinstance(data.get("s"), str)
            or data.get("b") not in BUCKET_WIDTHS_MS
            or not stamp(data.get("o"))
            or not stamp(data.get("n"))
            or not integer(data.get("T"))
            or not integer(data.get("P"))
            or not isinstance(rows, list)
            or not all(
                isinstance(row, list)
                and len(row) == 3
                and all(integer(v) for v in row)
                and row[0] <= 2**31 - 1
                and row[1] <= row[2]
                for row in rows
            )
            or len({row[0] for row in rows}) != len(rows)
        ):
            raise bad("not a summary cursor")
        if data["t"] != topic:
            raise bad(f"made for topic {shown(data['t'])}, not {topic!r}")
        if data["s"] != selection.fingerprint():
            raise bad("made for another selection (start the count again when the selection changes)")
        return cls(
            topic=topic,
            selection=data["s"],
            bucket_ms=data["b"],
            oldest_ms=data["o"],
            newest_ms=data["n"],
            total=data["T"],
            position=data["P"],
            partitions={row[0]: (row[1], row[2]) for row in rows},
        )


@dataclass(frozen=True)
class DeadLetterSummaryChunk:
    """One bounded chunk of a summary: figures for the records of this call only (a delta).

    The caller adds ``matched``, ``malformed``, ``counts`` and ``timeline`` of successive
    chunks up; ``total``, ``bucket_ms``, ``oldest_ms`` and ``newest_ms`` are fixed by the
    first chunk and ``position`` is cumulative. ``counts`` keys a missing value as ``(none)``;
    the timeline leaves out records without a timestamp (its keys are bucket starts, epoch ms
    as text, of the DLQ record's timestamp).
    """

    topic: str
    total: int
    read: int
    position: int
    complete: bool
    cursor: str | None
    bucket_ms: int
    oldest_ms: int | None
    newest_ms: int | None
    matched: int
    malformed: int
    counts: Mapping[str, Mapping[str, int]]
    timeline: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "total": self.total,
            "read": self.read,
            "position": self.position,
            "complete": self.complete,
            "cursor": self.cursor,
            "bucket_ms": self.bucket_ms,
            "oldest_ms": self.oldest_ms,
            "newest_ms": self.newest_ms,
            "matched": self.matched,
            "malformed": self.malformed,
            "counts": {name: dict(values) for name, values in self.counts.items()},
            "timeline": dict(self.timeline),
        }


def _start_scan(kafka_config: Mapping[str, Any], topic: str, selection: Selection) -> ScanCursor:
    """Fix a new scan's range (begin → end offsets now) and its bucket width, from the edge records' timestamps."""
    consumer = _consumer(kafka_config)
    try:
        ranges = _ranges(consumer, topic)
        deadline = time.monotonic() + LOOKUP_TIMEOUT_S
        firsts = _first_records(
            consumer,
            {(topic, p): low for p, (low, _) in ranges.items()},
            {(topic, p): h for p, (_, h) in ranges.items()},
            deadline,
        )
        lasts = _first_records(
            consumer,
            {(topic, p): max(low, high - 1) for p, (low, high) in ranges.items()},
            {(topic, p): h for p, (_, h) in ranges.items()},
            deadline,
        )
    finally:
        consumer.close()
    stamps = [ts for m in (*firsts.values(), *lasts.values()) if (ts := _timestamp(m)) is not None]
    oldest = min(stamps) if stamps else None
    newest = max(stamps) if stamps else None
    low_ms = oldest if selection.start_ms is None or oldest is None else max(oldest, selection.start_ms)
    high_ms = newest if selection.end_ms is None or newest is None else min(newest, selection.end_ms - 1)
    return ScanCursor(
        topic=topic,
        selection=selection.fingerprint(),
        bucket_ms=choose_bucket_ms(low_ms, high_ms),
        oldest_ms=oldest,
        newest_ms=newest,
        total=sum(high - low for low, high in ranges.values()),
        position=0,
        partitions={p: (low, high) for p, (low, high) in ranges.items()},
    )


def summarize(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    selection: Selection = Selection(),  # frozen: one shared default is safe
    cursor: str | None = None,
    max_records: int = 200_000,
    max_seconds: float = 1.0,
) -> DeadLetterSummaryChunk:
    """Count the next chunk of the DLQ, reading forward through headers only (values are never decoded).

    The first call (``cursor`` None) fixes the scan: each partition's range from its first to
    its end offset as they are now (records written later are not counted), and the timeline's
    bucket width (:func:`choose_bucket_ms` over the oldest and newest record timestamps, read
    from the partitions' first and last records, within the selection's time bounds). Each
    call reads until ``max_records`` or ``max_seconds``, whichever comes first, and returns a
    ``cursor`` to pass back with the same selection (``None`` once complete). The figures are
    this chunk's only: the caller adds chunks up. A cursor from another topic or selection,
    or not from here, raises :class:`InvalidSelection` naming ``cursor``.

    Reads are ``read_committed`` unless ``kafka_config`` says otherwise, so an aborted
    record is neither read nor counted, and a partition with a transaction still open
    cannot complete before it ends.
    """
    started = time.monotonic()
    scan = (
        _start_scan(kafka_config, topic, selection) if cursor is None else ScanCursor.decode(cursor, topic, selection)
    )
    nexts = {p: nxt for p, (nxt, end) in scan.partitions.items()}
    ends = {p: end for p, (_, end) in scan.partitions.items()}
    todo = {p for p in nexts if nexts[p] < ends[p]}
    bucket = scan.bucket_ms
    start_ms, end_ms = selection.start_ms, selection.end_ms
    by_time = start_ms is not None or end_ms is not None
    low_ms = -1 if start_ms is None else start_ms
    high_ms = _LONG_MAX if end_ms is None else end_ms
    tally: dict[tuple[Any, ...], int] = {}
    read = malformed = 0
    if todo and max_records > 0:
        # A consumer kept from the previous chunk of this scan stands at ``nexts`` already
        # (see :mod:`~airflow_kerr.kafka.scan_consumers`); a miss assigns a new one there.
        consumer = SCAN_CONSUMERS.take(scan_key(kafka_config, topic, scan.selection, scan.partitions))
        keep = False
        try:
            if consumer is None:
                consumer = _consumer(kafka_config)
                consumer.assign([TopicPartition(topic, p, nexts[p]) for p in sorted(todo)])
            deadline = started + max_seconds
            while todo and read < max_records:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                wanted = min(SCAN_BATCH, max_records - read, sum(ends[p] - nexts[p] for p in todo))
                messages: list[Any] = consumer.consume(wanted, min(left, 0.1))
                for message in messages:
                    if message.error() is not None:
                        continue
                    partition = message.partition()
                    offset = message.offset()
                    if partition not in todo:
                        continue
                    end = ends[partition]
                    if offset >= end:  # written after the scan began: the range is done
                        nexts[partition] = end
                        todo.discard(partition)
                        continue
                    offset += 1
                    nexts[partition] = offset
                    if offset >= end:
                        todo.discard(partition)
                    read += 1
                    headers = message.headers()
                    fast = plain_connect_of(headers)  # a plain Connect dead letter: no parse, as _raw_fields does
                    if fast is None:
                        exception_class, stage, source_topic, pipeline, header_set, bad = _raw_fields(headers)
                        if bad:
                            malformed += 1
                    else:
                        source_topic, stage, exception_class, pipeline, _ = fast
                        header_set = _CONNECT
                    kind, stamp = message.timestamp()
                    if kind == 0 or stamp < 0:
                        if by_time:
                            continue
                        slot = None
                    else:
                        if by_time and not low_ms <= stamp < high_ms:
                            continue
                        slot = stamp - stamp % bucket
                    key = (exception_class, stage, source_topic, pipeline, header_set, slot)
                    try:
                        tally[key] += 1
                    except KeyError:  # the first of its kind: a scan meets few
                        tally[key] = 1
                if not messages and todo:
                    for reached in consumer.position([TopicPartition(topic, p) for p in todo]):
                        if reached.offset >= 0 and reached.offset > nexts[reached.partition]:
                            nexts[reached.partition] = min(reached.offset, ends[reached.partition])
                        if nexts[reached.partition] >= ends[reached.partition]:
                            todo.discard(reached.partition)
            keep = bool(todo)
        finally:
            if keep and consumer is not None:
                following_partitions = {p: (nexts[p], ends[p]) for p in nexts}
                SCAN_CONSUMERS.put(scan_key(kafka_config, topic, scan.selection, following_partitions), consumer)
            elif consumer is not None:
                consumer.close()
    counts: dict[str, Counter[str]] = {name: Counter() for name in _TEXT_KEYS}
    timeline: Counter[str] = Counter()
    matched = 0
    for (exception_class, stage, source_topic, pipeline, header_set, slot), n in tally.items():
        values = (_text(exception_class), _stage_text(stage), _text(source_topic), _text(pipeline), header_set)
        if selection.by_values and not selection.matches_values(*values):
            continue
        matched += n
        for name, value in zip(_TEXT_KEYS, values, strict=True):
            counts[name][NONE_KEY if value is None else value] += n
        if slot is not None:
            timeline[str(slot)] += n
    position = scan.position + read
    complete = all(nexts[p] >= ends[p] for p in nexts)
    following = ScanCursor(
        topic=topic,
        selection=scan.selection,
        bucket_ms=bucket,
        oldest_ms=scan.oldest_ms,
        newest_ms=scan.newest_ms,
        total=scan.total,
        position=position,
        partitions={p: (nexts[p], ends[p]) for p in nexts},
    )
    return DeadLetterSummaryChunk(
        topic=topic,
        total=scan.total,
        read=read,
        position=position,
        complete=complete,
        cursor=None if complete else following.encode(),
        bucket_ms=bucket,
        oldest_ms=scan.oldest_ms,
        newest_ms=scan.newest_ms,
        matched=matched,
        malformed=malformed,
        counts={name: dict(values.most_common()) for name, values in counts.items()},
        timeline=dict(sorted(timeline.items(), key=lambda item: int(item[0]))),
    )


# --------------------------------------------------------------------------------------------- backlog


@dataclass(frozen=True)
class GroupBacklog:
    """How far a consumer group (a replay's) is behind on a DLQ, from its committed offsets only."""

    group: str
    committed: Mapping[int, int | None]
    unread: int
    total: int

    def to_dict(self) -> dict[str, Any]:
        """``committed`` is keyed by partition number as text (JSON object keys are text)."""
        return {
            "group": self.group,
            "committed": {str(p): offset for p, offset in sorted(self.committed.items())},
            "unread": self.unread,
            "total": self.total,
        }


def unread_for_group(
    kafka_config: Mapping[str, Any], topic: str, group_id: str, *, timeout_s: float = 10.0
) -> GroupBacklog:
    """Records of ``topic`` the group has not read: from its committed offset (or the first one, when it
    has none or one retention already deleted) to the end, summed over partitions.

    The group's offsets are read with an OffsetFetch from a consumer that never joins the
    group and never commits, so looking does not move the group nor rebalance its members.
    """
    scratch = _consumer(kafka_config)
    try:
        ranges = _ranges(scratch, topic, timeout_s)
    finally:
        scratch.close()
    settings = {**kafka_config, "group.id": group_id, "enable.auto.offset.store": False}
    lookup = offset_consumer(settings)
    try:
        found = lookup.committed([TopicPartition(topic, p) for p in ranges], timeout=timeout_s)
    finally:
        lookup.close()
    committed: dict[int, int | None] = dict.fromkeys(ranges)
    for tp in found:
        if tp.offset >= 0:
            committed[tp.partition] = tp.offset
    unread = 0
    for partition, (low, high) in ranges.items():
        offset = committed[partition]
        start = low if offset is None else min(max(offset, low), high)
        unread += high - start
    return GroupBacklog(
        group=group_id,
        committed=committed,
        unread=unread,
        total=sum(high - low for low, high in ranges.values()),
    )


# --------------------------------------------------------------------------------------------- display


def _cut(text: str | None) -> str | None:
    """Text shown whole up to :data:`MAX_SHOWN_CHARS`; beyond, cut with the length noted."""
    if text is None or len(text) <= MAX_SHOWN_CHARS:
        return text
    return f"{text[:MAX_SHOWN_CHARS]}\u2026 [cut: {len(text):,} characters in all]"


def _masked_text(text: str | None) -> str | None:
    return None if text is None else _cut(mask_secrets(text))


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class Payload:
    """A record key or value for display: text (JSON pretty-printed, secrets masked) or base64 for bytes.

    ``text`` is set when the bytes are UTF-8 without control characters (other than tab and
    line ends); ``json`` when that text is a JSON object or array, then shown indented. Other
    bytes are ``base64`` (standard alphabet). Only the first :data:`MAX_SHOWN_BYTES` are
    shown; ``truncated`` says so and ``bytes`` is the full size. ``None`` has both unset.
    """

    text: str | None
    base64: str | None
    json: bool
    bytes: int
    truncated: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_payload(raw: bytes | None) -> Payload:
    """How a sampled record's key or value is shown (see :class:`Payload`)."""
    if raw is None:
        return Payload(None, None, False, 0, False)
    size = len(raw)
    truncated = size > MAX_SHOWN_BYTES
    shown_bytes = raw[:MAX_SHOWN_BYTES]
    text: str | None = None
    for trim in range(4 if truncated else 1):  # a cut may split a UTF-8 sequence: drop up to 3 bytes of it
        try:
            text = shown_bytes[: len(shown_bytes) - trim].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    if text is None or _CONTROL.search(text):
        return Payload(None, base64.b64encode(shown_bytes).decode("ascii"), False, size, truncated)
    if not truncated and text.lstrip()[:1] in ("{", "["):
        try:
            document = json.loads(text)
            pretty = json.dumps(mask_secrets(document), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            pass
        else:
            return Payload(pretty, None, True, size, False)
    return Payload(mask_text(text), None, False, size, truncated)


@dataclass(frozen=True)
class SampledDeadLetter:
    """One dead letter as the view shows it, parsed by :func:`parse_dead_letter`, secrets masked."""

    partition: int
    offset: int
    timestamp_ms: int | None
    key: Payload
    value: Payload
    headers: tuple[tuple[str, str | None], ...]
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None
    stage: str | None
    exception_class: str | None
    exception_message: str | None
    stacktrace: str | None
    pipeline: str | None
    task_id: int | None
    format: str | None
    #: The dialect's name, ``"none"`` for a header-less record (``format`` is ``None`` then).
    header_set: str = HEADER_LESS
    #: The class Spring's error handler received; the consumer group (Spring, KIP-1191); the Schema Registry rule.
    wrapper_class: str | None = None
    group: str | None = None
    rule: str | None = None
    #: The original record's timestamp, when the dialect carries it (Spring).
    source_timestamp_ms: int | None = None

    @classmethod
    def from_message(cls, message: Any) -> SampledDeadLetter:
        headers = message.headers() or []
        letter = parse_dead_letter(
            headers,
            message.key(),
            message.value(),
            topic=message.topic(),
            partition=message.partition(),
            offset=message.offset(),
            timestamp=_timestamp(message),
        )
        # display(): Spring's big-endian numbers are shown as numbers, any other header as text.
        shown_headers = tuple(
            (name, MASK if is_sensitive_key(name) else _masked_text(display(name, value))) for name, value in headers
        )
        return cls(
            partition=message.partition(),
            offset=message.offset(),
            timestamp_ms=_timestamp(message),
            key=describe_payload(message.key()),
            value=describe_payload(message.value()),
            headers=shown_headers,
            source_topic=letter.source_topic,
            source_partition=letter.source_partition,
            source_offset=letter.source_offset,
            stage=None if letter.stage is None else letter.stage.value,
            exception_class=letter.exception_class,
            exception_message=_masked_text(letter.exception_message),
            stacktrace=_masked_text(letter.exception_stacktrace),
            pipeline=letter.connector_name,
            task_id=letter.task_id,
            format=None if letter.header_set is None else letter.header_set.value,
            header_set=header_set_name(letter.header_set),
            wrapper_class=letter.wrapper_class,
            group=letter.group,
            rule=None if letter.rule_name is None else f"{letter.rule_name} ({letter.rule_mode or 'mode unknown'})",
            source_timestamp_ms=letter.source_timestamp,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
            "key": self.key.to_dict(),
            "value": self.value.to_dict(),
            "headers": [{"name": name, "value": value} for name, value in self.headers],
            "source": {"topic": self.source_topic, "partition": self.source_partition, "offset": self.source_offset},
            "stage": self.stage,
            "exception_class": self.exception_class,
            "exception_message": self.exception_message,
            "stacktrace": self.stacktrace,
            "pipeline": self.pipeline,
            "task_id": self.task_id,
            "format": self.format,
            "header_set": self.header_set,
            "wrapper_class": self.wrapper_class,
            "group": self.group,
            "rule": self.rule,
            "source_timestamp_ms": self.source_timestamp_ms,
        }


@dataclass(frozen=True)
class DeadLetterSample:
    """The newest matching dead letters, newest first; ``complete`` when every record of the topic was examined."""

    records: tuple[SampledDeadLetter, ...]
    scanned: int
    complete: bool

    def to_dict(self) -> dict[str, Any]:
        return {"records": [r.to_dict() for r in self.records], "scanned": self.scanned, "complete": self.complete}


@dataclass
class _Window:
    """One partition's part of a backward read: ``[low, high)`` is read next; ``first`` bounds what is left."""

    first: int
    low: int
    high: int
    #: The next offset expected in this window (records before it were read).
    next: int = 0
    oldest_seen_ms: int | None = None
    done: bool = field(default=False)


def sample_dead_letters(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    selection: Selection = Selection(),  # frozen: one shared default is safe
    limit: int = 20,
    max_scan: int = 20_000,
    max_seconds: float = 2.0,
) -> DeadLetterSample:
    """The newest ``limit`` dead letters matching ``selection``, newest (by timestamp) first.

    Reads backwards from the end of each partition in windows that grow fourfold, until
    ``limit`` are found and no unread record can be newer than them (each partition's
    unread records are older than those read from it, as timestamps grow with offsets), or
    ``max_scan`` records were examined, or ``max_seconds`` passed. Only the records returned
    are decoded (:class:`SampledDeadLetter`); matching reads headers the way the summary does.
    """
    started = time.monotonic()
    deadline = started + max_seconds
    consumer = _consumer(kafka_config)
    windows: dict[int, _Window] = {}
    found: list[tuple[tuple[int, int, int], Any]] = []
    scanned = 0
    try:
        for partition, (low, high) in _ranges(consumer, topic).items():
            windows[partition] = _Window(first=low, low=high, high=high, done=high <= low)
        size = max(2 * limit, 100)
        while limit > 0 and scanned < max_scan and time.monotonic() < deadline:
            open_windows = [p for p, w in windows.items() if not w.done]
            if not open_windows:
                break
            if len(found) >= limit:
                kth = found[limit - 1][0][0]
                if all((windows[p].oldest_seen_ms or -1) <= kth for p in open_windows):
                    break
            share = max(1, min(size, (max_scan - scanned) // len(open_windows)))
            for p in open_windows:
                window = windows[p]
                window.high = window.low
                window.low = max(window.first, window.high - share)
            scanned += _read_windows(consumer, topic, windows, open_windows, selection, found, deadline)
            found.sort(key=lambda item: item[0], reverse=True)
            del found[limit:]
            size *= 4
    finally:
        consumer.close()
    complete = all(w.done for w in windows.values())
    records = tuple(SampledDeadLetter.from_message(message) for _, message in found[: max(0, limit)])
    return DeadLetterSample(records=records, scanned=scanned, complete=complete)


def _read_windows(
    consumer: Consumer,
    topic: str,
    windows: Mapping[int, _Window],
    partitions: list[int],
    selection: Selection,
    found: list[tuple[tuple[int, int, int], Any]],
    deadline: float,
) -> int:
    """Read each partition's current window, adding matches to ``found``; the records examined.

    A window read whole marks its partition done when it reached the partition's first
    offset; one cut short by the deadline leaves the partition unfinished.
    """
    todo = {p: windows[p].high for p in partitions if windows[p].low < windows[p].high}
    for p in partitions:
        if p not in todo:
            windows[p].done = True
    if not todo:
        return 0
    for p in todo:
        windows[p].next = windows[p].low
    consumer.assign([TopicPartition(topic, p, windows[p].low) for p in todo])
    examined = 0
    try:
        while todo and time.monotonic() < deadline:
            left = sum(todo[p] - max(windows[p].low, windows[p].next) for p in todo)
            wait = min(0.1, max(0.0, deadline - time.monotonic()))
            messages: list[Any] = consumer.consume(max(1, min(SCAN_BATCH, left)), wait)
            for message in messages:
                if message.error() is not None:
                    continue
                p, offset = message.partition(), message.offset()
                if p not in todo or offset >= todo[p] or offset < windows[p].low:
                    continue
                examined += 1
                stamp = _timestamp(message)
                window = windows[p]
                window.next = offset + 1
                if stamp is not None and (window.oldest_seen_ms is None or stamp < window.oldest_seen_ms):
                    window.oldest_seen_ms = stamp
                if offset + 1 >= todo[p]:
                    todo.pop(p)
                    if todo:  # its later records were read in an earlier window: stop fetching them
                        consumer.incremental_unassign([TopicPartition(topic, p)])
                fields = dead_letter_fields(message.headers())
                if selection.matches_time(stamp) and selection.matches_values(
                    fields.exception_class, fields.stage, fields.source_topic, fields.pipeline, fields.header_set
                ):
                    found.append(((-1 if stamp is None else stamp, offset, -p), message))
            if not messages and todo:
                for position in consumer.position([TopicPartition(topic, p) for p in todo]):
                    if position.offset >= todo[position.partition]:
                        todo.pop(position.partition)
    finally:
        consumer.unassign()
    for p in partitions:
        window = windows[p]
        if p not in todo and window.low <= window.first:
            window.done = True
    return examined
