"""The rate limiter's spacing and stop, and the progress line, on a fake clock."""

from __future__ import annotations

import itertools

import pytest

from airflow_kerr.replay.pacing import Progress, RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def test_writes_are_spaced_evenly_at_the_rate() -> None:
    clock = FakeClock()
    limiter = RateLimiter(100, clock=clock, sleep=clock.sleep)
    times = []
    for _ in range(301):
        assert limiter.acquire()
        times.append(clock.now)
    assert times[-1] - times[0] == pytest.approx(3.0)
    assert max(b - a for a, b in itertools.pairwise(times)) == pytest.approx(0.01)


def test_no_burst_after_an_idle_spell() -> None:
    clock = FakeClock()
    limiter = RateLimiter(10, clock=clock, sleep=clock.sleep)
    limiter.acquire()
    clock.now += 60
    start = clock.now
    for _ in range(11):
        limiter.acquire()
    assert clock.now - start == pytest.approx(1.0)


def test_a_stop_ends_the_wait_without_using_the_slot() -> None:
    clock = FakeClock()
    stopped: list[bool] = []
    limiter = RateLimiter(0.1, stopped=lambda: bool(stopped), clock=clock, sleep=clock.sleep)
    assert limiter.acquire()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        stopped.append(True)

    limiter._sleep = sleep
    assert not limiter.acquire()
    assert clock.slept <= 0.05 + 1e-9


@pytest.mark.parametrize("rate", [0, -1, float("inf"), float("nan")])
def test_the_rate_must_be_positive_and_finite(rate: float) -> None:
    with pytest.raises(ValueError, match="positive, finite"):
        RateLimiter(rate)


def test_progress_shows_done_total_rate_and_eta_every_interval() -> None:
    clock = FakeClock()
    lines: list[str] = []
    progress = Progress("replay orders.dlq", 1000, 5.0, lines.append, clock=clock)
    clock.now += 2
    progress.update(200, 150, 5, 1)
    assert lines == []
    clock.now += 3
    progress.update(250, 200, 5, 1)
    assert lines == [
        "replay orders.dlq: 250/1,000 records (25.0%), 200 replayed, 5 parked, 1 dropped; 50.0 records/s; ETA 15s"
    ]
    clock.now += 1
    progress.update(300, 250, 5, 1, force=True)
    assert len(lines) == 2 and lines[1].endswith("50.0 records/s; ETA 14s")
    progress.total = 10_000
    assert progress.line(300, 0, 0, 0).endswith("ETA 3m14s")
    progress.total = 1_000_000
    assert progress.line(300, 0, 0, 0).endswith("ETA 5h33m")


def test_a_dry_run_progress_line_says_nothing_was_written() -> None:
    clock = FakeClock()
    progress = Progress("replay orders.dlq", 100, 5.0, lambda line: None, clock=clock, dry_run=True)
    clock.now += 1
    line = progress.line(20, 18, 2, 0)
    assert "would replay 18, park 2, drop 0 (dry run: nothing written)" in line
    assert " replayed," not in line
