"""Connect fidelity of retries in the Spark job's batch path and of closing the reporters (issue #12, point 7).

Connect's ``RetryWithToleranceOperator.execAndRetry`` reads the clock before the first
attempt: ``deadline = start + errors.retry.timeout`` (no deadline when negative), and a
failed attempt is retried only while ``now < deadline``. The batch runner used to start
the deadline after the first failure, so a slow first attempt bought an extra retry.
Every path must make exactly the attempts Connect makes.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import (
    SKIPPED,
    ConnectError,
    ErrorHandlingConfig,
    ErrorMetrics,
    PipelineStage,
    RetriableError,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
)
from airflow_kerr.errors.retry import RETRIES_DELAY_MIN_MS
from airflow_kerr.spark.stages import BatchRunner

STAGE = PipelineStage(Stage.TRANSFORMATION, "test.transform")
NO_RANDOM_DELAY = 10**12  # errors.retry.delay.max.ms so large the backoff is never random


class Clock:
    """Epoch milliseconds that move only when an attempt works or the operator sleeps."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, delay_ms: float) -> None:
        self.now += delay_ms


def connect_attempts(timeout_ms: int, attempt_ms: float, fail_times: int) -> int:
    """How many attempts Connect's execAndRetry makes (Kafka 3.9/4.0), for an operation failing ``fail_times``."""
    now = 0.0
    deadline = now + timeout_ms if timeout_ms >= 0 else math.inf
    attempt = 0
    while True:
        attempt += 1
        now += attempt_ms
        if attempt > fail_times:
            return attempt
        if not now < deadline:
            return attempt
        delay: float = min(RETRIES_DELAY_MIN_MS << min(attempt - 1, 62), NO_RANDOM_DELAY)
        if delay + now > deadline:
            delay = max(0.0, deadline - now)
        now += delay


def operator(timeout_ms: int, clock: Clock) -> RetryWithTolerance:
    config = ErrorHandlingConfig.from_properties(
        {
            "errors.retry.timeout": timeout_ms,
            "errors.retry.delay.max.ms": NO_RANDOM_DELAY,
            "errors.tolerance": "all",
        }
    )
    return RetryWithTolerance(
        config, ErrorMetrics(), task=TaskId("p", 0), stages=[STAGE], clock=clock, sleep=clock.sleep
    )


class SlowFlaky:
    """A transformation whose bad item fails ``fail_times`` times; every call to it takes ``attempt_ms``.

    Good items take ``other_ms`` each: time spent on other records must not count against
    the bad record's retry budget, as it does not in Connect, where each record is its own
    operation.
    """

    def __init__(self, clock: Clock, attempt_ms: float, fail_times: int, other_ms: float = 0.0) -> None:
        self.clock = clock
        self.attempt_ms = attempt_ms
        self.fail_times = fail_times
        self.other_ms = other_ms
        self.attempts = 0

    def __call__(self, item: str) -> str:
        if item != "bad":
            self.clock.now += self.other_ms
            return item
        self.attempts += 1
        self.clock.now += self.attempt_ms
        if self.attempts <= self.fail_times:
            raise RetriableError(f"attempt {self.attempts}")
        return "fixed"


def source(row: int) -> SourceRecord:
    return SourceRecord("t", 0, row, key=None, value=b"v")


def batch_attempts(timeout_ms: int, attempt_ms: float, fail_times: int, other_ms: float = 0.0) -> tuple[int, Any]:
    clock = Clock()
    transform = SlowFlaky(clock, attempt_ms, fail_times, other_ms)
    items = ["good", "good", "bad", "good"]
    results, _ = BatchRunner(operator(timeout_ms, clock)).run(STAGE, transform, items, [0, 1, 2, 3], source)
    outcome = "fixed" if "fixed" in results else SKIPPED
    return transform.attempts, outcome


