"""``kerr_kafka``: a bounded Kafka source for Spark 4 written as a Python Data Source.

It needs no JVM connector jar: the driver plans ``[start, end)`` offset ranges,
the executors read them with confluent-kafka and hand Spark Arrow record batches.
start is the consumer group's committed offset (or earliest, latest, or the first
offset at a timestamp); end is the high watermark at planning time, so a run is a
bounded batch like ``Trigger.AvailableNow``. Partitions are split into several
input partitions only so every core works (``minPartitions``) and no task holds more
than ``maxRecordsPerPartition``: each piece starts its own consumer mid-partition, whose
fetches run past the piece's end (librdkafka prefetches, and some brokers answer a
fetch up to the partition's end), so a piece costs reads that only its neighbour
uses. Measured on 1,000,000 records in two partitions (``benchmarks/spark_job.py``):
six pieces of 167k cost the broker 1.5x the CPU of two of 500k, and the job 25 %
of its speed.

Options (``spark.read.format("kerr_kafka").option(...)``):
``subscribe`` (comma-separated topics), ``kafka.<librdkafka key>`` (client config,
``kafka.bootstrap.servers`` required), ``groupId``, ``startingOffsets``
(``group`` - the default when ``groupId`` is set -, ``earliest``, ``latest``),
``startingTimestamp`` (epoch ms; overrides startingOffsets),
``maxRecordsPerPartition`` (split size, default 2000000), ``minPartitions``
(default 2), ``offsetRanges`` (JSON from :func:`ranges_to_json`: read exactly
these ranges, for a job that planned them itself to commit them afterwards), and
``processBatches`` (the dotted path of a function ``(batches, processArgument) ->
rows``: each read task hands its Arrow batches to it and yields what it returns, in the
schema given with ``.schema(...)``; the error-aware job runs its pipeline so, inside the
read, without sending every record through the JVM to a second Python worker).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from airflow_kerr.callables import import_callable
from airflow_kerr.kafka.offsets import group_offsets, offset_consumer, topic_partitions, watermarks
from airflow_kerr.spark.spec import STARTING_OFFSETS

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
except ImportError:  # pragma: no cover - planning helpers stay usable without pyspark
    DataSource = object  # type: ignore[assignment,misc]
    DataSourceReader = object  # type: ignore[assignment,misc]
    InputPartition = object  # type: ignore[assignment,misc]

FORMAT_NAME = "kerr_kafka"
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestamp_type int, headers array<struct<key: string, value: binary>>"
)
DEFAULT_MAX_RECORDS_PER_PARTITION = 2_000_000
ARROW_BATCH_ROWS = 8192


class KafkaSourceOptionError(ValueError):
    """A kerr_kafka option is missing or outside what is accepted."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One input partition: records ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return max(0, self.end - self.start)


def ranges_to_json(ranges: Sequence[OffsetRange]) -> str:
    return json.dumps([asdict(r) for r in ranges])


