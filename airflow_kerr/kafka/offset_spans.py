"""Which DLQ offsets a run wrote: per partition, sorted disjoint ``[start, end)`` spans. Pure Python, no client.

A job run knows exactly which dead letters it wrote: the DLQ producer's delivery reports
name each record's partition and offset. :class:`SpanRecorder` keeps them as spans (one per
stretch of consecutive offsets: a partition another writer shares breaks the stretch, so the
spans stay exact), each task attempt's metrics record carries them
(``dead_letter_offsets``), and the DLQ view, the replay and the operator read them back
with the helpers here. Nothing is found by a time window, so a record another run wrote
into the same DLQ at the same moment is never taken for this run's.

Two ways to write spans down: as metrics-record fields (:meth:`SpanRecorder.as_fields`,
:func:`spans_from_fields`: ``{"0": [[10, 20]]}``, end exclusive) and as the text a person
reads and types in the replay form (:func:`spans_text`, :func:`parse_spans_text`:
``0:10-19, 1:5``, last offset inclusive, as the view shows offsets).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from typing import Any

#: Partition → sorted, disjoint, non-empty ``(start, end)`` spans (end exclusive).
OffsetSpans = dict[int, tuple[tuple[int, int], ...]]

#: The metrics-record fields a task attempt adds when it wrote dead letters: the DLQ topic and its spans.
DEAD_LETTER_TOPIC = "dead_letter_topic"
DEAD_LETTER_OFFSETS = "dead_letter_offsets"
#: The XCom key under which the operator leaves a run's dead letters for the DLQ view's run tab.
RUN_DEAD_LETTERS_XCOM = "kerr_dead_letters"
#: The largest offset Kafka has (int64).
OFFSET_MAX = 2**63 - 1
_TEXT_ITEM = re.compile(r"^(\d{1,10}):(\d{1,19})(?:-(\d{1,19}))?$")
SPANS_TEXT_ACCEPTED = (
    "expected partition:first-last items (last offset included), separated by commas or spaces, e.g. '0:10-19, 1:5'"
)


class SpanRecorder:
    """Offsets as they are delivered, kept as spans: one call per delivered record, in the delivery thread.

    Delivery reports of one producer come in offset order per partition, so the usual call
    extends the partition's last span; an offset anywhere else starts a new span, and
    :meth:`spans` puts them in order.
    """

    def __init__(self) -> None:
        self._spans: dict[int, list[list[int]]] = {}

    def add(self, partition: int, offset: int) -> None:
        """Note one delivered record."""
        spans = self._spans.get(partition)
        if spans is None:
            self._spans[partition] = [[offset, offset + 1]]
            return
        last = spans[-1]
        if last[1] == offset:
            last[1] = offset + 1
        else:
            spans.append([offset, offset + 1])

    def spans(self) -> OffsetSpans:
        """A snapshot, sorted and merged (safe to call from another thread while records are delivered)."""
        snapshot = {p: [(s[0], s[1]) for s in list(spans)] for p, spans in list(self._spans.items())}
        return merge_spans(snapshot)

    def as_fields(self, topic: str | None) -> dict[str, Any]:
        """The metrics-record fields: ``dead_letter_topic`` and ``dead_letter_offsets``; none before any delivery."""
        spans = self.spans()
        if not spans or not topic:
            return {}
        return {DEAD_LETTER_TOPIC: topic, DEAD_LETTER_OFFSETS: spans_to_fields(spans)}


def merge_spans(*many: Mapping[int, Iterable[tuple[int, int]]]) -> OffsetSpans:
    """The union of any number of span mappings, per partition sorted and disjoint (touching spans joined)."""
    gathered: dict[int, list[tuple[int, int]]] = {}
    for spans in many:
        for partition, items in spans.items():
            gathered.setdefault(partition, []).extend((int(s), int(e)) for s, e in items if int(s) < int(e))
    merged: OffsetSpans = {}
    for partition in sorted(gathered):
        out: list[tuple[int, int]] = []
        for start, end in sorted(gathered[partition]):
            if out and start <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], end))
            else:
                out.append((start, end))
        if out:
            merged[partition] = tuple(out)
    return merged


def spans_to_fields(spans: Mapping[int, Iterable[tuple[int, int]]]) -> dict[str, list[list[int]]]:
    """Spans as JSON: partitions as text keys, each span ``[start, end]`` with the end exclusive."""
    return {str(p): [[s, e] for s, e in items] for p, items in sorted(spans.items())}


def spans_from_fields(value: Any) -> OffsetSpans | None:
    """Spans read back from JSON (:func:`spans_to_fields`); ``None`` when ``value`` is not that shape."""
    if not isinstance(value, Mapping):
        return None
    found: dict[int, list[tuple[int, int]]] = {}
    try:
        for key, items in value.items():
            partition = int(key)
            if partition < 0 or not isinstance(items, list):
                return None
            for item in items:
                start, end = (int(x) for x in item)
                if not 0 <= start < end <= OFFSET_MAX:
                    return None
                found.setdefault(partition, []).append((start, end))
    except (TypeError, ValueError, OverflowError):
        return None
    return merge_spans(found)


def count_offsets(spans: Mapping[int, Iterable[tuple[int, int]]]) -> int:
    """How many offsets the spans hold (records, where no offset was skipped by a transaction marker)."""
    return sum(end - start for items in spans.values() for start, end in items)


def in_spans(spans: tuple[tuple[int, int], ...], offset: int) -> bool:
    """Whether ``offset`` lies in one of a partition's sorted disjoint spans (a binary search)."""
    index = bisect.bisect_right(spans, (offset, OFFSET_MAX)) - 1
    return index >= 0 and spans[index][0] <= offset < spans[index][1]


def hull(spans: tuple[tuple[int, int], ...]) -> tuple[int, int] | None:
    """The one ``[start, end)`` that covers a partition's spans, or ``None`` when it has none."""
    return (spans[0][0], spans[-1][1]) if spans else None


def spans_text(spans: Mapping[int, Iterable[tuple[int, int]]]) -> str:
    """Spans as a person reads them: ``0:10-19, 1:5`` (partition:first-last, the last offset included)."""
    items = []
    for partition, pairs in sorted(spans.items()):
        for start, end in pairs:
            items.append(f"{partition}:{start}" if end == start + 1 else f"{partition}:{start}-{end - 1}")
    return ", ".join(items)


def parse_spans_text(text: str) -> OffsetSpans:
    """Spans from :func:`spans_text`'s form; raises ``ValueError`` naming the first item it cannot read."""
    found: dict[int, list[tuple[int, int]]] = {}
    for item in (part for part in re.split(r"[\s,;]+", text.strip()) if part):
        match = _TEXT_ITEM.match(item)
        named = repr(item) if len(item) <= 40 else repr(item[:39] + "\u2026")
        if match is None:
            raise ValueError(f"{named} is not partition:first-last; {SPANS_TEXT_ACCEPTED}")
        partition, first = int(match.group(1)), int(match.group(2))
        last = first if match.group(3) is None else int(match.group(3))
        if last < first or last >= OFFSET_MAX or partition > 2**31 - 1:
            raise ValueError(f"{named}: the last offset is before the first or out of range; {SPANS_TEXT_ACCEPTED}")
        found.setdefault(partition, []).append((first, last + 1))
    return merge_spans(found)
