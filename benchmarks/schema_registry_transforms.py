"""``schema_registry.py``'s transformation, schemas and hand-written job, importable by Spark's Python workers."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from io import BytesIO
from typing import Any

#: The orders the benchmark reads: about 70 bytes of Avro each, framed in Confluent's wire format.
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "order_ref", "type": "string"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string"},
        {"name": "created_ms", "type": "long"},
        {"name": "note", "type": "string"},
    ],
}
#: What both jobs write: the order and its amount in cents.
ENRICHED = {**ORDER, "name": "EnrichedOrder", "fields": [*ORDER["fields"], {"name": "amount_cents", "type": "long"}]}


def transform(record: Any) -> Any:
    """A business check and a derived field; raises for a non-positive amount (as ``spark_job_transforms``)."""
    order = record.value
    if order["amount"] <= 0:
        raise ValueError("non-positive amount")
    order["amount_cents"] = round(order["amount"] * 100)
    return record


def handwritten_batches(batches: Iterator[Any], argument: str) -> Iterator[tuple[int]]:
    """The hand-written job of one read task: fastavro decode, :func:`transform`, fastavro encode, write.

    What a user writes without the provider: a dict of parsed writer schemas by id (fetched
    from the registry on a miss, as Confluent's cached client does, misses not remembered),
    ``schemaless_reader``/``schemaless_writer``, the output schema registered once, and a record
    that raises anywhere is dropped, nothing else (no DLQ, no metrics, no retry).
    """
    from fastavro import parse_schema, schemaless_reader, schemaless_writer

    from airflow_kerr.spark.columns import BatchColumns
    from airflow_kerr.spark.sinks import ProducerChannel

    options = json.loads(argument)
    channel = ProducerChannel(options["config"])
    url, sink = options["registry"], options["sink"]
    out_schema = parse_schema(ENRICHED)
    request = urllib.request.Request(
        f"{url}/subjects/{sink}-value/versions",
        data=json.dumps({"schema": json.dumps(ENRICHED)}).encode(),
        method="POST",
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        header = b"\x00" + int(json.loads(answer.read())["id"]).to_bytes(4, "big")
    schemas: dict[int, Any] = {}
    written = 0

    def decode(value: bytes) -> Any:
        if value[0] != 0 or len(value) < 5:
            raise ValueError("not framed")
        schema_id = int.from_bytes(value[1:5], "big")
        schema = schemas.get(schema_id)
        if schema is None:
            with urllib.request.urlopen(f"{url}/schemas/ids/{schema_id}", timeout=30) as answer:
                schema = schemas[schema_id] = parse_schema(json.loads(json.loads(answer.read())["schema"]))
        return schemaless_reader(BytesIO(value[5:]), schema, None)

    for batch in batches:
        columns = BatchColumns(batch)
        keys, values, kept = columns.keys, [], []
        for row, value in enumerate(columns.values):
            try:
                values.append(decode(value))
            except Exception:
                continue
            kept.append(row)
        records = columns.pipeline_records(kept, [keys[row] for row in kept], values)
        for record in records:
            try:
                order = transform(record).value
                out = BytesIO()
                out.write(header)
                schemaless_writer(out, out_schema, order)
            except Exception:
                continue
            channel.produce(sink, key=record.key, value=out.getvalue())
            written += 1
    channel.flush()
    yield (written,)
