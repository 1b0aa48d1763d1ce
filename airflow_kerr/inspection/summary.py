"""The resumable summary: a DLQ counted by exception class, stage, source topic, pipeline and over time, in chunks.

A DLQ can hold millions of records and a page must answer in about a second, so the
count reads headers only (the fast path of :mod:`airflow_kerr.inspection.fields`), a
bounded chunk per call, and hands back a :class:`~airflow_kerr.inspection.cursor.ScanCursor`
to go on from; the page adds the chunks up until ``complete``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from airflow_kerr.errors.config import LONG_MAX
from airflow_kerr.errors.header_reader import plain_connect_of
from airflow_kerr.inspection.consumers import (
    LOOKUP_TIMEOUT_S,
    SCAN_BATCH,
    first_records,
    offset_ranges,
    scratch_consumer,
    timestamp_of,
)
from airflow_kerr.inspection.cursor import ScanCursor, choose_bucket_ms
from airflow_kerr.inspection.fields import CONNECT, header_text, raw_fields, stage_text
from airflow_kerr.inspection.scan_consumers import SCAN_CONSUMERS, scan_key
from airflow_kerr.inspection.selection import EVERYTHING, NONE_KEY, TEXT_KEYS, Selection
from airflow_kerr.kafka.offset_spans import in_spans

#: Records the first chunk of a large DLQ's count reads from its newest end (shared out over the
#: partitions) before it goes on from the start: the first figures a page shows, in well under a second.
NEWEST_FIRST = 20_000
#: Seconds the first chunk may take to read the newest slices whole, beyond its ``max_seconds`` when the
#: machine is slow: slices not read whole are not counted, and the first figures would hold none.
NEWEST_FIRST_S = 5.0


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
    #: What this chunk read, by (exception class, stage, source topic, pipeline, header set, bucket), before the
    #: selection's value criteria: :func:`refigured` takes other value criteria's figures from it.
    tally: Mapping[tuple[Any, ...], int] = field(default_factory=dict, repr=False, compare=False)

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


def _log_start_stamps(
    kafka_config: Mapping[str, Any], topic: str, starts: Mapping[int, int], timeout_s: float
) -> dict[int, int]:
    """The timestamp of each partition's first record, from the broker's time index rather than a fetch.

    Why: noida-db answers a fetch with every record from its offset to the partition's end, so
    fetching a 1,000,000-record partition's first record made the broker build and send the
    whole partition (about 3.5 s) before the count could begin. ``ListOffsets`` for timestamp 0
    names the first record with a timestamp and that timestamp, in milliseconds. Only a partition
    whose answer is its first offset (``starts``) is taken: the record there is that one. The
    rest (an answer further on, a broker that does not answer, an error) are left out, for
    :func:`first_records` to fetch as before.
    """
    from confluent_kafka.admin import AdminClient, OffsetSpec

    found: dict[int, int] = {}
    try:
        admin = AdminClient({**kafka_config, "log_level": 0})
        futures = admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.for_timestamp(0) for p in starts}, request_timeout=timeout_s
        )
        for partition, future in futures.items():
            answer = future.result(timeout_s)
            if answer.offset == starts[partition.partition] and answer.timestamp >= 0:
                found[partition.partition] = answer.timestamp
    except (KafkaException, TimeoutError, ValueError):  # only means the first records are fetched, as before
        return {}
    return found


def _newest_slices(ranges: Mapping[int, tuple[int, int]], budget: int) -> dict[int, int]:
    """Where each partition's newest slice starts: ``budget`` records shared out, none when the DLQ is small.

    A DLQ of at most ``2 * budget`` records is counted from its start as before (the first
    chunk reads most of it anyway). Otherwise each non-empty partition's slice is an equal
    share of ``budget`` (at least one record), so the first chunk counts the newest records of
    every partition; a partition smaller than its share is counted whole in it.
    """
    sizes = {p: high - low for p, (low, high) in ranges.items() if high > low}
    if budget <= 0 or not sizes or sum(sizes.values()) <= 2 * budget:
        return {}
    share = max(1, budget // len(sizes))
    return {p: ranges[p][1] - min(size, share) for p, size in sizes.items()}


def _start_scan(kafka_config: Mapping[str, Any], topic: str, selection: Selection, consumer: Consumer) -> ScanCursor:
    """Fix a new scan's range (begin → end offsets now) and its bucket width, from the edge records' timestamps.

    The first records' timestamps come from :func:`_log_start_stamps` where the broker's
    time index gives them, else from a fetch; the last records' from a fetch at each end
    (a fetch that close to the end is small on any broker).
    """
    ranges = {p: selection.offset_window(low, high, p) for p, (low, high) in offset_ranges(consumer, topic).items()}
    deadline = time.monotonic() + LOOKUP_TIMEOUT_S
    open_ranges = {p: low for p, (low, high) in ranges.items() if low < high}
    known = _log_start_stamps(kafka_config, topic, open_ranges, LOOKUP_TIMEOUT_S) if open_ranges else {}
    firsts = first_records(
        consumer,
        {(topic, p): low for p, (low, _) in ranges.items() if p not in known},
        {(topic, p): h for p, (_, h) in ranges.items()},
        deadline,
    )
    lasts = first_records(
        consumer,
        {(topic, p): max(low, high - 1) for p, (low, high) in ranges.items()},
        {(topic, p): h for p, (_, h) in ranges.items()},
        deadline,
    )
    stamps = list(known.values())
    stamps += [ts for m in (*firsts.values(), *lasts.values()) if (ts := timestamp_of(m)) is not None]
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


def _time_bounds(selection: Selection) -> tuple[bool, int, int]:
    """Whether the selection bounds time, and its ``[low, high)`` in epoch ms, open ends widened.

    Worked out once per call so the per-record test is two comparisons of local integers.
    """
    start_ms, end_ms = selection.start_ms, selection.end_ms
    by_time = start_ms is not None or end_ms is not None
    return by_time, -1 if start_ms is None else start_ms, LONG_MAX if end_ms is None else end_ms


class _ChunkCount:
    """What one :func:`summarize` call has read so far: where each partition stands, and the tally.

    A class so the reading can be split into named steps without passing a dozen values
    around; the hot loop (:meth:`count`) binds what it needs to locals once per batch, so
    a record costs no attribute look-up and no extra call.
    """

    def __init__(self, scan: ScanCursor, selection: Selection) -> None:
        self.nexts = {p: nxt for p, (nxt, _) in scan.partitions.items()}
        self.ends = {p: end for p, (_, end) in scan.partitions.items()}
        self.todo = {p for p in self.nexts if self.nexts[p] < self.ends[p]}
        self.bucket = scan.bucket_ms
        self.by_time, self.low_ms, self.high_ms = _time_bounds(selection)
        #: One run's DLQ offsets (``Selection.dlq_offsets``), or None: then every offset in the ranges counts.
        self.spans = selection.dlq_offsets
        #: (exception class, stage, source topic, pipeline, header set, bucket start) → records.
        self.tally: dict[tuple[Any, ...], int] = {}
        self.read = 0
        self.malformed = 0

    def add(self, other: _ChunkCount) -> None:
        """Take ``other``'s tally as read in this chunk too (the newest slices, counted apart)."""
        for key, n in other.tally.items():
            self.tally[key] = self.tally.get(key, 0) + n
        self.read += other.read
        self.malformed += other.malformed

    def partitions(self) -> dict[int, tuple[int, int]]:
        """Each partition's ``(next, end)``: what the following chunk's cursor and kept consumer stand at."""
        return {p: (self.nexts[p], self.ends[p]) for p in self.nexts}

    def complete(self) -> bool:
        """Whether every partition's range has been read to its end."""
        return all(self.nexts[p] >= self.ends[p] for p in self.nexts)

    def read_from(
        self,
        consumer: Consumer,
        topic: str,
        deadline: float,
        max_records: int,
        arrived: Callable[[], object] | None = None,
    ) -> None:
        """Consume batches until the ranges are read, ``max_records`` are counted or ``deadline`` passes.

        A batch never asks for more than is left of the ranges or the record budget, so the
        consumer stops where the cursor says the next chunk starts. ``arrived`` is called once,
        when the first records have come and before they are counted.
        """
        todo, nexts, ends = self.todo, self.nexts, self.ends
        while todo and self.read < max_records:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            wanted = min(SCAN_BATCH, max_records - self.read, sum(ends[p] - nexts[p] for p in todo))
            messages: list[Any] = consumer.consume(wanted, min(left, 0.1))
            if messages and arrived is not None:
                arrived()
                arrived = None
            self.count(messages)
            if not messages:
                self.catch_up(consumer, topic)

    def count(self, messages: list[Any]) -> None:  # noqa: C901 - the hot loop, kept whole on purpose
        """Tally one batch, reading headers only: the hot loop, kept whole and on locals.

        A record past its partition's end (written after the scan began) closes the range
        uncounted; a plain Connect dead letter takes :func:`plain_connect_of` (no parse, as
        :func:`raw_fields` does); anything else :func:`raw_fields`.
        """
        todo, nexts, ends, tally = self.todo, self.nexts, self.ends, self.tally
        bucket, by_time, low_ms, high_ms = self.bucket, self.by_time, self.low_ms, self.high_ms
        spans = self.spans
        read, malformed = self.read, self.malformed
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
            nexts[partition] = offset + 1
            if offset + 1 >= end:
                todo.discard(partition)
            read += 1
            if spans is not None and not in_spans(spans.get(partition, ()), offset):
                continue  # another writer's record between this run's: read past, not counted
            headers = message.headers()
            fast = plain_connect_of(headers)  # a plain Connect dead letter: no parse, as raw_fields does
            if fast is None:
                exception_class, stage, source_topic, pipeline, header_set, bad = raw_fields(headers)
                if bad:
                    malformed += 1
            else:
                source_topic, stage, exception_class, pipeline, _ = fast
                header_set = CONNECT
            kind, stamp = message.timestamp()
            if kind == 0 or stamp < 0:
                if by_time:
                    continue
                slot = None
            elif by_time and not low_ms <= stamp < high_ms:
                continue
            else:
                slot = stamp - stamp % bucket
            key = (exception_class, stage, source_topic, pipeline, header_set, slot)
            try:
                tally[key] += 1
            except KeyError:  # the first of its kind: a scan meets few
                tally[key] = 1
        self.read, self.malformed = read, malformed

    def catch_up(self, consumer: Consumer, topic: str) -> None:
        """After an empty batch, move each partition to where the consumer stands.

        Offsets with no record to read (aborted transactions' records, control markers,
        compacted gaps) yield nothing, so only the consumer's position shows a range is done.
        """
        todo, nexts, ends = self.todo, self.nexts, self.ends
        if not todo:
            return
        for reached in consumer.position([TopicPartition(topic, p) for p in todo]):
            if reached.offset >= 0 and reached.offset > nexts[reached.partition]:
                nexts[reached.partition] = min(reached.offset, ends[reached.partition])
            if nexts[reached.partition] >= ends[reached.partition]:
                todo.discard(reached.partition)


