"""RetryWithTolerance: Connect's retry, backoff, tolerance and metrics, with a fake clock."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import (
    SKIPPED,
    ErrorContext,
    ErrorHandlingConfig,
    ErrorMetrics,
    PipelineStage,
    RetriableError,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
    ToleranceExceeded,
    UnhandledError,
    backoff_delay_ms,
)

TASK = TaskId("orders_pipeline", 0)


class FakeClock:
    """Epoch-millisecond clock that only moves when something sleeps or works."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []
        self.sleep_starts: list[float] = []
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return self.now

    def sleep(self, delay_ms: float) -> None:
        assert delay_ms >= 0
        self.sleep_starts.append(self.now)
        self.sleeps.append(delay_ms)
        self.now += delay_ms


class Recorder:
    """An ErrorReporter that keeps what it was given."""

    def __init__(self) -> None:
        self.contexts: list[ErrorContext] = []

    def report(self, context: ErrorContext) -> None:
        self.contexts.append(context)


class Flaky:
    """Raises the given errors in turn, then returns ``result``; counts calls."""

    def __init__(self, errors: list[Exception], result: object = "ok") -> None:
        self.errors = list(errors)
        self.result = result
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


def make(
    properties: dict[str, Any] | None = None,
    *,
    clock: FakeClock | None = None,
    reporters: list[Any] | None = None,
    sleep: Callable[[float], object] | None = None,
    seed: int = 7,
) -> tuple[RetryWithTolerance, FakeClock, ErrorMetrics]:
    clock = clock or FakeClock()
    metrics = ErrorMetrics()
    operator = RetryWithTolerance(
        ErrorHandlingConfig.from_properties(properties or {}),
        metrics,
        reporters or [],
        task=TASK,
        clock=clock,
        sleep=sleep or clock.sleep,
        rng=random.Random(seed),
    )
    return operator, clock, metrics


def record(offset: int = 0) -> SourceRecord:
    return SourceRecord("orders", 0, offset, 1_700_000_000_000, key=b"k", value=b"v")


def always(error: Exception) -> Callable[[], object]:
    def fail() -> object:
        raise error

    return fail


def test_success_returns_the_value_and_touches_neither_metrics_nor_clock() -> None:
    operator, clock, metrics = make()

    assert operator.execute(Stage.TASK_PUT, lambda: 42, record()) == 42

    assert metrics == ErrorMetrics()
    assert clock.calls == 0
    assert operator.last_error is None


def test_arguments_are_passed_to_the_stage_function() -> None:
    operator, _, _ = make()

    assert operator.execute(Stage.VALUE_CONVERTER, int, record(), "17", base=8) == 15


def test_retriable_error_is_retried_with_doubling_backoff_until_success() -> None:
    operator, clock, metrics = make({"errors.retry.timeout": 60_000})
    flaky = Flaky([RetriableError("busy"), RetriableError("busy"), RetriableError("busy")])

    assert operator.execute(Stage.TASK_PUT, flaky, record()) == "ok"

    assert flaky.calls == 4
    assert clock.sleeps == [300, 600, 1200]
    assert metrics.total_record_failures == 3
    assert metrics.total_retries == 3
    assert metrics.total_record_errors == 0
    assert metrics.total_records_skipped == 0


def test_no_retry_by_default_and_a_retriable_failure_then_fails_fast() -> None:
    reporter = Recorder()
    operator, clock, metrics = make(reporters=[reporter])
    flaky = Flaky([RetriableError("busy")])

    with pytest.raises(ToleranceExceeded) as raised:
        operator.execute(Stage.TASK_PUT, flaky, record())

    assert str(raised.value) == "Tolerance exceeded in error handler"
    assert raised.value.limit == "errors.tolerance"
    assert isinstance(raised.value.__cause__, RetriableError)
    assert flaky.calls == 1
    assert clock.sleeps == []
    assert len(reporter.contexts) == 1
    assert metrics.total_record_failures == 1
    assert metrics.total_record_errors == 1
    assert metrics.total_records_skipped == 0


