"""Batch transformations: vectorized code (Arrow or pandas) under Connect's per-record ``errors.*`` policy.

A transformation marked with :func:`batch_transformation` receives a whole batch of
records as one ``pyarrow.RecordBatch`` (or pandas ``DataFrame``) and returns one. The
batch holds the columns ``key``, ``value`` (a struct for JSON objects), ``topic``,
``partition``, ``offset`` and ``timestamp`` (epoch ms); a pandas function sees the value's
fields as ``value.<field>`` columns.

Error semantics. Vectorized code fails a batch as a whole, so one bad record would
otherwise cost every good one. When a batch call raises, the batch is split in two and
each half is called again (bisection), until a call succeeds or holds a single record.
That one-record call is the record's first attempt, and from there Connect's per-record
policy applies unchanged: retries of the one-record call with Connect's backoff within
``errors.retry.timeout`` when the error is retriable, then tolerance, the error log and the
DLQ record with the same ``__connect.errors.*`` headers as the per-record path. The rest of
the batch stays vectorized. A retry therefore always means "the same call on the same one
record": a multi-record call is never retried as a whole; its failure only says that some
record in it failed. So a batch function must be safe to call again on a subset of its
records (no side effects that count calls), and one bad record among ``n`` costs about
``2·log2(n)`` extra calls on ever smaller pieces.

Which records a function kept is read from the ``offset`` column it returns (a record left
out was dropped on purpose, like a per-record transformation returning ``None``); a function
that returns no ``offset`` column must return exactly one row per input row, in order.

The converters over whole columns (JSON decode with its exactness check, string decode,
JSON encode) are :mod:`airflow_kerr.spark.column_converters`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa

from airflow_kerr.errors import SKIPPED, PipelineStage, RetryWithTolerance, SourceRecord
from airflow_kerr.spark.stages import (
    batch_kind,
    batch_transformation,
)

__all__ = [
    "BatchStageRunner",
    "batch_kind",
    "batch_transformation",
]

VALUE_FIELD_PREFIX: Final = "value."

BatchFunction = Callable[[pa.RecordBatch], pa.RecordBatch]


class BatchContractError(TypeError):
    """A batch transformation returned something the job cannot trace back to its input records.

    Raised outside the error policy: it is a bug in the function, not a bad record, so the task fails.
    """


def as_arrow_function(fn: Callable[..., Any], name: str) -> BatchFunction:
    """``fn`` as a RecordBatch → RecordBatch function, converting to and from pandas for ``kind="pandas"``."""
    if batch_kind(fn) == "pandas":

        def call_with_pandas(batch: pa.RecordBatch) -> pa.RecordBatch:
            return _from_pandas(fn(_to_pandas(batch)), name)

        return call_with_pandas

    def call_with_arrow(batch: pa.RecordBatch) -> pa.RecordBatch:
        result = fn(batch)
        if isinstance(result, pa.Table):
            return _one_batch(result)
        if not isinstance(result, pa.RecordBatch):
            raise BatchContractError(
                f"batch transformation {name} returned {type(result).__name__}: expected a pyarrow RecordBatch or Table"
            )
        return result

    return call_with_arrow


def _to_pandas(batch: pa.RecordBatch) -> Any:
    return pa.Table.from_batches([batch]).flatten().to_pandas()


def _from_pandas(frame: Any, name: str) -> pa.RecordBatch:
    """A DataFrame back to the batch layout: ``value.<field>`` columns become the ``value`` struct again."""
    import pandas as pd  # type: ignore[import-untyped]

    if not isinstance(frame, pd.DataFrame):
        raise BatchContractError(
            f"batch transformation {name} (kind='pandas') returned {type(frame).__name__}: expected a pandas DataFrame"
        )
    table = pa.Table.from_pandas(frame, preserve_index=False)
    fields = [column for column in table.column_names if column.startswith(VALUE_FIELD_PREFIX)]
    if not fields:
        return _one_batch(table)
    value = pa.StructArray.from_arrays(
        [table.column(column).combine_chunks() for column in fields],
        names=[column[len(VALUE_FIELD_PREFIX) :] for column in fields],
    )
    rest = [column for column in table.column_names if not column.startswith(VALUE_FIELD_PREFIX)]
    return pa.RecordBatch.from_arrays([table.column(c).combine_chunks() for c in rest] + [value], [*rest, "value"])


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=table.schema)


class BatchStageRunner:
    """Runs one batch stage under the retry/tolerance policy, bisecting a failing batch down to its bad records."""

    def __init__(self, retry: RetryWithTolerance) -> None:
        self.retry = retry

    def run(
        self,
        stage: PipelineStage,
        fn: BatchFunction,
        batch: pa.RecordBatch,
        rows: list[int],
        source_record: Callable[[int], SourceRecord],
    ) -> tuple[pa.RecordBatch, list[int]]:
        """Return the stage's output and the input row each output row belongs to; failed records are left out."""
        if batch.num_rows == 0:
            return batch, rows
        pieces: list[tuple[pa.RecordBatch, list[int]]] = []
        self._call(stage, fn, batch, rows, source_record, pieces)
        if not pieces:
            return batch.slice(0, 0), []
        if len(pieces) == 1:
            return pieces[0]
        kept = [row for _, piece_rows in pieces for row in piece_rows]
        try:
            return concat_batches([piece for piece, _ in pieces]), kept
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise BatchContractError(
                f"{stage.class_name}: the pieces of a split batch came back with types that do not combine "
                f"({error}); the task fails rather than drop records"
            ) from error

    def _call(
        self,
        stage: PipelineStage,
        fn: BatchFunction,
        batch: pa.RecordBatch,
        rows: list[int],
        source_record: Callable[[int], SourceRecord],
        pieces: list[tuple[pa.RecordBatch, list[int]]],
    ) -> None:
        started = self.retry.clock() if self.retry.config.retry_enabled else 0.0
        try:
            output = fn(batch)
        except BatchContractError:
            raise
        except Exception as error:
            if batch.num_rows > 1:
                half = batch.num_rows // 2
                self._call(stage, fn, batch.slice(0, half), rows[:half], source_record, pieces)
                self._call(stage, fn, batch.slice(half), rows[half:], source_record, pieces)
                return
            result = self.retry.execute_after_failure(stage, fn, source_record(rows[0]), error, started, batch)
            if result is SKIPPED:
                return
            output = result
        pieces.append((output, traced_rows(output, batch, rows, stage.class_name)))


