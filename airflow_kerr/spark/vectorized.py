"""The vectorized stages of a partition task: whole Arrow batches through converters, transformations and the sink.

They run on executors beside the batch transformations' machinery
(:mod:`airflow_kerr.spark.batch`) when every transformation of a pipeline is a batch
one; the task's per-record setup (converters, retry policy, sink) is handed in as a
:class:`TaskPipeline`, which :class:`~airflow_kerr.spark.partition.PartitionProcessor` is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from airflow_kerr.errors import PipelineStage, RetryWithTolerance, SourceRecord, Stage
from airflow_kerr.formats import RegistryDeserializer
from airflow_kerr.spark.avro_columns import VectorizedAvroConverter
from airflow_kerr.spark.batch import BatchStageRunner, as_arrow_function, positions_of
from airflow_kerr.spark.column_converters import VectorizedJsonConverter, decode_string_column, encode_json_column
from airflow_kerr.spark.columns import BatchColumns
from airflow_kerr.spark.sinks import KafkaSink, RegistryKafkaSink, Sink
from airflow_kerr.spark.spec import InvalidPipelineSpec
from airflow_kerr.spark.stages import (
    BatchRunner,
    Converter,
    PipelineRecord,
    batch_kind,
    decode_json,
    decode_string,
)


class TaskPipeline(Protocol):
    """What the vectorized stages use of a partition task: its stages, its runner and retry policy, its sink."""

    retry: RetryWithTolerance
    runner: BatchRunner
    key_converter: Converter
    value_converter: Converter
    transformations: list[tuple[PipelineStage, Any]]
    sink: Sink

    def put(self, records: list[PipelineRecord], rows: list[int], source: Callable[[int], SourceRecord]) -> int:
        """The TASK_PUT stage over records; how many were written."""
        ...

    def write_encoded(
        self, pairs: list[tuple[bytes | None, bytes | None]], rows: list[int], source: Callable[[int], SourceRecord]
    ) -> int:
        """The TASK_PUT stage of a Kafka sink over (value, key) pairs already bytes; how many were written."""
        ...


def uses_batch_transformations(transformations: Sequence[tuple[PipelineStage, Any]]) -> bool:
    """True when every transformation is a batch one; one pipeline runs one kind, so a mix is refused."""
    batch = [stage.class_name for stage, fn in transformations if batch_kind(fn)]
    per_record = [stage.class_name for stage, fn in transformations if not batch_kind(fn)]
    if batch and per_record:
        raise InvalidPipelineSpec(
            [
                f"transformations: {', '.join(batch)} are batch transformations (@batch_transformation) and "
                f"{', '.join(per_record)} per-record ones: a pipeline runs one kind; mark them all, or none"
            ]
        )
    return bool(batch)


@dataclass(frozen=True)
class DecodedBatch:
    """A batch between stages: the working columns, the source row of each, and what the converters made of them.

    The converters' output is kept so the sink can tell a value no transformation changed
    (written with its original bytes) from one that must be encoded again.
    """

    work: Any
    rows: list[int]
    converted_keys: Any
    converted_values: Any
    converted_rows: list[int]


class VectorizedStages:
    """The stages of a pipeline whose transformations are batch functions: whole Arrow batches, bad records isolated.

    Converters decode a column at a time (JSON with pyarrow, Avro with numpy), transformations get the
    batch, and the Kafka sink writes a value no transformation changed with its original
    bytes. Failures follow :mod:`airflow_kerr.spark.batch`: each bad record is isolated and
    goes through the same retry/tolerance/DLQ policy as on the per-record path.
    """

    def __init__(self, processor: TaskPipeline) -> None:
        self.processor = processor
        self.batch_runner = BatchStageRunner(processor.retry)
        self.transformations = [
            (stage, as_arrow_function(fn, stage.class_name)) for stage, fn in processor.transformations
        ]
        #: The vectorized JSON converter of each converter stage (key, value) that decodes JSON, kept for the task.
        self.json_converters: dict[Stage, Any] = {
            converter.stage.type: VectorizedJsonConverter(converter.stage, processor.runner, self.batch_runner)
            for converter in (processor.key_converter, processor.value_converter)
            if converter.fn is decode_json
        }
        #: The column decoder of each converter stage that decodes Avro through the registry.
        self.avro_converters: dict[Stage, VectorizedAvroConverter] = {
            converter.stage.type: VectorizedAvroConverter(converter.stage, converter, processor.runner)
            for converter in (processor.key_converter, processor.value_converter)
            if isinstance(converter.fn, RegistryDeserializer) and converter.fn.fmt == "avro"
        }

    def process(self, batch: Any, columns: BatchColumns) -> int:
        """Run every stage over one Arrow batch of source records; return how many records the sink took."""
        decoded = self.decode(batch, columns)
        return self.put(self.transform(decoded, columns), columns)

    def decode(self, batch: Any, columns: BatchColumns) -> DecodedBatch:
        """The key and value converters over whole columns, then the batch transformations receive."""

        processor = self.processor
        rows = list(range(batch.num_rows))
        keys, key_rows = self.convert(processor.key_converter, batch.column("key"), rows, columns)
        raw_values = batch.column("value")
        if len(key_rows) != batch.num_rows:  # the value converter sees only the records whose key converted
            raw_values = raw_values.take(pa.array(key_rows, pa.int64()))
        values, rows = self.convert(processor.value_converter, raw_values, key_rows, columns)
        if len(rows) != len(key_rows):
            keys = keys.take(positions_of(key_rows, rows))
        coordinates = batch.select(["topic", "partition", "offset", "timestamp"])
        if len(rows) != batch.num_rows:
            coordinates = coordinates.take(pa.array(rows, pa.int64()))
        micros = coordinates.column("timestamp").cast(pa.int64())
        work = pa.RecordBatch.from_arrays(
            [
                keys,
                values,
                coordinates.column("topic"),
                coordinates.column("partition"),
                coordinates.column("offset"),
                pc.divide(micros, pa.scalar(1000, pa.int64())),
            ],
            ["key", "value", "topic", "partition", "offset", "timestamp"],
        )
        return DecodedBatch(work, rows, keys, values, rows)

    def transform(self, decoded: DecodedBatch, columns: BatchColumns) -> DecodedBatch:
        """Every batch transformation in turn, each bisecting its failures down to the bad records."""
        work, rows = decoded.work, decoded.rows
        for stage, fn in self.transformations:
            work, rows = self.batch_runner.run(stage, fn, work, rows, columns.source_record)
        return replace(decoded, work=work, rows=rows)

    def put(self, decoded: DecodedBatch, columns: BatchColumns) -> int:
        """Hand the surviving records to the sink (the TASK_PUT stage, record by record); return how many it took."""
        processor = self.processor
        work, rows = decoded.work, decoded.rows
        if not isinstance(processor.sink, KafkaSink) or isinstance(processor.sink, RegistryKafkaSink):
            # A registry sink encodes every value through its schema, record by record (a misfit fails alone).
            keys, values = work.column("key").to_pylist(), work.column("value").to_pylist()
            return processor.put(columns.pipeline_records(rows, keys, values), rows, columns.source_record)
        converted_keys, converted_values = decoded.converted_keys, decoded.converted_values
        if rows != decoded.converted_rows:
            positions = positions_of(decoded.converted_rows, rows)
            converted_keys, converted_values = converted_keys.take(positions), converted_values.take(positions)
        taken = pa.array(rows, pa.int64())
        raw = columns.batch
        written_keys = _to_write(work.column("key"), converted_keys, raw.column("key"), taken)
        written_values = _to_write(work.column("value"), converted_values, raw.column("value"), taken)
        pairs = list(zip(written_values, written_keys, strict=True))
        return processor.write_encoded(pairs, rows, columns.source_record)

    def convert(self, converter: Converter, raw: Any, rows: list[int], columns: BatchColumns) -> tuple[Any, list[int]]:
        """One converter over a whole column; a value it cannot convert is reported and left out with its row."""
        runner = self.processor.runner
        source = columns.source_record
        if converter.fn is None:
            return raw, rows
        if converter.fn is decode_json:
            return self.json_converters[converter.stage.type].convert(raw, rows, source, columns)
        if converter.fn is decode_string:
            return decode_string_column(raw, rows, converter.stage, runner, source)
        avro = self.avro_converters.get(converter.stage.type)
        decoded = None if avro is None else avro.convert(raw, rows, columns)
        if decoded is None:
            converted, kept = runner.run(
                converter.stage, converter.fn, raw.to_pylist(), rows, source, fast=converter.fast
            )
        elif isinstance(decoded[0], pa.Array):
            return decoded[0], decoded[1]
        else:
            converted, kept = decoded
        try:
            return pa.array(converted), kept
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            return self.typed_column(converter, converted, kept, source)

    def typed_column(
        self, converter: Converter, converted: list[Any], rows: list[int], source: Callable[[int], SourceRecord]
    ) -> tuple[Any, list[int]]:
        """The converted values as one Arrow column when they do not share a type: the most common type wins.

        A column has one type, so a value whose fields clash with most of its batch's (a
        ``string`` amount among ``double`` ones, from another schema version) fails its record
        alone at its converter's stage, with pyarrow's reason, and the rest keep their type
        whatever the batch's order. A value that only lacks a field (null) still fits.
        """
        kinds = Counter(_arrow_type(value) for value in converted)
        kinds.pop(None, None)
        if not kinds:
            raise TypeError("no converted value of this batch has an Arrow type")
        kind = kinds.most_common(1)[0][0]
        runner = self.processor.runner
        kept, kept_rows = runner.run(converter.stage, partial(_as_arrow, kind), converted, rows, source)
        return pa.array(kept, type=kind), kept_rows


def _arrow_type(value: Any) -> Any:
    try:
        return pa.array([value]).type
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None


def _as_arrow(kind: Any, value: Any) -> Any:
    """``value`` itself when it fits an Arrow column of type ``kind``; pyarrow's error (its record fails) otherwise."""
    try:
        pa.array([value], type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as error:
        raise ConvertedValueMismatch(
            f"the value does not fit its batch's Arrow column of type {kind}: {error}"
        ) from None
    return value


class ConvertedValueMismatch(ValueError):
    """A converted value whose type clashes with the rest of its batch's: one Arrow column holds one type."""


def _to_write(column: Any, converted: Any, raw: Any, taken: Any) -> list[Any]:
    """The bytes a Kafka sink writes: the record's original bytes when no transformation changed the value."""

    if column.type == converted.type and column.equals(converted):
        return raw.take(taken).to_pylist()
    return encode_json_column(column)
