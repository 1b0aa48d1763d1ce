"""The DLQ replay engine: read a DLQ with a replay group, decide per record, write exactly once.

A run is bounded: before any record is read it checks the topics, plans the range of
each DLQ partition (the replay group's committed offset, or the start of the partition,
up to the fetch-verified end offset) and fences any older replay with the same
``transactional.id``. Each batch is then parsed by the core, selected, fixed and routed
(:mod:`airflow_kerr.replay.policy`), and written with the replay group's offsets
in one transaction (:mod:`airflow_kerr.replay.transactions`) by a background thread while
the next batch is read. An aborted batch is retried from the last committed offsets with
Connect's backoff, a bounded number of times. Each transaction has one time budget
(``transaction_timeout_s``); when the broker stops answering the run fails within it,
saying what was committed.
No Airflow imports: the operator is a thin shell around :class:`DlqReplay`.
"""

from __future__ import annotations

import gc
import logging
import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import partial
from typing import Any, NamedTuple, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from airflow_kerr.errors import DeadLetterRecord, Header, backoff_delay_ms
from airflow_kerr.errors import parse_dead_letter as parse
from airflow_kerr.errors.header_reader import read_error_headers
from airflow_kerr.kafka.client_errors import KafkaErrorKind, classify_kafka_error
from airflow_kerr.kafka.offsets import OffsetLookupError, offset_consumer, topic_partitions, watermarks
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.pacing import STOP_CHECK_S, Progress, RateLimiter
from airflow_kerr.replay.pointers import Coordinates, Gone, PointerReader
from airflow_kerr.replay.policy import (
    Decision,
    Outgoing,
    ReplayPolicy,
    decide,
    fast_replayer,
    outgoing,
    park_source_gone,
    park_too_large,
    with_original,
)
from airflow_kerr.replay.size import NOT_WRITTEN, SizeLimits, message_max_bytes
from airflow_kerr.replay.summary import BatchCounts, ReplayPlan, ReplaySummary, partition_ranges
from airflow_kerr.replay.transactions import (
    BackgroundWriter,
    BatchAborted,
    BrokerUnreachable,
    ProducerLike,
    ReplayFatalError,
    TransactionalWriter,
    describe_error,
    transactional_config,
)

#: Seconds between the replay loop's own passes of the cyclic garbage collector (paused otherwise).
GC_INTERVAL_S = 10.0

#: The interpreter's thread switch interval during the replay loop (Python's default is 5 ms); see
#: :func:`_quick_thread_switches`.
SWITCH_INTERVAL_S = 0.001

#: Attempts of one batch that keeps hitting abortable errors before the run fails.
DEFAULT_MAX_BATCH_ATTEMPTS = 5


class LogLike(Protocol):
    """What the engine logs through: a stdlib logger or an Airflow task logger."""

    def info(self, msg: Any, /, *args: Any) -> Any: ...

    def warning(self, msg: Any, /, *args: Any) -> Any: ...


class ReplayRetriesExhausted(RuntimeError):
    """A batch was aborted on every allowed attempt; the replay group stays at its last committed offsets."""


class _Written(Enum):
    """How the batch in flight ended."""

    COMMITTED = "committed"
    #: Aborted on an abortable error: the consumer is back at the committed offsets.
    REWOUND = "rewound"
    #: A stop came first: the transaction was aborted, or the backoff before its retry cut short.
    STOPPED = "stopped"


class _InFlight(NamedTuple):
    """The batch the background writer is writing: the offsets its transaction commits and the counts it settles."""

    positions: dict[int, int]
    counts: BatchCounts


@dataclass
class _Batch:
    """One polled batch, decided: the records it writes, what it counts, and the read positions after it."""

    outputs: list[Outgoing]
    counts: BatchCounts
    positions: dict[int, int]


