"""Retry and tolerance for one stage of one record: Kafka Connect's ``RetryWithToleranceOperator``.

Retriable failures are retried with Connect's backoff until ``errors.retry.timeout`` runs
out; a record that still fails is reported and then either skipped (tolerance ``all``, within
the count and rate limits) or turned into an exception that fails the task. Following
Kafka 4.0 (KAFKA-18073), a retriable failure that ran out of retries is subject to tolerance
like any other, instead of being dropped silently.

Times are milliseconds throughout: ``clock`` returns epoch milliseconds (it also stamps
``time_of_error`` and ``last-error-timestamp``, as Connect's ``Time.milliseconds()`` does),
and ``sleep`` receives a delay in milliseconds.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from enum import Enum
from types import ModuleType
from typing import Final, Literal, ParamSpec, TypeVar

from airflow_kerr.errors.config import (
    ERRORS_TOLERANCE,
    ERRORS_TOLERANCE_LIMIT,
    ERRORS_TOLERANCE_RATE_DURATION,
    ERRORS_TOLERANCE_RATE_LIMIT,
    ErrorHandlingConfig,
    ToleranceType,
)
from airflow_kerr.errors.context import NOT_CONVERTED, ErrorContext, TaskId
from airflow_kerr.errors.exceptions import (
    ConnectError,
    ToleranceExceeded,
    UnhandledError,
    describe_error,
    is_retriable,
)
from airflow_kerr.errors.metrics import ErrorMetrics
from airflow_kerr.errors.record import SourceRecord
from airflow_kerr.errors.reporters import ErrorReporter
from airflow_kerr.errors.stage import TOLERATES_ANY_EXCEPTION, PipelineStage, Stage

#: Connect's first backoff, doubled before each further retry.
RETRIES_DELAY_MIN_MS: Final = 300
# Past this many doublings the delay is far above any sane maximum; avoids huge integers.
_MAX_SHIFT: Final = 62

TOLERANCE_EXCEEDED_MESSAGE: Final = "Tolerance exceeded in error handler"
UNHANDLED_MESSAGE: Final = "Unhandled exception in error handler"
CLOSE_FAILED_MESSAGE: Final = "Failed to close all reporters"

P = ParamSpec("P")
T = TypeVar("T")


class _Skipped(Enum):
    SKIPPED = "SKIPPED"


#: Returned by :meth:`RetryWithTolerance.execute` for a record that failed and was tolerated.
SKIPPED: Final = _Skipped.SKIPPED
Skipped = Literal[_Skipped.SKIPPED]


def wall_clock_ms() -> float:
    """Epoch milliseconds, the default clock."""
    return time.time() * 1000.0


def backoff_delay_ms(
    attempt: int,
    now_ms: float,
    deadline_ms: float,
    max_delay_ms: int,
    randrange: Callable[[int], int],
) -> float:
    """How long to wait after failed attempt number ``attempt`` (1-based), as Connect computes it.

    ``300 ms << (attempt - 1)``; once that exceeds ``max_delay_ms`` a uniform random value in
    ``[0, max_delay_ms)`` instead; always cut to the time left before ``deadline_ms`` (which
    may be ``math.inf``) and never negative.
    """
    shift = attempt - 1
    delay: float = RETRIES_DELAY_MIN_MS << shift if shift <= _MAX_SHIFT else math.inf
    if delay > max_delay_ms:
        delay = randrange(max_delay_ms)
    if delay + now_ms > deadline_ms:
        delay = max(0.0, deadline_ms - now_ms)
    return delay


class RetryWithTolerance:
    """Runs pipeline stages for records under the ``errors.*`` retry and tolerance policy.

    One instance per task (a Spark partition, say); it counts failures across the records it
    sees, which the tolerance limits need. ``execute`` costs one call and an identity check
    when nothing fails; the error context is built only for a record that fails.
    ``stop()`` may be called from another thread: it ends a backoff wait at once, and the
    record being retried fails. A custom ``sleep`` must return early when
    :attr:`stop_event` is set.
    """

    def __init__(  # noqa: PLR0913 - the clock, sleep, stop event and random source are seams tests and the replay substitute
        self,
        config: ErrorHandlingConfig,
        metrics: ErrorMetrics | None = None,
        reporters: Sequence[ErrorReporter] = (),
        *,
        task: TaskId,
        stages: Sequence[PipelineStage] = (),
        clock: Callable[[], float] = wall_clock_ms,
        sleep: Callable[[float], object] | None = None,
        stop_event: threading.Event | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self.metrics = metrics if metrics is not None else ErrorMetrics()
        self._reporters = tuple(reporters)
        self.task = task
        self._stages = tuple(stages)
        self._clock = clock
        self.stop_event = stop_event if stop_event is not None else threading.Event()
        self._sleep = sleep if sleep is not None else self._wait_for_stop
        self._randrange = (rng or random.Random()).randrange
        self._timeout = config.retry_timeout_ms
        self._tolerance_all = config.tolerance is ToleranceType.ALL
        self._window: deque[float] | None = None
        if self._tolerance_all and config.tolerance_rate_limit >= 0:
            self._window = deque(maxlen=config.tolerance_rate_limit + 1)
        self.total_failures = 0
        self.last_error: ErrorContext | None = None
        self._record: SourceRecord | None = None
        self._record_failed = False
        self._failed_at: tuple[str, int, int] | None = None
        self._converted_key: object = NOT_CONVERTED
        self._converted_value: object = NOT_CONVERTED

    @property
    def config(self) -> ErrorHandlingConfig:
        """The policy this operator applies."""
        return self._config

    @property
    def clock(self) -> Callable[[], float]:
        """The clock this operator reads (epoch milliseconds); a batch runner stamps first attempts with it."""
        return self._clock

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self.stop_event.is_set()

    def stop(self) -> None:
        """Stop retrying: a running backoff wait ends now and the record being retried fails."""
        self.stop_event.set()

    def close(self) -> None:
        """Close every reporter that has a ``close`` method, then raise once if any failed (Connect's ``close``).

        One reporter failing to close never keeps the others open. The :class:`ConnectError`
        names each reporter that failed and why; its cause is the lone failure, or an
        ``ExceptionGroup`` of all of them. The operator has no reporters afterwards, so a
        second ``close`` does nothing.
        """
        failures: list[tuple[object, Exception]] = []
        for reporter in self._reporters:
            close = getattr(reporter, "close", None)
            if not callable(close):
                continue
            try:
                close()
            except Exception as error:
                failures.append((reporter, error))
        self._reporters = ()
        if not failures:
            return
        named = "; ".join(f"{_type_name(type(reporter))}: {describe_error(error)}" for reporter, error in failures)
        errors = [error for _, error in failures]
        cause = errors[0] if len(errors) == 1 else ExceptionGroup(CLOSE_FAILED_MESSAGE, errors)
        raise ConnectError(f"{CLOSE_FAILED_MESSAGE}: {named}") from cause

    def execute(
        self,
        stage: Stage | PipelineStage,
        fn: Callable[P, T],
        record: SourceRecord | None,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | Skipped:
        """Run ``fn(*args, **kwargs)`` as ``stage`` of ``record``'s processing.

        Returns ``fn``'s result, or :data:`SKIPPED` when the record failed and was tolerated
        (already reported to the log and DLQ); the job then drops the record. Once a record
        failed, further stages for the same record (same object, same topic, partition and
        offset) return :data:`SKIPPED` without running, as Connect's processing context does.

        Raises :class:`ToleranceExceeded` when tolerance is used up, :class:`UnhandledError`
        for an exception the stage never tolerates, and whatever a reporter raises (a failed
        DLQ write, say).
        """
        if record is not self._record:
            self._new_record(record)
        elif self._record_failed and record is not None:
            if (record.topic, record.partition, record.offset) == self._failed_at:
                return SKIPPED
            self._new_record(record)
        start = self._clock() if self._timeout != 0 else 0.0
        try:
            result = fn(*args, **kwargs)
        except Exception as error:
            return self._retry(stage, fn, record, error, start, args, kwargs)
        if self._converted_key is NOT_CONVERTED or self._converted_value is NOT_CONVERTED:
            self._remember(stage, result)
        return result

    def execute_after_failure(
        self,
        stage: Stage | PipelineStage,
        fn: Callable[P, T],
        record: SourceRecord | None,
        error: Exception,
        started: float,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T | Skipped:
        """Continue :meth:`execute` for a call whose first attempt already raised ``error``.

        A batch runner maps ``fn`` over many records at once and hands over only the record
        that raised; the first attempt is not run again, so a transform with side effects
        sees exactly the attempts Connect would make and every retry is counted.
        ``started`` is the :attr:`clock` reading taken just before that first attempt:
        Connect's deadline runs from there, so a slow first attempt uses up retry budget
        rather than adding to it. It is not read when ``errors.retry.timeout`` is 0.
        """
        self._new_record(record)
        return self._retry(stage, fn, record, error, started, args, kwargs)

    def execute_failed(
        self,
        stage: Stage | PipelineStage,
        record: SourceRecord | None,
        error: BaseException,
        *,
        executing_class: str | None = None,
    ) -> None:
        """Report a failure that happened outside :meth:`execute` (Connect's ``executeFailed``).

        For errors learnt later, such as an asynchronous delivery failure of the sink. The
        record is reported; if tolerance is used up, :class:`ToleranceExceeded` is raised.
        """
        now = self._clock()
        self.metrics.record_error_timestamp(now)
        self.total_failures += 1
        self.metrics.record_failure()
        context = self._context(stage, None, record, error, 1, now, executing_class)
        failure = self._tolerance_failure(now, context)
        if failure is not None:
            self.metrics.record_error()
        self._report(context, failure)
        if failure is not None:
            raise failure from error

    def _new_record(self, record: SourceRecord | None) -> None:
        self._record = record
        self._record_failed = False
        self._converted_key = NOT_CONVERTED
        self._converted_value = NOT_CONVERTED

    def _wait_for_stop(self, delay_ms: float) -> None:
        self.stop_event.wait(delay_ms / 1000.0)

    def _remember(self, stage: Stage | PipelineStage, result: object) -> None:
        kind = stage.type if isinstance(stage, PipelineStage) else stage
        if kind is Stage.KEY_CONVERTER:
            self._converted_key = result
        elif kind is Stage.VALUE_CONVERTER:
            self._converted_value = result

    def _retry(
        self,
        stage: Stage | PipelineStage,
        fn: Callable[..., T],
        record: SourceRecord | None,
        error: Exception,
        start: float,
        args: tuple[object, ...],
        kwargs: dict[str, object],
    ) -> T | Skipped:
        deadline = start + self._timeout if self._timeout >= 0 else math.inf
        attempt = 1
        while True:
            self.metrics.record_failure()
            if self._timeout == 0 or not is_retriable(error):
                break
            now = self._clock()
            if not now < deadline:
                break
            self._sleep(backoff_delay_ms(attempt, now, deadline, self._config.retry_delay_max_ms, self._randrange))
            self.metrics.record_retry()
            if self.stop_event.is_set():
                break
            attempt += 1
            try:
                result = fn(*args, **kwargs)
            except Exception as retry_error:
                error = retry_error
                continue
            self._remember(stage, result)
            return result
        return self._give_up(stage, fn, record, error, attempt)

    def _give_up(
        self,
        stage: Stage | PipelineStage,
        fn: Callable[..., object],
        record: SourceRecord | None,
        error: Exception,
        attempt: int,
    ) -> Skipped:
        now = self._clock()
        self.metrics.record_error_timestamp(now)
        self.total_failures += 1
        context = self._context(stage, fn, record, error, attempt, now, None)
        self._record_failed = True
        if record is not None:
            self._failed_at = (record.topic, record.partition, record.offset)
        self.last_error = context
        self.metrics.record_error()
        failure: ConnectError | None
        if context.stage in TOLERATES_ANY_EXCEPTION or is_retriable(error):
            failure = self._tolerance_failure(now, context)
        else:
            failure = UnhandledError(UNHANDLED_MESSAGE, context=context)
        if failure is None:
            self.metrics.record_skipped()
        self._report(context, failure)
        if failure is not None:
            raise failure from error
        return SKIPPED

    def _tolerance_failure(self, now: float, context: ErrorContext) -> ToleranceExceeded | None:
        config = self._config
        if not self._tolerance_all:
            return ToleranceExceeded(TOLERANCE_EXCEEDED_MESSAGE, limit=ERRORS_TOLERANCE, context=context)
        if config.tolerance_limit >= 0 and self.total_failures > config.tolerance_limit:
            return ToleranceExceeded(
                f"{TOLERANCE_EXCEEDED_MESSAGE}: {ERRORS_TOLERANCE_LIMIT}={config.tolerance_limit} "
                f"and {self.total_failures} records failed in this run",
                limit=ERRORS_TOLERANCE_LIMIT,
                context=context,
            )
        window = self._window
        if window is not None:
            window.append(now)
            horizon = now - config.tolerance_rate_duration_ms
            while window and window[0] <= horizon:
                window.popleft()
            if len(window) > config.tolerance_rate_limit:
                return ToleranceExceeded(
                    f"{TOLERANCE_EXCEEDED_MESSAGE}: {ERRORS_TOLERANCE_RATE_LIMIT}={config.tolerance_rate_limit} "
                    f"and {len(window)} records failed within {config.tolerance_rate_duration_ms} ms "
                    f"({ERRORS_TOLERANCE_RATE_DURATION})",
                    limit=ERRORS_TOLERANCE_RATE_LIMIT,
                    context=context,
                )
        return None

    def _report(self, context: ErrorContext, failure: ConnectError | None) -> None:
        """Give the context to every reporter; the first reporter error is raised after all ran.

        When the record already fails the task, that failure wins and a reporter error is
        attached to it as a note, so neither is lost.
        """
        first: Exception | None = None
        for reporter in self._reporters:
            try:
                reporter.report(context)
            except Exception as report_error:
                if first is None:
                    first = report_error
        if first is None:
            return
        if failure is not None:
            failure.add_note(f"Reporting the failed record also failed: {first!r}")
            return
        raise first

    def _context(
        self,
        stage: Stage | PipelineStage,
        fn: Callable[..., object] | None,
        record: SourceRecord | None,
        error: BaseException,
        attempt: int,
        now: float,
        executing_class: str | None,
    ) -> ErrorContext:
        stages = self._stages
        index = _position(stages, stage)
        located: PipelineStage
        if index >= 0:
            located = stages[index]
        elif isinstance(stage, PipelineStage):
            located = stage
        else:
            located = PipelineStage(stage, executing_class or _callable_name(fn))
        if index < 0:
            stages, index = (*stages, located), len(stages)
        same_record = record is not None and record is self._record
        return ErrorContext(
            task=self.task,
            stage=located.type,
            executing_class=executing_class or located.class_name,
            error=error,
            record=record,
            attempt=attempt,
            time_of_error=int(now),
            stages=stages,
            index=index,
            converted_key=self._converted_key if same_record else NOT_CONVERTED,
            converted_value=self._converted_value if same_record else NOT_CONVERTED,
        )


def _position(stages: Sequence[PipelineStage], stage: Stage | PipelineStage) -> int:
    """Where ``stage`` sits in the pipeline: the very object, or the first stage of that type."""
    for position, candidate in enumerate(stages):
        if candidate is stage or candidate.type is stage:
            return position
    return -1


def _callable_name(fn: Callable[..., object] | None) -> str:
    """A class-like name for the code that ran a stage, for the ``class.name`` header."""
    if fn is None:
        return "unknown"
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, ModuleType):
        return _type_name(owner if isinstance(owner, type) else type(owner))
    qualname = getattr(fn, "__qualname__", None)
    if qualname is None:
        return _type_name(type(fn))
    module = getattr(fn, "__module__", None)
    return qualname if module in (None, "builtins") else f"{module}.{qualname}"


def _type_name(cls: type) -> str:
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
