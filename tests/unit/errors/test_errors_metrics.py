"""ErrorMetrics: Connect's eight counters, the accumulator merge and the published record."""

from __future__ import annotations

import dataclasses
import json
import pickle

from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import CONNECT_METRIC_NAMES, ErrorMetrics

counts = st.integers(0, 10**12)
snapshots = st.builds(
    ErrorMetrics,
    total_record_failures=counts,
    total_record_errors=counts,
    total_records_skipped=counts,
    total_retries=counts,
    total_errors_logged=counts,
    deadletterqueue_produce_requests=counts,
    deadletterqueue_produce_failures=counts,
    last_error_timestamp=st.integers(0, 4 * 10**12),
    records_in=counts,
)


def test_the_eight_connect_names() -> None:
    assert CONNECT_METRIC_NAMES == (
        "total-record-failures",
        "total-record-errors",
        "total-records-skipped",
        "total-retries",
        "total-errors-logged",
        "deadletterqueue-produce-requests",
        "deadletterqueue-produce-failures",
        "last-error-timestamp",
    )


def test_merge_adds_counters_and_keeps_the_latest_error_time() -> None:
    left = ErrorMetrics(total_record_failures=3, total_retries=2, last_error_timestamp=200, records_in=100)
    right = ErrorMetrics(total_record_failures=1, deadletterqueue_produce_requests=4, last_error_timestamp=150)

    merged = left.merge(right)

    assert merged == ErrorMetrics(
        total_record_failures=4,
        total_retries=2,
        deadletterqueue_produce_requests=4,
        last_error_timestamp=200,
        records_in=100,
    )
    assert left.total_record_failures == 3
    assert left + right == merged


@given(snapshots, snapshots, snapshots)
def test_merge_is_associative(a: ErrorMetrics, b: ErrorMetrics, c: ErrorMetrics) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@given(snapshots, snapshots)
def test_merge_is_commutative_with_zero_as_identity(a: ErrorMetrics, b: ErrorMetrics) -> None:
    assert a.merge(b) == b.merge(a)
    assert a.merge(ErrorMetrics.zero()) == a


@given(snapshots, snapshots)
def test_add_in_place_equals_merge(a: ErrorMetrics, b: ErrorMetrics) -> None:
    expected = a.merge(b)
    target = dataclasses.replace(a)

    assert target.add(b) is target
    assert target == expected


def test_recording_methods_move_their_own_counter() -> None:
    metrics = ErrorMetrics()

    metrics.record_failure()
    metrics.record_error()
    metrics.record_skipped()
    metrics.record_retry()
    metrics.record_error_logged()
    metrics.record_dlq_produce_request()
    metrics.record_dlq_produce_failed()
    metrics.record_error_timestamp(1234.9)
    metrics.record_in(10)

    assert metrics.as_connect_metrics() == {
        "total-record-failures": 1,
        "total-record-errors": 1,
        "total-records-skipped": 1,
        "total-retries": 1,
        "total-errors-logged": 1,
        "deadletterqueue-produce-requests": 1,
        "deadletterqueue-produce-failures": 1,
        "last-error-timestamp": 1234,
    }
    assert metrics.records_in == 10


def test_metrics_record_has_identity_window_records_in_and_the_counters() -> None:
    metrics = ErrorMetrics(total_record_errors=2, total_records_skipped=2, records_in=500, last_error_timestamp=9)

    text = metrics.to_json(
        pipeline="orders_pipeline", task=None, run_id="manual__2026", window_start_ms=1000, window_end_ms=61000
    )

    record = json.loads(text)
    assert list(record) == [
        "pipeline",
        "task",
        "run_id",
        "window_start_ms",
        "window_end_ms",
        "records_in",
        *CONNECT_METRIC_NAMES,
    ]
    assert record["pipeline"] == "orders_pipeline"
    assert record["task"] is None
    assert record["records_in"] == 500
    assert record["total-record-errors"] == 2
    assert ErrorMetrics.from_record(record) == metrics


def test_snapshots_survive_pickling_for_spark_accumulators() -> None:
    metrics = ErrorMetrics(total_record_errors=3, last_error_timestamp=7)

    assert pickle.loads(pickle.dumps(metrics)) == metrics