@dataclass
class _LoopState:
    """What the replay loop carries from one batch to the next, with the parts it works on.

    ``positions`` run ahead of ``committed`` while a batch is in flight, or while batches
    that wrote nothing (every record skipped or dropped) wait to ride on the next
    transaction. ``pending`` counts what was read and not yet handed to a transaction,
    ``in_flight`` is the batch being written; counts reach the summary only once their
    transaction committed. ``attempt`` counts the aborts of the batch at ``committed``.
    """

    consumer: Consumer
    writer: TransactionalWriter | None
    #: Writes one batch while the next is read and decided; None in a dry run, which writes nothing.
    background: BackgroundWriter | None
    plan: ReplayPlan
    summary: ReplaySummary
    policy: ReplayPolicy
    progress: Progress
    committed: dict[int, int]
    positions: dict[int, int]
    #: Called by the writer before each record produced, so a stop aborts the open transaction: the rate
    #: limiter's wait for a paced run (``pace``), else a check that never waits (``halted``).
    pace: Callable[[], bool] | None = None
    halted: Callable[[], bool] | None = None
    batch_size: int = 1
    pending: BatchCounts = field(default_factory=BatchCounts)
    in_flight: _InFlight | None = None
    attempt: int = 0
    #: No record arrived for ``idle_timeout_s`` before the planned end.
    idle: bool = False
    last_progress: float = field(default_factory=time.monotonic)
    #: When settling last ran a young-generation pass of the cyclic collector.
    collected: float = field(default_factory=time.monotonic)
    #: Set once the loop ended: a batch still in flight (the loop failed) stops at its next record.
    abandoned: bool = False

    @property
    def ends(self) -> dict[int, int]:
        """The planned end offset of each partition."""
        return self.plan.end_offsets

    @property
    def reading(self) -> bool:
        """Whether some partition has records left before its planned end."""
        return any(self.positions[p] < self.ends[p] for p in self.plan.partitions)

    @property
    def left(self) -> int:
        """How many offsets are left to read before the planned ends."""
        return sum(self.ends[p] - self.positions[p] for p in self.plan.partitions if self.positions[p] < self.ends[p])

    @property
    def written_back(self) -> bool:
        """Whether the batch in flight has its outcome ready, so collecting it does not wait."""
        return self.in_flight is not None and self.background is not None and self.background.finished


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the replay loop; settling runs a young pass every GC_INTERVAL_S.

    A batch keeps thousands of young objects alive until it is written; the cyclic collector,
    run every 700 allocations, traversed them again and again (15 % of a replay's CPU). Replay
    objects form no cycles (refcounting frees them), so only cycles a fix function may leave
    need the periodic pass.
    """
    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collector_was_on:
            gc.enable()


@contextmanager
def _quick_thread_switches() -> Iterator[None]:
    """Hand the GIL between the reader and the writer thread every :data:`SWITCH_INTERVAL_S` during the loop.

    ``commit_transaction`` takes the GIL back (to serve delivery reports) while it flushes;
    with the reader busy deciding the next batch, each such wait lasted Python's default
    switch interval, 5 ms: a 1000-record commit took 8-10 ms instead of 2, and the writer,
    not the reader, set the pace of a replay with a fix. The interval is process-wide, so it
    is restored when the loop ends.
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _producer(config: dict[str, Any]) -> ProducerLike:
    """confluent-kafka's ``Producer``, the default ``producer_factory``."""
    producer: Any = Producer(config)
    return producer


class DlqReplay:
    """Replays one DLQ topic with the given options; :meth:`run` once, :meth:`stop` from anywhere.

    ``transactional_id_prefix`` should be stable per DAG and task (the operator uses
    ``kerr-replay.<dag_id>.<task_id>``): the DLQ topic and partition set are appended, so
    a restarted task fences its zombie. ``producer_factory`` builds the transactional
    producer from its config; tests wrap it to inject client errors.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        options: ReplayOptions,
        *,
        run_id: str,
        transactional_id_prefix: str = "kerr-replay",
        log: LogLike | None = None,
        producer_factory: Callable[[dict[str, Any]], ProducerLike] | None = None,
        max_batch_attempts: int = DEFAULT_MAX_BATCH_ATTEMPTS,
        retry_backoff_max_ms: int = 10_000,
        idle_timeout_s: float = 30.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.kafka_config = dict(kafka_config)
        self.options = options
        self.run_id = run_id
        self.transactional_id_prefix = transactional_id_prefix
        self.log: LogLike = log or logging.getLogger(__name__)
        self.producer_factory = producer_factory or _producer
        self.max_batch_attempts = max_batch_attempts
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.idle_timeout_s = idle_timeout_s
        self.timeout_s = timeout_s
        self._stop_requested = False
        self._known_topics: dict[str, bool] = {}
        self._listed_partitions: dict[str, list[int]] = {}
        self._metadata: Consumer | None = None
        self._admin: AdminClient | None = None
        #: Records too large to write: checked before producing, learnt from the broker's refusals.
        self._sizes = SizeLimits(message_max_bytes(self.kafka_config), self._topic_max_message_bytes)
        #: Whether the run's first record was looked at (:meth:`_check_first_record`).
        self._first_checked = False
        #: Reads the originals of pointer dead letters; opened at the first one.
        self._pointers: PointerReader | None = None

    def stop(self) -> None:
        """Ask the run to stop: the open transaction is aborted and nothing more is committed.

        Safe from a signal handler or another thread (it only sets a flag).
        """
        self._stop_requested = True

    # -- planning ------------------------------------------------------------------------------------

    def _topic_exists(self, topic: str) -> bool:
        """Whether ``topic`` exists, from one cluster-wide metadata snapshot and a look-up for any other.

        The snapshot is taken before the offset look-ups: librdkafka answers a metadata request
        for a topic it has not seen yet half a second late once the consumer was assigned.
        """
        if not self._known_topics:
            assert self._metadata is not None
            listed = self._metadata.list_topics(timeout=self.timeout_s).topics
            self._known_topics.update({name: True for name, md in listed.items() if md.error is None})
            self._listed_partitions.update(
                {name: sorted(md.partitions) for name, md in listed.items() if md.error is None and md.partitions}
            )
        if topic not in self._known_topics:
            assert self._metadata is not None
            try:
                topic_partitions(self._metadata, topic, self.timeout_s)
                self._known_topics[topic] = True
            except OffsetLookupError:
                self._known_topics[topic] = False
        exists = self._known_topics[topic]
        if exists:
            # Asked once per topic written to, so a record over the topic's own max.message.bytes is
            # parked before it is produced, not after the broker refused it and aborted its batch.
            self._sizes.topic_limit(topic)
        return exists

    def _check_topics(self, metadata: Consumer) -> list[int]:
        """The DLQ's partitions; every unknown topic the options name is reported at once."""
        o = self.options
        problems: list[str] = []
        partitions: list[int] = []
        # The snapshot is needed anyway (for the parking topic); it usually names the DLQ's
        # partitions too, which saves a second metadata round trip.
        self._topic_exists(o.parking_topic)
        try:
            partitions = self._listed_partitions.get(o.dlq_topic) or [
                p for _, p in topic_partitions(metadata, o.dlq_topic, self.timeout_s)
            ]
        except OffsetLookupError as error:
            problems.append(f"dlq_topic={o.dlq_topic!r}: {error}")
        if o.target_topic and not self._topic_exists(o.target_topic):
            problems.append(f"target_topic={o.target_topic!r}: the topic does not exist; create it first")
        if not o.target_topic:
            missing = sorted(t for t in o.selection.source_topics if not self._topic_exists(t))
            if missing:
                problems.append(
                    f"source_topics={sorted(o.selection.source_topics)!r}: {missing!r} do not exist, so their "
                    "records cannot go back; create them or set target_topic"
                )
        if problems:
            raise InvalidReplayOptions(problems)
        return partitions

    def plan(
        self, committed: Mapping[int, int], marks: Mapping[int, tuple[int, int]], partitions: list[int]
    ) -> ReplayPlan:
        """Start at the committed offset (or the partition start), clipped to the offset range.

        A committed offset below the log start offset means retention deleted dead letters
        this group never read: they cannot be replayed, so the plan counts them (``expired``)
        rather than moving past them unsaid.
        """
        selection = self.options.selection
        starts: dict[int, int] = {}
        ends: dict[int, int] = {}
        expired: dict[int, int] = {}
        for p in partitions:
            low, high = marks[p]
            position = committed.get(p, -1)
            if 0 <= position < low:
                expired[p] = low - position
            start = max(low if position < 0 else position, low, selection.start_offset or 0)
            end = high if selection.end_offset is None else min(high, selection.end_offset)
            starts[p], ends[p] = min(start, end), end
        return ReplayPlan(
            partitions,
            starts,
            ends,
            self.transactional_id(partitions),
            not self._topic_exists(self.options.parking_topic),
            expired,
        )

    def transactional_id(self, partitions: Sequence[int]) -> str:
        """Stable per prefix (DAG and task), DLQ topic and partition set, so a restarted run fences its zombie."""
        return f"{self.transactional_id_prefix}.{self.options.dlq_topic}.p{partition_ranges(partitions)}"

    # -- the run ---------------------------------------------------------------------------------------

    def run(self) -> ReplaySummary:
        """Replay (or, with ``dry_run``, count) every selected record in the planned range."""
        started = time.monotonic()
        self._metadata = offset_consumer(self.kafka_config)
        consumer: Consumer | None = None
        writer: TransactionalWriter | None = None
        fatal = False
        try:
            partitions = self._check_topics(self._metadata)
            if not self.options.dry_run:
                writer = self._writer(self.transactional_id(partitions))
                self._fence(writer)
            consumer = self._consumer()
            plan, summary = self._start(consumer, partitions)
            self._loop(consumer, writer, plan, summary)
            summary.seconds = round(time.monotonic() - started, 3)
            if writer is not None:
                summary.transactions, summary.commit_retries = writer.commits, writer.commit_retries
            return summary
        except ReplayFatalError:
            fatal = True
            raise
        finally:
            self._close(writer, consumer, fatal)

    def _writer(self, transactional_id: str) -> TransactionalWriter:
        """The transactional writer; its producer's ``transaction.timeout.ms`` is the per-transaction budget.

        Delivery reports only for errors (librdkafka filters the rest, so a replay pays nothing for
        them) go to :meth:`TransactionalWriter.delivered`: the broker's MESSAGE_TOO_LARGE names the
        refused record only there.
        """
        budget = self.options.transaction_timeout_s
        made: list[TransactionalWriter] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            if made:
                made[0].delivered(error, message)

        config = {
            **transactional_config(self.kafka_config, transactional_id, budget),
            "on_delivery": delivered,
            "delivery.report.only.error": True,
        }
        made.append(TransactionalWriter(self.producer_factory(config), transaction_timeout_s=budget))
        return made[0]

    def _topic_max_message_bytes(self, topic: str) -> int | None:
        """The topic's ``max.message.bytes`` as the broker reports it; None when it cannot be read.

        Asked only once a record comes near the producer's limit (:class:`SizeLimits`), so a
        broker that cannot describe configs costs one warning, and the refusal path still holds.
        """
        try:
            if self._admin is None:
                self._admin = AdminClient(self.kafka_config)
            resource = ConfigResource("topic", topic)
            entries = self._admin.describe_configs([resource])[resource].result(self.timeout_s)
            return int(entries["max.message.bytes"].value)
        except Exception as error:
            self.log.warning(
                "could not read max.message.bytes of %s (%s); records are checked against the producer's "
                "message.max.bytes only, and a refusal by the broker is handled when it comes",
                topic,
                describe_error(error),
            )
            return None

    def _fence(self, writer: TransactionalWriter) -> None:
        """``init_transactions`` before any record is read, so an older replay with this ``transactional.id`` stops."""
        try:
            writer.init()
        except BrokerUnreachable as error:
            raise BrokerUnreachable(f"{error}. Nothing was committed by this run.") from error

    def _consumer(self) -> Consumer:
        """The replay group's consumer: its offsets move only inside the writer's transactions, never on their own.

        ``read_committed`` hides a transactionally written DLQ's aborted records.
        """
        return Consumer(
            {
                **self.kafka_config,
                "group.id": self.options.group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
            }
        )

    def _start(self, consumer: Consumer, partitions: list[int]) -> tuple[ReplayPlan, ReplaySummary]:
        """Plan the range from the group's committed offsets and the watermarks, before any record is read."""
        o = self.options
        assert self._metadata is not None
        tps = [TopicPartition(o.dlq_topic, p) for p in partitions]
        committed = {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=self.timeout_s)}
        marks = {p: lh for (_, p), lh in watermarks(self._metadata, [(o.dlq_topic, p) for p in partitions]).items()}
        plan = self.plan(committed, marks, partitions)
        summary = ReplaySummary(
            self.run_id,
            o.dlq_topic,
            o.group_id,
            plan.transactional_id,
            o.dry_run,
            total=plan.total,
            start_offsets=dict(plan.start_offsets),
            end_offsets=dict(plan.end_offsets),
            expired=sum(plan.expired.values()),
        )
        if plan.expired:
            lost = sorted(plan.expired.items())
            where = ", ".join(f"partition {p}: {n} before offset {marks[p][0]}" for p, n in lost)
            note = (
                f"{summary.expired} dead letters of {o.dlq_topic} were deleted by the topic's retention before "
                f"group {o.group_id} read them ({where}); they cannot be replayed"
            )
            summary.notes.append(note)
            self.log.warning("%s", note)
        self._prepare_parking(plan, summary)
        self.log.info(
            "replaying %s (partitions %s, %d records to read) with group %s, transactional.id %s%s",
            o.dlq_topic,
            partition_ranges(partitions),
            plan.total,
            o.group_id,
            plan.transactional_id,
            " (dry run)" if o.dry_run else "",
        )
        return plan, summary

    def _close(self, writer: TransactionalWriter | None, consumer: Consumer | None, fatal: bool) -> None:
        """Abort a transaction left open, then close every client, whatever ended the run.

        After a fatal error nothing is aborted: the producer cannot, and the broker aborts the
        transaction itself (or the next run's ``init_transactions`` does).
        """
        if writer is not None and writer.in_transaction and not fatal:
            try:
                writer.abort()
            except ReplayFatalError as error:
                self.log.warning("could not abort the open transaction: %s", error)
        if writer is not None:
            writer.close()
        if consumer is not None:
            consumer.close()
        if self._pointers is not None:
            self._pointers.close()
            self._pointers = None
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    def _prepare_parking(self, plan: ReplayPlan, summary: ReplaySummary) -> None:
        """Create a missing parking topic before the first batch, so parking a record never fails on it."""
        if not plan.create_parking_topic:
            return
        name = self.options.parking_topic
        if self.options.dry_run:
            summary.notes.append(f"parking topic {name!r} does not exist; a real run creates it")
            return
        admin = AdminClient(self.kafka_config)
        admin.create_topics([NewTopic(name, len(plan.partitions))])[name].result(self.timeout_s)
        self._known_topics[name] = True
        summary.notes.append(f"created parking topic {name!r} with {len(plan.partitions)} partitions")
        self.log.info("created the parking topic %s", name)

    # -- the replay loop -------------------------------------------------------------------------------

    def _loop(
        self, consumer: Consumer, writer: TransactionalWriter | None, plan: ReplayPlan, summary: ReplaySummary
    ) -> None:
        """Read, decide and write batch by batch until the planned ends, a stop, ``max_records`` or idleness.

        The loop itself is :meth:`_replay_batches`; around it: the background writer, which writes
        one batch while the next is read and decided, the paused cyclic collector and quick thread
        switches; after it, the offsets of the last records that wrote nothing, and a read-back of
        the group's offsets.
        """
        loop = self._loop_state(consumer, writer, plan, summary)
        with _cyclic_gc_paused(), _quick_thread_switches():
            try:
                self._replay_batches(loop)
            finally:
                loop.abandoned = True
                if loop.background is not None:
                    loop.background.close()
        if writer is not None:
            self._commit_remaining_offsets(loop, writer)
            self._read_back_committed(loop, writer)
        loop.progress.update(summary.scanned, summary.replayed, summary.parked, summary.dropped, force=True)

    def _replay_batches(self, loop: _LoopState) -> None:
        """confluent-kafka's exactly-once loop (``examples/eos-transactions.py``), one transaction per batch.

        consume a batch → decide each record (replay, park or drop; unselected records are
        skipped) → produce the outputs, ``send_offsets_to_transaction`` with the replay group's
        positions and ``commit_transaction`` (:meth:`_write`, in the background while the next
        batch is read) → settle the batch's counts; after an abort, rewind to the committed
        offsets and read the batch again. Ends at the planned ends, a stop, ``max_records`` or idleness.
        """
        while True:
            if loop.written_back:
                # Settle a finished batch at once: a failure (an unreachable broker) ends the run now,
                # not after the reader has waited out its idle timeout.
                if self._collect(loop) is _Written.STOPPED:
                    return
                continue
            budget = self._budget(loop)
            if self._read_enough(loop, budget):
                if not self._wind_down(loop):
                    return
                continue
            # Never ask for more than is left, or the last consume waits out its whole timeout.
            messages = loop.consumer.consume(max(1, min(loop.batch_size, loop.left)), 0.5)
            batch = self._decide(loop, messages, budget)
            if batch is not None and not self._write(loop, batch):
                return

    def _loop_state(
        self, consumer: Consumer, writer: TransactionalWriter | None, plan: ReplayPlan, summary: ReplaySummary
    ) -> _LoopState:
        """The loop's state at the planned start offsets, with the consumer assigned there."""
        o = self.options
        policy = ReplayPolicy(
            o.dlq_topic,
            self.run_id,
            o.parking_topic,
            o.target_topic,
            o.target_allowlist,
            o.max_replays,
            o.fix,
            self._topic_exists,
        )
        progress = Progress(
            f"replay {o.dlq_topic}", plan.total, o.progress_interval_s, self.log.info, dry_run=o.dry_run
        )
        committed = {p: plan.start_offsets[p] for p in plan.partitions}
        background = None if writer is None else BackgroundWriter(writer)
        loop = _LoopState(consumer, writer, background, plan, summary, policy, progress, committed, dict(committed))
        loop.pace, loop.halted, loop.batch_size = self._pacing(loop)
        self._rewind(loop)
        return loop

    def _pacing(self, loop: _LoopState) -> tuple[Callable[[], bool] | None, Callable[[], bool] | None, int]:
        """What the writer calls before each record (``pace`` or ``halted``), and the most records one batch reads.

        The call lets a stop abort the open transaction. With ``max_records_per_second`` it is
        the rate limiter, which waits for the next slot, and a batch holds at most a second's
        worth of records, so a paced replay still commits about once a second.
        """
        o = self.options
        halted = partial(self._halted, loop)
        if o.max_records_per_second is None:
            return None, halted, o.batch_size
        limiter = RateLimiter(o.max_records_per_second, stopped=halted)
        return limiter.acquire, None, min(o.batch_size, max(1, int(o.max_records_per_second)))

    def _halted(self, loop: _LoopState) -> bool:
        """Whether the writer must stop producing: a stop was asked for, or the loop ended with a batch in flight."""
        return self._stop_requested or loop.abandoned

    def _budget(self, loop: _LoopState) -> int | None:
        """How many more records ``max_records`` lets this run select (counting those read but not yet committed)."""
        if self.options.max_records is None:
            return None
        budget = self.options.max_records - loop.summary.selected - loop.pending.selected
        return budget - (0 if loop.in_flight is None else loop.in_flight.counts.selected)

    def _read_enough(self, loop: _LoopState, budget: int | None) -> bool:
        """Whether to read no further: the planned ends were reached, a stop, ``max_records`` or idleness."""
        return not loop.reading or loop.idle or self._stop_requested or (budget is not None and budget <= 0)

    def _wind_down(self, loop: _LoopState) -> bool:
        """With nothing more to read, collect the batch in flight; False once the loop is over.

        After an abort the loop reads again from the committed offsets (its idleness forgotten);
        with nothing in flight it ends, and the summary says why.
        """
        if loop.in_flight is None:
            self._note_end(loop)
            return False
        written = self._collect(loop)
        if written is _Written.STOPPED:
            return False
        loop.idle = loop.idle and written is _Written.COMMITTED
        return True

    def _note_end(self, loop: _LoopState) -> None:
        """Say in the summary why the loop ended before the planned end offsets (it stays completed otherwise)."""
        if loop.idle:
            loop.summary.status = "idle"
            loop.summary.notes.append(f"no record arrived for {self.idle_timeout_s:.0f} s before the planned end")
        elif loop.reading:
            loop.summary.status = "stopped" if self._stop_requested else "max_records"

    def _decide(self, loop: _LoopState, messages: Sequence[Any], budget: int | None) -> _Batch | None:
        """Decide each polled record (:meth:`_process`); None when the positions did not move (idleness is timed).

        An empty poll may still end a partition whose last offsets are commit markers.
        """
        outputs, counts, positions = self._process(messages, loop.positions, loop.ends, loop.policy, budget)
        if not messages:
            self._past_control_records(loop.consumer, positions, loop.ends)
        if positions == loop.positions:
            loop.idle = time.monotonic() - loop.last_progress > self.idle_timeout_s
            return None
        loop.last_progress = time.monotonic()
        return _Batch(outputs, counts, positions)

    def _write(self, loop: _LoopState, batch: _Batch) -> bool:
        """Hand a batch to the writer: produce → ``send_offsets_to_transaction`` → ``commit_transaction``.

        The transaction is :meth:`TransactionalWriter.write`, run in the background; the batch
        before it is collected first, since transactions commit in batch order. A batch that
        writes nothing is not a transaction: its offsets ride on the next one. In a dry run the
        batch counts at once. False when a stop came first.
        """
        loop.positions.update(batch.positions)
        loop.pending.merge(batch.counts)
        if loop.background is None:
            self._settle(loop, loop.positions, loop.pending)
            loop.pending.clear()
            return True
        if not batch.outputs:
            summary = loop.summary
            scanned = summary.scanned + loop.pending.scanned
            loop.progress.update(scanned, summary.replayed, summary.parked, summary.dropped)
            return True
        if loop.in_flight is not None:
            written = self._collect(loop)
            if written is _Written.STOPPED:
                return False
            if written is _Written.REWOUND:
                return True  # this batch is read again from the committed offsets
        offsets = self._offsets(loop.positions, loop.committed)
        metadata = loop.consumer.consumer_group_metadata()
        loop.background.submit(batch.outputs, offsets, metadata, loop.pace, loop.halted)
        loop.in_flight, loop.pending = _InFlight(dict(loop.positions), loop.pending), BatchCounts()
        return True

    def _collect(self, loop: _LoopState) -> _Written:
        """Wait for the batch in flight; settle it once committed, or back off and rewind after an abort."""
        assert loop.background is not None and loop.in_flight is not None and loop.writer is not None
        at, counts = loop.in_flight
        loop.in_flight = None
        try:
            if not loop.background.result():
                return self._stopped(loop)
        except BrokerUnreachable as error:
            raise self._unreachable(error, loop.writer, loop.summary, loop.committed) from error
        except BatchAborted as error:
            return self._retry_aborted(loop, error)
        loop.attempt = 0
        self._settle(loop, at, counts)
        return _Written.COMMITTED

    def _retry_aborted(self, loop: _LoopState, error: BatchAborted) -> _Written:
        """Rewind to the committed offsets after Connect's backoff; fail once ``max_batch_attempts`` aborts.

        An abort caused by records too large for Kafka is not retried as it was: the refused
        records are remembered by their DLQ coordinates and the batch is read again at once,
        parking them without their value (or, refused again, dropping them). It does not count
        as an attempt: each record can be refused at most twice, so the run always gets past it.
        """
        if error.refused and self._sizes.learn(error.refused):
            loop.summary.aborted_batches += 1
            self.log.warning(
                "the batch of %s at offsets %s was aborted: %s; reading it again without writing %s as they were",
                self.options.dlq_topic,
                loop.committed,
                "; ".join(f"{self.options.dlq_topic}/{r.partition}/{r.offset}: {r.detail}" for r in error.refused),
                "it" if len(error.refused) == 1 else "them",
            )
            self._rewind(loop)
            return _Written.REWOUND
        loop.attempt += 1
        loop.summary.aborted_batches += 1
        if loop.attempt >= self.max_batch_attempts:
            raise ReplayRetriesExhausted(
                f"a batch of {self.options.dlq_topic} starting at offsets {loop.committed} was aborted "
                f"{loop.attempt} times; the replay group stays there. Last cause: {error}"
            ) from error
        if not self._backoff(loop.attempt):
            return self._stopped(loop)
        self._rewind(loop)
        return _Written.REWOUND

    def _stopped(self, loop: _LoopState) -> _Written:
        """A stop came first: the positions fall back to the committed offsets, so nothing more is committed."""
        loop.positions.update(loop.committed)
        loop.summary.status = "stopped"
        return _Written.STOPPED

    def _rewind(self, loop: _LoopState) -> None:
        """Read again from the committed offsets, forgetting what was read past them (it is read and counted again)."""
        loop.positions.update(loop.committed)
        loop.pending.clear()
        loop.consumer.assign(
            [
                TopicPartition(self.options.dlq_topic, p, loop.positions[p])
                for p in loop.plan.partitions
                if loop.positions[p] < loop.ends[p]
            ]
        )

    def _settle(self, loop: _LoopState, at: Mapping[int, int], counts: BatchCounts) -> None:
        """Record a committed batch (or, in a dry run, a read one): its offsets, its counts, the progress line.

        Also the cyclic collector's young-generation pass every GC_INTERVAL_S, while it is paused.
        """
        loop.committed.update(at)
        for what in counts.dropped_too_large:
            self.log.warning("dropped a record too large to write even without its value, nor to park: %s", what)
            if len(loop.summary.notes) < 20:
                loop.summary.notes.append(f"dropped, too large even to park: {what}")
        loop.summary.add(counts)
        summary = loop.summary
        loop.progress.update(summary.scanned, summary.replayed, summary.parked, summary.dropped)
        if time.monotonic() - loop.collected > GC_INTERVAL_S:
            gc.collect(1)
            loop.collected = time.monotonic()

    def _commit_remaining_offsets(self, loop: _LoopState, writer: TransactionalWriter) -> None:
        """Commit the positions past the last records, which wrote nothing, in an offsets-only transaction.

        An abort here loses nothing: those records are read again by the next run, and the summary says so.
        """
        if loop.positions == loop.committed:
            return
        try:
            writer.write([], self._offsets(loop.positions, loop.committed), loop.consumer.consumer_group_metadata())
            self._settle(loop, loop.positions, loop.pending)
        except BrokerUnreachable as error:
            raise self._unreachable(error, writer, loop.summary, loop.committed) from error
        except BatchAborted as error:
            loop.summary.notes.append(
                f"the offsets of the last records, which wrote nothing, were not committed: {error}"
            )

    def _read_back_committed(self, loop: _LoopState, writer: TransactionalWriter) -> None:
        """Report the offsets the broker really holds for the group (:meth:`_confirm_committed`)."""
        moved = {p for p, n in loop.committed.items() if n != loop.plan.start_offsets[p]}
        try:
            loop.summary.committed_offsets = self._confirm_committed(loop.consumer, loop.committed, moved, loop.summary)
        except KafkaException as error:
            failed = BrokerUnreachable(
                f"the broker was unreachable: reading the replay group's offsets back failed ({describe_error(error)})"
            )
            raise self._unreachable(failed, writer, loop.summary, loop.committed) from error

    def _unreachable(
        self,
        error: BrokerUnreachable,
        writer: TransactionalWriter,
        summary: ReplaySummary,
        committed: Mapping[int, int],
    ) -> BrokerUnreachable:
        """The writer's account of the failure, completed with what this run committed before it."""
        if writer.commits:
            done = (
                f"Committed by this run before it: {writer.commits} transactions with {summary.replayed} records "
                f"replayed and {summary.parked} parked ({summary.scanned} DLQ records read past); the replay group "
                f"{self.options.group_id} is at offsets {dict(sorted(committed.items()))} of {self.options.dlq_topic}"
            )
        else:
            done = (
                f"Nothing was committed by this run; the replay group {self.options.group_id} stays at offsets "
                f"{dict(sorted(committed.items()))} of {self.options.dlq_topic}"
            )
        return BrokerUnreachable(f"{error}. {done}; the next run continues from there.")

    def _offsets(self, positions: Mapping[int, int], committed: Mapping[int, int]) -> list[TopicPartition]:
        return [TopicPartition(self.options.dlq_topic, p, n) for p, n in positions.items() if n != committed[p]]

    def _confirm_committed(
        self, consumer: Consumer, committed: Mapping[int, int], moved: set[int], summary: ReplaySummary
    ) -> dict[int, int]:
        """Read the group's offsets back (-1 where it has none); commit directly what the broker did not apply.

        A transaction that carries offsets but no records is valid Kafka, yet Tansu 0.6 ignores
        its offsets once the producer has committed a transaction with records. Reading the
        group back once per run catches that and reports the offsets the broker really holds.
        """
        tps = [TopicPartition(self.options.dlq_topic, p, n) for p, n in committed.items()]
        found = {tp.partition: max(tp.offset, -1) for tp in consumer.committed(tps, timeout=self.timeout_s)}
        missing = [tp for tp in tps if tp.partition in moved and found.get(tp.partition) != tp.offset]
        if missing:
            consumer.commit(offsets=missing, asynchronous=False)
            note = f"the broker had not applied the transactional offsets {missing}; committed them directly"
            summary.notes.append(note)
            self.log.warning(note)
            found.update({tp.partition: tp.offset for tp in missing})
        return found

    def _process(
        self,
        messages: Sequence[Any],
        positions: Mapping[int, int],
        ends: Mapping[int, int],
        policy: ReplayPolicy,
        budget: int | None,
    ) -> tuple[list[Outgoing], BatchCounts, dict[int, int]]:
        """Decide every record of one polled batch, in order; stop early when ``budget`` selections are used.

        The hot loop of a replay: names are bound to locals because attribute look-ups per
        record are a visible share of its cost. Without a selection, a record with Connect's
        plain header set takes :func:`fast_replayer`'s one pass over its headers (and a fix
        gets it with its DLQ record parsed only if read); any other record is parsed and
        decided in full.
        """
        selection = self.options.selection
        matches = None if selection.everything else selection.matches
        fast = fast_replayer(policy) if matches is None else None
        dlq = self.options.dlq_topic
        counts = BatchCounts()
        count = counts.count
        breakdown = counts.breakdown
        outputs: list[Outgoing] = []
        written = outputs.append
        next_positions = dict(positions)
        scanned = selected = 0
        limit = -1 if budget is None else budget
        refused = self._sizes.refused
        oversize = self._sizes.oversize
        if not self._first_checked:
            self._check_first_record(messages, positions, ends, policy)
        originals = self._originals(messages, positions, ends)
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self._consumer_error(error)
                continue
            partition, offset = message.partition(), message.offset()
            if offset < next_positions[partition]:
                continue
            if offset >= ends[partition]:
                next_positions[partition] = ends[partition]
                continue
            try:
                headers, unreadable = message.headers() or [], None
            except Exception as error:  # header names that are not UTF-8: the client cannot decode them
                headers, unreadable = [], error
            kind, ts = message.timestamp()
            stamp = ts if kind and ts >= 0 else None
            key, value = message.key(), message.value()
            if fast is not None and unreadable is None:
                if selected == limit:  # every record is selected here: stop before a fix runs on it
                    break
                done = fast(headers, key, value, partition, offset, stamp)
                if done is not None:
                    selected += 1
                    if isinstance(done, Decision):  # parked after its fix ran
                        parked = done.record
                        assert parked is not None
                        out: Outgoing | None = outgoing(parked)
                        assert out is not None
                        if (refused and (partition, offset) in refused) or oversize(out[0], out[2], out[1], out[3]):
                            self._too_large(out, parked.dead_letter, headers, policy, counts, written)
                        else:
                            count(done, parked.dead_letter)
                            written(out)
                    else:
                        out = done[0]
                        if out is not None and (
                            (refused and (partition, offset) in refused) or oversize(out[0], out[2], out[1], out[3])
                        ):
                            letter = parse(
                                headers, key, value, topic=dlq, partition=partition, offset=offset, timestamp=stamp
                            )
                            self._too_large(out, letter, headers, policy, counts, written)
                        else:
                            if out is not None:
                                written(out)
                            breakdown[done[1]] += 1
                    scanned += 1
                    next_positions[partition] = offset + 1
                    continue
            letter = parse(headers, key, value, topic=dlq, partition=partition, offset=offset, timestamp=stamp)
            if unreadable is not None:
                problem = f"the record's headers cannot be read ({describe_error(unreadable)}); parked without them"
                letter = replace(letter, malformed_headers={"headers": problem})
            if matches is None or matches(letter):
                if selected == limit:
                    break
                selected += 1
                if letter.is_pointer and not letter.malformed_headers:
                    decision = self._resolve(letter, headers, policy, originals)
                else:
                    decision = decide(letter, headers, policy)
                record = decision.record
                if record is not None and (
                    (refused and (partition, offset) in refused)
                    or oversize(record.topic, record.key, record.value, record.headers)
                ):
                    self._too_large(outgoing(record), letter, headers, policy, counts, written)
                else:
                    count(decision, letter)
                    if record is not None:
                        written(outgoing(record))
            scanned += 1
            next_positions[partition] = offset + 1
        counts.scanned, counts.selected = scanned, selected
        return outputs, counts, next_positions

    def _check_first_record(
        self, messages: Sequence[Any], positions: Mapping[int, int], ends: Mapping[int, int], policy: ReplayPolicy
    ) -> None:
        """Fail before anything is written when the run's first record is header-less, selected, and no target is set.

        A header-less DLQ (Airflow's ``KafkaSharedStreamTrigger(dlq_topic=…)``, most hand-written
        producers) does not say where its records came from, and the replay never guesses:
        ``target_topic`` names it. A header-less record met later in a DLQ of another dialect
        is parked (``no_source_topic``) instead, so that one stray record does not stop a run.
        """
        for message in messages:
            partition, offset = message.partition(), message.offset()
            if message.error() is not None or not positions[partition] <= offset < ends[partition]:
                continue
            self._first_checked = True
            if policy.target_topic is not None:
                return
            try:
                headers = message.headers() or []
                if read_error_headers(headers).dialect is not None:
                    return
                letter = parse(headers, message.key(), message.value(), topic=message.topic(), offset=offset)
            except Exception:  # headers that cannot be read: the record is parked as malformed
                return
            selection = self.options.selection
            if selection.everything or selection.matches(letter):
                raise InvalidReplayOptions(
                    [
                        f"target_topic: not set, and the first dead letter read, {message.topic()}/{partition}/"
                        f"{offset}, carries no dead-letter headers, so it does not say which topic it came from "
                        "(a header-less DLQ, as Airflow's KafkaSharedStreamTrigger(dlq_topic=...) or a plain "
                        "producer writes it); set target_topic to the topic its records go back to. Nothing was "
                        "written."
                    ]
                )
            return

    def _originals(
        self, messages: Sequence[Any], positions: Mapping[int, int], ends: Mapping[int, int]
    ) -> dict[Coordinates, Any]:
        """The originals of the batch's pointer dead letters (no key, no value), read in one pass per partition."""
        wanted: list[Coordinates] = []
        for message in messages:
            if message.key() is not None or message.value() is not None or message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            if not positions[partition] <= offset < ends[partition]:
                continue
            try:
                letter = parse(message.headers() or [], None, None)
            except Exception:  # unreadable headers: parked as malformed in the loop
                continue
            if letter.is_pointer and not letter.malformed_headers:
                assert letter.source_topic is not None
                assert letter.source_partition is not None and letter.source_offset is not None
                wanted.append((letter.source_topic, letter.source_partition, letter.source_offset))
        if not wanted:
            return {}
        if self._pointers is None:
            self._pointers = PointerReader(self.kafka_config, timeout_s=self.timeout_s)
        return self._pointers.read(wanted)

    def _resolve(
        self,
        letter: DeadLetterRecord,
        headers: Sequence[Header],
        policy: ReplayPolicy,
        originals: Mapping[Coordinates, Any],
    ) -> Decision:
        """Decide a pointer dead letter on its original, or park it ``source_gone`` when that cannot be read."""
        assert letter.source_topic is not None
        assert letter.source_partition is not None and letter.source_offset is not None
        original = originals.get((letter.source_topic, letter.source_partition, letter.source_offset))
        if original is None or isinstance(original, Gone):
            detail = original.detail if isinstance(original, Gone) else "the original was not read"
            return park_source_gone(letter, headers, policy, detail)
        return decide(with_original(letter, original), headers, policy)

    def _too_large(
        self,
        out: Outgoing,
        letter: DeadLetterRecord,
        raw_headers: Sequence[Header],
        policy: ReplayPolicy,
        counts: BatchCounts,
        written: Callable[[Outgoing], None],
    ) -> None:
        """A record too large to write as decided: park it without its value, or, if even that is too large, drop it.

        Too large is what the pre-check finds against the producer's and the topic's limits, or
        what the client or the broker refused in an earlier attempt of this batch (then ``refused``
        says how far down it went). A drop is counted in ``dropped_too_large`` and logged with the
        record's DLQ coordinates once the batch commits: the run never stops at such a record.
        """
        sizes = self._sizes
        where = f"{letter.topic}/{letter.partition}/{letter.offset}"
        level, why = sizes.refused.get((letter.partition or 0, letter.offset or 0), (0, ""))
        if level == 0:
            why = sizes.oversize(out[0], out[2], out[1], out[3]) or "refused for its size"
        if level < NOT_WRITTEN:
            decision = park_too_large(letter, raw_headers, policy, why)
            parked = decision.record
            assert parked is not None
            still = sizes.oversize(parked.topic, None, None, parked.headers)
            if still is None:
                counts.count(decision, letter)
                written(outgoing(parked))
                return
            why = f"{why}; without its value still {still}"
        counts.dropped_too_large.append(f"{where}: too_large: {why}")

    def _past_control_records(self, consumer: Consumer, positions: dict[int, int], ends: Mapping[int, int]) -> None:
        """Move a partition to its end when the consumer is there but the last offsets were no records.

        A transactionally written DLQ ends with commit markers: they take offsets below the end
        offset but are never returned, so only the consumer's position shows the partition is done.
        """
        waiting = [TopicPartition(self.options.dlq_topic, p) for p, n in positions.items() if n < ends[p]]
        for tp in consumer.position(waiting) if waiting else []:
            if tp.offset >= ends[tp.partition]:
                positions[tp.partition] = ends[tp.partition]

    def _consumer_error(self, error: KafkaError) -> None:
        if classify_kafka_error(error) is KafkaErrorKind.FATAL:
            raise ReplayFatalError(f"the replay consumer failed: {describe_error(error)}")
        self.log.warning("consumer error (the client retries it): %s", describe_error(error))

    def _backoff(self, attempt: int) -> bool:
        """Connect's backoff before retrying an aborted batch; False when a stop came during the wait."""
        delay_s = backoff_delay_ms(attempt, 0, math.inf, self.retry_backoff_max_ms, random.randrange) / 1000
        self.log.warning("retrying the aborted batch in %.1f s (attempt %d)", delay_s, attempt + 1)
        deadline = time.monotonic() + delay_s
        while time.monotonic() < deadline:
            if self._stop_requested:
                return False
            time.sleep(min(STOP_CHECK_S, deadline - time.monotonic()))
        return not self._stop_requested
