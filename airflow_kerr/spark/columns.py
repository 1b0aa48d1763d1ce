"""Column access for one Arrow batch in the ``kerr_kafka`` schema (runs on executors).

Both paths of a partition task read their batch through :class:`BatchColumns`: the
per-record path converts the columns it needs to Python lists once per batch, the
vectorized path reads them as Arrow, and either builds a failed record's
:class:`SourceRecord` for its error context and DLQ record only when it fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from airflow_kerr.errors import (
    SourceRecord,
)
from airflow_kerr.errors.record import TimestampType
from airflow_kerr.spark.stages import (
    PipelineRecord,
)

_SPARK_TO_TIMESTAMP_TYPE = {0: TimestampType.CREATE_TIME, 1: TimestampType.LOG_APPEND_TIME}
#: :meth:`BatchColumns.source_records_of` converts only the given rows when they are at most one in this many.
FEW_ROWS_SHARE: Final = 16


class BatchColumns:
    """Column access for one Arrow batch in the ``kerr_kafka`` schema; per-row objects only on demand.

    Each column is converted with one vectorized call the first time it is read, so the
    vectorized path, which reads a clean batch's columns only as Arrow, converts none of
    them. Headers are flattened and sliced rather than converted struct by struct, which
    costs several times more.
    """

    def __init__(self, batch: Any) -> None:
        self.batch = batch

    @cached_property
    def keys(self) -> list[Any]:
        return self.batch.column("key").to_pylist()

    @cached_property
    def values(self) -> list[Any]:
        return self.batch.column("value").to_pylist()

    @cached_property
    def offsets(self) -> list[int]:
        return self.batch.column("offset").to_pylist()

    @cached_property
    def topics(self) -> list[str]:
        return self.batch.column("topic").to_pylist()

    @cached_property
    def partitions(self) -> list[int]:
        return self.batch.column("partition").to_pylist()

    @cached_property
    def timestamps(self) -> list[int | None]:

        # Kafka timestamps are epoch milliseconds >= 0, so Arrow's truncating division is Python's //.
        return pc.divide(self.batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()

    @cached_property
    def headers(self) -> list[list[tuple[str, bytes | None]]]:
        """Every row's headers (what per-record transformations receive)."""
        bounds, pairs = self._header_pairs
        return [pairs[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]

    def headers_of(self, row: int) -> list[tuple[str, bytes | None]]:
        """One row's headers, without building every row's list: a failed record's DLQ record needs only its own."""
        bounds, pairs = self._header_pairs
        return pairs[bounds[row] : bounds[row + 1]]

    @cached_property
    def _header_pairs(self) -> tuple[list[int], list[tuple[str, bytes | None]]]:
        """The header column's row bounds and its (key, value) pairs, flattened and converted once per batch."""
        column = self.batch.column("headers")
        flat = column.flatten()
        pairs = list(zip(flat.field("key").to_pylist(), flat.field("value").to_pylist(), strict=True))
        return column.offsets.to_pylist(), pairs

    @cached_property
    def timestamp_types(self) -> list[int]:
        return self.batch.column("timestamp_type").to_pylist()

    def source_record(self, row: int) -> SourceRecord:
        """The record as Connect's error context and DLQ record see it; built only for a record that failed."""
        kind = self.timestamp_types[row]
        timestamp = self.timestamps[row]
        return SourceRecord(
            topic=self.topics[row],
            partition=self.partitions[row],
            offset=self.offsets[row],
            timestamp=timestamp,
            timestamp_type=TimestampType.NO_TIMESTAMP_TYPE
            if timestamp is None
            else _SPARK_TO_TIMESTAMP_TYPE.get(kind, TimestampType.CREATE_TIME),
            key=self.keys[row],
            value=self.values[row],
            headers=self.headers_of(row),
        )

    def source_records_of(self, rows: Sequence[int]) -> Callable[[int], SourceRecord]:
        """:meth:`source_record` for ``rows`` only, known before any fails: a batch's suspect values.

        Converting a column costs about the same whether one of its records failed or all
        did: 1.3 ms for a batch of 8,192, which the few failed records of a batch at 1 % bad
        paid between them. When ``rows`` are few, and no column is converted yet, their
        records come from a ``take`` of those rows (0.4 ms for 82 of 8,192).
        """
        if len(rows) * FEW_ROWS_SHARE > self.batch.num_rows or "offsets" in self.__dict__:
            return self.source_record
        few = BatchColumns(self.batch.take(pa.array(rows, pa.int64())))
        position = {row: index for index, row in enumerate(rows)}
        return lambda row: few.source_record(position[row])

    def pipeline_records(self, rows: list[int], keys: list[Any], values: list[Any]) -> list[PipelineRecord]:
        """The records transformations receive, for the given rows and their converted keys and values.

        No rows (every record of the batch failed to convert) reads no column: a batch of poison
        would otherwise pay for every row's headers, 1.7 µs per record, for nothing.
        """
        if not rows:
            return []
        topics, partitions, offsets = self.topics, self.partitions, self.offsets
        timestamps, headers = self.timestamps, self.headers
        return [
            PipelineRecord(key, value, topics[row], partitions[row], offsets[row], timestamps[row], headers[row])
            for row, key, value in zip(rows, keys, values, strict=True)
        ]