def single_attempts(timeout_ms: int, attempt_ms: float, fail_times: int) -> tuple[int, Any]:
    clock = Clock()
    transform = SlowFlaky(clock, attempt_ms, fail_times)
    result = operator(timeout_ms, clock).execute(STAGE, transform, source(2), "bad")
    return transform.attempts, result


def test_a_slow_first_attempt_uses_up_budget_in_the_batch_path() -> None:
    """The issue's case: 5 s attempts, 6 s budget. Connect tries twice; the batch path used to try three times."""
    assert connect_attempts(6_000, 5_000, fail_times=10) == 2
    assert batch_attempts(6_000, 5_000, fail_times=10) == (2, SKIPPED)


def test_time_spent_on_other_records_of_the_batch_is_not_charged() -> None:
    assert batch_attempts(6_000, 5_000, fail_times=10, other_ms=10_000)[0] == 2
    assert batch_attempts(60_000, 1_000, fail_times=3, other_ms=30_000) == (4, "fixed")


@settings(max_examples=300, deadline=None)
@given(
    timeout_ms=st.one_of(st.integers(-(2**63), -1), st.integers(0, 30_000)),
    attempt_ms=st.integers(0, 8_000),
    fail_times=st.integers(0, 12),
    other_ms=st.integers(0, 5_000),
)
def test_batch_and_single_record_paths_make_exactly_connects_attempts(
    timeout_ms: int, attempt_ms: int, fail_times: int, other_ms: int
) -> None:
    expected = connect_attempts(timeout_ms, attempt_ms, fail_times)
    outcome = "fixed" if expected > fail_times else SKIPPED

    assert batch_attempts(timeout_ms, attempt_ms, fail_times, other_ms) == (expected, outcome)
    assert single_attempts(timeout_ms, attempt_ms, fail_times) == (expected, outcome)


@pytest.mark.parametrize("timeout_ms", [-1, -2, -3_600_000, -(2**63)])
def test_any_negative_timeout_retries_without_a_deadline(timeout_ms: int) -> None:
    """Connect: ``deadline = errorRetryTimeout >= 0 ? start + errorRetryTimeout : Long.MAX_VALUE``."""
    attempts, outcome = batch_attempts(timeout_ms, attempt_ms=60_000, fail_times=40)
    assert (attempts, outcome) == (41, "fixed")


class Closeable:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.closed = 0

    def report(self, context: Any) -> None:
        pass

    def close(self) -> None:
        self.closed += 1
        if self.error is not None:
            raise self.error


def test_close_closes_every_reporter_and_raises_one_error_naming_all_that_failed() -> None:
    """Connect's close: every reporter's close runs, failures are gathered into one ConnectException."""
    first, second = Closeable(OSError("disk gone")), Closeable(RuntimeError("producer stuck"))
    healthy = Closeable()
    retry = RetryWithTolerance(
        ErrorHandlingConfig(),
        ErrorMetrics(),
        [first, healthy, second, object()],  # type: ignore[list-item]  # object() has no close()
        task=TaskId("p", 0),
    )

    with pytest.raises(ConnectError) as raised:
        retry.close()

    assert (first.closed, healthy.closed, second.closed) == (1, 1, 1)
    message = str(raised.value)
    assert message.startswith("Failed to close all reporters")
    assert "OSError: disk gone" in message and "RuntimeError: producer stuck" in message
    assert isinstance(raised.value.__cause__, ExceptionGroup)
    assert list(raised.value.__cause__.exceptions) == [first.error, second.error]

    retry.close()  # the reporters are gone, as in Connect: closing again does nothing
    assert (first.closed, healthy.closed, second.closed) == (1, 1, 1)


def test_one_failed_close_is_the_cause_itself() -> None:
    broken = Closeable(OSError("disk gone"))
    retry = RetryWithTolerance(ErrorHandlingConfig(), ErrorMetrics(), [broken, Closeable()], task=TaskId("p", 0))

    with pytest.raises(ConnectError, match=r"Failed to close all reporters: .*Closeable: OSError: disk gone") as raised:
        retry.close()
    assert raised.value.__cause__ is broken.error
