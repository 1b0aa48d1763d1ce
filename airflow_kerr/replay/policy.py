"""What a DLQ replay does with one dead letter: skip it, replay it, drop it, or park it.

Pure decisions with no Kafka client, so every rule is unit-tested without a broker.
A replayed record is the original record (error headers removed by the core parser)
with lineage headers that make loops visible: ``__kerr.replay.count`` travels with the
record, so when a replayed record fails again and comes back to the DLQ, the next
replay sees how often it went round and parks it instead of looping.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from airflow_kerr.errors import (
    DeadLetterRecord,
    Header,
    HeaderSet,
    Stage,
    exception_class_name,
    exception_message,
    parse_dead_letter,
)
from airflow_kerr.errors.dead_letter import (
    INT64_MAX,
    TOPIC_NAME_RULE,
    is_topic_name,
    shown,
)

LINEAGE_PREFIX = "__kerr.replay."
HEADER_REPLAY_COUNT = LINEAGE_PREFIX + "count"
HEADER_REPLAY_SOURCE = LINEAGE_PREFIX + "source"
HEADER_REPLAY_RUN = LINEAGE_PREFIX + "run"
HEADER_PARKED_REASON = LINEAGE_PREFIX + "parked.reason"

#: Replays of one record before it is parked instead of replayed again.
DEFAULT_MAX_REPLAYS = 3
PARKING_SUFFIX = ".parked"
#: Longest parked-reason text: a fix's exception message may quote a whole record, and the reason
#: header must never make the parked record too large to write (which would stop the replay).
MAX_REASON_CHARS = 1000


class Action(StrEnum):
    """What happens to one DLQ record."""

    #: Not selected: read and committed past, nothing written.
    SKIP = "skip"
    #: Written to its target topic with lineage headers.
    REPLAY = "replay"
    #: The fix function returned None: deliberately not replayed.
    DROP = "drop"
    #: Written to the parking topic with a reason header, never to a target.
    PARK = "park"


class ParkReason(StrEnum):
    """Why a selected record was parked; the reason header starts with this name."""

    #: An error-context header the replay would rely on is garbage (see ``DeadLetterRecord.malformed_headers``).
    MALFORMED_HEADERS = "malformed_headers"
    MAX_REPLAYS = "max_replays"
    NO_SOURCE_TOPIC = "no_source_topic"
    NO_CONTENT = "no_content"
    FIX_FAILED = "fix_failed"
    FORBIDDEN_TARGET = "forbidden_target"
    #: The target (from a fix or the override) is not a name Kafka accepts for a topic.
    INVALID_TARGET = "invalid_target"
    TARGET_NOT_ALLOWED = "target_not_allowed"
    UNKNOWN_TARGET = "unknown_target"
    #: The record (replayed or parked) is larger than the producer or the topic accepts: parked without its value.
    TOO_LARGE = "too_large"
    #: A dead letter that points at its original (KIP-1191 without a copy), whose original cannot be read.
    SOURCE_GONE = "source_gone"
    #: A Schema Registry rule failed on WRITE: the DLQ holds the value before serialization, not the topic's bytes.
    UNSERIALIZED = "unserialized"
    #: With a fix and a registry format: the key or value could not be decoded for the fix (the deserializer's text).
    UNDECODABLE = "undecodable"
    #: With a fix and a registry format: the fixed key or value does not fit its schema (the serializer's text).
    DOES_NOT_FIT = "does_not_fit"


class ParkRecord(Exception):
    """Raised by a step around the fix (decoding before it, encoding after it) to park the record.

    The user's own fix raising anything parks the record ``fix_failed``; this lets the
    registry step say more precisely why (``undecodable``, ``does_not_fit``).
    """

    def __init__(self, reason: ParkReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class StopReplay(Exception):
    """Raised by a step around the fix when no record can be decided (the registry is out of reach).

    Never parks the record: it ends the run before the batch is written, so nothing of it
    is committed and the next run reads it again.
    """


class ReplayRecord:
    """What a fix function receives and returns (or ``None`` to drop the record).

    ``topic`` is the target (the source topic from the DLQ headers, or the override);
    ``headers`` are the original headers without error or lineage headers. ``timestamp``
    is ``None`` so the producer stamps the write: an original timestamp older than the
    target's retention would be deleted at once, so a fix that wants event time sets it
    from ``dead_letter.timestamp`` on purpose. ``dead_letter`` is the parsed DLQ record,
    for reading the failure (stage, exception) while repairing.

    A plain class rather than a dataclass so that ``dead_letter`` can be parsed on first
    read: the replay's fast path hands a fix a record built from one pass over the headers,
    and most fixes read only ``value``, so parsing every record's ten error headers (about
    6 µs) would be most of what the replay adds to the fix's own work.
    """

    __slots__ = ("_dead_letter", "_unparsed", "headers", "key", "timestamp", "topic", "value")

    def __init__(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[Header],
        dead_letter: DeadLetterRecord,
        timestamp: int | None = None,
    ) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.headers = headers
        self.timestamp = timestamp
        self._dead_letter: DeadLetterRecord | None = dead_letter
        self._unparsed: UnparsedLetter | None = None

    @classmethod
    def unparsed(
        cls, topic: str, key: bytes | None, value: bytes | None, headers: list[Header], letter: UnparsedLetter
    ) -> ReplayRecord:
        """A record whose ``dead_letter`` is parsed from ``letter`` when it is first read."""
        record = cls.__new__(cls)
        record.topic, record.key, record.value, record.headers, record.timestamp = topic, key, value, headers, None
        record._dead_letter, record._unparsed = None, letter
        return record

    @property
    def dead_letter(self) -> DeadLetterRecord:
        """The DLQ record this one was read from, parsed."""
        letter = self._dead_letter
        if letter is None:
            headers, key, value, topic, partition, offset, timestamp = self._unparsed  # type: ignore[misc]
            letter = self._dead_letter = parse_dead_letter(
                headers, key, value, topic=topic, partition=partition, offset=offset, timestamp=timestamp
            )
        return letter

    @dead_letter.setter
    def dead_letter(self, letter: DeadLetterRecord) -> None:
        self._dead_letter = letter

    def _fields(self) -> tuple[object, ...]:
        return (self.topic, self.key, self.value, self.headers, self.dead_letter, self.timestamp)

    def __eq__(self, other: object) -> bool:
        if type(other) is not ReplayRecord:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaces

    def __repr__(self) -> str:
        return (
            f"ReplayRecord(topic={self.topic!r}, key={self.key!r}, value={self.value!r}, headers={self.headers!r}, "
            f"dead_letter={self.dead_letter!r}, timestamp={self.timestamp!r})"
        )


#: A DLQ record as read, not yet parsed: headers, key, value, DLQ topic, partition, offset and timestamp.
UnparsedLetter = tuple[Sequence[Header], bytes | None, bytes | None, str, int, int, int | None]

FixFn = Callable[[ReplayRecord], ReplayRecord | None]

#: One record to write, in ``Producer.produce``'s argument order: topic, value, key, headers and timestamp
#: (None: the producer stamps it). What the engine hands the writer: a tuple is cheaper to build and unpack
#: per record than an object, and it holds nothing the writer does not send.
Outgoing = tuple[str, bytes | None, bytes | None, list[Header], int | None]


def outgoing(record: ReplayRecord) -> Outgoing:
    """The record as the writer produces it."""
    return (record.topic, record.value, record.key, record.headers, record.timestamp)


@dataclass(frozen=True)
class ReplayPolicy:
    """Where selected records go, and the safety rules that decide when they are parked instead."""

    dlq_topic: str
    run_id: str
    parking_topic: str
    target_topic: str | None = None
    target_allowlist: re.Pattern[str] | None = None
    max_replays: int = DEFAULT_MAX_REPLAYS
    fix: FixFn | None = None
    #: Whether a topic exists; the engine answers from broker metadata, cached.
    topic_exists: Callable[[str], bool] = field(default=lambda topic: True)

    def forbidden_reason(self, topic: str) -> tuple[ParkReason, str] | None:
        """Why replay must never write to ``topic``, or ``None`` when it may.

        The name is checked first: librdkafka refuses to create a topic object for an invalid
        name (a ``RuntimeError`` from the metadata look-up), which would end the whole run.
        """
        if not is_topic_name(topic):
            return ParkReason.INVALID_TARGET, f"target {shown(topic)} is not a topic name ({TOPIC_NAME_RULE})"
        if topic.startswith("__"):
            return ParkReason.FORBIDDEN_TARGET, f"target {topic!r} is an internal topic (starts with '__')"
        if topic in (self.dlq_topic, self.parking_topic):
            return ParkReason.FORBIDDEN_TARGET, f"target {topic!r} is the DLQ or the parking topic itself"
        if self.target_allowlist is not None and not self.target_allowlist.fullmatch(topic):
            return (
                ParkReason.TARGET_NOT_ALLOWED,
                f"target {topic!r} does not match target_allowlist {self.target_allowlist.pattern!r}",
            )
        if not self.topic_exists(topic):
            return ParkReason.UNKNOWN_TARGET, f"target topic {topic!r} does not exist"
        return None

    def refusal(self, topic: str) -> tuple[ParkReason, str] | None:
        """:meth:`forbidden_reason`, decided once per topic (a run writes to few topics, many times)."""
        try:
            return self._refusals[topic]
        except KeyError:
            self._refusals[topic] = refused = self.forbidden_reason(topic)
            return refused

    @cached_property
    def _refusals(self) -> dict[str, tuple[ParkReason, str] | None]:
        return {}

    @cached_property
    def run_header(self) -> Header:
        return (HEADER_REPLAY_RUN, self.run_id.encode())

    @cached_property
    def source_prefix(self) -> bytes:
        """The start of a ``__kerr.replay.source`` value, ``<dlq topic>/``: only partition and offset vary."""
        return f"{self.dlq_topic}/".encode()


@dataclass(slots=True)
class Decision:
    """The outcome for one selected record: the record to write (replay or park), or a drop.

    ``detail`` says why a record is parked (the text after the reason in its reason header).
    """

    action: Action
    record: ReplayRecord | None = None
    reason: ParkReason | None = None
    detail: str | None = None


def replay_count(headers: Sequence[Header]) -> int:
    """How often the record was replayed before (the last ``__kerr.replay.count`` wins; garbage counts 0)."""
    return split_lineage(headers)[1]


def split_lineage(headers: Sequence[Header]) -> tuple[list[Header], int]:
    """The headers without lineage headers, and the replay count the lineage headers carried."""
    kept: list[Header] = []
    count = 0
    for header in headers:
        name = header[0]
        if not name.startswith(LINEAGE_PREFIX):
            kept.append(header)
        elif name == HEADER_REPLAY_COUNT:
            try:
                count = int(header[1] or b"")
            except ValueError:
                count = 0
    return kept, count


def decide(letter: DeadLetterRecord, raw_headers: Sequence[Header], policy: ReplayPolicy) -> Decision:
    """Replay, drop or park one selected record; ``raw_headers`` are the DLQ record's headers as read.

    Whatever the record carries, the outcome is a decision, never an exception: a record whose
    error headers are garbage, whose fix raised or returned something unusable, or whose target
    may not or cannot be written is parked with the reason.
    """
    headers, count = split_lineage(letter.headers)
    if letter.malformed_headers:
        detail = "; ".join(f"{name}: {problem}" for name, problem in letter.malformed_headers.items())
        return park(letter, raw_headers, policy, ParkReason.MALFORMED_HEADERS, detail, count)
    if count >= policy.max_replays:
        return park(letter, raw_headers, policy, ParkReason.MAX_REPLAYS, f"replayed {count} times already", count)
    target = policy.target_topic or letter.source_topic
    if not target:
        detail = "the DLQ record names no source topic and no target_topic override is set"
        return park(letter, raw_headers, policy, ParkReason.NO_SOURCE_TOPIC, detail, count)
    if letter.key is None and letter.value is None:
        detail = "the DLQ record has neither key nor value, and does not name its original's partition and offset"
        return park(letter, raw_headers, policy, ParkReason.NO_CONTENT, detail, count)
    if policy.fix is None and _serialized_by_the_fix(letter):
        detail = (
            f"Schema Registry rule {letter.rule_name!r} failed on WRITE, so the DLQ holds the value before it was "
            "serialized (confluent-kafka's DlqAction writes it as JSON, tagged fields redacted), not the bytes "
            f"{target!r} takes; replay it with a fix that serializes it"
        )
        return park(letter, raw_headers, policy, ParkReason.UNSERIALIZED, detail, count)
    record: ReplayRecord | None = ReplayRecord(target, letter.key, letter.value, headers, letter)
    if policy.fix is not None:
        record, problem = apply_fix(record, policy.fix)  # type: ignore[arg-type]
        if problem is not None:
            return park(letter, raw_headers, policy, problem[0], problem[1], count)
        if record is None:
            return Decision(Action.DROP)
    assert record is not None
    refused = policy.refusal(record.topic)
    if refused is not None:
        return park(letter, raw_headers, policy, refused[0], refused[1], count)
    record.headers += _lineage(letter, policy, count + 1)
    return Decision(Action.REPLAY, record)


def _serialized_by_the_fix(letter: DeadLetterRecord) -> bool:
    """Whether the dead letter is a Schema Registry rule's on WRITE: its value was never serialized for the topic.

    On READ (and the read-side migrations) the rule action copies the wire bytes as they were
    consumed, which go back as they are.
    """
    return letter.header_set is HeaderSet.SCHEMA_REGISTRY and (letter.rule_mode or "").upper() == "WRITE"


#: Why a fix's outcome parks the record: the reason and the text after it in the reason header.
Problem = tuple[ParkReason, str]


def apply_fix(record: ReplayRecord, fix: FixFn) -> tuple[ReplayRecord | None, Problem | None]:
    """The fix's result with any lineage headers it set removed (``None``: drop), or why it parks the record.

    A fix that raises, or returns something the producer cannot write, parks the record
    ``fix_failed`` with that as the detail: one bad repair must never end the run. A step
    around the fix parks it with its own reason (:class:`ParkRecord`); only
    :class:`StopReplay` ends the run.
    """
    try:
        fixed = fix(record)
    except StopReplay:
        raise
    except ParkRecord as parked:
        return None, (parked.reason, parked.detail)
    except Exception as error:
        return None, (ParkReason.FIX_FAILED, f"{exception_class_name(error)}: {exception_message(error)}")
    if fixed is None:
        return None, None
    problem = _unusable(fixed)
    if problem is not None:
        return None, (ParkReason.FIX_FAILED, problem)
    fixed.headers = split_lineage(fixed.headers)[0]
    return fixed, None


def _unusable(record: object) -> str | None:
    """What makes a fix's result impossible to produce, or ``None``: caught here, it parks one record.

    Left to the producer, a wrong type would raise inside the transaction and end the run.
    A text key or value is encoded here as UTF-8 (as the producer would), so one that cannot
    be encoded parks the record too.
    """
    if not isinstance(record, ReplayRecord):
        return f"the fix returned {type(record).__name__}, expected a ReplayRecord or None"
    if not isinstance(record.topic, str):
        return f"the fix returned a topic of type {type(record.topic).__name__}, expected str"
    for name in ("key", "value"):
        part = getattr(record, name)
        # What a fix returns nearly always (bytes or None) is settled here without a call.
        if part is not None and type(part) is not bytes:
            problem = _coerce_part(record, name, part)
            if problem is not None:
                return problem
    timestamp = record.timestamp
    if timestamp is not None and (type(timestamp) is not int or not 0 <= timestamp <= INT64_MAX):
        return f"the fix returned timestamp={shown(timestamp)}, expected None or epoch milliseconds (an int >= 0)"
    headers = record.headers
    if not isinstance(headers, (list, tuple)):
        return _bad_headers(headers)
    for h in headers:  # a loop, not all(<generator>): this runs for every fixed record
        if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str)):
            return _bad_headers(headers)
        if h[1] is not None and not isinstance(h[1], bytes):
            return _bad_headers(headers)
    return None


def _coerce_part(record: ReplayRecord, name: str, part: object) -> str | None:
    """Encode a text key or value as UTF-8 in place, or say why ``part`` cannot be produced.

    Apart from :func:`_unusable` because only a fix that returns something other than
    bytes or None reaches it: the common record pays no call for it.
    """
    if isinstance(part, str):
        try:
            setattr(record, name, part.encode("utf-8"))
        except UnicodeEncodeError as error:
            return f"the fix returned a {name} that is not UTF-8 text: {error}"
        return None
    if not isinstance(part, bytes):  # a bytes subclass goes to the producer as it is
        return f"the fix returned a {name} of type {type(part).__name__}, expected bytes or None"
    return None


def _bad_headers(headers: object) -> str:
    return f"the fix returned headers={shown(headers)}, expected a list of (str, bytes or None) pairs"


#: ``__kerr.replay.count`` headers for the counts a replay writes most, built once.
COUNT_HEADERS: tuple[Header, ...] = tuple((HEADER_REPLAY_COUNT, str(n).encode()) for n in range(16))


def _lineage(letter: DeadLetterRecord, policy: ReplayPolicy, count: int) -> list[Header]:
    return lineage_headers(policy, count, f"{letter.topic}/{letter.partition}/{letter.offset}".encode())


def lineage_headers(policy: ReplayPolicy, count: int, source: bytes) -> list[Header]:
    """The three lineage headers: the replay count, where in the DLQ the record was read, and the run."""
    return [
        COUNT_HEADERS[count] if 0 <= count < 16 else (HEADER_REPLAY_COUNT, str(count).encode()),
        (HEADER_REPLAY_SOURCE, source),
        policy.run_header,
    ]


#: A summary breakdown key: action, topic written to (None for a drop), stage, exception class, park reason.
BreakdownKey = tuple[Action, str | None, Stage | None, str | None, ParkReason | None]


def with_original(letter: DeadLetterRecord, original: Any) -> DeadLetterRecord:
    """A pointer dead letter with its original's key, value and headers, read at its coordinates.

    The original's headers are its own (a replayed original carries its lineage, so the loop
    guard still counts); the dead letter's error headers stay in ``error_headers``.
    """
    return replace(letter, key=original.key(), value=original.value(), headers=tuple(original.headers() or ()))


def park_source_gone(
    letter: DeadLetterRecord, raw_headers: Sequence[Header], policy: ReplayPolicy, detail: str
) -> Decision:
    """Park a pointer whose original cannot be read, with why and where (``detail``), as it was read."""
    return park(letter, raw_headers, policy, ParkReason.SOURCE_GONE, detail, replay_count(raw_headers))


def park_too_large(
    letter: DeadLetterRecord, raw_headers: Sequence[Header], policy: ReplayPolicy, detail: str
) -> Decision:
    """Park a record too large to write without its key and value: headers, coordinates and the reason only.

    Its value stays in the DLQ record at the coordinates the lineage header names, so nothing
    is lost. The key goes too: a key without a value is a tombstone to a compacted topic, so a
    replay of the parking topic must park this copy again (``no_content``), never write it.
    """
    decision = park(letter, raw_headers, policy, ParkReason.TOO_LARGE, detail, replay_count(raw_headers))
    assert decision.record is not None
    decision.record.key = decision.record.value = None
    return decision


def park(
    letter: DeadLetterRecord,
    raw_headers: Sequence[Header],
    policy: ReplayPolicy,
    reason: ParkReason,
    detail: str,
    count: int,
) -> Decision:
    """The DLQ record as read (error headers kept for diagnosis) plus the reason and lineage headers.

    Its count stays as it was (it was not replayed); like a replayed record it gets a new timestamp,
    so retention keeps it for the people who will look at it.
    """
    if len(detail) > MAX_REASON_CHARS:
        detail = f"{detail[: MAX_REASON_CHARS - 1]}\u2026"
    headers = split_lineage(raw_headers)[0] + _lineage(letter, policy, count)
    # backslashreplace: an exception message may hold lone surrogates, which UTF-8 cannot encode.
    headers.append((HEADER_PARKED_REASON, f"{reason}: {detail}".encode("utf-8", errors="backslashreplace")))
    parked = ReplayRecord(policy.parking_topic, letter.key, letter.value, headers, letter)
    return Decision(Action.PARK, parked, reason, detail)