def _read_chunk(
    kafka_config: Mapping[str, Any],
    topic: str,
    scan: ScanCursor,
    chunk: _ChunkCount,
    deadline: float,
    max_records: int,
) -> None:
    """Read this call's chunk with the consumer the previous chunk kept, or a new one; keep it if not done.

    A consumer kept from the previous chunk of this scan stands at the cursor already (see
    :mod:`~airflow_kerr.inspection.scan_consumers`); a miss assigns a new one there. It is
    kept for the following chunk only when this one ended with ranges left to read, and
    closed on any error.
    """
    consumer = SCAN_CONSUMERS.take(scan_key(kafka_config, topic, scan.selection, scan.partitions))
    keep = False
    try:
        if consumer is None:
            consumer = scratch_consumer(kafka_config)
            consumer.assign([TopicPartition(topic, p, chunk.nexts[p]) for p in sorted(chunk.todo)])
        chunk.read_from(consumer, topic, deadline, max_records)
        keep = bool(chunk.todo)
    finally:
        if keep and consumer is not None:
            SCAN_CONSUMERS.put(scan_key(kafka_config, topic, scan.selection, chunk.partitions()), consumer)
        elif consumer is not None:
            consumer.close()


def _figures(
    tally: Mapping[tuple[Any, ...], int], selection: Selection
) -> tuple[int, dict[str, Counter[str]], Counter[str]]:
    """The matched count, counts by field and timeline of a tally, with the selection's value filters applied.

    Values are decoded to text here, once per distinct key rather than once per record.
    """
    counts: dict[str, Counter[str]] = {name: Counter() for name in TEXT_KEYS}
    timeline: Counter[str] = Counter()
    matched = 0
    for (exception_class, stage, source_topic, pipeline, header_set, slot), n in tally.items():
        values = (
            header_text(exception_class),
            stage_text(stage),
            header_text(source_topic),
            header_text(pipeline),
            header_set,
        )
        if selection.by_values and not selection.matches_values(*values):
            continue
        matched += n
        for name, value in zip(TEXT_KEYS, values, strict=True):
            counts[name][NONE_KEY if value is None else value] += n
        if slot is not None:
            timeline[str(slot)] += n
    return matched, counts, timeline


