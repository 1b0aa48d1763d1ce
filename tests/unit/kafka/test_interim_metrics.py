"""Interim and final metrics records of one run count once: the newest per task attempt, the final one superseding.

A running task publishes a cumulative interim record every ``metrics_interval_ms``, then its
final record. The metrics topic is replaced by the list of records the job would have written,
in the order a reader gets them; the merge, the shares and the breach decision are the real code.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_kerr.kafka import tolerance
from airflow_kerr.kafka.metrics_topic import ATTEMPT, INTERIM, SEQ, input_range_fields, latest_per_attempt
from airflow_kerr.kafka.tolerance import metrics_window

PIPELINE = "orders_pipeline"
TOPIC = "orders"


@dataclass
class Attempt:
    """One Spark task attempt over ``[start, end)`` of one partition, writing records as the job does."""

    log: MetricsLog
    run_id: str
    name: str
    start: int
    end: int
    seq: int = 0

    def interim(self, upto: int) -> dict[str, Any]:
        """The cumulative record of the offsets ``[start, upto)`` read so far."""
        return self._write(upto, state="running", interim=True)

    def final(self, upto: int | None = None, state: str = "success") -> dict[str, Any]:
        return self._write(self.end if upto is None else upto, state=state, interim=False)

    def _write(self, upto: int, *, state: str, interim: bool) -> dict[str, Any]:
        errors = sum(self.log.failing[self.start : upto])
        record = self.log.write(
            run_id=self.run_id,
            records_in=upto - self.start,
            errors=errors,
            state=state,
            **{ATTEMPT: self.name, SEQ: self.seq, INTERIM: interim},
            **input_range_fields(TOPIC, 0, self.start, upto - 1),
        )
        self.seq += 1
        return record


@dataclass
class MetricsLog:
    """The metrics topic of one pipeline over partition 0 of ``orders``, whose offsets fail as ``failing`` says."""

    failing: list[bool]
    records: list[dict[str, Any]] = field(default_factory=list)
    clock_ms: int = 1_000_000

    def attempt(self, run_id: str, name: str, start: int, end: int) -> Attempt:
        return Attempt(self, run_id, name, start, end)

    def write(self, *, records_in: int, errors: int, **fields: Any) -> dict[str, Any]:
        self.clock_ms += 7
        record = {
            "pipeline": PIPELINE,
            "task": 0,
            "scope": "task",
            "window_start_ms": 1_000_000,
            "window_end_ms": self.clock_ms,
            "records_in": records_in,
            "total-record-errors": errors,
            **fields,
        }
        self.records.append(record)
        return record


@pytest.fixture
def read_from(monkeypatch: pytest.MonkeyPatch) -> Callable[[MetricsLog], tolerance.ToleranceReading]:
    """Read a window over ``log`` as the sensors, watchers and guard do; the log stands in for the topic."""

    def read(log: MetricsLog) -> tolerance.ToleranceReading:
        def fake_read(config: Any, topic: str, since_ms: int, accept: Callable[[dict[str, Any]], bool]) -> Any:
            return [r for r in log.records if accept(r)]  # in the order read, as the topic gives them

        monkeypatch.setattr(tolerance, "read_metrics_records", fake_read)
        return metrics_window({}, "kerr.metrics", PIPELINE, window_ms=10**9, now_ms=log.clock_ms + 1)

    return read


def clean_then_failing(size: int, first_bad: int) -> list[bool]:
    return [offset >= first_bad for offset in range(size)]


def counts(reading: tolerance.ToleranceReading) -> tuple[int, int]:
    return reading.records_in, reading.errors


def test_a_running_task_counts_as_its_newest_interim_record(read_from: Callable[..., Any]) -> None:
    """Three cumulative interim records of one attempt: the window holds the third's counts, not their sum."""
    log = MetricsLog(clean_then_failing(1000, first_bad=400))
    task = log.attempt("A", "a1", 0, 1000)
    for upto in (200, 400, 600):
        task.interim(upto)

    reading = read_from(log)

    assert counts(reading) == (600, 200)
    assert reading.breaches(max_error_rate=0.3, max_errors=None, min_records=100)