def ranges_from_json(text: str) -> list[OffsetRange]:
    try:
        return [
            OffsetRange(str(r["topic"]), int(r["partition"]), int(r["start"]), int(r["end"])) for r in json.loads(text)
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise KafkaSourceOptionError(
            f'offsetRanges={text[:200]!r}: expected a JSON list of {{"topic", "partition", "start", "end"}} objects'
        ) from exc


def plan_offset_ranges(
    kafka_config: Mapping[str, Any],
    topics: Sequence[str],
    starting_offsets: str = "earliest",
    group_id: str | None = None,
    starting_timestamp_ms: int | None = None,
    timeout_s: float = 30.0,
) -> list[OffsetRange]:
    """Plan one ``[start, end)`` range per topic partition; end is the high watermark now."""
    if starting_offsets not in STARTING_OFFSETS:
        raise KafkaSourceOptionError(
            f"startingOffsets={starting_offsets!r}: expected one of {', '.join(STARTING_OFFSETS)}"
        )
    if starting_offsets == "group" and not group_id:
        raise KafkaSourceOptionError(
            "startingOffsets='group' needs groupId: the consumer group whose offsets to start at"
        )
    lookup = offset_consumer(kafka_config)
    try:
        partitions = [tp for topic in topics for tp in topic_partitions(lookup, topic, timeout_s)]
        marks = watermarks(lookup, partitions, timeout_s)
        starts = {key: low for key, (low, _) in marks.items()}
        if starting_timestamp_ms is not None:
            found = lookup.offsets_for_times(
                [TopicPartition(t, p, starting_timestamp_ms) for t, p in partitions], timeout=timeout_s
            )
            for tp in found:
                starts[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else marks[(tp.topic, tp.partition)][1]
        elif starting_offsets == "latest":
            starts = {key: high for key, (_, high) in marks.items()}
        elif starting_offsets == "group":
            starts.update(group_offsets(kafka_config, str(group_id), partitions, timeout_s))
    finally:
        lookup.close()
    ranges = []
    for key, (low, high) in sorted(marks.items()):
        start = min(max(starts[key], low), high)
        ranges.append(OffsetRange(key[0], key[1], start, high))
    return ranges


def split_ranges(ranges: Sequence[OffsetRange], max_records: int, min_partitions: int) -> list[OffsetRange]:
    """Split ranges so no piece holds more than ``max_records`` and there are at least ``min_partitions``."""
    total = sum(r.count for r in ranges)
    if total == 0:
        return [r for r in ranges if r.count > 0]
    target = max(1, min(max_records, math.ceil(total / max(1, min_partitions))))
    pieces: list[OffsetRange] = []
    for r in ranges:
        if r.count == 0:
            continue
        n = math.ceil(r.count / target)
        step = math.ceil(r.count / n)
        pieces.extend(OffsetRange(r.topic, r.partition, s, min(s + step, r.end)) for s in range(r.start, r.end, step))
    return pieces


def read_range(
    kafka_config: Mapping[str, Any],
    offset_range: OffsetRange,
    poll_batch: int = 1000,
    timeout_s: float = 60.0,
) -> Iterator[list[Any]]:
    """Yield the records of one range as lists of confluent-kafka messages, in offset order.

    A range ends at its planned end, or earlier at partition EOF (the last offsets
    of a transactional topic are markers no consumer sees). A broker that sends
    nothing for ``timeout_s`` fails the read rather than return a short batch.

    Each ``consume`` asks for no more records than the range has left: librdkafka's
    ``consume(n, timeout)`` returns only once it holds ``n`` messages or the timeout
    passes, so asking for a full ``poll_batch`` at a range's tail waited out the whole
    second for records that are not the range's, in every task (64 source partitions:
    64 idle seconds, ``benchmarks/scaling.py``).
    """
    if offset_range.count == 0:
        return
    consumer = Consumer(
        {
            **kafka_config,
            "group.id": kafka_config.get("group.id", "kerr-source-reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        start = offset_range.start if offset_range.start >= 0 else OFFSET_BEGINNING
        consumer.assign([TopicPartition(offset_range.topic, offset_range.partition, start)])
        last_progress = time.monotonic()
        expected = offset_range.start  # the next offset the range reads: a marker at most lies before it
        while True:
            messages = consumer.consume(_wanted(offset_range, expected, poll_batch), timeout=1.0)
            if not messages:
                if time.monotonic() - last_progress > timeout_s:
                    raise TimeoutError(
                        f"no records from {offset_range.topic}[{offset_range.partition}] for {timeout_s:.0f} s "
                        f"while reading offsets [{offset_range.start}, {offset_range.end})"
                    )
                continue
            last_progress = time.monotonic()
            last_offset = messages[-1].offset()
            expected = last_offset + 1 if last_offset is not None and last_offset >= 0 else expected
            if last_offset is not None and last_offset < offset_range.end - 1 and not any(map(Message.error, messages)):
                yield messages  # the common case, checked in C: no error and the range goes on past this batch
                continue
            batch = []
            done = False
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done = True
                        break
                    raise KafkaException(error)
                offset = int(message.offset() or 0)
                if offset >= offset_range.end:
                    done = True
                    break
                batch.append(message)
                done = offset >= offset_range.end - 1
            if batch:
                yield batch
            if done:
                return
    finally:
        consumer.close()


def _wanted(offset_range: OffsetRange, expected: int, poll_batch: int) -> int:
    """Records to ask ``consume`` for: a batch, or what is left of the range before ``expected`` reaches its end."""
    if expected < 0:  # the range starts at the partition's beginning, wherever that is
        return poll_batch
    return max(1, min(poll_batch, offset_range.end - expected))


def _arrow_schema() -> Any:
    """The Arrow schema Spark expects for :data:`SCHEMA` (microsecond timestamps, list items named element)."""
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestamp_type", pa.int32()),
            ("headers", pa.list_(pa.field("element", header))),
        ]
    )


def messages_to_arrow(messages: Sequence[Any], topic: str | None = None, partition: int | None = None) -> Any:
    """One Arrow record batch in :data:`SCHEMA`'s shape from confluent-kafka messages.

    ``topic`` and ``partition``, when the caller knows every message is from that one
    partition (a range's read), are repeated rather than read message by message.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _arrow_schema()
    count = len(messages)
    # map over the unbound methods: a C loop, where a list comprehension would run Python bytecode per message.
    stamps = list(map(Message.timestamp, messages))
    kind = pa.array([kind for kind, _ in stamps], pa.int32())
    millis = [ms for _, ms in stamps]
    no_timestamp = pc.equal(kind, 0)
    micros = pc.if_else(no_timestamp, pa.scalar(None, pa.int64()), pc.multiply(pa.array(millis, pa.int64()), 1000))
    # confluent-kafka numbers the types 0 (none), 1 (CreateTime), 2 (LogAppendTime); Spark -1, 0 and 1.
    spark_kind = pc.if_else(pc.less_equal(kind, 2), pc.subtract(kind, 1), -1)
    arrays = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.repeat(topic, count) if topic is not None else pa.array(list(map(Message.topic, messages)), pa.string()),
        pa.repeat(pa.scalar(partition, pa.int32()), count)
        if partition is not None
        else pa.array(list(map(Message.partition, messages)), pa.int32()),
        pa.array(list(map(Message.offset, messages)), pa.int64()),
        micros.cast(schema.field("timestamp").type),
        spark_kind.cast(pa.int32()),
        _headers_to_arrow(list(map(Message.headers, messages)), schema.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _headers_to_arrow(headers: list[Any], kind: Any) -> Any:
    """The headers column built from flat key and value arrays: a dict per header costs more than the record."""
    import pyarrow as pa

    keys: list[str] = []
    values: list[bytes | None] = []
    bounds = [0]
    if any(headers):
        for pairs in headers:
            if pairs:
                for key, value in pairs:
                    keys.append(key)
                    values.append(value)
            bounds.append(len(keys))
    else:
        bounds *= len(headers) + 1
    entry = kind.value_type
    items = pa.StructArray.from_arrays(
        [pa.array(keys, entry.field("key").type), pa.array(values, entry.field("value").type)], fields=list(entry)
    )
    return pa.ListArray.from_arrays(pa.array(bounds, pa.int32()), items, type=kind)


def kafka_config_from_options(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from ``kafka.``-prefixed options; bootstrap servers are required."""
    config = {key[len("kafka.") :]: value for key, value in options.items() if key.startswith("kafka.")}
    if not config.get("bootstrap.servers"):
        raise KafkaSourceOptionError("kafka.bootstrap.servers is required: the brokers to read from")
    return config


def _int_option(options: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise KafkaSourceOptionError(f"{key}={raw!r}: expected a whole number >= {minimum}") from None
    if value < minimum:
        raise KafkaSourceOptionError(f"{key}={raw!r}: expected a whole number >= {minimum}")
    return value


class KafkaSourceReader(DataSourceReader):
    """Plans offset ranges on the driver and reads them on the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.kafka_config = kafka_config_from_options(options)
        self.process_batches = options.get("processBatches")
        self.process_argument = options.get("processArgument", "")
        self.max_records = _int_option(options, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION, 1)
        self.min_partitions = _int_option(options, "minPartitions", 2, 1)
        if "offsetRanges" in options:
            self.ranges = ranges_from_json(options["offsetRanges"])
            return
        topics = [t.strip() for t in options.get("subscribe", "").split(",") if t.strip()]
        if not topics:
            raise KafkaSourceOptionError("subscribe is required: a comma-separated list of topics (or offsetRanges)")
        group_id = options.get("groupId")
        timestamp = options.get("startingTimestamp")
        self.ranges = plan_offset_ranges(
            self.kafka_config,
            topics,
            starting_offsets=options.get("startingOffsets", "group" if group_id else "earliest"),
            group_id=group_id,
            starting_timestamp_ms=_int_option(options, "startingTimestamp", 0, 0) if timestamp else None,
        )

    def partitions(self) -> Sequence[OffsetRange]:
        return split_ranges(self.ranges, self.max_records, self.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, OffsetRange):
            raise TypeError(f"kerr_kafka reads OffsetRange partitions, got {type(partition).__name__}")
        batches = self.arrow_batches(partition)
        if self.process_batches is None:
            yield from batches
            return
        yield from import_callable(self.process_batches)(batches, self.process_argument)

    def arrow_batches(self, partition: OffsetRange) -> Iterator[Any]:
        """The range's records as Arrow batches of about :data:`ARROW_BATCH_ROWS` rows."""
        pending: list[Any] = []
        for messages in read_range(self.kafka_config, partition):
            pending.extend(messages)
            if len(pending) >= ARROW_BATCH_ROWS:
                yield messages_to_arrow(pending, partition.topic, partition.partition)
                pending = []
        if pending:
            yield messages_to_arrow(pending, partition.topic, partition.partition)


class KafkaSource(DataSource):
    """The ``kerr_kafka`` format: a bounded, offset-range Kafka read."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        if "processBatches" in self.options:
            raise KafkaSourceOptionError(
                "processBatches needs the schema of the rows it yields: spark.read.format('kerr_kafka').schema(...)"
            )
        return SCHEMA

    def reader(self, schema: Any) -> KafkaSourceReader:
        return KafkaSourceReader(self.options)


def register(spark: Any) -> None:
    """Make ``spark.read.format("kerr_kafka")`` available in this session."""
    spark.dataSource.register(KafkaSource)
