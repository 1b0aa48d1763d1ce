"""What the DLQ view selects dead letters by, parsed from a page's query; and the time rules both selections share.

There are two selections of dead letters, and they are different things:
:class:`ViewSelection` (here) picks the rows of a count, so it matches the exact values a
summary counts by, ``(none)`` included, and is read from a page's query strings;
:class:`~airflow_kerr.replay.selection.ReplaySelection` picks what a replay writes back, by
sets of topics and stages, a regular expression, offsets and headers, read from a DAG's
settings. What they share is here once: how a time is read (:func:`parse_time`,
:func:`epoch_ms`) and what a ``[start, end)`` window takes (:func:`in_window`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_kerr.errors.config import LONG_MAX, ConfigProblem, parse_integer
from airflow_kerr.errors.dead_letter import DeadLetterRecord, HeaderSet
from airflow_kerr.errors.dialects import HEADER_LESS, header_set_name
from airflow_kerr.errors.stage import Stage
from airflow_kerr.inspection.fields import STAGE_NAMES

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


# --------------------------------------------------------------------------------------------- the view's selection


@dataclass(frozen=True)
class ViewSelection:
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
    def from_query(cls, mapping: Mapping[str, str | None]) -> ViewSelection:
        """Build from a page's query values, checking each; every problem is raised at once.

        Keys are the field names (``start``/``end`` also name the times); other keys are not
        the selection's (the route's ``cursor``, ``limit``) and are ignored. Empty or blank
        values are unset. Times are epoch milliseconds or ISO-8601; a stage is a Connect stage
        name (any case) or ``(none)``.
        """
        problems: list[ConfigProblem] = []
        texts: dict[str, str | None] = {}
        for key in TEXT_KEYS:
            raw = mapping.get(key)
            texts[key] = (raw.strip() or None) if isinstance(raw, str) else None
        stage = texts["stage"]
        if stage is not None and stage != NONE_KEY:
            if stage.upper() in STAGE_NAMES:
                texts["stage"] = stage.upper()
            else:
                names = ", ".join(Stage.__members__)
                problems.append(ConfigProblem("stage", mapping.get("stage"), f"expected one of {names} or {NONE_KEY}"))
        header_set = texts["header_set"]
        if header_set is not None and header_set.lower() not in HEADER_SET_NAMES:
            accepted = ", ".join(HEADER_SET_NAMES)
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
                parsed = parse_time(raw)
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
        """The time part of :meth:`matches`: inside ``[start_ms, end_ms)``; no timestamp matches no bound.

        A negative timestamp is Kafka's "none" (a record written without one), so it counts as none.
        """
        stamp = None if timestamp_ms is None or timestamp_ms < 0 else timestamp_ms
        return in_window(stamp, self.start_ms, self.end_ms)

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


#: The selection that takes every dead letter: the reads' default (frozen, so one shared instance is safe).
EVERYTHING = ViewSelection()
