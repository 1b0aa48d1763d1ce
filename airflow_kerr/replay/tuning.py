"""What the replay loop changes in the interpreter while it runs: the cyclic collector and the thread switch interval.

Both are process-wide, so each is a context manager that puts the interpreter back as it found
it when the loop ends, however it ends. They live apart from the loop because they are about
CPython, not Kafka: the loop would read the same without them, only slower.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: Seconds between the replay loop's own passes of the cyclic garbage collector (paused otherwise).
GC_INTERVAL_S = 10.0

#: The interpreter's thread switch interval during the replay loop (Python's default is 5 ms); see
#: :func:`quick_thread_switches`.
SWITCH_INTERVAL_S = 0.001


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the replay loop; :func:`collect_young` runs a pass every GC_INTERVAL_S.

    A batch keeps thousands of young objects alive until it is written; the cyclic collector,
    run every 700 allocations, traversed them again and again (15 % of a replay's CPU). Replay
    objects form no cycles (refcounting frees them), so only cycles a fix function may leave
    need the periodic pass.
    """
    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collector_was_on:
            gc.enable()


def collect_young(last: float) -> float:
    """Run a young-generation pass of the paused collector if GC_INTERVAL_S passed since ``last``; when it last ran.

    Called once per settled batch, so the cycles a fix function may leave are still freed while
    :func:`cyclic_gc_paused` holds the collector off.
    """
    if time.monotonic() - last > GC_INTERVAL_S:
        gc.collect(1)
        return time.monotonic()
    return last


@contextmanager
def quick_thread_switches() -> Iterator[None]:
    """Hand the GIL between the reader and the writer thread every :data:`SWITCH_INTERVAL_S` during the loop.

    ``commit_transaction`` takes the GIL back (to serve delivery reports) while it flushes;
    with the reader busy deciding the next batch, each such wait lasted Python's default
    switch interval, 5 ms: a 1000-record commit took 8-10 ms instead of 2, and the writer,
    not the reader, set the pace of a replay with a fix. The interval is process-wide, so it
    is restored when the loop ends.
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
