"""Which dead letters a read takes: one :class:`Selection` for the DLQ view's counts and samples and for the replay.

The view reads it from a page's query (:meth:`Selection.from_query`), the replay from a
DAG's settings (:meth:`~airflow_kerr.replay.options.ReplayOptions.build`); both check records
with the same rules, so a filter means the same in both places. How a time is read
(:func:`parse_time`, :func:`epoch_ms`) and what a ``[start, end)`` window takes
(:func:`in_window`) live here too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_kerr.errors.config import LONG_MAX, ConfigProblem, parse_integer
from airflow_kerr.errors.dead_letter import DeadLetterRecord, HeaderSet
from airflow_kerr.errors.dialects import HEADER_LESS, header_set_name
from airflow_kerr.errors.stage import Stage
from airflow_kerr.inspection.fields import STAGE_NAMES
from airflow_kerr.kafka.offset_spans import OffsetSpans, hull, in_spans, spans_to_fields

#: The key under which records without a value count (no exception class, stage, source topic or pipeline).
NONE_KEY = "(none)"
#: The names a dialect is counted and selected by: each header set's, and "none" for header-less records.
HEADER_SET_NAMES = (*(h.value for h in HeaderSet), HEADER_LESS)
#: The text fields of a selection, in the order a summary counts by them.
TEXT_KEYS = ("exception_class", "stage", "source_topic", "pipeline", "header_set")
#: Query keys of a selection's times, with their aliases (the page sends ``start``/``end``).
_TIME_KEYS = {"start_ms": ("start_ms", "start"), "end_ms": ("end_ms", "end")}
_TIME_ACCEPTED = (
    "expected epoch milliseconds (e.g. 1795250000000) or an ISO-8601 time "
    "(e.g. 2026-11-23T10:00:00Z; without a zone it is UTC)"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class InvalidSelection(ValueError):
    """A selection or cursor the view cannot use: one line per problem, naming the key, its value and what works."""

    def __init__(self, problems: Iterable[ConfigProblem]) -> None:
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


# --------------------------------------------------------------------------------------------- shared time rules


def epoch_ms(moment: datetime) -> int:
    """Milliseconds since the epoch, exactly (integer arithmetic, no float rounding); naive means UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def parse_time(text: str) -> int | None:
    """Epoch milliseconds from digits or an ISO-8601 time (naive means UTC); ``None`` when it is neither.

    Digits follow the integer rule of :func:`~airflow_kerr.errors.config.parse_integer`
    (0 to int64); the caller bounds the result further if it must.
    """
    number = parse_integer(text, 0, LONG_MAX)
    if number is not None:
        return number
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return epoch_ms(moment)


def in_window(timestamp_ms: int | None, start_ms: int | None, end_ms: int | None) -> bool:
    """Whether ``timestamp_ms`` is inside ``[start_ms, end_ms)``; a record without one is in no bounded window."""
    if start_ms is None and end_ms is None:
        return True
    if timestamp_ms is None:
        return False
    return (start_ms is None or timestamp_ms >= start_ms) and (end_ms is None or timestamp_ms < end_ms)


# --------------------------------------------------------------------------------------------- the selection