def counting_selection(selection: Selection) -> Selection:
    """What decides which records a count reads: the selection without its value criteria.

    The count reads every record of its time, offset and run ranges whatever the value
    criteria (classes, stages, source topics, pipelines, dialects); those are applied to the
    tally afterwards (:func:`_figures`). So one scan of this selection, passed with its cursors,
    gives the figures of every value filter over the same ranges (:func:`refigured`): the DLQ
    view counts once for everyone looking at a DLQ, whatever each of them filters on.
    """
    return replace(
        selection,
        exception_classes=frozenset(),
        exception_pattern=None,
        stages=frozenset(),
        source_topics=frozenset(),
        pipelines=frozenset(),
        header_sets=frozenset(),
    )


def refigured(chunk: DeadLetterSummaryChunk, selection: Selection) -> DeadLetterSummaryChunk:
    """``chunk`` (of ``counting_selection(selection)``'s scan) with ``selection``'s value criteria applied."""
    matched, counts, timeline = _figures(chunk.tally, selection)
    return replace(chunk, matched=matched, counts=_sorted_counts(counts), timeline=_sorted_timeline(timeline))


def _sorted_counts(counts: Mapping[str, Counter[str]]) -> dict[str, dict[str, int]]:
    return {name: dict(values.most_common()) for name, values in counts.items()}


