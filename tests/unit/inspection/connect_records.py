"""A dead letter as our Spark job writes it (Connect's headers), for the inspection's unit tests."""

from __future__ import annotations

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record


def connect_headers(error: BaseException | None = None, topic: str = "orders") -> list[tuple[str, bytes | None]]:
    record = SourceRecord(topic, 1, 42, 1_795_250_000_000, key=b"k", value=b"v", headers=[("trace", b"t")])
    context = ErrorContext(
        TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "x.Validate", error or ValueError("bad"), record
    )
    return build_dead_letter_record(context, topic="orders.dlq").headers
