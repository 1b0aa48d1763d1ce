"""The batch runner: failures isolated per record, nothing run twice, the errors.* policy applied."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kerr.errors import (
    ErrorHandlingConfig,
    ErrorMetrics,
    PipelineStage,
    RetriableError,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
    ToleranceExceeded,
)
from airflow_kerr.spark.stages import BatchRunner, decode_json, drop_filtered, make_converter

STAGE = PipelineStage(Stage.VALUE_CONVERTER, "test.Converter")


def runner(**properties: Any) -> tuple[BatchRunner, ErrorMetrics, list[Any]]:
    reported: list[Any] = []

    class Collect:
        def report(self, context: Any) -> None:
            reported.append(context)

    metrics = ErrorMetrics()
    retry = RetryWithTolerance(
        ErrorHandlingConfig.from_properties(properties),
        metrics,
        [Collect()],
        task=TaskId("p", 0),
        stages=[STAGE],
        sleep=lambda ms: None,
    )
    return BatchRunner(retry), metrics, reported


def source(row: int) -> SourceRecord:
    return SourceRecord("t", 0, row, key=None, value=str(row).encode())


def test_list_extend_keeps_results_made_before_an_exception() -> None:
    """The runner relies on CPython keeping what list.extend appended before the iterator raised."""
    out: list[int] = []

    def fail_at_three(x: int) -> int:
        if x == 3:
            raise ValueError
        return x

    with pytest.raises(ValueError):
        out.extend(map(fail_at_three, range(6)))
    assert out == [0, 1, 2]


def test_bad_records_are_isolated_and_each_good_one_runs_once() -> None:
    batch_runner, metrics, reported = runner(**{"errors.tolerance": "all"})
    calls: list[bytes] = []

    def convert(raw: bytes) -> Any:
        calls.append(raw)
        return decode_json(raw)

    items = [b"1", b"{bad", b"3", b"4", b"[", b"6"]
    values, rows = batch_runner.run(STAGE, convert, items, list(range(6)), source)

    assert values == [1, 3, 4, 6]
    assert rows == [0, 2, 3, 5]
    assert calls == items
    assert [context.record.offset for context in reported] == [1, 4]
    assert metrics.total_records_skipped == 2 and metrics.total_record_failures == 2


def test_a_retriable_failure_continues_from_the_first_attempt() -> None:
    batch_runner, metrics, _ = runner(**{"errors.tolerance": "all", "errors.retry.timeout": "5000"})
    attempts: dict[int, int] = {}

    def flaky(x: int) -> int:
        attempts[x] = attempts.get(x, 0) + 1
        if x == 2 and attempts[x] < 3:
            raise RetriableError("try again")
        return x * 10

    values, rows = batch_runner.run(STAGE, flaky, [1, 2, 3], [0, 1, 2], source)

    assert values == [10, 20, 30] and rows == [0, 1, 2]
    assert attempts == {1: 1, 2: 3, 3: 1}
    assert metrics.total_retries == 2
    assert metrics.total_record_failures == 2
    assert metrics.total_records_skipped == 0


def test_tolerance_none_raises_on_the_first_bad_record() -> None:
    batch_runner, _, reported = runner()
    with pytest.raises(ToleranceExceeded):
        batch_runner.run(STAGE, decode_json, [b"1", b"x", b"3"], [0, 1, 2], source)
    assert len(reported) == 1 and reported[0].record.offset == 1


def test_transformations_may_drop_records_on_purpose() -> None:
    records, rows = drop_filtered(["a", None, "c"], [0, 1, 2])
    assert records == ["a", "c"] and rows == [0, 2]


def test_bytes_converter_does_no_per_record_work() -> None:
    assert make_converter("bytes", Stage.VALUE_CONVERTER).fn is None
    assert make_converter("string", Stage.KEY_CONVERTER).fn is not None
    with pytest.raises(ImportError, match="no callable named 'nope'"):
        make_converter("airflow_kerr.spark.stages.nope", Stage.VALUE_CONVERTER)
