"""Sinks (the TASK_PUT stage) and the Kafka producer that carries sink output, DLQ records and metrics.

Every write is asynchronous until :meth:`ProducerChannel.flush` or a sink's
``flush``; a partition task flushes all of them before it reports success, and a
delivery that failed raises there, so the task fails and no offset is committed
past a record that was not written.
"""

from __future__ import annotations

import atexit
import inspect
import json
import logging
import math
import os
import uuid
import weakref
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from airflow_kerr.callables import import_callable
from airflow_kerr.errors import DeadLetterQueueRecord
from airflow_kerr.formats import RegistrySerializer, RegistrySettings, registry_client_for
from airflow_kerr.formats.registry_settings import FORMATS
from airflow_kerr.kafka.idle_clients import IdleClients
from airflow_kerr.kafka.offset_spans import SpanRecorder
from airflow_kerr.kafka.record_size import batch_size, is_size_error, message_max_bytes, record_size
from airflow_kerr.spark.spec import SinkSpec
from airflow_kerr.spark.stages import PipelineRecord

LOG = logging.getLogger("airflow_kerr.spark.sinks")

#: Marks a DLQ record written without the failed record's key and value, because with them it was too large
#: for Kafka; its value says why and where the record is (``too_large: ...; key and value of t/p/o omitted``).
#: Our own namespace, not ``__connect.errors.``: readers that rank a record's header set by that prefix
#: (ours included) would take an extra name there for Connect's set, even on a KIP-1191 (``__dlq.errors.``) record.
HEADER_RECORD_OMITTED = "__kerr.dlq.record.omitted"

#: The DLQ producer's ``compression.type`` when the job's Kafka settings name none (they name one for both).
DEAD_LETTER_COMPRESSION = "lz4"

#: Called once for every DLQ record written without key and value: the record as built, and why.
OnOmitted = Callable[[DeadLetterQueueRecord, str], None]


def without_record(record: DeadLetterQueueRecord, why: str) -> DeadLetterQueueRecord:
    """The DLQ record without the failed record's key and value: its headers, and a marker saying why and where.

    Like a KIP-1191 headers-only record (``copy.record.enable=false``), it carries no key or
    value, so a replay parks it (``no_content``) rather than write an empty record back; the
    failed record itself is still in its source topic at the coordinates the marker names.
    """
    where = record.source or "the failed record"
    marker = f"too_large: {why}; key and value of {where} omitted".encode("utf-8", errors="backslashreplace")
    return replace(record, key=None, value=None, headers=[*record.headers, (HEADER_RECORD_OMITTED, marker)])


class DeliveryFailed(KafkaException):
    """Kafka did not accept records this task produced; the task must fail rather than lose them."""


#: ``json.dumps(value, separators=(",", ":"))`` without building a ``JSONEncoder`` on every call, as ``dumps``
#: does for any non-default argument: the same text for about a microsecond less per record.
_compact_json: Callable[[Any], str] = json.JSONEncoder(separators=(",", ":")).encode