def _sorted_timeline(timeline: Counter[str]) -> dict[str, int]:
    return dict(sorted(timeline.items(), key=lambda item: int(item[0])))


def _result(topic: str, scan: ScanCursor, chunk: _ChunkCount, selection: Selection) -> DeadLetterSummaryChunk:
    """The chunk's figures, and the cursor the following call goes on from (``None`` once complete)."""
    matched, counts, timeline = _figures(chunk.tally, selection)
    position = scan.position + chunk.read
    complete = chunk.complete()
    following = ScanCursor(
        topic=topic,
        selection=scan.selection,
        bucket_ms=scan.bucket_ms,
        oldest_ms=scan.oldest_ms,
        newest_ms=scan.newest_ms,
        total=scan.total,
        position=position,
        partitions=chunk.partitions(),
    )
    return DeadLetterSummaryChunk(
        topic=topic,
        total=scan.total,
        read=chunk.read,
        position=position,
        complete=complete,
        cursor=None if complete else following.encode(),
        bucket_ms=scan.bucket_ms,
        oldest_ms=scan.oldest_ms,
        newest_ms=scan.newest_ms,
        matched=matched,
        malformed=chunk.malformed,
        counts=_sorted_counts(counts),
        timeline=_sorted_timeline(timeline),
        tally=dict(chunk.tally),
    )