def test_retriable_failure_out_of_retries_is_skipped_with_tolerance_all() -> None:
    reporter = Recorder()
    operator, clock, metrics = make(
        {"errors.retry.timeout": 1000, "errors.tolerance": "all"},
        reporters=[reporter],
    )
    fail = always(RetriableError("still busy"))

    assert operator.execute(Stage.TASK_PUT, fail, record()) is SKIPPED

    assert clock.sleeps == [300, 600, 100]
    assert metrics.total_record_failures == 4
    assert metrics.total_retries == 3
    assert metrics.total_record_errors == 1
    assert metrics.total_records_skipped == 1
    assert metrics.last_error_timestamp == int(clock.now)
    assert reporter.contexts[0].attempt == 4
    assert operator.total_failures == 1


def test_non_retriable_error_in_a_task_stage_is_never_tolerated() -> None:
    reporter = Recorder()
    operator, clock, metrics = make(
        {"errors.retry.timeout": -1, "errors.tolerance": "all"},
        reporters=[reporter],
    )

    with pytest.raises(UnhandledError) as raised:
        operator.execute(Stage.TASK_PUT, always(ValueError("bad row")), record())

    assert str(raised.value) == "Unhandled exception in error handler"
    assert isinstance(raised.value.__cause__, ValueError)
    assert raised.value.context is reporter.contexts[0]
    assert clock.sleeps == []
    assert metrics.total_record_failures == 1
    assert metrics.total_record_errors == 1
    assert metrics.total_records_skipped == 0


@pytest.mark.parametrize(
    "stage", [Stage.KEY_CONVERTER, Stage.VALUE_CONVERTER, Stage.HEADER_CONVERTER, Stage.TRANSFORMATION]
)
def test_converters_and_transformations_tolerate_any_exception(stage: Stage) -> None:
    operator, _, metrics = make({"errors.tolerance": "all"})

    assert operator.execute(stage, always(ValueError("bad")), record()) is SKIPPED
    assert metrics.total_records_skipped == 1


@pytest.mark.parametrize("stage", [Stage.TASK_PUT, Stage.TASK_POLL, Stage.KAFKA_PRODUCE, Stage.KAFKA_CONSUME])
def test_task_stages_tolerate_only_retriable_exceptions(stage: Stage) -> None:
    operator, _, _ = make({"errors.tolerance": "all"})

    assert operator.execute(stage, always(RetriableError("busy")), record(1)) is SKIPPED
    with pytest.raises(UnhandledError):
        operator.execute(stage, always(KeyError("x")), record(2))


def test_tolerance_none_fails_on_the_first_converter_error() -> None:
    operator, _, _ = make()

    with pytest.raises(ToleranceExceeded) as raised:
        operator.execute(Stage.VALUE_CONVERTER, always(ValueError("not json")), record())

    assert raised.value.limit == "errors.tolerance"


def test_a_failed_record_skips_its_remaining_stages_and_the_next_record_runs() -> None:
    operator, _, _ = make({"errors.tolerance": "all"})
    failed = record(1)
    later_stage = Flaky([])

    assert operator.execute(Stage.KEY_CONVERTER, always(ValueError("bad key")), failed) is SKIPPED
    assert operator.execute(Stage.VALUE_CONVERTER, later_stage, failed) is SKIPPED
    assert later_stage.calls == 0
    assert operator.execute(Stage.VALUE_CONVERTER, later_stage, record(2)) == "ok"


def test_a_reused_record_object_with_new_coordinates_is_a_new_record() -> None:
    operator, _, _ = make({"errors.tolerance": "all"})
    reused = record(1)

    assert operator.execute(Stage.KEY_CONVERTER, always(ValueError("bad key")), reused) is SKIPPED
    reused.offset = 2
    assert operator.execute(Stage.KEY_CONVERTER, lambda: "k", reused) == "k"


