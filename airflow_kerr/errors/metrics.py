"""Connect's ``task-error-metrics`` counters, mergeable across Spark executors.

Each executor task counts into its own :class:`ErrorMetrics`; the driver merges them (a
Spark accumulator's ``addInPlace``) and publishes one JSON metrics record per window, which
the tolerance sensors read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

#: Connect's metric names, in ``ErrorHandlingMetrics`` order.
TOTAL_RECORD_FAILURES = "total-record-failures"
TOTAL_RECORD_ERRORS = "total-record-errors"
TOTAL_RECORDS_SKIPPED = "total-records-skipped"
TOTAL_RETRIES = "total-retries"
TOTAL_ERRORS_LOGGED = "total-errors-logged"
DLQ_PRODUCE_REQUESTS = "deadletterqueue-produce-requests"
DLQ_PRODUCE_FAILURES = "deadletterqueue-produce-failures"
LAST_ERROR_TIMESTAMP = "last-error-timestamp"

CONNECT_METRIC_NAMES: tuple[str, ...] = (
    TOTAL_RECORD_FAILURES,
    TOTAL_RECORD_ERRORS,
    TOTAL_RECORDS_SKIPPED,
    TOTAL_RETRIES,
    TOTAL_ERRORS_LOGGED,
    DLQ_PRODUCE_REQUESTS,
    DLQ_PRODUCE_FAILURES,
    LAST_ERROR_TIMESTAMP,
)


@dataclass(slots=True)
class ErrorMetrics:
    """The eight Connect counters plus ``records_in`` (records read), for error rates.

    All counters are cumulative sums; ``last_error_timestamp`` is epoch milliseconds of the
    latest failed record (0 when none). Merging adds the sums and keeps the latest timestamp,
    so merging is associative and commutative with :meth:`zero` as identity.
    """

    total_record_failures: int = 0
    total_record_errors: int = 0
    total_records_skipped: int = 0
    total_retries: int = 0
    total_errors_logged: int = 0
    deadletterqueue_produce_requests: int = 0
    deadletterqueue_produce_failures: int = 0
    last_error_timestamp: int = 0
    records_in: int = 0

    @classmethod
    def zero(cls) -> ErrorMetrics:
        """The identity of :meth:`merge` (a Spark ``AccumulatorParam.zero``)."""
        return cls()

    def record_failure(self) -> None:
        """One failed attempt of an operation, retriable or not."""
        self.total_record_failures += 1

    def record_error(self) -> None:
        """One record whose operation failed for good (after any retries)."""
        self.total_record_errors += 1

    def record_skipped(self) -> None:
        """One failed record tolerated and skipped."""
        self.total_records_skipped += 1

    def record_retry(self) -> None:
        """One retry after a backoff."""
        self.total_retries += 1

    def record_error_logged(self) -> None:
        """One error context written to the log."""
        self.total_errors_logged += 1

    def record_dlq_produce_request(self) -> None:
        """One attempt to write a failed record to the DLQ."""
        self.deadletterqueue_produce_requests += 1

    def record_dlq_produce_failed(self) -> None:
        """One DLQ write that failed."""
        self.deadletterqueue_produce_failures += 1

    def record_error_timestamp(self, epoch_ms: float) -> None:
        """The time of the latest failed record."""
        self.last_error_timestamp = int(epoch_ms)

    def record_in(self, count: int = 1) -> None:
        """Records read by the job, the denominator of error rates."""
        self.records_in += count

    def merge(self, other: ErrorMetrics) -> ErrorMetrics:
        """A new snapshot combining both: sums added, the later error timestamp kept."""
        merged = ErrorMetrics()
        for spec in fields(ErrorMetrics):
            name = spec.name
            if name == "last_error_timestamp":
                value = max(self.last_error_timestamp, other.last_error_timestamp)
            else:
                value = getattr(self, name) + getattr(other, name)
            setattr(merged, name, value)
        return merged

    def add(self, other: ErrorMetrics) -> ErrorMetrics:
        """Merge ``other`` into this snapshot and return it (a Spark ``addInPlace``)."""
        merged = self.merge(other)
        for spec in fields(ErrorMetrics):
            setattr(self, spec.name, getattr(merged, spec.name))
        return self

    def __add__(self, other: ErrorMetrics) -> ErrorMetrics:
        return self.merge(other)

    def as_connect_metrics(self) -> dict[str, int]:
        """The eight counters under Connect's metric names."""
        return {
            TOTAL_RECORD_FAILURES: self.total_record_failures,
            TOTAL_RECORD_ERRORS: self.total_record_errors,
            TOTAL_RECORDS_SKIPPED: self.total_records_skipped,
            TOTAL_RETRIES: self.total_retries,
            TOTAL_ERRORS_LOGGED: self.total_errors_logged,
            DLQ_PRODUCE_REQUESTS: self.deadletterqueue_produce_requests,
            DLQ_PRODUCE_FAILURES: self.deadletterqueue_produce_failures,
            LAST_ERROR_TIMESTAMP: self.last_error_timestamp,
        }

    def to_record(
        self,
        *,
        pipeline: str,
        task: int | str | None,
        run_id: str,
        window_start_ms: int,
        window_end_ms: int,
    ) -> dict[str, Any]:
        """The metrics record published per window: identity, window, records in, the counters."""
        return {
            "pipeline": pipeline,
            "task": task,
            "run_id": run_id,
            "window_start_ms": window_start_ms,
            "window_end_ms": window_end_ms,
            "records_in": self.records_in,
            **self.as_connect_metrics(),
        }

    def to_json(
        self,
        *,
        pipeline: str,
        task: int | str | None,
        run_id: str,
        window_start_ms: int,
        window_end_ms: int,
    ) -> str:
        """:meth:`to_record` as JSON text."""
        return json.dumps(
            self.to_record(
                pipeline=pipeline,
                task=task,
                run_id=run_id,
                window_start_ms=window_start_ms,
                window_end_ms=window_end_ms,
            )
        )

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ErrorMetrics:
        """Read the counters back from a metrics record (missing counters count as 0)."""
        return cls(
            total_record_failures=int(record.get(TOTAL_RECORD_FAILURES, 0)),
            total_record_errors=int(record.get(TOTAL_RECORD_ERRORS, 0)),
            total_records_skipped=int(record.get(TOTAL_RECORDS_SKIPPED, 0)),
            total_retries=int(record.get(TOTAL_RETRIES, 0)),
            total_errors_logged=int(record.get(TOTAL_ERRORS_LOGGED, 0)),
            deadletterqueue_produce_requests=int(record.get(DLQ_PRODUCE_REQUESTS, 0)),
            deadletterqueue_produce_failures=int(record.get(DLQ_PRODUCE_FAILURES, 0)),
            last_error_timestamp=int(record.get(LAST_ERROR_TIMESTAMP, 0)),
            records_in=int(record.get("records_in", 0)),
        )
