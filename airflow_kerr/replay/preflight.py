"""A replay's pre-flight: everything settled before the first dead letter is read.

The topics the options name are checked (all problems reported at once), the range of each
DLQ partition is planned from the replay group's committed offset and the watermarks, a
missing parking topic is created, and the transactional producer is set up and fenced with
``init_transactions``, so an older replay with the same ``transactional.id`` stops before
this one reads. Kept apart from the loop (:mod:`airflow_kerr.replay.engine`) so that the
loop reads as confluent-kafka's exactly-once example, and the checks that may refuse a run
read as such.

The metadata consumer opened here stays open for the whole run: the policy asks
:meth:`Preflight.topic_exists` about each topic a record is routed to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from airflow_kerr.kafka.offset_spans import hull
from airflow_kerr.kafka.offsets import OffsetLookupError, offset_consumer, topic_partitions, watermarks
from airflow_kerr.replay.failures import LogLike, fence_failed
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.size import SizeLimits, message_max_bytes
from airflow_kerr.replay.summary import ReplayPlan, ReplaySummary, partition_ranges
from airflow_kerr.replay.transactions import (
    BrokerUnreachable,
    ProducerLike,
    TransactionalWriter,
    describe_error,
    transactional_config,
)


def default_producer(config: dict[str, Any]) -> ProducerLike:
    """confluent-kafka's ``Producer``, the default ``producer_factory``."""
    producer: Any = Producer(config)
    return producer


