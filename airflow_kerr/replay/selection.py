"""Which dead letters a replay takes: the selection a DAG author sets, checked per parsed record.

Apart from :mod:`airflow_kerr.replay.policy` because it is a different job: the selection
decides which records the replay looks at, the policy what happens to each it takes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_kerr.errors import DeadLetterRecord, Stage
from airflow_kerr.inspection.selection import in_window


@dataclass(frozen=True)
class ReplaySelection:
    """Which DLQ records a replay takes; an empty criterion matches everything.

    Time bounds are ``[start_time_ms, end_time_ms)`` on the DLQ record's timestamp (the
    failed record's own, as Connect copies it); offset bounds are ``[start_offset,
    end_offset)`` on each DLQ partition. ``headers`` must all be present with exactly these
    UTF-8 values, looked up among the original and the error headers.

    Not the DLQ view's :class:`~airflow_kerr.inspection.selection.ViewSelection`: that one
    picks a count's rows by the exact values counted, this one what a replay writes back, by
    sets, a regular expression, offsets and headers. They share the time rules
    (:func:`~airflow_kerr.inspection.selection.in_window`).
    """

    source_topics: frozenset[str] = frozenset()
    stages: frozenset[Stage] = frozenset()
    exception_class: re.Pattern[str] | None = None
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def everything(self) -> bool:
        """True when no criterion is set, so every record matches (the replay then skips :meth:`matches`)."""
        return (
            not self.source_topics
            and not self.stages
            and self.exception_class is None
            and self.start_time_ms is None
            and self.end_time_ms is None
            and self.start_offset is None
            and self.end_offset is None
            and not self.headers
        )

    def matches(self, letter: DeadLetterRecord) -> bool:
        """True when the record meets every criterion, cheapest checks first."""
        if self.source_topics and letter.source_topic not in self.source_topics:
            return False
        if self.stages and letter.stage not in self.stages:
            return False
        if not in_window(letter.timestamp, self.start_time_ms, self.end_time_ms):
            return False
        if self.start_offset is not None or self.end_offset is not None:
            offset = -1 if letter.offset is None else letter.offset
            if self.start_offset is not None and offset < self.start_offset:
                return False
            if self.end_offset is not None and offset >= self.end_offset:
                return False
        if self.exception_class is not None and not self.exception_class.search(letter.exception_class or ""):
            return False
        return not self.headers or _headers_match(letter, self.headers)


def _headers_match(letter: DeadLetterRecord, wanted: Mapping[str, str]) -> bool:
    found: dict[str, str | None] = {
        name: None if raw is None else raw.decode("utf-8", errors="replace") for name, raw in letter.headers
    }
    found.update(letter.error_headers)
    return all(name in found and found[name] == value for name, value in wanted.items())
