"""The benchmark's transformation and plain job as an importable module, so Spark's Python workers load them by path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def transform(record: Any) -> Any:
    """A business check and a derived field; raises for a non-positive amount."""
    order = record.value
    if order["amount"] <= 0:
        raise ValueError("non-positive amount")
    order["amount_cents"] = round(order["amount"] * 100)
    return record


def plain_batches(batches: Iterator[Any], argument: str) -> Iterator[tuple[int]]:
    """The plain job of one read task: decode, transform, write; a record that raises is dropped, nothing else."""
    from airflow_kerr.spark.columns import BatchColumns
    from airflow_kerr.spark.sinks import ProducerChannel, encode_value
    from airflow_kerr.spark.stages import decode_json

    options = json.loads(argument)
    channel = ProducerChannel(options["config"])
    sink = options["sink"]
    written = 0

    def convert(raw: bytes) -> Any:
        try:
            return decode_json(raw)
        except ValueError:
            return None

    def apply(record: Any) -> Any:
        try:
            return transform(record)
        except Exception:
            return None

    for batch in batches:
        columns = BatchColumns(batch)
        keys = [None if k is None else k.decode() for k in columns.keys]
        values = [convert(v) for v in columns.values]
        kept = [row for row in range(batch.num_rows) if values[row] is not None]
        records = columns.pipeline_records(kept, [keys[r] for r in kept], [values[r] for r in kept])
        for record in map(apply, records):
            if record is not None:
                channel.produce(sink, key=record.key.encode(), value=encode_value(record.value))
                written += 1
    channel.flush()
    yield (written,)