def test_the_final_record_supersedes_the_interim_ones_even_when_read_first(read_from: Callable[..., Any]) -> None:
    """A late interim record (higher in the topic than the final) never replaces the attempt's totals."""
    log = MetricsLog(clean_then_failing(1000, first_bad=900))
    task = log.attempt("A", "a1", 0, 1000)
    task.interim(300)
    late = task.interim(500)
    task.final()
    log.records.remove(late)
    log.records.append(late)  # read after the final record

    assert counts(read_from(log)) == (1000, 100)


def test_a_failed_attempt_and_its_running_retry_count_each_offset_once(read_from: Callable[..., Any]) -> None:
    """Spark retries a failed task: the failed attempt's interim and final records, then the retry's interim ones."""
    log = MetricsLog(clean_then_failing(1000, first_bad=100))
    first = log.attempt("A", "a1", 0, 1000)
    first.interim(200)
    first.final(upto=350, state="failed")
    retry = log.attempt("A", "a2", 0, 1000)
    retry.interim(250)

    # The retry counts [0, 250) as it read it (150 errors); the failed attempt only the 100 of its 350 offsets the
    # retry has not reached, its 250 errors in proportion (71): each offset read counts once.
    assert counts(read_from(log)) == (350, 150 + round(250 * 100 / 350))

    retry.final()
    assert counts(read_from(log)) == (1000, 900)


def test_a_speculative_copy_still_running_gives_way_to_the_attempt_that_finished(
    read_from: Callable[..., Any],
) -> None:
    """Spark ran a slow task twice; one copy finished, the other's interim records keep coming until it is killed."""
    log = MetricsLog(clean_then_failing(1000, first_bad=700))
    slow = log.attempt("A", "a1", 0, 1000)
    fast = log.attempt("A", "a2", 0, 1000)
    slow.interim(100)
    fast.interim(300)
    fast.final()
    slow.interim(800)  # written after the fast copy finished, counting errors the fast copy already counted

    assert counts(read_from(log)) == (1000, 300)


def test_records_without_an_attempt_pass_through() -> None:
    """A task record from an older writer names no attempt: nothing says it repeats another, so it is kept."""
    old = {"pipeline": PIPELINE, "run_id": "A", "scope": "task", "records_in": 5}
    log = MetricsLog(clean_then_failing(10, first_bad=5))
    task = log.attempt("A", "a1", 0, 10)
    kept = [task.interim(3), old, task.interim(6)]

    assert latest_per_attempt(kept) == [old, kept[2]]


def test_the_same_attempt_name_in_another_run_is_another_attempt() -> None:
    log = MetricsLog(clean_then_failing(10, first_bad=5))
    one = log.attempt("A", "same", 0, 10).interim(4)
    other = log.attempt("B", "same", 0, 10).interim(2)

    assert latest_per_attempt([one, other]) == [one, other]


@pytest.mark.parametrize("seed", range(40))
def test_any_interleaving_of_attempts_counts_the_truth_once_one_finished(
    seed: int, read_from: Callable[..., Any]
) -> None:
    """The class of defect: retries, speculative copies and interim records in any order; once an attempt of the
    range finished, the window equals the ground truth, and before that it never counts more than was read."""
    rng = random.Random(seed)
    size = rng.randrange(50, 500)
    log = MetricsLog([rng.random() < 0.3 for _ in range(size)])
    attempts = [log.attempt("A", f"a{n}", 0, size) for n in range(rng.randrange(1, 4))]
    progress = dict.fromkeys(range(len(attempts)), 0)
    failed: set[int] = set()
    for _ in range(rng.randrange(1, 12)):
        n = rng.randrange(len(attempts))
        if n in failed or progress[n] == size:
            continue
        progress[n] = rng.randrange(progress[n], size) + 1
        attempts[n].interim(progress[n])
        if rng.random() < 0.2:
            attempts[n].final(upto=progress[n], state="failed")
            failed.add(n)
        assert read_from(log).records_in <= size
    finisher = rng.choice([n for n in range(len(attempts)) if n not in failed] or [len(attempts)])
    if finisher == len(attempts):  # every attempt failed: Spark runs one more
        attempts.append(log.attempt("A", f"a{finisher}", 0, size))
    finisher = rng.randrange(len(attempts))
    attempts[finisher].final()
    for n, attempt in enumerate(attempts):  # the others may still publish interim records afterwards
        if n != finisher and n not in failed and rng.random() < 0.5:
            attempt.interim(rng.randrange(size) + 1)
    rng.shuffle(log.records)

    assert counts(read_from(log)) == (size, sum(log.failing))