class Preflight:
    """The checks, the plan and the fenced writer of one replay; :meth:`open` first, :meth:`close` last.

    ``sizes`` is built here because the topics' own ``max.message.bytes`` are read with this
    class's admin client; the batch decider and the loop share it.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        options: ReplayOptions,
        *,
        transactional_id_prefix: str,
        log: LogLike,
        producer_factory: Callable[[dict[str, Any]], ProducerLike],
        timeout_s: float,
    ) -> None:
        self.kafka_config = dict(kafka_config)
        self.options = options
        self.transactional_id_prefix = transactional_id_prefix
        self.log = log
        self.producer_factory = producer_factory
        self.timeout_s = timeout_s
        self._known_topics: dict[str, bool] = {}
        self._listed_partitions: dict[str, list[int]] = {}
        self._metadata: Consumer | None = None
        #: How many partitions the whole DLQ has (a fanned-out task reads only some of them).
        self.dlq_partition_count = 0
        self._admin: AdminClient | None = None
        #: Records too large to write: checked before producing, learnt from the broker's refusals.
        self.sizes = SizeLimits(message_max_bytes(self.kafka_config), self._topic_max_message_bytes)

    def open(self) -> None:
        """Open the metadata consumer the topic checks and the offset look-ups use."""
        self._metadata = offset_consumer(self.kafka_config)

    def close(self) -> None:
        """Close the metadata consumer; the run is over."""
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    # -- topics ----------------------------------------------------------------------------------------

    def topic_exists(self, topic: str) -> bool:
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
            self.sizes.topic_limit(topic)
        return exists

    def check_topics(self) -> list[int]:
        """The DLQ's partitions; every unknown topic the options name is reported at once."""
        o = self.options
        assert self._metadata is not None
        problems: list[str] = []
        partitions: list[int] = []
        # The snapshot is needed anyway (for the parking topic); it usually names the DLQ's
        # partitions too, which saves a second metadata round trip.
        self.topic_exists(o.parking_topic)
        try:
            partitions = self._listed_partitions.get(o.dlq_topic) or [
                p for _, p in topic_partitions(self._metadata, o.dlq_topic, self.timeout_s)
            ]
        except OffsetLookupError as error:
            problems.append(f"dlq_topic={o.dlq_topic!r}: {error}")
        if o.target_topic and not self.topic_exists(o.target_topic):
            problems.append(f"target_topic={o.target_topic!r}: the topic does not exist; create it first")
        if not o.target_topic:
            missing = sorted(t for t in o.selection.source_topics if not self.topic_exists(t))
            if missing:
                problems.append(
                    f"source_topics={sorted(o.selection.source_topics)!r}: {missing!r} do not exist, so their "
                    "records cannot go back; create them or set target_topic"
                )
        self.dlq_partition_count = len(partitions)
        if o.partitions is not None and partitions:
            unknown = sorted(set(o.partitions) - set(partitions))
            if unknown:
                problems.append(
                    f"partitions={partition_ranges(o.partitions)!r}: {o.dlq_topic} has no partition "
                    f"{partition_ranges(unknown)}; it has {partition_ranges(partitions)}"
                )
            partitions = [p for p in partitions if p in o.partitions]
        if problems:
            raise InvalidReplayOptions(problems)
        return partitions

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

    # -- the plan --------------------------------------------------------------------------------------

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
            spans = selection.offsets_of(p)
            if spans is not None:  # one run's dead letters: read no further than they reach
                covered = hull(spans) or (low, low)
                start, end = max(start, covered[0]), min(end, covered[1])
            starts[p], ends[p] = min(start, end), end
        return ReplayPlan(
            partitions,
            starts,
            ends,
            self.transactional_id(partitions),
            not self.topic_exists(self.options.parking_topic),
            expired,
        )

    def transactional_id(self, partitions: Sequence[int]) -> str:
        """Stable per prefix (DAG and task), DLQ topic and partition set, so a restarted run fences its zombie."""
        return f"{self.transactional_id_prefix}.{self.options.dlq_topic}.p{partition_ranges(partitions)}"

    def start(self, consumer: Consumer, partitions: list[int], run_id: str) -> tuple[ReplayPlan, ReplaySummary]:
        """Plan the range from the group's committed offsets and the watermarks, before any record is read."""
        o = self.options
        assert self._metadata is not None
        tps = [TopicPartition(o.dlq_topic, p) for p in partitions]
        committed = {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=self.timeout_s)}
        marks = {p: lh for (_, p), lh in watermarks(self._metadata, [(o.dlq_topic, p) for p in partitions]).items()}
        plan = self.plan(committed, marks, partitions)
        summary = ReplaySummary(
            run_id,
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

    def _prepare_parking(self, plan: ReplayPlan, summary: ReplaySummary) -> None:
        """Create a missing parking topic before the first batch, so parking a record never fails on it."""
        if not plan.create_parking_topic:
            return
        name = self.options.parking_topic
        if self.options.dry_run:
            summary.notes.append(f"parking topic {name!r} does not exist; a real run creates it")
            return
        count = max(self.dlq_partition_count, len(plan.partitions))
        admin = AdminClient(self.kafka_config)
        try:
            admin.create_topics([NewTopic(name, count)])[name].result(self.timeout_s)
        except KafkaException as error:
            # Replay tasks of one fanned-out replay start together: another one may have created it first.
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            self._known_topics[name] = True
            return
        self._known_topics[name] = True
        summary.notes.append(f"created parking topic {name!r} with {count} partitions")
        self.log.info("created the parking topic %s", name)

    # -- the clients -----------------------------------------------------------------------------------

    def fence(self, writer: TransactionalWriter) -> None:
        """``init_transactions`` before any record is read, so an older replay with this ``transactional.id`` stops.

        That older replay (a zombie of a restarted task) is fenced off here: from now on only
        this run can commit the replay group's offsets.
        """
        try:
            writer.init()
        except BrokerUnreachable as error:
            raise fence_failed(error) from error

    def writer(self, partitions: Sequence[int]) -> TransactionalWriter:
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
            **transactional_config(self.kafka_config, self.transactional_id(partitions), budget),
            "on_delivery": delivered,
            "delivery.report.only.error": True,
        }
        made.append(TransactionalWriter(self.producer_factory(config), transaction_timeout_s=budget))
        return made[0]

    def consumer(self) -> Consumer:
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