def _first_chunk(
    kafka_config: Mapping[str, Any],
    topic: str,
    selection: Selection,
    started: float,
    max_seconds: float,
    max_records: int,
) -> DeadLetterSummaryChunk:
    """A new scan's first chunk: the newest slice of each partition first, then on from the start.

    Why the newest first: on noida-db (which answers a fetch with the partition's whole
    remainder) the first records from a large partition's start arrive only once the broker has
    built and sent all of it, seconds for a million records, while a slice at the end comes back
    at once. So the look-up consumer counts each partition's newest :data:`NEWEST_FIRST` records
    (shared out, :func:`_newest_slices`), and the count's own consumer is assigned at each
    start as soon as the slices' records have arrived (not before: noida-db then answered the
    slices' fetch only after the whole partition's), so its first fetch overlaps their count.
    A slice is counted whole or not at all: the slices may take up to :data:`NEWEST_FIRST_S`
    (more than ``max_seconds`` on a slow machine), and if they are not all read by then the scan
    goes on from each start over the whole range, as without slices. The cursor then
    covers ``[start, slice start)`` of each partition, so the figures added up stay exact.
    """
    deadline = started + max_seconds
    lookup = scratch_consumer(kafka_config)
    counter: Consumer | None = None
    assigned: set[int] = set()
    keep = False

    def start_counting(partitions: Mapping[int, int]) -> Consumer:
        """The count's consumer, assigned at each of ``partitions``' offsets it does not read yet."""
        nonlocal counter
        if counter is None:
            counter = scratch_consumer(kafka_config)
        added = {p: offset for p, offset in partitions.items() if p not in assigned}
        if added:
            counter.incremental_assign([TopicPartition(topic, p, offset) for p, offset in sorted(added.items())])
            assigned.update(added)
        return counter

    try:
        whole = _start_scan(kafka_config, topic, selection, lookup)
        slices = _newest_slices(whole.partitions, min(NEWEST_FIRST, max_records))
        scan = replace(whole, partitions={p: (low, slices.get(p, high)) for p, (low, high) in whole.partitions.items()})
        chunk = _ChunkCount(scan, selection)
        if slices:
            newest = _ChunkCount(
                replace(whole, partitions={p: (start, whole.partitions[p][1]) for p, start in slices.items()}),
                selection,
            )
            lookup.assign([TopicPartition(topic, p, start) for p, start in sorted(slices.items())])
            # The count's consumer is assigned once the slices' records are here, not before.
            main = {p: chunk.nexts[p] for p in chunk.todo}
            slices_deadline = started + max(max_seconds, NEWEST_FIRST_S)
            newest.read_from(
                lookup, topic, slices_deadline, max_records, lambda: start_counting(main) if main else None
            )
            if newest.complete():
                chunk.add(newest)
            else:  # not read whole in time: count every partition from its start instead
                scan, chunk = whole, _ChunkCount(whole, selection)
        if chunk.todo and max_records > 0:
            chunk.read_from(start_counting({p: chunk.nexts[p] for p in chunk.todo}), topic, deadline, max_records)
        keep = bool(chunk.todo)
    finally:
        lookup.close()
        if keep and counter is not None:
            SCAN_CONSUMERS.put(scan_key(kafka_config, topic, scan.selection, chunk.partitions()), counter)
        elif counter is not None:
            counter.close()
    return _result(topic, scan, chunk, selection)


def summarize(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    selection: Selection = EVERYTHING,
    cursor: str | None = None,
    max_records: int = 200_000,
    max_seconds: float = 1.0,
) -> DeadLetterSummaryChunk:
    """Count the next chunk of the DLQ, reading forward through headers only (values are never decoded).

    The first call (``cursor`` None) fixes the scan: each partition's range from its first to
    its end offset as they are now (records written later are not counted), narrowed to the
    selection's offsets, and the timeline's
    bucket width (:func:`choose_bucket_ms` over the oldest and newest record timestamps, read
    from the partitions' first and last records, within the selection's time bounds). On a
    DLQ of more than twice :data:`NEWEST_FIRST` records it counts each partition's newest
    slice first (:func:`_first_chunk`, which may take up to :data:`NEWEST_FIRST_S` for them),
    so the first figures come from the newest dead letters; the following calls go on from
    each partition's start. Each
    call reads until ``max_records`` or ``max_seconds``, whichever comes first, and returns a
    ``cursor`` to pass back with the same selection (``None`` once complete). The figures are
    this chunk's only: the caller adds chunks up. A cursor from another topic or selection,
    or not from here, raises :class:`InvalidSelection` naming ``cursor``.

    Reads are ``read_committed`` unless ``kafka_config`` says otherwise, so an aborted
    record is neither read nor counted, and a partition with a transaction still open
    cannot complete before it ends.
    """
    selection.refuse_headers("the DLQ count")
    started = time.monotonic()
    if cursor is None:
        return _first_chunk(kafka_config, topic, selection, started, max_seconds, max_records)
    scan = ScanCursor.decode(cursor, topic, selection)
    chunk = _ChunkCount(scan, selection)
    if chunk.todo and max_records > 0:
        _read_chunk(kafka_config, topic, scan, chunk, started + max_seconds, max_records)
    return _result(topic, scan, chunk, selection)
