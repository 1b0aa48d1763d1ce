"""One Spark task's work on an executor: every record of its offset range through the ``errors.*`` policy.

The ``kerr_kafka`` source calls :func:`process_batches` inside the read task (Spark's
``kafka`` format hands its rows to :func:`process_partition` through ``mapInArrow``);
either runs a :class:`PartitionProcessor` over the task's Arrow batches, flushes its
output, DLQ records and metrics record, and hands the driver one summary row.

While the task runs, an :class:`InterimMetrics` thread publishes its counters every
``metrics_interval_ms`` (``interim: true``), so a breach is seen while a long task is
still reading, not only when it ends.
"""

from __future__ import annotations

import gc
import json
import logging
import operator
import pickle
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields, replace
from itertools import repeat
from typing import Any

import pyarrow as pa

from airflow_kerr.errors import (
    SKIPPED,
    DeadLetterQueueRecord,
    DeadLetterQueueReporter,
    ErrorHandlingConfig,
    ErrorMetrics,
    ErrorReporter,
    LogReporter,
    PipelineStage,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
)
from airflow_kerr.formats import ConverterDataError, ConverterRetriableError, RegistryDeserializer
from airflow_kerr.kafka.metrics_topic import ATTEMPT, INTERIM, SEQ, input_range_fields
from airflow_kerr.spark.columns import BatchColumns
from airflow_kerr.spark.failures import task_failure_text
from airflow_kerr.spark.outage import Outage, OutageDetector, OutageTripped, outage_record_fields
from airflow_kerr.spark.run_metrics import publish_metrics_record
from airflow_kerr.spark.sinks import (
    FileSink,
    KafkaSink,
    ProducerChannel,
    RegistryKafkaSink,
    encode_value,
    make_sink,
    sink_class_name,
    sink_config,
    texts,
)
from airflow_kerr.spark.spec import PipelineSpec
from airflow_kerr.spark.stages import (
    BatchRunner,
    PipelineRecord,
    drop_filtered,
    make_converter,
    make_transformation,
    map_past_failures,
    without_positions,
)
from airflow_kerr.spark.vectorized import VectorizedStages, uses_batch_transformations

LOG = logging.getLogger("airflow_kerr.spark.partition")
# Allocations between two runs of the cyclic collector while a task processes (see few_collections).
GC_FIRST_GENERATION_THRESHOLD = 50_000
#: The class a Connect sink task's errant record is reported under (``WorkerErrantRecordReporter``).
ERRANT_RECORD_CLASS = "org.apache.kafka.connect.sink.SinkTask"
#: Converters whose keys and values are text or JSON's types (after :func:`texts` for ``bytes``).
BUILT_IN_CONVERTERS = ("bytes", "string", "json")
SUMMARY_FIELDS = (
    "topic",
    "partition",
    "first_offset",
    "last_offset",
    "records_in",
    "records_out",
    "metrics",
    "outage",
)


