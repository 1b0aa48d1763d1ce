"""The outage breaker's rules on failures reported as the job reports them (no Spark needed to judge)."""

from __future__ import annotations

import pytest

from airflow_kerr.errors import ErrorContext, ErrorHandlingConfig, SourceRecord, Stage, TaskId
from airflow_kerr.spark.outage import Outage, OutageDetector, OutageTripped


def detector(**settings: object) -> OutageDetector:
    keys = {f"errors.outage.{name.replace('_', '.')}": value for name, value in settings.items()}
    config = ErrorHandlingConfig.from_properties({"errors.tolerance": "all", "errors.outage.enable": True, **keys})
    return OutageDetector(config)


def fail(judge: OutageDetector, offset: int, error: BaseException, stage: Stage = Stage.TRANSFORMATION) -> None:
    record = SourceRecord("orders", 3, offset)
    judge.report(ErrorContext(task=TaskId("p", 0), stage=stage, executing_class="x", error=error, record=record))


def test_n_failures_in_a_row_of_one_class_at_one_stage_trip_at_once_naming_the_first() -> None:
    judge = detector(consecutive_failures=3)
    judge.begin_batch(list(range(100, 110)), "orders", 3)
    fail(judge, 101, ConnectionRefusedError())
    fail(judge, 102, ConnectionRefusedError())

    with pytest.raises(OutageTripped) as tripped:
        fail(judge, 103, ConnectionRefusedError())

    outage = tripped.value.outage
    assert (outage.exception_class, outage.stage, outage.consecutive) == ("ConnectionRefusedError", "TRANSFORMATION", 3)
    assert (outage.first_offset, outage.resume_offset, outage.failed, outage.records) == (101, 100, 3, 10)
    assert "orders-3@101" in str(tripped.value) and "ConnectionRefusedError" in str(tripped.value)


def test_a_record_that_got_through_another_class_or_another_stage_breaks_the_run() -> None:
    judge = detector(consecutive_failures=3, batch_failure_percent=100)
    judge.begin_batch(list(range(10)), "orders", 0)
    fail(judge, 0, TimeoutError())
    fail(judge, 1, TimeoutError())
    fail(judge, 2, ValueError())  # poison of another class
    fail(judge, 3, TimeoutError())
    fail(judge, 4, TimeoutError(), Stage.VALUE_CONVERTER)
    fail(judge, 6, TimeoutError())  # offset 5 got through
    fail(judge, 7, TimeoutError())

    judge.judge()  # no run of three: poison, not an outage


def test_a_run_goes_on_across_batches() -> None:
    judge = detector(consecutive_failures=4, batch_failure_percent=100)
    judge.begin_batch([0, 1, 2, 3], "orders", 0)
    fail(judge, 2, TimeoutError())
    fail(judge, 3, TimeoutError())
    judge.judge()
    judge.begin_batch([4, 5, 6, 7], "orders", 0)
    fail(judge, 4, TimeoutError())

    with pytest.raises(OutageTripped) as tripped:
        fail(judge, 5, TimeoutError())
    assert (tripped.value.outage.first_offset, tripped.value.outage.resume_offset) == (4, 4)


def test_more_than_x_percent_of_at_least_m_records_trips_at_the_judgment() -> None:
    judge = detector(consecutive_failures=0, batch_failure_percent=50, batch_min_records=10)
    judge.begin_batch(list(range(10)), "orders", 0)
    for offset in range(0, 10, 2):
        fail(judge, offset, TimeoutError())
    judge.judge()  # 50 %: not more than half
    fail(judge, 1, TimeoutError())

    with pytest.raises(OutageTripped) as tripped:
        judge.judge()
    assert tripped.value.outage.rate == pytest.approx(0.6)
    assert "6 of 10 records (60.0%)" in str(tripped.value)

    small = detector(consecutive_failures=0, batch_failure_percent=50, batch_min_records=10)
    small.begin_batch(list(range(5)), "orders", 0)
    for offset in range(5):
        fail(small, offset, TimeoutError())
    small.judge()  # five records are too few to judge by rate


def test_an_outage_travels_as_json() -> None:
    outage = Outage("rule", "TimeoutError", "TRANSFORMATION", 6, 10, 3, "orders", 0, 4, 0)
    assert Outage.from_json(outage.to_json()) == outage
