"""Read the job's metrics records back from the metrics topic, counting each input once.

The job publishes one JSON record per partition task (``scope="task"``) and one
per run (``scope="run"``), keyed by pipeline name; a task that tripped ``errors.outage.*``
adds one ``scope="outage"`` record naming the cause. Readers start at the first
offset at or after a timestamp (ListOffsets by time), so they never scan the
whole topic.

A task record names the input it counted: records ``[start_offset, end_offset)``
of ``source_partition`` of ``source_topic`` (see :class:`InputRange`). The same
input can be counted by more than one task record: a run killed before its commit
is read again by the next run, and Spark runs a failed or slow task again. Summing
every record would count those inputs twice, so :func:`count_inputs_once` lets one
record win wherever ranges overlap: a finished task's over a failed attempt's, then
the latest.

While a task runs it also publishes interim records (``interim: true``), each cumulative
for its task attempt (``attempt``, numbered by ``seq``). :func:`latest_per_attempt` keeps
one record per attempt before the ranges are compared: the attempt's final record, or
else its newest interim one, so an attempt never counts twice, whether it is still
running, finished, failed, retried by Spark or run twice by speculation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.kafka.offset_spans import (
    DEAD_LETTER_OFFSETS,
    DEAD_LETTER_TOPIC,
    OffsetSpans,
    merge_spans,
    spans_from_fields,
)
from airflow_kerr.kafka.offsets import OffsetLookupError, offset_consumer, read_range, topic_partitions, watermarks

#: The fields of a task record that name its input: offsets ``[start_offset, end_offset)`` of one source partition.
SOURCE_TOPIC = "source_topic"
SOURCE_PARTITION = "source_partition"
START_OFFSET = "start_offset"
END_OFFSET = "end_offset"
#: The fields that tell a task attempt's records apart: which attempt, the how-manieth record of it, interim or final.
ATTEMPT = "attempt"
SEQ = "seq"
INTERIM = "interim"

R = TypeVar("R", bound=Mapping[str, Any])
#: The ``scope`` of the record a task publishes when its batch tripped ``errors.outage.*``: the guard's outage event.
OUTAGE_SCOPE = "outage"


@dataclass(frozen=True)
class InputRange:
    """The source records one task read: offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> InputRange | None:
        """The range a metrics record names, or None when it names none (a record from an older writer)."""
        try:
            found = cls(
                str(record[SOURCE_TOPIC]),
                int(record[SOURCE_PARTITION]),
                int(record[START_OFFSET]),
                int(record[END_OFFSET]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return found if found.start < found.end else None

    def as_fields(self) -> dict[str, Any]:
        """The range as the fields a task record carries."""
        return {
            SOURCE_TOPIC: self.topic,
            SOURCE_PARTITION: self.partition,
            START_OFFSET: self.start,
            END_OFFSET: self.end,
        }


def input_range_fields(topic: str, partition: int, first_offset: int | None, last_offset: int | None) -> dict[str, Any]:
    """The fields a task record adds to name the offsets it read, first to last; none when it read nothing.

    For the writer: with them the readers can tell when two records counted the same input.
    """
    if first_offset is None or last_offset is None or not 0 <= first_offset <= last_offset:
        return {}
    return InputRange(topic, partition, first_offset, last_offset + 1).as_fields()


def read_metrics_records(
    kafka_config: Mapping[str, Any],
    topic: str,
    since_ms: int,
    accept: Callable[[dict[str, Any]], bool] = lambda record: True,
    timeout_s: float = 30.0,
) -> list[dict[str, Any]]:
    """Every metrics record written at or after ``since_ms`` that ``accept`` keeps, oldest first.

    Oldest by ``window_end_ms``, the time the job wrote the record; records written in
    the same millisecond keep the order they were written in (one pipeline's records
    share a partition), so of two the later one is the latest for :func:`count_inputs_once`.
    """
    consumer = offset_consumer(kafka_config)
    try:
        partitions = topic_partitions(consumer, topic, timeout_s)
        marks = watermarks(consumer, partitions, timeout_s)
        found = consumer.offsets_for_times([TopicPartition(t, p, since_ms) for t, p in partitions], timeout=timeout_s)
        starts: dict[int, int] = {}
        for tp in found:
            low, high = marks[(tp.topic, tp.partition)]
            starts[tp.partition] = max(tp.offset if tp.offset >= 0 else high, low)
        ends = {p: high for (_, p), (_, high) in marks.items()}
        messages, _ = read_range(consumer, topic, starts, ends, timeout_s)
        records: list[dict[str, Any]] = []
        for message in messages:
            try:
                record = json.loads(message.value() or b"")
            except (TypeError, ValueError):
                continue
            if isinstance(record, dict) and accept(record):
                records.append(record)
        return sorted(records, key=lambda r: int(r.get("window_end_ms", 0)))
    finally:
        consumer.close()


def run_summary(
    kafka_config: Mapping[str, Any], topic: str, pipeline: str, run_id: str, since_ms: int
) -> dict[str, Any] | None:
    """The ``scope="run"`` record of one run, or None when the job did not publish it."""
    found = read_metrics_records(
        kafka_config,
        topic,
        since_ms,
        lambda r: r.get("scope") == "run" and r.get("pipeline") == pipeline and r.get("run_id") == run_id,
    )
    return found[-1] if found else None


@dataclass(frozen=True)
class RunDeadLetters:
    """The dead letters one job run wrote, as its task records say: the DLQ topic and the offsets per partition.

    ``attempts`` is how many task attempts' records were found; 0 means the run published
    none (it failed before any task reported), so nothing is known rather than "none written".
    """

    topic: str | None
    spans: OffsetSpans
    attempts: int


def run_dead_letters(records: Sequence[Mapping[str, Any]]) -> RunDeadLetters:
    """What a run's task records say it wrote to the DLQ: every attempt's latest record, their offsets joined.

    Each attempt's spans are cumulative (its latest record holds all of them,
    :func:`latest_per_attempt`); a failed attempt's dead letters count too, since they are in
    the DLQ whether or not Spark ran the task again, and a retry's are other offsets.
    """
    tasks = latest_per_attempt([r for r in records if r.get("scope") == "task"])
    topics = {str(r[DEAD_LETTER_TOPIC]) for r in tasks if r.get(DEAD_LETTER_TOPIC)}
    spans = [found for r in tasks if (found := spans_from_fields(r.get(DEAD_LETTER_OFFSETS))) is not None]
    return RunDeadLetters(topic=min(topics) if topics else None, spans=merge_spans(*spans), attempts=len(tasks))


def read_run_dead_letters(
    kafka_config: Mapping[str, Any], topic: str, pipeline: str, run_id: str, since_ms: int
) -> RunDeadLetters:
    """:func:`run_dead_letters` of one run, read from the metrics topic from ``since_ms`` (before the run began)."""
    found = read_metrics_records(
        kafka_config,
        topic,
        since_ms,
        lambda r: r.get("scope") == "task" and r.get("pipeline") == pipeline and r.get("run_id") == run_id,
    )
    return run_dead_letters(found)


def latest_per_attempt(records: Sequence[R]) -> list[R]:
    """One record per task attempt (in the given order, oldest first): its final record, else its newest interim one.

    An attempt's records are cumulative: each interim record repeats what the earlier ones
    counted, and the final record (``interim`` absent or false) holds the attempt's totals,
    so it supersedes every interim record whatever the order they were read in (a final
    record can be read before a late interim one: they may sit in different batches). Among
    interim records the highest ``seq`` wins, then the later read. Records of different
    attempts are all kept: Spark's retries and speculative copies are separate attempts,
    whose overlapping input :func:`count_inputs_once` then counts once. A record naming no
    attempt (a task record from an older writer, a run record) is kept as it is.
    """
    best: dict[tuple[Any, Any, Any], int] = {}
    for index, record in enumerate(records):
        attempt = record.get(ATTEMPT)
        if attempt is None:
            continue
        key = (record.get("pipeline"), record.get("run_id"), attempt)
        held = best.get(key)
        if held is None or _attempt_rank(record, index) > _attempt_rank(records[held], held):
            best[key] = index
    kept = set(best.values())
    return [r for i, r in enumerate(records) if r.get(ATTEMPT) is None or i in kept]


def _attempt_rank(record: Mapping[str, Any], index: int) -> tuple[bool, int, int]:
    """How one record of an attempt ranks among the others: final first, then the highest ``seq``, then the latest."""
    try:
        seq = int(record.get(SEQ, 0))
    except (TypeError, ValueError):
        seq = 0
    return (not record.get(INTERIM, False), seq, index)


def count_inputs_once(records: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], float]]:
    """Each task record (in the given order, oldest first) with the share of its input range it counts.

    Every input offset counts once, by the one record that counts it best: a finished
    task's record, then a running attempt's newest interim record (see :func:`_state_rank`),
    before that of an attempt that failed (its range runs to the end of
    the batch it failed in, its counters stop at the failure, and a worker of a killed
    run may write it after the rerun wrote its own), then the latest. So a killed run's
    records give way to the rerun's for the offsets both read, and a failed task attempt
    to its retry, whatever the split of the ranges. A record whose offsets all count
    elsewhere gets 0, an untouched one 1, a partly covered one the fraction of its
    offsets left to it: its counters are totals, so its part of them is estimated in
    proportion. Records that name no range keep 1; nothing says what they overlap.
    """
    precedence = sorted(range(len(records)), key=lambda i: (_state_rank(records[i]), i), reverse=True)
    covered: dict[tuple[str, int], list[tuple[int, int]]] = {}
    shares = [1.0] * len(records)
    for index in precedence:
        span = InputRange.of(records[index])
        if span is None:
            continue
        spans = covered.get((span.topic, span.partition), [])
        overlap = sum(max(0, min(end, span.end) - max(start, span.start)) for start, end in spans)
        shares[index] = 1.0 - overlap / (span.end - span.start)
        covered[(span.topic, span.partition)] = _merge_span(spans, span.start, span.end)
    return list(zip(records, shares, strict=True))