class PartitionProcessor:
    """Processes the Arrow batches of one Spark task under the ``errors.*`` policy."""

    def __init__(self, spec: PipelineSpec, run_id: str, part_name: str) -> None:
        self.spec = spec
        self.run_id = run_id
        self.config: ErrorHandlingConfig = spec.validate()
        self.metrics = ErrorMetrics()
        self.channel = ProducerChannel(spec.kafka, on_omitted=self._dead_letter_omitted, pool_key=run_id)
        registry = spec.registry_settings() if spec.schema_registry else None
        self.key_converter = make_converter(spec.key_converter, Stage.KEY_CONVERTER, registry)
        self.value_converter = make_converter(spec.value_converter, Stage.VALUE_CONVERTER, registry)
        self.transformations = [make_transformation(path) for path in spec.transformations]
        self.vectorized = uses_batch_transformations(self.transformations)
        self.sink = make_sink(spec.sink, self.channel, part_name, registry)
        self.put_stage = PipelineStage(Stage.TASK_PUT, sink_class_name(spec.sink), sink_config(spec.sink))
        #: A ``jsonl`` sink fed by built-in converters alone writes a batch's lines from its columns (put_columns).
        self.lines_from_columns = (
            not self.transformations
            and isinstance(self.sink, FileSink)
            and self.sink.kind == "jsonl"
            and spec.key_converter in BUILT_IN_CONVERTERS
            and spec.value_converter in BUILT_IN_CONVERTERS
        )
        stages = [
            self.key_converter.stage,
            self.value_converter.stage,
            *(stage for stage, _ in self.transformations),
            self.put_stage,
        ]
        reporters: list[ErrorReporter] = [LogReporter(self.config, self.metrics, logger=LOG, job_config=spec.kafka)]
        #: With errors.outage.enable, the judge of each batch; its DLQ records wait in ``held`` for the verdict.
        self.outage: OutageDetector | None = OutageDetector(self.config) if self.config.outage_enable else None
        self.held: list[DeadLetterQueueRecord] = []
        self.tripped: Outage | None = None
        if self.outage is not None:
            reporters.append(self.outage)
        if self.config.dlq_topic_name:
            self.channel.open_dead_letters()  # its producer id arrives while the first batch is fetched
            send = self.channel.send_dead_letter if self.outage is None else self.held.append
            reporters.append(DeadLetterQueueReporter(self.config, self.metrics, send, group=spec.source.group_id))
        self.retry = RetryWithTolerance(
            self.config, self.metrics, reporters, task=TaskId(spec.name, spec.task_id), stages=stages
        )
        self.runner = BatchRunner(self.retry)
        self.vector: VectorizedStages | None = VectorizedStages(self) if self.vectorized else None
        self.started_ms = int(time.time() * 1000)
        self.records_out = 0
        self.first_offset: int | None = None
        self.last_offset: int | None = None
        self.topic = ""
        self.partition = -1
        #: This task attempt's id in its metrics records: a Spark retry or speculative copy is another attempt.
        self.attempt = uuid.uuid4().hex
        #: The number of the attempt's next metrics record: interim ones count up, the final one is the last.
        self.seq = 0
        self.interim = InterimMetrics(self, spec.metrics_interval_ms / 1000)

    def _dead_letter_omitted(self, record: DeadLetterQueueRecord, why: str) -> None:
        """A DLQ record was too large for Kafka and went without the failed record's key and value.

        Counted in ``deadletterqueue-produce-failures``, as Connect counts a DLQ send that failed:
        the DLQ does not hold the record as the contract says, and the metric is what alerts.
        """
        self.metrics.record_dlq_produce_failed()

    def process(self, batch: Any) -> None:
        """Run every stage over one Arrow batch of source records, then serve the delivery reports that came in."""
        if batch.num_rows == 0:
            return
        if self.outage is None:
            self._process(batch)
        else:
            # Judged by ``batch_size`` records: a trip then costs the next run at most that many re-read.
            for start in range(0, batch.num_rows, self.spec.batch_size):
                self._process_judged(batch.slice(start, self.spec.batch_size), self.outage)
        self.channel.serve_delivery_reports()

    def _process_judged(self, batch: Any, outage: OutageDetector) -> None:
        """One batch under the outage breaker: its DLQ records are held until it is judged clean.

        The put paths judge the batch before they write (:meth:`judge`), and the whole batch
        is judged again after the put; a trip undoes the batch's counters and drops its held
        DLQ records and a file sink's rows, then raises :class:`OutageTripped`.
        """
        before = replace(self.metrics)
        marks = (self.records_out, self.first_offset, self.last_offset, len(getattr(self.sink, "rows", ())))
        offsets = batch.column("offset").to_pylist()
        outage.begin_batch(offsets, batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py())
        try:
            self._process(batch)
            outage.judge()
        except OutageTripped as trip:
            for f in fields(ErrorMetrics):
                setattr(self.metrics, f.name, getattr(before, f.name))
            self.records_out, self.first_offset, self.last_offset = marks[:3]
            rows = getattr(self.sink, "rows", None)
            if isinstance(rows, list):
                del rows[marks[3] :]
            self.held.clear()
            outage.forget_batch()
            self.tripped = trip.outage
            raise
        held, self.held[:] = list(self.held), []
        for record in held:
            self.channel.send_dead_letter(record)

    def judge(self) -> None:
        """Before a put writes: raise :class:`OutageTripped` when the batch so far is an outage."""
        if self.outage is not None:
            self.outage.judge()

    def _process(self, batch: Any) -> None:
        """Every stage over one batch that has records: the vectorized path, or one stage at a time over the batch."""
        count = batch.num_rows
        self.metrics.record_in(count)
        columns = BatchColumns(batch)
        if self.first_offset is None:
            self.first_offset = batch.column("offset")[0].as_py()
            self.topic, self.partition = batch.column("topic")[0].as_py(), batch.column("partition")[0].as_py()
            for converter in (self.key_converter.fn, self.value_converter.fn):
                if isinstance(converter, RegistryDeserializer):
                    converter.topic = self.topic  # a task reads one topic-partition; failure texts name it
        self.last_offset = batch.column("offset")[-1].as_py()
        if self.vector is not None:
            self.records_out += self.vector.process(batch, columns)
            return
        rows = list(range(count))
        keys: list[Any] = columns.keys
        values: list[Any] = columns.values
        source = columns.source_record
        run, key, value = self.runner.run, self.key_converter, self.value_converter
        if key.fn is not None:
            keys, rows = run(key.stage, key.fn, keys, rows, source, fast=key.fast)
            if self.runner.dropped:
                values = without_positions(values, self.runner.dropped)
        if value.fn is not None:
            values, rows = run(value.stage, value.fn, values, rows, source, fast=value.fast)
            if self.runner.dropped:
                keys = without_positions(keys, self.runner.dropped)
        written = self._put_untransformed(columns, keys, values, rows, source)
        if written is not None:
            self.records_out += written
            return
        records = columns.pipeline_records(rows, keys, values)
        for stage, fn in self.transformations:
            records, rows = self.runner.run(stage, fn, records, rows, source)
            records, rows = drop_filtered(records, rows)
        self.records_out += self.put(records, rows, source)

    def _put_untransformed(
        self,
        columns: BatchColumns,
        keys: list[Any],
        values: list[Any],
        rows: list[int],
        source: Callable[[int], SourceRecord],
    ) -> int | None:
        """TASK_PUT straight from the converted columns when no transformation runs; None when records are needed."""
        if self.transformations:
            return None
        self.judge()
        if isinstance(self.sink, RegistryKafkaSink):
            return self.write_registry(keys, values, rows, source)
        if isinstance(self.sink, KafkaSink):
            pairs = list(zip(keys, values, strict=True))
            done, _ = self.runner.run(self.put_stage, self.sink.put_pair, pairs, rows, source)
            return len(done)
        if self.lines_from_columns and self._put_lines(columns, rows, keys, values):
            return len(rows)
        return None

    def _put_lines(self, columns: BatchColumns, rows: list[int], keys: list[Any], values: list[Any]) -> bool:
        """A ``jsonl`` sink's TASK_PUT of a batch from its columns, no record objects; False if it wrote nothing.

        Nothing here runs a Python frame per record unless a line holds ``null`` (see
        :meth:`FileSink.put_columns`); when the sink refuses the batch, the caller puts it
        record by record, so each record still gets its own outcome under ``errors.*``.
        """
        sink = self.sink
        assert isinstance(sink, FileSink)
        if self.spec.key_converter == "bytes":
            keys = texts(keys)
        if self.spec.value_converter == "bytes":
            values = texts(values)
        topics, partitions = columns.topics, columns.partitions
        offsets, timestamps = columns.offsets, columns.timestamps
        if len(rows) != len(offsets):
            topics, partitions = [topics[row] for row in rows], [partitions[row] for row in rows]
            offsets, timestamps = [offsets[row] for row in rows], [timestamps[row] for row in rows]
        return sink.put_columns(keys, values, topics, partitions, offsets, timestamps)

    def put(self, records: list[PipelineRecord], rows: list[int], source: Callable[[int], SourceRecord]) -> int:
        """The TASK_PUT stage over a batch's records; returns how many were written.

        A Kafka sink's records are encoded in one pass and written in a second, each write a
        C call with no Python frame (as the vectorized path writes): a failure in either
        pass is the record's put failure, as it is in one ``put``.
        """
        sink = self.sink
        self.judge()
        if isinstance(sink, RegistryKafkaSink):
            keys = [record.key for record in records]
            return self.write_registry(keys, [record.value for record in records], rows, source)
        if not isinstance(sink, KafkaSink):
            done, _ = self.runner.run(self.put_stage, sink.put, records, rows, source)
            return len(done)
        pairs, rows = self.runner.run(self.put_stage, sink.encode, records, rows, source)
        return self.write_encoded(pairs, rows, source)

    def write_registry(
        self, keys: list[Any], values: list[Any], rows: list[int], source: Callable[[int], SourceRecord]
    ) -> int:
        """A registry sink's TASK_PUT: values encoded through the schema, then written; how many were written."""
        encoded, kept = self.serialize_values(values, rows, source)
        if len(kept) != len(rows):
            by_row = dict(zip(rows, keys, strict=True))
            keys = [by_row[row] for row in kept]
        pairs = [(value, encode_value(key)) for value, key in zip(encoded, keys, strict=True)]
        return self.write_encoded(pairs, kept, source)

    def serialize_values(
        self, values: list[Any], rows: list[int], source: Callable[[int], SourceRecord]
    ) -> tuple[list[bytes | None], list[int]]:
        """Each value through the registry sink's serializer; a value that does not fit is an errant record.

        As a Connect sink task hands a record it cannot write to its ``ErrantRecordReporter``
        (KIP-610, reported at ``TASK_PUT`` by ``SinkTask``), the record is reported through the
        tolerance and the DLQ, and the rest are written; tolerance ``none`` fails the task. A
        registry outage is retried within ``errors.retry.timeout`` first, as for any stage.
        """
        sink = self.sink
        assert isinstance(sink, RegistryKafkaSink)
        serialize = sink.serializer
        fast = serialize.fast
        if fast is not None:  # Avro's write mapped over the batch; what it refuses goes through serialize
            results = map_past_failures(
                fast, values, lambda position, _: self.serialize_one(values[position], rows[position], source)
            )
            if not any(map(operator.is_, results, repeat(SKIPPED))):
                return results, rows
            kept = [row for row, result in zip(rows, results, strict=True) if result is not SKIPPED]
            return [result for result in results if result is not SKIPPED], kept
        encoded: list[bytes | None] = []
        kept = []
        for value, row in zip(values, rows, strict=True):
            result = self.serialize_one(value, row, source)
            if result is not SKIPPED:
                encoded.append(result)
                kept.append(row)
        return encoded, kept

    def serialize_one(self, value: Any, row: int, source: Callable[[int], SourceRecord]) -> Any:
        """One value through the registry sink's serializer: its bytes, or SKIPPED once its failure is reported."""
        sink = self.sink
        assert isinstance(sink, RegistryKafkaSink)
        serialize = sink.serializer
        try:
            try:
                return serialize(value)
            except ConverterRetriableError as outage:
                return self.retry.execute_after_failure(
                    self.put_stage, serialize, source(row), outage, self.retry.clock(), value
                )
        except ConverterDataError as error:
            self.retry.execute_failed(self.put_stage, source(row), error, executing_class=ERRANT_RECORD_CLASS)
            return SKIPPED

    def write_encoded(
        self, pairs: list[tuple[bytes | None, bytes | None]], rows: list[int], source: Callable[[int], SourceRecord]
    ) -> int:
        """A Kafka sink's TASK_PUT of (value, key) pairs already bytes, each write a C call; how many were written.

        Both paths end here: the per-record path after encoding its records, the vectorized
        path with the bytes it read or encoded by column.
        """
        sink = self.sink
        self.judge()
        if not isinstance(sink, KafkaSink):
            raise TypeError(f"write_encoded writes to a Kafka sink; this task's sink is {type(sink).__name__}")
        fast = sink.produce_value_key
        done, _ = self.runner.run(self.put_stage, sink.put_encoded, pairs, rows, source, fast=fast, star=True)
        return len(done)

    def finish(self) -> dict[str, Any]:
        """Flush sink output, DLQ records and this task's metrics record; return the task summary.

        After a trip the clean batches' output is flushed the same way, the task's record says
        ``state="outage"``, and an outage record (``scope="outage"``) follows for the guard.
        """
        self.interim.stop()
        self.sink.flush()
        self.channel.flush()
        self.publish_metrics(state="success" if self.tripped is None else "outage")
        if self.tripped is not None:
            publish_metrics_record(
                self.channel,
                self.spec,
                self.metrics,
                task=self.spec.task_id,
                run_id=self.run_id,
                started_ms=self.started_ms,
                **outage_record_fields(self.tripped),
            )
        return {
            "topic": self.topic,
            "partition": self.partition,
            "first_offset": self.first_offset if self.first_offset is not None else -1,
            "last_offset": self.last_offset if self.last_offset is not None else -1,
            "records_in": self.metrics.records_in,
            "records_out": self.records_out,
            "outage": "" if self.tripped is None else self.tripped.to_json(),
        }

    def publish_metrics(self, state: str) -> None:
        """Write this task's final metrics record (``scope="task"``) and wait until Kafka has it.

        Its ``seq`` is after every interim record's, and it holds the attempt's totals: readers
        let it supersede them (:func:`~airflow_kerr.kafka.metrics_topic.latest_per_attempt`).
        """
        self.interim.stop()
        publish_metrics_record(
            self.channel,
            self.spec,
            self.metrics,
            task=self.spec.task_id,
            run_id=self.run_id,
            started_ms=self.started_ms,
            **self.record_fields(state, interim=False),
        )

    def record_fields(self, state: str, *, interim: bool) -> dict[str, Any]:
        """What a task record adds to the counters: scope, state, the attempt and its ``seq``, the input range.

        And, once the attempt has written dead letters, the DLQ topic and the offsets they landed at
        (``dead_letter_offsets``, from the delivery reports so far): what the DLQ view's run tab shows.
        """
        seq, self.seq = self.seq, self.seq + 1
        return {
            "scope": "task",
            "state": state,
            "records_out": self.records_out,
            "source": f"{self.topic}-{self.partition}",
            ATTEMPT: self.attempt,
            SEQ: seq,
            INTERIM: interim,
            **input_range_fields(self.topic, self.partition, self.first_offset, self.last_offset),
            **self.channel.dead_letter_spans.as_fields(self.config.dlq_topic_name),
        }

    def publish_interim(self) -> bool:
        """Queue an interim record of the counters so far (``state="running"``), without waiting for delivery.

        Called from the :class:`InterimMetrics` thread while the task's own thread processes:
        the counters are plain ints, each read whole under the GIL, and a snapshot taken
        mid-batch at worst lags the batch's failures (``records_in`` counts a batch as it
        starts), never counts one twice. The record goes out with the producer's next send
        (``linger.ms``); a full local queue skips this one, the next interval tries again.
        """
        if self.first_offset is None:
            return False  # nothing read yet: a record would say nothing
        snapshot = ErrorMetrics.zero().merge(self.metrics)
        record = snapshot.to_record(
            pipeline=self.spec.name,
            task=self.spec.task_id,
            run_id=self.run_id,
            window_start_ms=self.started_ms,
            window_end_ms=int(time.time() * 1000),
        )
        record.update(self.record_fields("running", interim=True))
        try:
            self.channel.producer.produce(
                self.spec.metrics_topic, value=json.dumps(record).encode(), key=self.spec.name.encode()
            )
        except BufferError:
            LOG.warning("interim metrics record skipped: the producer's local queue is full")
            return False
        return True

    def fail(self, error: BaseException) -> RuntimeError:
        """Flush what was reported, publish this task's metrics as failed, and describe the failure."""
        try:
            self.channel.flush()
        except Exception as flush_error:
            LOG.error("could not flush DLQ records while failing: %s", flush_error)
        self.channel.failures.clear()
        try:
            self.publish_metrics(state="failed")
        except Exception as publish_error:
            LOG.error("could not publish the metrics of the failed task: %s", publish_error)
        return RuntimeError(task_failure_text(error, getattr(error, "context", None) or self.retry.last_error))

    def close(self) -> None:
        """Close the error reporters; a failure to close is logged, never hiding the task's own outcome."""
        self.interim.stop()
        try:
            self.retry.close()
        except Exception as error:
            LOG.error("%s", error)