def encode_value(value: Any) -> bytes | None:
    """Bytes as they are, text as UTF-8, anything else as compact JSON; keys and values alike."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return _compact_json(value).encode("utf-8")


class _Deliveries:
    """A producer's ``on_delivery``: calls the channel that holds the producer now (a pooled one changes hands).

    It holds a channel's method weakly. The producer holds this object, so a strong reference made
    channel and producer a cycle, which lives until a garbage collection rather than until the
    channel is dropped: a finished run's producers went on reconnecting to a broker that had stopped.
    A report for a channel that is gone is logged when it is an error.
    """

    def __init__(self, target: Callable[[KafkaError | None, Any], None]) -> None:
        self.target = target

    @property
    def target(self) -> Callable[[KafkaError | None, Any], None] | None:
        return self._target()

    @target.setter
    def target(self, target: Callable[[KafkaError | None, Any], None]) -> None:
        self._target: Callable[[], Callable[[KafkaError | None, Any], None] | None] = (
            weakref.WeakMethod(target) if inspect.ismethod(target) else lambda: target
        )

    def __call__(self, error: KafkaError | None, message: Any) -> None:
        target = self._target()
        if target is not None:
            target(error, message)
        else:
            _dropped_delivery(error, message)


@dataclass(frozen=True)
class _Pooled:
    """An idle producer the pool keeps, with its delivery-report target."""

    producer: Producer
    deliveries: _Deliveries

    def close(self) -> None:
        """Close it; this flushes nothing, as a producer came back only with nothing queued nor unreported."""
        self.producer.close()


class ProducerPool(IdleClients):
    """Idle producers a process keeps between the tasks of one run, so each task does not start its own.

    Why: a new idempotent producer sends nothing until it has its producer id, and librdkafka
    asks for it on a 500 ms timer once a broker connection is up: half a second to a second per
    producer, two per task (sink and DLQ). Spark hands a Python worker one task after another,
    so the job over 1,000,000 records in 64 source partitions waited that out 64 times: about
    half its time (``benchmarks/scaling.py``). A task that succeeded gives its flushed
    producers back (:meth:`ProducerChannel.release`); the next task of the same run with the
    same settings takes them, with their id. Only producers with nothing queued and no
    failure come back.

    Nothing outlives its run for long, nor keeps reconnecting to a broker that is gone
    (:class:`~airflow_kerr.kafka.idle_clients.IdleClients`): the pool's daemon thread closes a
    producer idle for ``idle_s`` whether or not another task comes, another run's producers
    are closed when this run's come back, and the rest when the process exits normally.
    """

    def __init__(self, idle_s: float) -> None:
        super().__init__(POOL_MAX_PRODUCERS, idle_s, name="kerr-producer-pool")

    def take(self, key: Hashable) -> tuple[Producer, _Deliveries] | None:
        """The idle producer kept under ``key``, or None."""
        kept = super().take(key)
        return None if kept is None else (kept.producer, kept.deliveries)

    def give(self, key: str, producer: Producer, deliveries: _Deliveries) -> None:
        """Keep ``producer`` (flushed, nothing queued) for the next task under ``key``; only one run's at a time."""
        run = key.split("|", 1)[0]
        self.drop(lambda other: str(other).split("|", 1)[0] != run)  # another run's: this worker has moved on
        self.put(key, _Pooled(producer, deliveries))


#: How long an idle producer is kept for the run's next task (tasks of one job follow each other within ms).
POOL_IDLE_S = 10.0
#: Idle producers kept at most: a run's tasks use two settings (sink, DLQ), one producer each.
POOL_MAX_PRODUCERS = 8
#: This process's idle producers (a Spark Python worker's, between its tasks).
PRODUCER_POOL = ProducerPool(POOL_IDLE_S)
# A Python process that ends normally closes what it keeps; a forked PySpark worker ends with os._exit,
# which runs no handler, but then the process and its connections are gone at once: nothing reconnects.
atexit.register(PRODUCER_POOL.close_all)


