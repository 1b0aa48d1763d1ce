"""Pacing and progress for a replay: an even-spaced rate limiter and a periodic progress line.

The stop check is a plain callable rather than a ``threading.Event`` because Airflow calls
``on_kill`` from a SIGTERM handler in the thread that runs the replay: setting an Event
there could deadlock on the Event's own lock if the signal arrives inside ``Event.wait``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

#: Longest single sleep, so a stop request is seen within this many seconds.
STOP_CHECK_S = 0.05


class RateLimiter:
    """Spaces writes ``1 / rate`` seconds apart, with no burst after an idle spell.

    Each write is due one interval after the previous one or now, whichever is later, so
    the long-run rate never exceeds ``rate`` and a slow stretch is not made up by a burst.
    """

    def __init__(
        self,
        rate: float,
        *,
        stopped: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not rate > 0 or math.isinf(rate):
            raise ValueError(f"rate={rate!r}: expected a positive, finite number of records per second")
        self.interval = 1.0 / rate
        self._stopped = stopped
        self._clock = clock
        self._sleep = sleep
        self._due = -math.inf

    def acquire(self) -> bool:
        """Wait for the next slot; False when a stop was requested while waiting (the slot is not used)."""
        now = self._clock()
        due = max(self._due, now)
        while now < due:
            if self._stopped():
                return False
            self._sleep(min(due - now, STOP_CHECK_S))
            now = self._clock()
        self._due = due + self.interval
        return True


def _duration(seconds: float) -> str:
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


class Progress:
    """Emits ``done / total / rate / ETA`` at most every ``interval_s`` seconds.

    ``done`` counts DLQ records read and settled (committed, or counted in a dry run);
    ``total`` is the number of records between the start positions and the end offsets
    planned when the run began (or ``max_records`` when that is smaller).
    """

    def __init__(
        self,
        label: str,
        total: int,
        interval_s: float,
        emit: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        dry_run: bool = False,
    ) -> None:
        self.dry_run = dry_run
        self.label = label
        self.total = total
        self.interval_s = interval_s
        self._emit = emit
        self._clock = clock
        self._started = clock()
        self._last = self._started

    def line(self, done: int, replayed: int, parked: int, dropped: int) -> str:
        """The progress line for the given counts, at the current time."""
        elapsed = max(self._clock() - self._started, 1e-9)
        rate = done / elapsed
        percent = 100.0 * done / self.total if self.total else 100.0
        remaining = max(self.total - done, 0)
        eta = _duration(remaining / rate) if rate > 0 else "unknown"
        if self.dry_run:
            outcome = f"would replay {replayed:,}, park {parked:,}, drop {dropped:,} (dry run: nothing written)"
        else:
            outcome = f"{replayed:,} replayed, {parked:,} parked, {dropped:,} dropped"
        return (
            f"{self.label}: {done:,}/{self.total:,} records ({percent:.1f}%), {outcome}; "
            f"{rate:,.1f} records/s; ETA {eta}"
        )

    def update(self, done: int, replayed: int, parked: int, dropped: int, *, force: bool = False) -> None:
        """Emit the line when ``interval_s`` passed since the last one (or when forced)."""
        now = self._clock()
        if force or now - self._last >= self.interval_s:
            self._last = now
            self._emit(self.line(done, replayed, parked, dropped))
