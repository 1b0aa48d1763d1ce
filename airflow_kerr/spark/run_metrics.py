"""The job's metrics records: one per task (written by the executor) and one per run (by the driver)."""

from __future__ import annotations

import json
import time
from typing import Any

from airflow_kerr.errors import (
    ErrorMetrics,
)
from airflow_kerr.spark.sinks import ProducerChannel
from airflow_kerr.spark.spec import PipelineSpec


def publish_metrics_record(
    channel: ProducerChannel,
    spec: PipelineSpec,
    metrics: ErrorMetrics,
    *,
    task: int | None,
    run_id: str,
    started_ms: int,
    **fields: Any,
) -> None:
    """Task and run records share one shape (a window ending now plus ``fields``), so one writer serves both."""
    record = metrics.to_record(
        pipeline=spec.name,
        task=task,
        run_id=run_id,
        window_start_ms=started_ms,
        window_end_ms=int(time.time() * 1000),
    )
    record.update(fields)
    channel.produce(spec.metrics_topic, key=spec.name.encode(), value=json.dumps(record).encode())
    channel.flush()