def test_tolerance_limit_fails_once_more_records_failed_than_allowed() -> None:
    operator, _, metrics = make({"errors.tolerance": "all", "errors.tolerance.limit": 2})
    bad = always(ValueError("bad"))

    assert operator.execute(Stage.TRANSFORMATION, bad, record(1)) is SKIPPED
    assert operator.execute(Stage.TRANSFORMATION, bad, record(2)) is SKIPPED
    with pytest.raises(ToleranceExceeded) as raised:
        operator.execute(Stage.TRANSFORMATION, bad, record(3))

    assert raised.value.limit == "errors.tolerance.limit"
    assert "errors.tolerance.limit=2 and 3 records failed in this run" in str(raised.value)
    assert metrics.total_records_skipped == 2
    assert metrics.total_record_errors == 3


def test_tolerance_limit_zero_fails_on_the_first_failure() -> None:
    operator, _, _ = make({"errors.tolerance": "all", "errors.tolerance.limit": 0})

    with pytest.raises(ToleranceExceeded):
        operator.execute(Stage.TRANSFORMATION, always(ValueError("bad")), record())


def test_rate_limit_counts_failures_inside_a_sliding_window() -> None:
    clock = FakeClock()
    operator, _, _ = make(
        {"errors.tolerance": "all", "errors.tolerance.rate.limit": 2, "errors.tolerance.rate.duration": "minute"},
        clock=clock,
    )
    bad = always(ValueError("bad"))

    assert operator.execute(Stage.TRANSFORMATION, bad, record(1)) is SKIPPED
    clock.now += 20_000
    assert operator.execute(Stage.TRANSFORMATION, bad, record(2)) is SKIPPED
    clock.now += 20_000
    with pytest.raises(ToleranceExceeded) as raised:
        operator.execute(Stage.TRANSFORMATION, bad, record(3))

    assert raised.value.limit == "errors.tolerance.rate.limit"
    assert "3 records failed within 60000 ms" in str(raised.value)


def test_rate_limit_allows_failures_spread_beyond_the_window() -> None:
    clock = FakeClock()
    operator, _, metrics = make(
        {"errors.tolerance": "all", "errors.tolerance.rate.limit": 1, "errors.tolerance.rate.duration": 10_000},
        clock=clock,
    )

    for offset in range(5):
        assert operator.execute(Stage.TRANSFORMATION, always(ValueError("bad")), record(offset)) is SKIPPED
        clock.now += 10_000

    assert metrics.total_records_skipped == 5


def test_stop_during_backoff_fails_the_record_without_another_attempt() -> None:
    clock = FakeClock()
    operators: list[RetryWithTolerance] = []

    def sleep_then_stop(delay_ms: float) -> None:
        clock.sleep(delay_ms)
        operators[0].stop()

    operator, _, metrics = make(
        {"errors.retry.timeout": -1, "errors.tolerance": "all"}, clock=clock, sleep=sleep_then_stop
    )
    operators.append(operator)
    flaky = Flaky([RetriableError("busy")] * 10)

    assert operator.execute(Stage.TASK_PUT, flaky, record()) is SKIPPED

    assert flaky.calls == 1
    assert operator.stopping
    assert metrics.total_records_skipped == 1