class ProducerChannel:
    """The idempotent producers of one partition task; delivery errors are kept and raised at flush.

    Sink output and metrics go through :attr:`producer`. DLQ records go through their own
    producer (:meth:`open_dead_letters`), compressed with lz4 unless ``compression.type`` is
    configured: a DLQ record carries ten context headers, the stack trace among them, so it
    is about ten times the size of the record it holds, and the traces of a task's failures
    repeat. Compressed, the broker stores and the network carries a fraction of those
    bytes, which measured as most of what a failed record cost beyond the task's own thread.
    Kafka compresses per producer, hence a second one; the sink's output stays as configured.

    A DLQ record too large for Kafka (refused by the client at ``produce()`` or by the broker
    in its delivery report) is written again without the failed record's key and value
    (:func:`without_record`), and ``on_omitted`` told so (the job counts it as a failed DLQ
    write); only if that smaller record is refused too does the task fail. The client's
    limit (``message.max.bytes``) is on the record as it is; the broker's is on the
    compressed batch, so a compressible record may pass it where it would not uncompressed.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        flush_timeout_s: float = 60.0,
        on_omitted: OnOmitted | None = None,
        pool_key: str | None = None,
    ) -> None:
        #: Producers are taken from and given back to PRODUCER_POOL under this key (a run's id), or never if None.
        self.pool_key = pool_key
        self._deliveries: dict[int, tuple[str, _Deliveries]] = {}
        self.failures: list[tuple[str, KafkaError]] = []
        #: DLQ records the broker refused for their size, written again without key and value at the next flush.
        self.oversized: list[tuple[DeadLetterQueueRecord, KafkaError]] = []
        self.on_omitted = on_omitted
        self.message_max_bytes = message_max_bytes(kafka_config)
        self.flush_timeout_s = flush_timeout_s
        self.kafka_config = kafka_config
        self.producer = self._new_producer(kafka_config)
        #: The DLQ records' producer, opened by :meth:`open_dead_letters` or with the first DLQ record.
        self.dead_letters: Producer | None = None
        #: Where each DLQ record landed (partition, offset), from its delivery report: the run's own dead letters.
        self.dead_letter_spans = SpanRecorder()

    def _new_producer(self, kafka_config: Mapping[str, Any], *, report_deliveries: bool = False) -> Producer:
        """An idempotent producer: one the run's previous task gave back (see ProducerPool), else a new one."""
        settings = {
            **kafka_config,
            "enable.idempotence": True,
            "linger.ms": kafka_config.get("linger.ms", 20),
            "delivery.report.only.error": not report_deliveries,
        }
        key = f"{self.pool_key}|{sorted((k, repr(v)) for k, v in settings.items())}"
        kept = PRODUCER_POOL.take(key) if self.pool_key is not None else None
        if kept is not None:
            producer, deliveries = kept
            deliveries.target = self._delivered
        else:
            deliveries = _Deliveries(self._delivered)
            producer = Producer({**settings, "on_delivery": deliveries})
        self._deliveries[id(producer)] = (key, deliveries)
        return producer

    def release(self) -> None:
        """Give the producers back to the pool for the run's next task: only after a flush that left no failure.

        A producer with records still queued, or a channel that saw a delivery fail, is not
        given back: it is closed with the channel, as without a pool.
        """
        if self.pool_key is None or self.failures or self.oversized:
            return
        for producer in (self.producer, self.dead_letters):
            if producer is None or len(producer) > 0:
                continue
            key, deliveries = self._deliveries.pop(id(producer))
            deliveries.target = _dropped_delivery
            PRODUCER_POOL.give(key, producer, deliveries)
        self.dead_letters = None

    def open_dead_letters(self) -> Producer:
        """The DLQ records' producer, created on the first call: a job with a DLQ calls this as its task starts.

        An idempotent producer waits for its producer id (about half a second on the local
        broker) before it sends anything; opened with the task, that wait passes while the
        task's first batch is fetched, instead of at the end of a task that failed a record late.
        """
        if self.dead_letters is None:
            config = self.kafka_config
            # Every delivery is reported, not only failures: its partition and offset say exactly which DLQ
            # records this task wrote (dead_letter_spans), so a run's dead letters are found by offset, never by time.
            self.dead_letters = self._new_producer(
                {**config, "compression.type": config.get("compression.type", DEAD_LETTER_COMPRESSION)},
                report_deliveries=True,
            )
        return self.dead_letters

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.failures.append((message.topic(), error))

    def serve_delivery_reports(self) -> None:
        """Serve the delivery reports that have arrived, without waiting: a task calls this after each batch.

        confluent-kafka frees a record's per-message state (a DLQ record's callback, which
        holds the record and its headers) only when its report is served, and only ``poll``
        and ``flush`` serve them. Unserved until the task's flush, a task that sent 98,629
        records to the DLQ held all of them: 203 MiB of Python objects and 666 MiB more RSS,
        against 3 MiB and 99 MiB with the reports served after each batch (in-process, real
        broker, 12 batches of 8,192 bad records). A delivery error is kept and raised at the
        flush, as before.
        """
        self.producer.poll(0)
        if self.dead_letters is not None:
            self.dead_letters.poll(0)

    def produce(self, topic: str, **kwargs: Any) -> None:
        """Queue one record, waiting for room when the local queue is full."""
        _produce_waiting(self.producer, topic, **kwargs)

    def send_dead_letter(self, record: DeadLetterQueueRecord) -> None:
        """Queue a DLQ record; one the client refuses for its size is queued without key and value instead.

        Raises what ``produce()`` raised when the record is refused otherwise, or refused even without them.
        """
        delivered = partial(self._dead_letter_delivered, record, False)
        headers: Any = record.headers  # confluent-kafka's stubs want str | bytes values; None is valid too
        producer = self.dead_letters or self.open_dead_letters()
        try:
            try:
                # The usual case in one C call, without building keyword arguments: partition -1 lets the
                # partitioner choose, and timestamp 0 lets the client stamp the record (produce()'s defaults).
                producer.produce(
                    record.topic,
                    record.value,
                    record.key,
                    -1 if record.partition is None else record.partition,
                    on_delivery=delivered,
                    timestamp=record.timestamp or 0,
                    headers=headers,
                )
            except BufferError:
                _produce_waiting(producer, **record.produce_kwargs(), on_delivery=delivered)
        except KafkaException as error:
            if not is_size_error(error):
                raise
            size = record_size(record.key, record.value, record.headers)
            self._write_without_record(record, f"{size:,} bytes > {self.message_max_bytes:,}")

    def _write_without_record(self, record: DeadLetterQueueRecord, why: str) -> None:
        smaller = without_record(record, why)
        _produce_waiting(
            self.open_dead_letters(),
            **smaller.produce_kwargs(),
            on_delivery=partial(self._dead_letter_delivered, smaller, True),
        )
        LOG.error(
            "Could not produce message to dead letter queue. topic=%s: the record was too large (%s); wrote it "
            "without the failed record's key and value (%s: %s)",
            record.topic,
            why,
            HEADER_RECORD_OMITTED,
            smaller.headers[-1][1].decode() if smaller.headers[-1][1] else "",
        )
        if self.on_omitted is not None:
            self.on_omitted(record, why)

    def _dead_letter_delivered(
        self, record: DeadLetterQueueRecord, omitted: bool, error: KafkaError | None, message: Any
    ) -> None:
        """A DLQ record's delivery report: where it landed, or a failure (a size refusal is written again at flush)."""
        if error is None:
            self.dead_letter_spans.add(message.partition(), message.offset())
            return
        if is_size_error(error) and not omitted:
            self.oversized.append((record, error))
        else:
            self.failures.append((message.topic(), error))

    def flush(self) -> None:
        """Wait for every queued record; raise DeliveryFailed naming the topics that refused records.

        DLQ records the broker refused for their size are written again without key and value
        first, and waited for too.
        """
        remaining = self._flush_all()
        if self.oversized and not remaining:
            refused, self.oversized = self.oversized, []
            for record, error in refused:
                size = batch_size(record.key, record.value, record.headers)
                self._write_without_record(record, f"{size:,} bytes refused by the broker ({error.str()})")
            remaining = self._flush_all()
        if remaining:
            raise DeliveryFailed(
                KafkaError(KafkaError._TIMED_OUT, f"{remaining} records not delivered within {self.flush_timeout_s} s")
            )
        if self.failures:
            topic, error = self.failures[0]
            raise DeliveryFailed(
                KafkaError(error.code(), f"{len(self.failures)} records not delivered, first to {topic}: {error.str()}")
            )

    def _flush_all(self) -> int:
        """Flush both producers (each has had its records since they were queued); how many are still undelivered."""
        remaining = self.producer.flush(self.flush_timeout_s)
        if self.dead_letters is not None:
            remaining += self.dead_letters.flush(self.flush_timeout_s)
        return remaining