@dataclass(frozen=True)
class Selection:
    """Which dead letters a count takes, a sample shows or a replay writes back; every criterion set must match.

    One class for the DLQ view and the replay, so a filter means the same thing on the page
    and in a replay's settings. An empty criterion matches everything.

    - **Exact values** (sets; any member matches): ``exception_classes``, ``stages`` (Connect's
      stage names), ``source_topics``, ``pipelines`` (Connect's connector name, which our job
      sets to its pipeline name) and ``header_sets`` (a :class:`HeaderSet` value, or ``"none"``
      for header-less records). :data:`NONE_KEY` takes the records without that value, so a
      count's ``(none)`` row can be selected too.
    - ``exception_pattern``: a regular expression searched in the exception class (a record
      without one is searched as ``""``).
    - ``start_ms`` (inclusive) and ``end_ms`` (exclusive) bound the DLQ record's timestamp; a
      record without one is in no bounded window. ``start_offset`` and ``end_offset`` bound its
      offset the same way, on each DLQ partition.
    - ``headers``: each must be present with exactly this UTF-8 value, looked up among the
      original and the error headers. Only a replay parses every header, so the view's reads
      refuse a selection that sets it (:meth:`refuse_headers`).
    - ``dlq_offsets``: exactly these DLQ offsets, per partition (sorted disjoint ``[start, end)``
      spans, :mod:`airflow_kerr.kafka.offset_spans`): the dead letters one job run wrote, as its
      delivery reports named them. A partition not listed has none; an empty mapping takes nothing.
    """

    exception_classes: frozenset[str] = frozenset()
    exception_pattern: re.Pattern[str] | None = None
    stages: frozenset[str] = frozenset()
    source_topics: frozenset[str] = frozenset()
    pipelines: frozenset[str] = frozenset()
    header_sets: frozenset[str] = frozenset()
    start_ms: int | None = None
    end_ms: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    dlq_offsets: OffsetSpans | None = None
    #: Whether any value criterion (the sets or the pattern) is set; else every record matches on values.
    by_values: bool = field(init=False, repr=False, compare=False)
    #: Whether no criterion is set, so every record matches (the replay then skips :meth:`matches`).
    everything: bool = field(init=False, repr=False, compare=False)
    #: Whether a value criterion :meth:`matches` does not test in line is set (classes, pipelines, dialects).
    _other_values: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Work out the flags :meth:`matches` reads once per record.

        Fields rather than cached properties: an attribute added to the instance after
        ``__init__`` makes CPython drop its fast attribute reads, and :meth:`matches` reads a
        dozen attributes per record.
        """
        other = bool(self.exception_classes or self.pipelines or self.header_sets)
        by_values = bool(other or self.exception_pattern is not None or self.stages or self.source_topics)
        bounds = (self.start_ms, self.end_ms, self.start_offset, self.end_offset)
        everything = (
            not by_values and all(bound is None for bound in bounds) and not self.headers and self.dlq_offsets is None
        )
        object.__setattr__(self, "by_values", by_values)
        object.__setattr__(self, "everything", everything)
        object.__setattr__(self, "_other_values", other)

    @classmethod
    def from_query(cls, mapping: Mapping[str, str | None]) -> Selection:
        """Build from a page's query values, checking each; every problem is raised at once.

        Keys are :data:`TEXT_KEYS` (one value each) and the times (``start``/``end``, or
        ``start_ms``/``end_ms``); other keys are not the selection's (the route's ``cursor``,
        ``limit``) and are ignored. Empty or blank values are unset. Times are epoch
        milliseconds or ISO-8601; a stage is a Connect stage name (any case) or ``(none)``.
        """
        problems: list[ConfigProblem] = []
        texts: dict[str, str | None] = {}
        for key in TEXT_KEYS:
            raw = mapping.get(key)
            texts[key] = (raw.strip() or None) if isinstance(raw, str) else None
        texts["stage"] = _stage_of(texts["stage"], mapping, problems)
        texts["header_set"] = _header_set_of(texts["header_set"], mapping, problems)
        start, end = _times_of(mapping, problems)
        if problems:
            raise InvalidSelection(problems)

        def one(key: str) -> frozenset[str]:
            value = texts[key]
            return frozenset() if value is None else frozenset((value,))

        return cls(
            exception_classes=one("exception_class"),
            stages=one("stage"),
            source_topics=one("source_topic"),
            pipelines=one("pipeline"),
            header_sets=one("header_set"),
            start_ms=start,
            end_ms=end,
        )

    def matches(self, letter: DeadLetterRecord) -> bool:
        """Whether a parsed dead letter meets every criterion, cheapest checks first.

        The replay calls this once per record: the replay's usual criteria (topics, stages,
        times, offsets) are tested in line, and the rest only when one of them is set.
        """
        if self.source_topics:
            topic = letter.source_topic
            if (NONE_KEY if topic is None else topic) not in self.source_topics:
                return False
        if self.stages:
            stage = letter.stage  # a Stage is the str of its name
            if (NONE_KEY if stage is None else stage) not in self.stages:
                return False
        if not in_window(letter.timestamp, self.start_ms, self.end_ms):  # parsing made "none" (negative) None
            return False
        if (
            self.start_offset is not None or self.end_offset is not None or self.dlq_offsets is not None
        ) and not self.matches_offset(letter.offset, letter.partition):
            return False
        if self.exception_pattern is not None and self.exception_pattern.search(letter.exception_class or "") is None:
            return False
        if self._other_values and not self._other_values_match(letter):
            return False
        return not self.headers or _headers_match(letter, self.headers)

    def _other_values_match(self, letter: DeadLetterRecord) -> bool:
        """The exact exception class, pipeline and dialect criteria of :meth:`matches`."""
        return (
            (not self.exception_classes or _or_none(letter.exception_class) in self.exception_classes)
            and (not self.pipelines or _or_none(letter.connector_name) in self.pipelines)
            and (not self.header_sets or header_set_name(letter.header_set) in self.header_sets)
        )

    def matches_values(
        self,
        exception_class: str | None,
        stage: str | None,
        source_topic: str | None,
        pipeline: str | None,
        header_set: str,
    ) -> bool:
        """The value part of :meth:`matches`, on the values a summary counts by (``None`` for a missing one)."""
        for wanted, value in (
            (self.exception_classes, exception_class),
            (self.stages, stage),
            (self.source_topics, source_topic),
            (self.pipelines, pipeline),
            (self.header_sets, header_set),
        ):
            if wanted and (NONE_KEY if value is None else value) not in wanted:
                return False
        return self.exception_pattern is None or self.exception_pattern.search(exception_class or "") is not None

    def matches_time(self, timestamp_ms: int | None) -> bool:
        """The time part of :meth:`matches`: inside ``[start_ms, end_ms)``; no timestamp matches no bound.

        A negative timestamp is Kafka's "none" (a record written without one), so it counts as none.
        """
        return in_window(_stamp(timestamp_ms), self.start_ms, self.end_ms)

    def matches_offset(self, offset: int | None, partition: int | None = None) -> bool:
        """The offset part of :meth:`matches`: inside ``[start_offset, end_offset)`` (no offset counts as -1), and
        among ``dlq_offsets`` of ``partition`` when those are set."""
        at = -1 if offset is None else offset
        if self.dlq_offsets is not None:
            spans = self.dlq_offsets.get(-1 if partition is None else partition)
            if not spans or not in_spans(spans, at):
                return False
        if self.start_offset is None and self.end_offset is None:
            return True
        return (self.start_offset is None or at >= self.start_offset) and (
            self.end_offset is None or at < self.end_offset
        )

    def offset_window(self, low: int, high: int, partition: int | None = None) -> tuple[int, int]:
        """A partition's ``[low, high)`` narrowed to ``[start_offset, end_offset)`` and to the span of its
        ``dlq_offsets`` (none listed: empty); an empty result is ``(x, x)``.

        Reads that know their partitions' ranges narrow them once with this; within the window,
        only ``dlq_offsets`` still needs a test per record (:meth:`offsets_of`).
        """
        start = low if self.start_offset is None else max(low, self.start_offset)
        end = high if self.end_offset is None else min(high, self.end_offset)
        if self.dlq_offsets is not None:
            covered = hull(self.dlq_offsets.get(-1 if partition is None else partition, ()))
            if covered is None:
                return start, start
            start, end = max(start, covered[0]), min(end, covered[1])
        return start, max(start, end)

    def offsets_of(self, partition: int) -> tuple[tuple[int, int], ...] | None:
        """The spans a record of ``partition`` must be in, or ``None`` when the selection takes any offset."""
        if self.dlq_offsets is None:
            return None
        return self.dlq_offsets.get(partition, ())

    def refuse_headers(self, read: str) -> None:
        """Raise :class:`InvalidSelection` naming ``headers`` when it is set: ``read`` parses only the error headers."""
        if self.headers:
            raise InvalidSelection(
                [
                    ConfigProblem(
                        "headers",
                        dict(self.headers),
                        f"{read} reads only the error headers; select by exception class, stage, source topic, "
                        "pipeline, header set, time or offset (a replay selects by any header)",
                    )
                ]
            )

    def to_dict(self) -> dict[str, Any]:
        """The criteria as plain JSON values (sets sorted, the pattern as its text), unset ones as ``None``."""
        return {
            "exception_classes": sorted(self.exception_classes) or None,
            "exception_pattern": None if self.exception_pattern is None else self.exception_pattern.pattern,
            "stages": sorted(self.stages) or None,
            "source_topics": sorted(self.source_topics) or None,
            "pipelines": sorted(self.pipelines) or None,
            "header_sets": sorted(self.header_sets) or None,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "headers": dict(sorted(self.headers.items())) or None,
            "dlq_offsets": None if self.dlq_offsets is None else spans_to_fields(self.dlq_offsets),
        }

    def fingerprint(self) -> str:
        """A short digest a cursor carries, so a scan resumed with another selection is refused, not mis-added."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _or_none(value: str | None) -> str:
    """A value as a selection names it: :data:`NONE_KEY` for a missing one."""
    return NONE_KEY if value is None else value


