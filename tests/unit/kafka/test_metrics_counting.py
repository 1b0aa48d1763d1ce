"""The tolerance window counts each input once, whatever killed runs and task retries wrote before.

The metrics topic is replaced by the list of records the job would have written, in
order; everything else (the window, the shares, the breach decision) is the real code.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pytest

from airflow_kerr.kafka import tolerance
from airflow_kerr.kafka.metrics_topic import InputRange, count_inputs_once, input_range_fields
from airflow_kerr.kafka.tolerance import metrics_window

PIPELINE = "orders_pipeline"
TOPIC = "orders"


@dataclass
class MetricsLog:
    """The job's metrics topic for one pipeline: what each task and run wrote, in order, over a ground truth.

    ``failing[(topic, partition)][offset]`` says whether that input record fails, so
    every record's counters are what the job would count for its range.
    """

    failing: dict[tuple[str, int], list[bool]]
    records: list[dict[str, Any]] = field(default_factory=list)
    clock_ms: int = 1_000_000

    def task(self, run_id: str, topic: str, partition: int, start: int, end: int, state: str = "success") -> None:
        errors = sum(self.failing[(topic, partition)][start:end])
        self._write(
            scope="task",
            run_id=run_id,
            records_in=end - start,
            errors=errors,
            state=state,
            **input_range_fields(topic, partition, start, end - 1),
        )

    def run(self, run_id: str, records_in: int, errors: int) -> None:
        self._write(scope="run", run_id=run_id, records_in=records_in, errors=errors, state="success", task=None)

    def _write(self, *, records_in: int, errors: int, **fields: Any) -> None:
        self.clock_ms += 7
        self.records.append(
            {
                "pipeline": PIPELINE,
                "task": 0,
                "window_start_ms": self.clock_ms - 5,
                "window_end_ms": self.clock_ms,
                "records_in": records_in,
                "total-record-errors": errors,
                "total-records-skipped": errors,
                **fields,
            }
        )


@pytest.fixture
def read_from(monkeypatch: pytest.MonkeyPatch) -> Callable[[MetricsLog], tolerance.ToleranceReading]:
    """Read a window over ``log`` as the sensors do, with the log standing in for the metrics topic."""

    def read(log: MetricsLog) -> tolerance.ToleranceReading:
        def fake_read(config: Any, topic: str, since_ms: int, accept: Callable[[dict[str, Any]], bool]) -> Any:
            return sorted((r for r in log.records if accept(r)), key=lambda r: r["window_end_ms"])

        monkeypatch.setattr(tolerance, "read_metrics_records", fake_read)
        return metrics_window({}, "kerr.metrics", PIPELINE, window_ms=10**9, now_ms=log.clock_ms + 1)

    return read


def every_tenth_fails(*partitions: tuple[str, int], size: int = 1000) -> dict[tuple[str, int], list[bool]]:
    return {tp: [offset % 10 == 3 for offset in range(size)] for tp in partitions}


def test_a_killed_runs_task_records_give_way_to_the_reruns(read_from: Callable[..., Any]) -> None:
    """Run A is killed after its tasks wrote their records (no run record, no commit); run B reads the same
    offsets again, split differently, plus what arrived since. Each input counts once, as B counted it."""
    log = MetricsLog(every_tenth_fails((TOPIC, 0), (TOPIC, 1)))
    log.task("A", TOPIC, 0, 0, 300)
    log.task("A", TOPIC, 1, 0, 150)
    log.task("A", TOPIC, 1, 150, 300)
    for start, end in ((0, 200), (200, 400)):
        log.task("B", TOPIC, 0, start, end)
    log.task("B", TOPIC, 1, 0, 400)
    log.run("B", records_in=800, errors=80)

    reading = read_from(log)

    assert (reading.records_in, reading.errors) == (800, 80)
    assert not reading.breaches(max_error_rate=None, max_errors=80, min_records=0), "a breach that did not happen"


def test_a_failed_task_attempt_gives_way_to_its_retry(read_from: Callable[..., Any]) -> None:
    """Spark runs a failed task again in the same run: the failed attempt's partial record and the retry's
    full one cover the same first offsets."""
    log = MetricsLog(every_tenth_fails((TOPIC, 0)))
    log.task("A", TOPIC, 0, 0, 128, state="failed")
    log.task("A", TOPIC, 0, 0, 500)
    log.run("A", records_in=500, errors=50)

    assert (read_from(log).records_in, read_from(log).errors) == (500, 50)


def test_a_killed_runs_worker_that_fails_after_the_rerun_does_not_replace_its_counts(
    read_from: Callable[..., Any],
) -> None:
    """A worker of killed run A notices the dead driver only after rerun B finished and writes a failed record
    for the batch it held: B's finished records still count those offsets (a failed attempt's counters stop at
    its failure while its range runs to the end of the batch)."""
    log = MetricsLog(every_tenth_fails((TOPIC, 0)))
    log.task("A", TOPIC, 0, 0, 100)
    log.task("B", TOPIC, 0, 0, 300)
    log.run("B", records_in=300, errors=30)
    log.task("A", TOPIC, 0, 100, 228, state="failed")

    assert (read_from(log).records_in, read_from(log).errors) == (300, 30)
    assert [share for _, share in count_inputs_once(log.records) if _["scope"] == "task"] == [0.0, 1.0, 0.0]


def test_a_partly_covered_record_counts_the_share_of_its_offsets_no_later_record_read(
    read_from: Callable[..., Any],
) -> None:
    """A covered [0, 100) with 10 errors; the rerun B, killed too, only [50, 100) with 5: A keeps half."""
    log = MetricsLog(every_tenth_fails((TOPIC, 0)))
    log.task("A", TOPIC, 0, 0, 100)
    log.task("B", TOPIC, 0, 50, 100)

    reading = read_from(log)

    assert (reading.records_in, reading.errors) == (100, 10)
    shares = [share for _, share in count_inputs_once(log.records)]
    assert shares == [0.5, 1.0]


def test_the_same_offsets_of_another_partition_or_topic_are_other_inputs(read_from: Callable[..., Any]) -> None:
    log = MetricsLog(every_tenth_fails((TOPIC, 0), (TOPIC, 1), ("payments", 0)))
    for topic, partition in ((TOPIC, 0), (TOPIC, 1), ("payments", 0)):
        log.task("A", topic, partition, 0, 100)

    assert (read_from(log).records_in, read_from(log).errors) == (300, 30)


def test_run_records_other_pipelines_and_records_without_a_range(read_from: Callable[..., Any]) -> None:
    """A run record repeats its tasks' sums and is never added to them; a record naming no range (an older
    writer, or a task that read nothing) counts whole, since nothing says what it overlaps."""
    log = MetricsLog(every_tenth_fails((TOPIC, 0)))
    log.task("A", TOPIC, 0, 0, 100)
    log.run("A", records_in=100, errors=10)
    log.records.append({**log.records[0], "pipeline": "other", "window_end_ms": log.clock_ms})
    legacy = {k: v for k, v in log.records[0].items() if k not in input_range_fields(TOPIC, 0, 0, 0)}
    log.records.append({**legacy, "records_in": 20, "total-record-errors": 4, "window_end_ms": log.clock_ms})

    assert (read_from(log).records_in, read_from(log).errors) == (120, 14)


def test_input_range_fields_name_the_offsets_read_first_to_last() -> None:
    fields = input_range_fields(TOPIC, 2, 40, 99)
    assert InputRange.of(fields) == InputRange(TOPIC, 2, 40, 100)
    assert input_range_fields(TOPIC, 2, None, None) == {} == input_range_fields("", -1, -1, -1)


def _simulate(seed: int) -> tuple[MetricsLog, int, int]:
    """Runs over two partitions that keep receiving records: each run plans [committed, high) per partition,
    splits it at random, may write a failed attempt before a piece's record, and is either killed (a random
    subset of its task records, no run record, no commit; a worker of an unfinished piece may write a failed
    record later, after the next runs' records) or completes (every piece, a run record, the commit). The
    last run completes. Returns the log and the inputs read and failed, each counted once."""
    rng = random.Random(seed)
    partitions = [(TOPIC, 0), (TOPIC, 1)]
    log = MetricsLog({tp: [rng.random() < 0.1 for _ in range(2000)] for tp in partitions})
    committed = dict.fromkeys(partitions, 0)
    high = dict.fromkeys(partitions, 0)
    runs = rng.randint(1, 6)
    stragglers: dict[int, list[tuple[str, str, int, int, int]]] = {}
    for number in range(runs):
        run_id, completes = f"run-{number}", number == runs - 1 or rng.random() < 0.4
        for tp in partitions:
            high[tp] += rng.randint(0, 300)
        for tp in partitions:
            cuts = sorted({committed[tp], high[tp], *(rng.randint(committed[tp], high[tp]) for _ in range(3))})
            for start, end in pairwise(cuts):
                if rng.random() < 0.2:
                    log.task(run_id, *tp, start, rng.randint(start + 1, end), state="failed")
                if completes or rng.random() < 0.5:
                    log.task(run_id, *tp, start, end)
                elif rng.random() < 0.3:
                    late = stragglers.setdefault(number + rng.randint(1, 2), [])
                    late.append((run_id, *tp, start, rng.randint(start + 1, end)))
        if completes:
            log.run(run_id, records_in=-1, errors=-1)
            committed = dict(high)
        for straggler in stragglers.pop(number, []):
            log.task(*straggler, state="failed")
    for straggler in (late for pending in stragglers.values() for late in pending):
        log.task(*straggler, state="failed")
    records_in = sum(high.values())
    errors = sum(sum(log.failing[tp][: high[tp]]) for tp in partitions)
    return log, records_in, errors


@pytest.mark.parametrize("seed", range(60))
def test_every_input_counts_once_after_any_history_of_killed_runs_and_retries(
    seed: int, read_from: Callable[..., Any]
) -> None:
    """The class of defect, not one example: once a run completes, the window equals the ground truth."""
    log, records_in, errors = _simulate(seed)

    reading = read_from(log)

    assert (reading.records_in, reading.errors) == (records_in, errors)


def test_a_reading_names_the_job_runs_that_wrote_its_windows_dead_letters() -> None:
    """What the breach alert links to: the runs whose task records carry dead-letter offsets, oldest first, once."""
    from airflow_kerr.kafka.offset_spans import DEAD_LETTER_OFFSETS
    from airflow_kerr.kafka.tolerance import metrics_reading

    def task(run_id: str, offsets: dict[str, list[list[int]]] | None) -> dict[str, Any]:
        record = {"scope": "task", "pipeline": "p", "run_id": run_id, "records_in": 10, "total-record-errors": 1}
        return {**record, DEAD_LETTER_OFFSETS: offsets} if offsets is not None else record

    records = [task("r1", {"0": [[0, 1]]}), task("r2", None), task("r3", {"0": [[4, 5]]}), task("r1", {"1": [[0, 1]]})]
    reading = metrics_reading(records, 0, 1)
    assert reading.dead_letter_runs == ("r1", "r3")
    assert reading.as_dict()["dead_letter_runs"] == ["r1", "r3"]
    assert "dead_letter_runs" not in metrics_reading([task("r2", None)], 0, 1).as_dict()
