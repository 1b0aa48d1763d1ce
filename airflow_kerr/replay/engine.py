"""The DLQ replay engine: read a DLQ with a replay group, decide per record, write exactly once.

A run is its pre-flight, then its loop. The pre-flight (:mod:`airflow_kerr.replay.preflight`)
checks the topics, plans the range of each DLQ partition (the replay group's committed offset,
or the start of the partition, up to the fetch-verified end offset) and fences any older
replay with the same ``transactional.id``, all before any record is read. The loop, this
module, is confluent-kafka's exactly-once loop (``examples/eos-transactions.py``): consume a
batch, decide each record (:mod:`airflow_kerr.replay.batch`, with the policy of
:mod:`airflow_kerr.replay.policy`), produce the outputs and send the replay group's offsets
in one transaction (:mod:`airflow_kerr.replay.transactions`, written by a background thread
while the next batch is read), commit. An aborted batch is retried from the last committed
offsets with Connect's backoff, a bounded number of times. Each transaction has one time
budget (``transaction_timeout_s``); when the broker stops answering the run fails within it,
saying what was committed (:mod:`airflow_kerr.replay.failures`).
No Airflow imports: the operator is a thin shell around :class:`DlqReplay`.

One module of about 500 lines on purpose: every method is a step of the one loop, sharing its
:class:`~airflow_kerr.replay.loop_state.LoopState`; the jobs beside the loop already have their
own modules (pre-flight, batch, background writer, transactions, pacing, failures).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from airflow_kerr.errors import backoff_delay_ms
from airflow_kerr.formats import RegistrySettings
from airflow_kerr.formats.registry_settings import InvalidRegistrySettings
from airflow_kerr.replay.background import BackgroundWriter
from airflow_kerr.replay.batch import BatchDecider
from airflow_kerr.replay.failures import (
    LogLike,
    ReplayRetriesExhausted,
    report_dropped,
    report_refused,
    retries_exhausted,
    unreachable,
)
from airflow_kerr.replay.loop_state import Batch, InFlight, LoopState, Written
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.pacing import STOP_CHECK_S, Progress, RateLimiter
from airflow_kerr.replay.policy import FixFn, ReplayPolicy
from airflow_kerr.replay.preflight import Preflight, default_producer
from airflow_kerr.replay.registry_values import RegistryValues
from airflow_kerr.replay.summary import BatchCounts, ReplayPlan, ReplaySummary
from airflow_kerr.replay.transactions import (
    BatchAborted,
    BrokerUnreachable,
    ProducerLike,
    ReplayFatalError,
    TransactionalWriter,
    describe_error,
)
from airflow_kerr.replay.tuning import (
    GC_INTERVAL_S,
    SWITCH_INTERVAL_S,
    collect_young,
    cyclic_gc_paused,
    quick_thread_switches,
)

__all__ = [
    "DEFAULT_MAX_BATCH_ATTEMPTS",
    "GC_INTERVAL_S",
    "SWITCH_INTERVAL_S",
    "DlqReplay",
    "LogLike",
    "ReplayRetriesExhausted",
]

#: Attempts of one batch that keeps hitting abortable errors before the run fails.
DEFAULT_MAX_BATCH_ATTEMPTS = 5


class DlqReplay:
    """Replays one DLQ topic with the given options; :meth:`run` once, :meth:`stop` from anywhere.

    ``transactional_id_prefix`` should be stable per DAG and task (the operator uses
    ``kerr-replay.<dag_id>.<task_id>``): the DLQ topic and partition set are appended, so
    a restarted task fences its zombie. ``producer_factory`` builds the transactional
    producer from its config; tests wrap it to inject client errors. ``schema_registry`` (the
    settings of a ``schema_registry`` connection) is needed only with a fix and
    ``key_format``/``value_format``: the fix then works on decoded values
    (:mod:`airflow_kerr.replay.registry_values`); without a fix the registry is never called.
    """

    def __init__(  # noqa: PLR0913 - public constructor; past config and options, keyword-only run tunables
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
        schema_registry: RegistrySettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.kafka_config = dict(kafka_config)
        #: The fix the policy calls: the options' own, or wrapped to work on decoded registry values.
        self.fix = _fix_of(options, schema_registry)
        self.options = options
        self.run_id = run_id
        self.transactional_id_prefix = transactional_id_prefix
        self.log: LogLike = log or logging.getLogger(__name__)
        self.producer_factory = producer_factory or default_producer
        self.max_batch_attempts = max_batch_attempts
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.idle_timeout_s = idle_timeout_s
        self.timeout_s = timeout_s
        self._stop_requested = False
        #: Topic checks, the plan, the fenced writer: everything before the first record is read.
        self._preflight = Preflight(
            self.kafka_config,
            options,
            transactional_id_prefix=transactional_id_prefix,
            log=self.log,
            producer_factory=self.producer_factory,
            timeout_s=timeout_s,
        )
        #: Records too large to write: checked before producing, learnt from the broker's refusals.
        self._sizes = self._preflight.sizes
        #: The transform step: what each polled record writes and counts.
        self._decider = BatchDecider(self.kafka_config, options, self._sizes, self.log, timeout_s)

    def stop(self) -> None:
        """Ask the run to stop: the open transaction is aborted and nothing more is committed.

        Safe from a signal handler or another thread (it only sets a flag).
        """
        self._stop_requested = True

    def plan(
        self, committed: Mapping[int, int], marks: Mapping[int, tuple[int, int]], partitions: list[int]
    ) -> ReplayPlan:
        """The range each partition replays (:meth:`Preflight.plan`)."""
        return self._preflight.plan(committed, marks, partitions)

    def transactional_id(self, partitions: Sequence[int]) -> str:
        """Stable per prefix (DAG and task), DLQ topic and partition set, so a restarted run fences its zombie."""
        return self._preflight.transactional_id(partitions)

    # -- the run ---------------------------------------------------------------------------------------

    def run(self) -> ReplaySummary:
        """Replay (or, with ``dry_run``, count) every selected record in the planned range.

        The pre-flight, then the loop: the topics, the fenced writer (unless a dry run), the
        replay group's consumer and the plan, all before the first record is read.
        """
        started = time.monotonic()
        preflight = self._preflight
        preflight.open()
        consumer: Consumer | None = None
        writer: TransactionalWriter | None = None
        fatal = False
        try:
            partitions = preflight.check_topics()
            if not self.options.dry_run:
                writer = preflight.writer(partitions)
                preflight.fence(writer)
            consumer = preflight.consumer()
            plan, summary = preflight.start(consumer, partitions, self.run_id)
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
        self._decider.close()
        self._preflight.close()

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
        with cyclic_gc_paused(), quick_thread_switches():
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

    def _replay_batches(self, loop: LoopState) -> None:
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
                if self._collect(loop) is Written.STOPPED:
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
    ) -> LoopState:
        """The loop's state at the planned start offsets, with the consumer assigned there."""
        o = self.options
        policy = ReplayPolicy(
            o.dlq_topic,
            self.run_id,
            o.parking_topic,
            o.target_topic,
            o.target_allowlist,
            o.max_replays,
            self.fix,
            self._preflight.topic_exists,
        )
        progress = Progress(
            f"replay {o.dlq_topic}", plan.total, o.progress_interval_s, self.log.info, dry_run=o.dry_run
        )
        committed = {p: plan.start_offsets[p] for p in plan.partitions}
        background = None if writer is None else BackgroundWriter(writer)
        loop = LoopState(consumer, writer, background, plan, summary, policy, progress, committed, dict(committed))
        loop.pace, loop.halted, loop.batch_size = self._pacing(loop)
        self._rewind(loop)
        return loop

    def _pacing(self, loop: LoopState) -> tuple[Callable[[], bool] | None, Callable[[], bool] | None, int]:
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

    def _halted(self, loop: LoopState) -> bool:
        """Whether the writer must stop producing: a stop was asked for, or the loop ended with a batch in flight."""
        return self._stop_requested or loop.abandoned

    def _budget(self, loop: LoopState) -> int | None:
        """How many more records ``max_records`` lets this run select (counting those read but not yet committed)."""
        if self.options.max_records is None:
            return None
        budget = self.options.max_records - loop.summary.selected - loop.pending.selected
        return budget - (0 if loop.in_flight is None else loop.in_flight.counts.selected)

    def _read_enough(self, loop: LoopState, budget: int | None) -> bool:
        """Whether to read no further: the planned ends were reached, a stop, ``max_records`` or idleness."""
        return not loop.reading or loop.idle or self._stop_requested or (budget is not None and budget <= 0)

    def _wind_down(self, loop: LoopState) -> bool:
        """With nothing more to read, collect the batch in flight; False once the loop is over.

        After an abort the loop reads again from the committed offsets (its idleness forgotten);
        with nothing in flight it ends, and the summary says why.
        """
        if loop.in_flight is None:
            self._note_end(loop)
            return False
        written = self._collect(loop)
        if written is Written.STOPPED:
            return False
        loop.idle = loop.idle and written is Written.COMMITTED
        return True

    def _note_end(self, loop: LoopState) -> None:
        """Say in the summary why the loop ended before the planned end offsets (it stays completed otherwise)."""
        if loop.idle:
            loop.summary.status = "idle"
            loop.summary.notes.append(f"no record arrived for {self.idle_timeout_s:.0f} s before the planned end")
        elif loop.reading:
            loop.summary.status = "stopped" if self._stop_requested else "max_records"

    def _decide(self, loop: LoopState, messages: Sequence[Any], budget: int | None) -> Batch | None:
        """Decide each polled record (:meth:`BatchDecider.decide`); None when the positions did not move.

        Idleness is timed from the last batch that moved them; an empty poll may still end a
        partition whose last offsets are commit markers.
        """
        outputs, counts, positions = self._decider.decide(messages, loop.positions, loop.ends, loop.policy, budget)
        if not messages:
            self._past_control_records(loop.consumer, positions, loop.ends)
        if positions == loop.positions:
            loop.idle = time.monotonic() - loop.last_progress > self.idle_timeout_s
            return None
        loop.last_progress = time.monotonic()
        return Batch(outputs, counts, positions)

    def _write(self, loop: LoopState, batch: Batch) -> bool:
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
            if written is Written.STOPPED:
                return False
            if written is Written.REWOUND:
                return True  # this batch is read again from the committed offsets
        offsets = self._offsets(loop.positions, loop.committed)
        metadata = loop.consumer.consumer_group_metadata()
        loop.background.submit(batch.outputs, offsets, metadata, loop.pace, loop.halted)
        loop.in_flight, loop.pending = InFlight(dict(loop.positions), loop.pending), BatchCounts()
        return True

    def _collect(self, loop: LoopState) -> Written:
        """Wait for the batch in flight; settle it once committed, or back off and rewind after an abort."""
        assert loop.background is not None and loop.in_flight is not None and loop.writer is not None
        at, counts = loop.in_flight
        loop.in_flight = None
        try:
            if not loop.background.result():
                return self._stopped(loop)
        except BrokerUnreachable as error:
            raise unreachable(error, self.options, loop.writer.commits, loop.summary, loop.committed) from error
        except BatchAborted as error:
            return self._retry_aborted(loop, error)
        loop.attempt = 0
        self._settle(loop, at, counts)
        return Written.COMMITTED

    def _retry_aborted(self, loop: LoopState, error: BatchAborted) -> Written:
        """Rewind to the committed offsets after Connect's backoff; fail once ``max_batch_attempts`` aborts.

        An abort caused by records too large for Kafka is not retried as it was: the refused
        records are remembered by their DLQ coordinates and the batch is read again at once,
        parking them without their value (or, refused again, dropping them). It does not count
        as an attempt: each record can be refused at most twice, so the run always gets past it.
        """
        if error.refused and self._sizes.learn(error.refused):
            loop.summary.aborted_batches += 1
            report_refused(self.options, loop.committed, error, self.log)
            self._rewind(loop)
            return Written.REWOUND
        loop.attempt += 1
        loop.summary.aborted_batches += 1
        if loop.attempt >= self.max_batch_attempts:
            raise retries_exhausted(self.options, loop.committed, loop.attempt, error) from error
        if not self._backoff(loop.attempt):
            return self._stopped(loop)
        self._rewind(loop)
        return Written.REWOUND

    def _stopped(self, loop: LoopState) -> Written:
        """A stop came first: the positions fall back to the committed offsets, so nothing more is committed."""
        loop.positions.update(loop.committed)
        loop.summary.status = "stopped"
        return Written.STOPPED

    def _rewind(self, loop: LoopState) -> None:
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

    def _settle(self, loop: LoopState, at: Mapping[int, int], counts: BatchCounts) -> None:
        """Record a committed batch (or, in a dry run, a read one): its offsets, its counts, the progress line.

        Also the cyclic collector's young-generation pass every GC_INTERVAL_S, while it is paused.
        """
        loop.committed.update(at)
        report_dropped(counts, loop.summary, self.log)
        loop.summary.add(counts)
        summary = loop.summary
        loop.progress.update(summary.scanned, summary.replayed, summary.parked, summary.dropped)
        loop.collected = collect_young(loop.collected)

    def _commit_remaining_offsets(self, loop: LoopState, writer: TransactionalWriter) -> None:
        """Commit the positions past the last records, which wrote nothing, in an offsets-only transaction.

        An abort here loses nothing: those records are read again by the next run, and the summary says so.
        """
        if loop.positions == loop.committed:
            return
        try:
            writer.write([], self._offsets(loop.positions, loop.committed), loop.consumer.consumer_group_metadata())
            self._settle(loop, loop.positions, loop.pending)
        except BrokerUnreachable as error:
            raise unreachable(error, self.options, writer.commits, loop.summary, loop.committed) from error
        except BatchAborted as error:
            loop.summary.notes.append(
                f"the offsets of the last records, which wrote nothing, were not committed: {error}"
            )

    def _read_back_committed(self, loop: LoopState, writer: TransactionalWriter) -> None:
        """Report the offsets the broker really holds for the group (:meth:`_confirm_committed`)."""
        moved = {p for p, n in loop.committed.items() if n != loop.plan.start_offsets[p]}
        try:
            loop.summary.committed_offsets = self._confirm_committed(loop.consumer, loop.committed, moved, loop.summary)
        except KafkaException as error:
            failed = BrokerUnreachable(
                f"the broker was unreachable: reading the replay group's offsets back failed ({describe_error(error)})"
            )
            raise unreachable(failed, self.options, writer.commits, loop.summary, loop.committed) from error

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

    def _past_control_records(self, consumer: Consumer, positions: dict[int, int], ends: Mapping[int, int]) -> None:
        """Move a partition to its end when the consumer is there but the last offsets were no records.

        A transactionally written DLQ ends with commit markers: they take offsets below the end
        offset but are never returned, so only the consumer's position shows the partition is done.
        """
        waiting = [TopicPartition(self.options.dlq_topic, p) for p, n in positions.items() if n < ends[p]]
        for tp in consumer.position(waiting) if waiting else []:
            if tp.offset >= ends[tp.partition]:
                positions[tp.partition] = ends[tp.partition]

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


def _fix_of(options: ReplayOptions, registry: RegistrySettings | Mapping[str, Any] | None) -> FixFn | None:
    """The options' fix, wrapped to decode and re-encode registry values when a format is set.

    Without a fix the formats change nothing (the bytes go back as they are) and need no
    registry; with one they need its settings, checked here before any record is read.
    """
    if options.fix is None or not options.formats:
        return options.fix
    named = ", ".join(f"{part}_format={fmt!r}" for part, fmt in options.formats.items())
    if registry is None:
        raise InvalidReplayOptions(
            [f"{named}: a fix on decoded values needs a Schema Registry; set schema_registry_conn_id"]
        )
    try:
        settings = registry if isinstance(registry, RegistrySettings) else RegistrySettings.from_mapping(registry)
    except InvalidRegistrySettings as error:
        raise InvalidReplayOptions([f"{named}: {problem}" for problem in error.problems]) from None
    return RegistryValues(settings, options.formats, options.reencode_with).wrap(options.fix)