def _stamp(timestamp_ms: int | None) -> int | None:
    """A DLQ record's timestamp, with Kafka's "none" (a negative one) as ``None``."""
    return None if timestamp_ms is None or timestamp_ms < 0 else timestamp_ms


def _stage_of(stage: str | None, mapping: Mapping[str, str | None], problems: list[ConfigProblem]) -> str | None:
    """A query's stage as Connect names it (any case in), or :data:`NONE_KEY`; a problem when it is neither."""
    if stage is None or stage == NONE_KEY:
        return stage
    if stage.upper() in STAGE_NAMES:
        return stage.upper()
    names = ", ".join(Stage.__members__)
    problems.append(ConfigProblem("stage", mapping.get("stage"), f"expected one of {names} or {NONE_KEY}"))
    return None


def _header_set_of(name: str | None, mapping: Mapping[str, str | None], problems: list[ConfigProblem]) -> str | None:
    """A query's header set in lower case; a problem when it names no dialect."""
    if name is None:
        return None
    if name.lower() in HEADER_SET_NAMES:
        return name.lower()
    accepted = ", ".join(HEADER_SET_NAMES)
    problems.append(ConfigProblem("header_set", mapping.get("header_set"), f"expected one of {accepted}"))
    return None


def _times_of(mapping: Mapping[str, str | None], problems: list[ConfigProblem]) -> tuple[int | None, int | None]:
    """A query's ``[start, end)`` in epoch ms; a problem for each unreadable time, and for an empty window."""
    times: dict[str, int | None] = {}
    for name, keys in _TIME_KEYS.items():
        times[name] = None
        for key in keys:
            raw = mapping.get(key)
            if not isinstance(raw, str) or not raw.strip():
                continue
            parsed = parse_time(raw)
            if parsed is None:
                problems.append(ConfigProblem(key, raw, _TIME_ACCEPTED))
            else:
                times[name] = parsed
    start, end = times["start_ms"], times["end_ms"]
    if not problems and start is not None and end is not None and start >= end:
        given = mapping.get("end") or mapping.get("end_ms")
        problems.append(ConfigProblem("end", given, f"expected a time after start ({start} ms)"))
    return start, end


def _headers_match(letter: DeadLetterRecord, wanted: Mapping[str, str]) -> bool:
    """Whether every wanted header is present with exactly that value, among the original and the error headers."""
    found: dict[str, str | None] = {
        name: None if raw is None else raw.decode("utf-8", errors="replace") for name, raw in letter.headers
    }
    found.update(letter.error_headers)
    return all(name in found and found[name] == value for name, value in wanted.items())


#: The selection that takes every dead letter: the reads' default (frozen, so one shared instance is safe).
EVERYTHING = Selection()