class InterimMetrics:
    """Publishes a running task's interim metrics record every ``interval_s`` seconds, from a daemon thread.

    A thread, not a check between batches: a batch of slow records (a lookup per record, a
    retry backoff) can take far longer than the interval, and the promise is a record at
    least every interval while the task runs. The task's thread holds the GIL in its loops,
    but Python hands it over every 5 ms (``sys.getswitchinterval``), so the ticks are on
    time. :meth:`stop` is called before the final record, so none is published after it.
    """

    def __init__(self, processor: PartitionProcessor, interval_s: float) -> None:
        self.processor = processor
        self.interval_s = interval_s
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None
        #: Interim records queued so far, and failures to build or queue one (logged, never failing the task).
        self.published = 0
        self.failures = 0

    def start(self) -> None:
        if self.thread is None and not self.stopped.is_set():
            self.thread = threading.Thread(target=self._run, name="kerr-interim-metrics", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        """Stop ticking and wait for a tick under way, so the final record is the attempt's last."""
        self.stopped.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            try:
                if self.processor.publish_interim():
                    self.published += 1
            except Exception as error:  # a metrics record is news, not the task's work: never fail the task for it
                self.failures += 1
                LOG.warning("could not publish an interim metrics record: %s", error)


def process_batches(batches: Iterator[Any], argument: str) -> Iterator[tuple[Any, ...]]:
    """The ``kerr_kafka`` source's ``processBatches`` hook: the pipeline runs inside the read task.

    The task then hands Spark one summary row instead of every record: no Arrow-to-row
    conversion in the JVM and no second Python worker for ``mapInArrow``, which together
    cost more than the pipeline itself.
    """
    options = json.loads(argument)
    summary = _process_task(batches, options["spec"], options["run_id"])
    yield tuple(summary[name] for name in SUMMARY_FIELDS)


def process_partition(spec_json: str, run_id: str) -> Any:
    """The function given to ``mapInArrow`` when Spark's ``kafka`` format reads: yields the task's summary row."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        yield pa.RecordBatch.from_pylist([_process_task(batches, spec_json, run_id)], schema=_summary_arrow_schema())

    return run


def _process_task(batches: Iterator[Any], spec_json: str, run_id: str) -> dict[str, Any]:
    """Process one Spark task's batches; its summary carries its metrics (pickled) for the driver to merge."""
    _configure_executor_logging()
    spec = PipelineSpec.from_json(spec_json)
    processor = PartitionProcessor(spec, run_id, part_name=f"part-{run_id}-{uuid.uuid4().hex[:8]}")
    try:
        processor.interim.start()
        try:
            with few_collections():
                for batch in batches:
                    processor.process(batch)
        except OutageTripped as trip:
            # Not a task failure: Spark would run the task again and write the clean batches twice.
            LOG.error("%s", trip)
        summary = processor.finish()
    except Exception as error:
        raise processor.fail(error) from error
    finally:
        processor.close()
    processor.channel.release()  # flushed and succeeded: the run's next task in this worker takes its producers
    return summary | {"metrics": pickle.dumps(processor.metrics)}


@contextmanager
def few_collections(first_generation: int = GC_FIRST_GENERATION_THRESHOLD) -> Iterator[None]:
    """Run the cyclic garbage collector rarely while a task processes its batches; restore it afterwards.

    A batch makes hundreds of thousands of short-lived objects (decoded values, records,
    encoded bytes) that reference counting frees. At Python's default threshold (700
    allocations) the collector still runs thousands of times per batch and scans the
    batch's live objects each time: about 1.4 µs per record, 14 % of the per-record path,
    measured in-process at 0 % bad. Python workers are reused across tasks, so the
    setting is put back when the task ends.
    """
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], first_generation), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _summary_arrow_schema() -> Any:
    return pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("first_offset", pa.int64()),
            ("last_offset", pa.int64()),
            ("records_in", pa.int64()),
            ("records_out", pa.int64()),
            ("metrics", pa.binary()),
            ("outage", pa.string()),
        ]
    )


def _configure_executor_logging() -> None:
    if not LOG.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        LOG.addHandler(handler)
        LOG.setLevel(logging.INFO)
        LOG.propagate = False