def _state_rank(record: Mapping[str, Any]) -> int:
    """A finished attempt's record counts best, a running one's newest interim next, a failed one's last.

    A running attempt (a Spark retry under way, or a speculative copy) has counted its range so
    far exactly; a failed attempt's counters stop at the failure while its range runs on to the
    end of its batch. A finished attempt's totals beat both, so once any attempt of a range
    finished, the range counts as it did.
    """
    if record.get("state") == "failed":
        return 0
    return 1 if record.get(INTERIM) else 2


def _merge_span(spans: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """Sorted disjoint ``spans`` with ``[start, end)`` added, still sorted and disjoint (so overlaps sum exactly)."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted([*spans, (start, end)]):
        if merged and low <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


#: How long a follower keeps its consumer before it looks at the topic afresh (partitions added meanwhile).
FOLLOW_REFRESH_S = 300.0
#: How long the follower's fetch waits on the broker for new records: the broker answers as soon as one comes.
FOLLOW_FETCH_WAIT_MS = 500


class MetricsFollower:
    """The metrics records of a sliding window, kept up to date by one consumer that follows the topic.

    What :func:`read_metrics_records` gives, without a new client and a look-up per look:
    the first :meth:`read` reads the window from the first offset at or after its start
    (as :func:`read_metrics_records` does); later ones only take what arrived since, and
    :meth:`read` can wait on the topic for it (``wait_s``), so a watch sees a record as soon
    as the broker has it instead of at its next look. Records are kept one per task attempt
    (:func:`latest_per_attempt`: a reading uses no other) and dropped once their
    ``window_end_ms`` leaves the window. Every :data:`FOLLOW_REFRESH_S` seconds, and after
    an error, the next read starts afresh. Not thread-safe: one caller at a time.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topic: str,
        accept: Callable[[dict[str, Any]], bool],
        window_ms: int,
        timeout_s: float = 30.0,
    ) -> None:
        self.kafka_config = dict(kafka_config)
        self.topic = topic
        self.accept = accept
        self.window_ms = window_ms
        self.timeout_s = timeout_s
        self.records: list[dict[str, Any]] = []
        self._consumer: Consumer | None = None
        self._opened_at = 0.0
        #: Records taken from the topic, and times the follower started afresh: evidence for tests and benchmarks.
        self.received = 0
        self.opens = 0

    def read(self, now_ms: int | None = None, wait_s: float = 0.0) -> list[dict[str, Any]]:
        """The window's records, oldest first by ``window_end_ms``, after taking what arrived.

        With ``wait_s`` it waits up to that long for a record when none is pending, and
        returns as soon as one came (then with everything already there).
        """
        try:
            if self._consumer is None or time.monotonic() - self._opened_at > FOLLOW_REFRESH_S:
                self._open(int(time.time() * 1000) if now_ms is None else now_ms)
                wait_s = 0.0  # the window was just read to its end: no waiting before the first reading
            self._take(wait_s)
        except Exception:
            self.close()
            raise
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        start_ms = now_ms - self.window_ms
        self.records = [r for r in latest_per_attempt(self.records) if int(r.get("window_end_ms", 0)) >= start_ms]
        return sorted(self.records, key=lambda r: int(r.get("window_end_ms", 0)))

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    def _open(self, now_ms: int) -> None:
        """Read the window to the end offsets seen now, then stay assigned to every partition after them."""
        self.close()
        self.records = []
        lookup = offset_consumer(self.kafka_config)
        try:
            partitions = topic_partitions(lookup, self.topic, self.timeout_s)
            since = [TopicPartition(t, p, now_ms - self.window_ms) for t, p in partitions]
            found = lookup.offsets_for_times(since, timeout=self.timeout_s)
            marks = watermarks(lookup, partitions, self.timeout_s)
        finally:
            lookup.close()
        starts: dict[int, int] = {}
        for tp in found:
            low, high = marks[(tp.topic, tp.partition)]
            starts[tp.partition] = max(tp.offset if tp.offset >= 0 else high, low)
        ends = {p: high for (_, p), (_, high) in marks.items()}
        # A fetch that finds nothing new waits on the broker (fetch.wait.max.ms) and returns when a record comes.
        consumer = offset_consumer({**self.kafka_config, "fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS})
        self._consumer, self._opened_at = consumer, time.monotonic()
        self.opens += 1
        messages, unfinished = read_range(consumer, self.topic, starts, ends, self.timeout_s)
        if unfinished:
            raise OffsetLookupError(f"{self.topic}: {unfinished} not read to the end in {self.timeout_s} s")
        self._keep(messages)
        # read_range assigned only the partitions it had to read, and reading ran past their ends: follow
        # every partition from where each stands now.
        positions = {p: ends[p] for p in ends}
        for message in messages:
            positions[int(message.partition() or 0)] = max(
                positions[int(message.partition() or 0)], int(message.offset() or 0) + 1
            )
        consumer.assign([TopicPartition(self.topic, p, offset) for p, offset in positions.items()])

    def _take(self, wait_s: float) -> None:
        """Take every record that arrived; with ``wait_s``, first wait up to that long for one."""
        assert self._consumer is not None
        deadline = time.monotonic() + wait_s
        taken: list[Any] = []
        while True:
            batch = self._consumer.consume(500, timeout=0)
            good = [m for m in batch if m.error() is None]
            taken += good
            if batch:
                continue
            left = deadline - time.monotonic()
            if taken or left <= 0:
                break
            message = self._consumer.poll(left)
            if message is not None and message.error() is None:
                taken.append(message)
        self._keep(taken)

    def _keep(self, messages: Sequence[Any]) -> None:
        for message in messages:
            self.received += 1
            try:
                record = json.loads(message.value() or b"")
            except (TypeError, ValueError):
                continue
            if isinstance(record, dict) and self.accept(record):
                self.records.append(record)