def traced_rows(output: pa.RecordBatch, batch: pa.RecordBatch, rows: list[int], name: str) -> list[int]:
    """The input row of each output row, found by its ``offset`` (or by position when the row count is unchanged)."""
    if "offset" not in output.schema.names:
        if output.num_rows != batch.num_rows:
            raise BatchContractError(
                f"batch transformation {name} returned {output.num_rows} rows for {batch.num_rows} without an "
                "'offset' column: keep the offset column to drop records, or return one row per input row"
            )
        return rows
    offsets = output.column("offset")
    if offsets.equals(batch.column("offset")):
        return rows
    row_of = dict(zip(batch.column("offset").to_pylist(), rows, strict=True))
    try:
        return [row_of[offset] for offset in offsets.to_pylist()]
    except KeyError as missing:
        raise BatchContractError(
            f"batch transformation {name} returned offset {missing.args[0]}, which was not in its input batch"
        ) from None


def concat_batches(batches: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
    """One batch from pieces whose types may differ where a piece inferred a narrower one (int vs double)."""
    tables = [pa.Table.from_batches([batch]) for batch in batches]
    return _one_batch(pa.concat_tables(tables, promote_options="permissive"))


def positions_of(rows: Sequence[int], subset: Sequence[int]) -> pa.Array:
    """Where each of ``subset`` sits in ``rows``, as an Arrow index; both ascending, ``subset`` within ``rows``.

    Rows only ever leave a batch, in order, so a binary search finds them: one numpy call
    where a dict of the batch's rows cost more than the stage it served.
    """
    return pa.array(np.searchsorted(np.asarray(rows, np.int64), np.asarray(subset, np.int64)))
