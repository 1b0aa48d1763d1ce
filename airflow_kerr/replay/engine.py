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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from enum import Enum
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.errors import backoff_delay_ms
from airflow_kerr.errors import parse_dead_letter as parse
from airflow_kerr.kafka.client_errors import KafkaErrorKind, classify_kafka_error
from airflow_kerr.kafka.offsets import OffsetLookupError, offset_consumer, topic_partitions, watermarks
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.pacing import STOP_CHECK_S, Progress, RateLimiter
from airflow_kerr.replay.policy import ReplayPolicy, ReplayRecord, decide
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


def _producer(config: dict[str, Any]) -> ProducerLike:
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
        return self._known_topics[topic]

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
        """Start at the committed offset (or the partition start), clipped to the offset range."""
        selection = self.options.selection
        starts: dict[int, int] = {}
        ends: dict[int, int] = {}
        for p in partitions:
            low, high = marks[p]
            start = committed.get(p, -1)
            start = max(low if start < 0 else start, low, selection.start_offset or 0)
            end = high if selection.end_offset is None else min(high, selection.end_offset)
            starts[p], ends[p] = min(start, end), end
        return ReplayPlan(
            partitions,
            starts,
            ends,
            self.transactional_id(partitions),
            not self._topic_exists(self.options.parking_topic),
        )

    def transactional_id(self, partitions: Sequence[int]) -> str:
        """Stable per prefix (DAG and task), DLQ topic and partition set, so a restarted run fences its zombie."""
        return f"{self.transactional_id_prefix}.{self.options.dlq_topic}.p{partition_ranges(partitions)}"

    # -- the run ---------------------------------------------------------------------------------------

    def run(self) -> ReplaySummary:
        """Replay (or, with ``dry_run``, count) every selected record in the planned range."""
        o = self.options
        started = time.monotonic()
        self._metadata = offset_consumer(self.kafka_config)
        consumer: Consumer | None = None
        writer: TransactionalWriter | None = None
        fatal = False
        try:
            partitions = self._check_topics(self._metadata)
            tid = self.transactional_id(partitions)
            if not o.dry_run:
                budget = o.transaction_timeout_s
                writer = TransactionalWriter(
                    self.producer_factory(transactional_config(self.kafka_config, tid, budget)),
                    transaction_timeout_s=budget,
                )
                try:
                    writer.init()
                except BrokerUnreachable as error:
                    raise BrokerUnreachable(f"{error}. Nothing was committed by this run.") from error
            consumer = Consumer(
                {
                    **self.kafka_config,
                    "group.id": o.group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": False,
                }
            )
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
            )
            self._prepare_parking(plan, summary)
            self.log.info(
                "replaying %s (partitions %s, %d records to read) with group %s, transactional.id %s%s",
                o.dlq_topic,
                partition_ranges(partitions),
                plan.total,
                o.group_id,
                tid,
                " (dry run)" if o.dry_run else "",
            )
            self._loop(consumer, writer, plan, summary)
            summary.seconds = round(time.monotonic() - started, 3)
            if writer is not None:
                summary.transactions, summary.commit_retries = writer.commits, writer.commit_retries
            return summary
        except ReplayFatalError:
            fatal = True
            raise
        finally:
            if writer is not None and writer.in_transaction and not fatal:
                try:
                    writer.abort()
                except ReplayFatalError as error:
                    self.log.warning("could not abort the open transaction: %s", error)
            if writer is not None:
                writer.close()
            if consumer is not None:
                consumer.close()
            self._metadata.close()
            self._metadata = None

    def _prepare_parking(self, plan: ReplayPlan, summary: ReplaySummary) -> None:
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

    def _loop(
        self, consumer: Consumer, writer: TransactionalWriter | None, plan: ReplayPlan, summary: ReplaySummary
    ) -> None:
        """Read, decide and write batch by batch until the planned ends, a stop, ``max_records`` or idleness.

        One batch is written in the background while the next is read and decided.
        ``positions`` run ahead of ``committed`` while a batch is in flight, or while batches
        that wrote nothing (every record skipped or dropped) wait to ride on the next
        transaction. ``pending`` counts what was read and not yet handed to a transaction,
        ``in_flight`` holds the positions and counts of the batch being written; counts reach
        the summary only once their transaction committed.
        """
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
        ends = plan.end_offsets
        committed = {p: plan.start_offsets[p] for p in plan.partitions}
        positions = dict(committed)
        pending = BatchCounts()
        in_flight: tuple[dict[int, int], BatchCounts] | None = None
        background = None if writer is None else BackgroundWriter(writer)
        attempt = 0
        abandoned = False

        def stopped() -> bool:
            return self._stop_requested or abandoned

        def carry_on() -> bool:
            return not stopped()

        # Called before each record is produced, so a stop aborts the open transaction.
        pace: Callable[[], bool] = carry_on
        batch_size = o.batch_size
        if o.max_records_per_second is not None:
            pace = RateLimiter(o.max_records_per_second, stopped=stopped).acquire
            batch_size = min(batch_size, max(1, int(o.max_records_per_second)))
        progress = Progress(
            f"replay {o.dlq_topic}", plan.total, o.progress_interval_s, self.log.info, dry_run=o.dry_run
        )

        def rewind() -> None:
            positions.update(committed)
            pending.clear()
            consumer.assign(
                [TopicPartition(o.dlq_topic, p, positions[p]) for p in plan.partitions if positions[p] < ends[p]]
            )

        collected = time.monotonic()

        def settle(at: Mapping[int, int], counts: BatchCounts) -> None:
            nonlocal collected
            committed.update(at)
            summary.add(counts)
            progress.update(summary.scanned, summary.replayed, summary.parked, summary.dropped)
            if time.monotonic() - collected > GC_INTERVAL_S:
                gc.collect(1)
                collected = time.monotonic()

        def collect() -> _Written:
            """Wait for the batch in flight; on an abort, back off and rewind to the committed offsets."""
            nonlocal in_flight, attempt
            assert background is not None and in_flight is not None and writer is not None
            at, counts = in_flight
            in_flight = None
            try:
                if not background.result():
                    positions.update(committed)
                    summary.status = "stopped"
                    return _Written.STOPPED
            except BrokerUnreachable as error:
                raise self._unreachable(error, writer, summary, committed) from error
            except BatchAborted as error:
                attempt += 1
                summary.aborted_batches += 1
                if attempt >= self.max_batch_attempts:
                    raise ReplayRetriesExhausted(
                        f"a batch of {o.dlq_topic} starting at offsets {committed} was aborted {attempt} times; "
                        f"the replay group stays there. Last cause: {error}"
                    ) from error
                if not self._backoff(attempt):
                    positions.update(committed)
                    summary.status = "stopped"
                    return _Written.STOPPED
                rewind()
                return _Written.REWOUND
            attempt = 0
            settle(at, counts)
            return _Written.COMMITTED

        rewind()
        idle = False
        last_progress = time.monotonic()
        collector_was_on = gc.isenabled()
        # A batch keeps thousands of young objects alive until it is written; the cyclic collector,
        # run every 700 allocations, traversed them again and again (15 % of a replay's CPU). Replay
        # objects form no cycles (refcounting frees them), so settle runs a young-generation pass
        # only every GC_INTERVAL_S, for cycles a fix function may leave.
        gc.disable()
        try:
            while True:
                if in_flight is not None and background is not None and background.finished:
                    # Settle a finished batch at once: a failure (an unreachable broker) ends the run now,
                    # not after the reader has waited out its idle timeout.
                    written = collect()
                    if written is _Written.STOPPED:
                        break
                    if written is _Written.REWOUND:
                        continue
                reading = any(positions[p] < ends[p] for p in plan.partitions)
                budget = None
                if o.max_records is not None:
                    budget = o.max_records - summary.selected - pending.selected
                    budget -= 0 if in_flight is None else in_flight[1].selected
                if not reading or idle or self._stop_requested or (budget is not None and budget <= 0):
                    if in_flight is not None:
                        written = collect()
                        if written is _Written.STOPPED:
                            break
                        idle = idle and written is _Written.COMMITTED
                        continue
                    if idle:
                        summary.status = "idle"
                        summary.notes.append(
                            f"no record arrived for {self.idle_timeout_s:.0f} s before the planned end"
                        )
                    elif reading:
                        summary.status = "stopped" if self._stop_requested else "max_records"
                    break
                # Never ask for more than is left, or the last consume waits out its whole timeout.
                left = sum(ends[p] - positions[p] for p in plan.partitions if positions[p] < ends[p])
                messages = consumer.consume(max(1, min(batch_size, left)), 0.5)
                outputs, counts, next_positions = self._process(messages, positions, ends, policy, budget)
                if not messages:
                    self._past_control_records(consumer, next_positions, ends)
                if next_positions == positions:
                    idle = time.monotonic() - last_progress > self.idle_timeout_s
                    continue
                last_progress = time.monotonic()
                positions.update(next_positions)
                pending.merge(counts)
                if background is None:
                    settle(positions, pending)
                    pending.clear()
                    continue
                if not outputs:
                    progress.update(
                        summary.scanned + pending.scanned, summary.replayed, summary.parked, summary.dropped
                    )
                    continue
                if in_flight is not None:
                    written = collect()
                    if written is _Written.STOPPED:
                        break
                    if written is _Written.REWOUND:
                        continue
                background.submit(
                    outputs, self._offsets(positions, committed), consumer.consumer_group_metadata(), pace
                )
                in_flight, pending = (dict(positions), pending), BatchCounts()
        finally:
            abandoned = True
            if background is not None:
                background.close()
            if collector_was_on:
                gc.enable()
        if writer is not None and positions != committed:
            try:
                writer.write([], self._offsets(positions, committed), consumer.consumer_group_metadata())
                settle(positions, pending)
            except BrokerUnreachable as error:
                raise self._unreachable(error, writer, summary, committed) from error
            except BatchAborted as error:
                summary.notes.append(
                    f"the offsets of the last records, which wrote nothing, were not committed: {error}"
                )
        if writer is not None:
            moved = {p for p, n in committed.items() if n != plan.start_offsets[p]}
            try:
                summary.committed_offsets = self._confirm_committed(consumer, committed, moved, summary)
            except KafkaException as error:
                failed = BrokerUnreachable(
                    f"the broker was unreachable: reading the replay group's offsets back failed "
                    f"({describe_error(error)})"
                )
                raise self._unreachable(failed, writer, summary, committed) from error
        progress.update(summary.scanned, summary.replayed, summary.parked, summary.dropped, force=True)

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
    ) -> tuple[list[ReplayRecord], BatchCounts, dict[int, int]]:
        """Decide every record of one polled batch, in order; stop early when ``budget`` selections are used.

        The hot loop of a replay: names are bound to locals because attribute look-ups per
        record are a visible share of its cost.
        """
        selection = self.options.selection
        matches = None if selection.everything else selection.matches
        dlq = self.options.dlq_topic
        counts = BatchCounts()
        count = counts.count
        outputs: list[ReplayRecord] = []
        written = outputs.append
        next_positions = dict(positions)
        scanned = selected = 0
        limit = -1 if budget is None else budget
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
                headers = message.headers() or []
            except Exception as error:  # header names that are not UTF-8: the client cannot decode them
                headers, unreadable = [], error
            else:
                unreadable = None
            kind, ts = message.timestamp()
            letter = parse(
                headers,
                message.key(),
                message.value(),
                topic=dlq,
                partition=partition,
                offset=offset,
                timestamp=ts if kind and ts >= 0 else None,
            )
            if unreadable is not None:
                problem = f"the record's headers cannot be read ({describe_error(unreadable)}); parked without them"
                letter = replace(letter, malformed_headers={"headers": problem})
            if matches is None or matches(letter):
                if selected == limit:
                    break
                selected += 1
                decision = decide(letter, headers, policy)
                count(decision, letter)
                if decision.record is not None:
                    written(decision.record)
            scanned += 1
            next_positions[partition] = offset + 1
        counts.scanned, counts.selected = scanned, selected
        return outputs, counts, next_positions

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