class RecordedEvent(threading.Event):
    """A stop event that remembers each wait on it: (timeout, whether the event ended it)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[tuple[float | None, bool]] = []

    def wait(self, timeout: float | None = None) -> bool:
        ended_by_the_event = super().wait(timeout)
        self.waits.append((timeout, ended_by_the_event))
        return ended_by_the_event


def test_stop_from_another_thread_ends_the_default_wait_at_once() -> None:
    config = ErrorHandlingConfig.from_properties({"errors.retry.timeout": -1, "errors.tolerance": "all"})
    stop_event = RecordedEvent()
    operator = RetryWithTolerance(config, ErrorMetrics(), task=TASK, stop_event=stop_event)
    second_attempt = threading.Event()
    calls: list[int] = []
    outcome: list[object] = []

    def stuck() -> object:
        calls.append(1)
        if len(calls) == 2:
            second_attempt.set()
        raise RetriableError("broker down")

    worker = threading.Thread(target=lambda: outcome.append(operator.execute(Stage.TASK_PUT, stuck, record())))
    worker.start()
    assert second_attempt.wait(5)
    operator.stop()
    worker.join(5)

    assert not worker.is_alive()
    # The default wait is the stop event's: the 300 ms backoff ran out, the 600 ms one was ended by the stop.
    assert stop_event.waits == [(0.3, False), (0.6, True)], "the 600 ms backoff was not cut short by the stop"
    assert outcome == [SKIPPED]
    assert len(calls) == 2


def test_retriable_kafka_errors_are_retried_and_fatal_ones_are_not() -> None:
    operator, clock, _ = make({"errors.retry.timeout": 10_000, "errors.tolerance": "all"})
    timed_out = KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "timed out", retriable=True))
    fenced = KafkaException(KafkaError(KafkaError.PRODUCER_FENCED, "fenced", fatal=True, retriable=True))

    assert operator.execute(Stage.KAFKA_PRODUCE, Flaky([timed_out]), record(1)) == "ok"
    assert clock.sleeps == [300]
    with pytest.raises(UnhandledError):
        operator.execute(Stage.KAFKA_PRODUCE, always(fenced), record(2))
    assert clock.sleeps == [300]


def test_context_records_the_stage_class_and_attempt() -> None:
    reporter = Recorder()
    operator, _, _ = make({"errors.tolerance": "all", "errors.retry.timeout": 5000}, reporters=[reporter])

    class Sink:
        def put(self) -> object:
            raise RetriableError("busy")

    operator.execute(Stage.TASK_PUT, Sink().put, record(9))

    context = reporter.contexts[0]
    assert context.stage is Stage.TASK_PUT
    assert context.executing_class.endswith("test_context_records_the_stage_class_and_attempt.<locals>.Sink")
    assert context.record == record(9)
    assert context.attempt == 6
    assert context.task == TASK
    assert [stage.type for stage in context.stages] == [Stage.TASK_PUT]
    assert context.index == 0


def test_configured_pipeline_stages_give_class_and_index() -> None:
    reporter = Recorder()
    stages = [
        PipelineStage(Stage.KEY_CONVERTER, "conv.String"),
        PipelineStage(Stage.TRANSFORMATION, "mypkg.first"),
        PipelineStage(Stage.TRANSFORMATION, "mypkg.second"),
    ]
    operator = RetryWithTolerance(
        ErrorHandlingConfig.from_properties({"errors.tolerance": "all"}),
        ErrorMetrics(),
        [reporter],
        task=TASK,
        stages=stages,
        clock=FakeClock(),
    )

    operator.execute(stages[2], always(ValueError("x")), record(1))
    operator.execute(Stage.KEY_CONVERTER, always(ValueError("x")), record(2))

    assert (reporter.contexts[0].index, reporter.contexts[0].executing_class) == (2, "mypkg.second")
    assert (reporter.contexts[1].index, reporter.contexts[1].executing_class) == (0, "conv.String")
    assert list(reporter.contexts[0].stages) == stages


def test_execute_failed_reports_and_applies_tolerance() -> None:
    reporter = Recorder()
    tolerant, _, metrics = make({"errors.tolerance": "all"}, reporters=[reporter])

    tolerant.execute_failed(Stage.TASK_PUT, record(), RuntimeError("delivery failed"), executing_class="a.Sink")

    assert reporter.contexts[0].executing_class == "a.Sink"
    assert metrics.total_record_failures == 1
    assert metrics.total_record_errors == 0

    strict, _, strict_metrics = make()
    with pytest.raises(ToleranceExceeded):
        strict.execute_failed(Stage.TASK_PUT, record(), RuntimeError("delivery failed"))
    assert strict_metrics.total_record_errors == 1


def test_a_failing_reporter_fails_a_tolerated_record_after_all_reporters_ran() -> None:
    class Broken:
        def report(self, context: ErrorContext) -> None:
            raise OSError("disk full")

    after = Recorder()
    operator, _, _ = make({"errors.tolerance": "all"}, reporters=[Broken(), after])

    with pytest.raises(OSError, match="disk full"):
        operator.execute(Stage.TRANSFORMATION, always(ValueError("bad")), record())
    assert len(after.contexts) == 1


def test_a_failing_reporter_is_noted_on_the_task_failure() -> None:
    class Broken:
        def report(self, context: ErrorContext) -> None:
            raise OSError("disk full")

    operator, _, _ = make(reporters=[Broken()])

    with pytest.raises(ToleranceExceeded) as raised:
        operator.execute(Stage.TRANSFORMATION, always(ValueError("bad")), record())
    assert any("disk full" in note for note in raised.value.__notes__)


def test_close_closes_reporters_that_can_be_closed() -> None:
    class Closable(Recorder):
        closed = False

        def close(self) -> None:
            self.closed = True

    closable = Closable()
    operator, _, _ = make(reporters=[Recorder(), closable])

    operator.close()

    assert closable.closed


# Backoff properties ---------------------------------------------------------------------------


@given(
    attempt=st.integers(1, 200),
    now=st.floats(0, 1e12, allow_nan=False),
    budget=st.one_of(st.floats(0, 1e9, allow_nan=False), st.just(float("inf"))),
    max_delay=st.integers(1, 10**7),
    seed=st.integers(0, 2**32),
)
def test_backoff_doubles_until_the_cap_then_is_random_and_never_passes_the_deadline(
    attempt: int, now: float, budget: float, max_delay: int, seed: int
) -> None:
    deadline = now + budget
    delay = backoff_delay_ms(attempt, now, deadline, max_delay, random.Random(seed).randrange)
    doubled = 300 * 2 ** (attempt - 1)

    assert delay >= 0
    assert now + delay <= deadline
    if doubled <= max_delay:
        assert delay == min(doubled, deadline - now)
    else:
        assert delay < max_delay


@settings(max_examples=150)
@given(
    timeout=st.integers(1, 60_000),
    max_delay=st.integers(1, 100_000),
    work_ms=st.lists(st.integers(100, 5_000), min_size=1, max_size=30),
    seed=st.integers(0, 2**32),
)
def test_total_wait_stays_within_the_retry_timeout_budget(
    timeout: int, max_delay: int, work_ms: list[int], seed: int
) -> None:
    clock = FakeClock(now=5_000_000.0)
    operator, _, metrics = make(
        {"errors.retry.timeout": timeout, "errors.retry.delay.max.ms": max_delay, "errors.tolerance": "all"},
        clock=clock,
        seed=seed,
    )
    deadline = clock.now + timeout
    attempt_starts: list[float] = []

    def busy() -> object:
        attempt_starts.append(clock.now)
        clock.now += work_ms[(len(attempt_starts) - 1) % len(work_ms)]
        raise RetriableError("busy")

    assert operator.execute(Stage.TASK_PUT, busy, record()) is SKIPPED

    assert sum(clock.sleeps) <= timeout
    assert all(begun <= deadline for begun in attempt_starts)
    assert all(begun < deadline for begun in clock.sleep_starts)
    assert metrics.total_retries == len(clock.sleeps) == len(attempt_starts) - 1
    for index, (begun, delay) in enumerate(zip(clock.sleep_starts, clock.sleeps, strict=True)):
        doubled = 300 * 2**index
        if doubled <= max_delay:
            assert delay == min(doubled, deadline - begun)
        else:
            assert delay < max_delay
            assert delay <= deadline - begun


@settings(max_examples=50)
@given(failures=st.integers(0, 40), seed=st.integers(0, 2**32))
def test_infinite_retry_keeps_going_until_success(failures: int, seed: int) -> None:
    operator, clock, metrics = make({"errors.retry.timeout": -1, "errors.retry.delay.max.ms": 5_000}, seed=seed)
    flaky = Flaky([RetriableError("busy")] * failures)

    assert operator.execute(Stage.TASK_PUT, flaky, record()) == "ok"

    assert len(clock.sleeps) == failures == metrics.total_retries
    assert all(delay < 5_000 for delay in clock.sleeps)