def _dropped_delivery(error: KafkaError | None, message: Any) -> None:
    """A pooled producer's reports between tasks: it had nothing queued when given back, so none is expected."""
    if error is not None:
        LOG.warning("a delivery report arrived for a producer between tasks: %s", error)


def _produce_waiting(producer: Producer, topic: str, **kwargs: Any) -> None:
    """``producer.produce``, waiting for room when its local queue is full."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)


class KafkaSink:
    """Writes each good record to a Kafka topic with its (re-encoded) key and value."""

    def __init__(self, channel: ProducerChannel, topic: str) -> None:
        self.channel = channel
        self.topic = topic

    def put(self, record: PipelineRecord) -> None:
        self.channel.produce(self.topic, key=encode_value(record.key), value=encode_value(record.value))

    @staticmethod
    def encode(record: PipelineRecord) -> tuple[bytes | None, bytes | None]:
        """The record's (value, key) as bytes: the per-record path's first put step (then :attr:`produce_value_key`)."""
        return encode_value(record.value), encode_value(record.key)

    def put_pair(self, pair: tuple[Any, Any]) -> None:
        """Write one converted (key, value) pair: the fast path when there are no transformations."""
        self.channel.produce(self.topic, key=encode_value(pair[0]), value=encode_value(pair[1]))

    @property
    def produce_value_key(self) -> Callable[[bytes | None, bytes | None], None]:
        """``produce(value, key)`` to this sink's topic, a C call with no Python frame: the vectorized path's fast put.

        It raises ``BufferError`` when the local queue is full; :meth:`put_encoded` is the
        same write that waits for room instead.
        """
        return partial(self.channel.producer.produce, self.topic)

    def put_encoded(self, pair: tuple[bytes | None, bytes | None]) -> None:
        """Write one (value, key) pair that is bytes already, waiting for room if need be."""
        self.channel.produce(self.topic, key=pair[1], value=pair[0])

    def flush(self) -> None:
        self.channel.flush()


def json_line_encoder() -> Callable[[Any], str]:
    """``json.dumps(obj, separators=(",", ":"))``, the same text, without its cost per call.

    ``json.dumps`` with any option builds a ``JSONEncoder`` per call, whose ``encode`` then
    builds a C encoder: 3.5 of the 6.7 µs a JSON-lines record cost a task (issue #40). This
    makes the C encoder once, with the options ``dumps`` passes it (ASCII escapes, ``NaN``
    allowed, circular references refused); without the C module it is a reused ``encode``.
    """
    encoder = json.JSONEncoder(separators=(",", ":"))
    make = getattr(json.encoder, "c_make_encoder", None)  # CPython's _json; absent from the stubs
    if make is None:
        return encoder.encode
    markers: dict[int, Any] = {}
    call = make(markers, encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)

    def encode(obj: Any) -> str:
        try:
            return "".join(call(obj, 0))
        except BaseException:
            markers.clear()  # dumps starts each call with empty markers; a failure may leave some behind
            raise

    return encode


class RegistryKafkaSink(KafkaSink):
    """A Kafka sink whose values are written in a registry format (``avro``, ``protobuf``, ``json_schema``).

    The partition task encodes each value with :attr:`serializer` before the write
    (:meth:`~airflow_kerr.spark.partition.PartitionProcessor.serialize_values`): a value that
    does not fit the schema is reported at TASK_PUT, as a Connect sink task reports an errant
    record, and goes to the DLQ. Keys are written as the plain Kafka sink writes them.
    """

    def __init__(self, channel: ProducerChannel, topic: str, serializer: RegistrySerializer) -> None:
        super().__init__(channel, topic)
        self.serializer = serializer


try:  # msgspec comes with Airflow; a bare Spark executor may lack it, and the json module then writes every line
    import msgspec
except ImportError:  # pragma: no cover - see above
    msgspec = None  # type: ignore[assignment]

if msgspec is not None:

    class JsonLine(msgspec.Struct):
        """One line of a ``jsonl`` file: the keys, in the order, that :meth:`FileSink.put`'s dict has."""

        key: Any
        value: Any
        topic: str
        partition: int
        offset: int
        timestamp: int | None


#: A batch of lines in one C call, or None without msgspec.
_encode_lines: Callable[[Any], bytes] | None = None if msgspec is None else msgspec.json.Encoder().encode_lines
#: One line in a C call (the batch's records again, one by one, when its text holds a ``null``).
_encode_line: Callable[[Any], bytes] | None = None if msgspec is None else msgspec.json.Encoder().encode


#: Characters ``str.splitlines`` breaks a line at that JSON lets a string hold unescaped, as msgspec writes them
#: (UTF-8) and as JSON escapes them. UTF-8 is self-synchronizing, so each sequence is that character wherever it is.
_LINE_BREAKS_IN_STRINGS = (
    ("\u0085".encode(), b"\\u0085"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
)


class FileSink:
    """Collects a partition task's good records and writes them as one file when the task flushes.

    The file name is derived from the offset range and the run, and the file is
    written under a temporary name and renamed, so a retried task replaces its own
    file instead of adding a second copy. A JSON-lines record is encoded when it is put:
    one that cannot be fails its own put, not the task's flush.
    """

    def __init__(self, path: str, kind: str, part_name: str) -> None:
        self.directory = Path(path)
        self.kind = kind
        self.part_name = part_name
        self.rows: list[dict[str, Any]] = []
        #: The ``jsonl`` file's text so far, in chunks of whole lines (each ends with a newline), UTF-8.
        self.chunks: list[bytes] = []
        self.encode_line = json_line_encoder()

    def put(self, record: PipelineRecord) -> None:
        row = {
            "key": _text(record.key),
            "value": _text(record.value),
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp,
        }
        if self.kind == "jsonl":
            self.chunks.append(self.encode_line(row).encode("ascii") + b"\n")
        else:
            self.rows.append(row)

    def put_columns(
        self,
        keys: list[Any],
        values: list[Any],
        topics: list[str],
        partitions: list[int],
        offsets: list[int],
        timestamps: list[int | None],
    ) -> bool:
        """Write a batch's lines from its columns in C (msgspec), or return False having written nothing.

        Only for keys and values a built-in converter made (``str``, and the ``dict``, ``list``,
        ``str``, ``int``, ``float``, ``bool`` and ``None`` of JSON): msgspec would write a
        transformation's ``bytes``, ``set`` or ``datetime`` where the json module refuses
        them. A line holds the values :meth:`put`'s line holds; msgspec writes non-ASCII as
        UTF-8 rather than ``\\u`` escapes, and ``null`` for a non-finite float, so a line
        holding one is written by the json module instead (``NaN`` stays ``NaN``, as
        :meth:`put` writes it); a batch is searched for one only when its text holds ``null``.
        False when msgspec is missing or refuses a value (a lone surrogate, which UTF-8 cannot
        hold; nesting too deep): the caller then puts the batch record by record. The line
        breaks of Unicode other than ``\\n`` (U+0085, U+2028, U+2029) are escaped as
        :meth:`put` escapes them, so ``str.splitlines`` splits the file into its records.
        """
        if _encode_lines is None or _encode_line is None or self.kind != "jsonl":
            return False
        if not keys:
            return True  # no lines: no chunk, so a task with none writes no file, as put() would
        lines = list(map(JsonLine, keys, values, topics, partitions, offsets, timestamps))
        try:
            text = _encode_lines(lines)
            if b"null" in text and any(map(_line_holds_non_finite, lines)):
                text = b"".join(map(self._line_keeping_non_finite, lines))
            for character, escaped in _LINE_BREAKS_IN_STRINGS:
                if character in text:
                    text = text.replace(character, escaped)
        except Exception:  # the record-by-record put gives each record its own outcome under errors.*
            return False
        self.chunks.append(text)
        return True

    def _line_keeping_non_finite(self, line: Any) -> bytes:
        """msgspec's line, or the json module's when the record holds a non-finite float (``NaN``, not ``null``)."""
        assert _encode_line is not None
        if not _line_holds_non_finite(line):
            return _encode_line(line) + b"\n"
        row = {name: getattr(line, name) for name in line.__struct_fields__}
        return self.encode_line(row).encode("ascii") + b"\n"

    def flush(self) -> None:
        if not self.rows and not self.chunks:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        suffix = ".jsonl" if self.kind == "jsonl" else ".parquet"
        final = self.directory / f"{self.part_name}{suffix}"
        temporary = self.directory / f".{self.part_name}.{uuid.uuid4().hex}.tmp"
        if self.kind == "jsonl":
            with open(temporary, "wb") as out:
                out.writelines(self.chunks)
                out.flush()
                os.fsync(out.fileno())
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(self.rows), temporary)
        os.replace(temporary, final)
        self.rows = []
        self.chunks = []


class CallableSink:
    """Hands each good record to a user function (``package.module.function(record)``)."""

    def __init__(self, path: str) -> None:
        self.fn = import_callable(path)
        self.flush_fn = getattr(self.fn, "flush", None)

    def put(self, record: PipelineRecord) -> None:
        self.fn(record)

    def flush(self) -> None:
        if callable(self.flush_fn):
            self.flush_fn()


def _holds_non_finite(value: Any) -> bool:
    """Whether a JSON value holds ``NaN`` or an infinity, which msgspec would write as ``null``."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(map(_holds_non_finite, value.values()))
    if isinstance(value, list):
        return any(map(_holds_non_finite, value))
    return False


def _line_holds_non_finite(line: Any) -> bool:
    return _holds_non_finite(line.value) or _holds_non_finite(line.key)


def texts(values: list[Any]) -> list[Any]:
    """The ``bytes`` converter's keys or values as :meth:`FileSink.put` writes them: UTF-8, bad bytes replaced."""
    return list(map(_text, values))


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


Sink = KafkaSink | FileSink | CallableSink


def make_sink(
    spec: SinkSpec, channel: ProducerChannel, part_name: str, registry: RegistrySettings | None = None
) -> Sink:
    if spec.kind in FORMATS:
        assert spec.topic is not None and registry is not None
        client = registry_client_for(registry)
        serializer = RegistrySerializer(spec.kind, client, registry, topic=spec.topic, is_key=False, schema=spec.schema)
        return RegistryKafkaSink(channel, spec.topic, serializer)
    if spec.kind == "kafka":
        assert spec.topic is not None
        return KafkaSink(channel, spec.topic)
    if spec.kind in ("parquet", "jsonl"):
        assert spec.path is not None
        return FileSink(spec.path, spec.kind, part_name)
    assert spec.callable is not None
    return CallableSink(spec.callable)


def sink_class_name(spec: SinkSpec) -> str:
    """The class named in error contexts for the TASK_PUT stage."""
    if spec.kind == "callable" and spec.callable:
        return spec.callable
    return {
        "kafka": f"{__name__}.KafkaSink",
        "avro": f"{__name__}.RegistryKafkaSink",
        "protobuf": f"{__name__}.RegistryKafkaSink",
        "json_schema": f"{__name__}.RegistryKafkaSink",
        "parquet": f"{__name__}.FileSink",
        "jsonl": f"{__name__}.FileSink",
    }[spec.kind]


def sink_config(spec: SinkSpec) -> dict[str, Any]:
    return {key: value for key, value in (("topic", spec.topic), ("path", spec.path)) if value}
