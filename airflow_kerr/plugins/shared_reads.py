"""One read of Kafka per question, however many people ask it: the DLQ view's answers shared and bounded.

Why: in an incident ten or twenty people open the same DLQ at once. Each page chains summary
chunks and asks for the newest samples; answered one by one, twenty pages were twenty scans of
the same million records at once on the api-server (whose one event loop and thread pool also
serve Airflow's own pages), each scan's consumer holding its own fetched records: the memory
grew by gigabytes, a look-up timed out into a 502 and a full count took minutes
(``benchmarks/view_load.py``). So:

- **shared**: a request whose question (connection, topic, selection, cursor, bounds) is being
  read already waits for that read's answer instead of starting its own, and an answer is kept
  for a few seconds (:data:`FIRST_CHUNK_TTL_S` and the other TTLs) for those who ask just
  after. The first summary chunk fixes a scan's end offsets and its cursor, so everyone who
  opened the DLQ within those seconds follows the same cursors, and every later chunk is one
  read for all of them (whatever value each filters on: the view counts by the selection's
  ranges only and applies value filters to the chunk's tally);
- **bounded**: at most ``limit`` reads run at once in the process; a request that finds every
  slot taken waits up to ``wait_s`` for one, then gets :class:`Busy` (the view answers 429 with
  ``Retry-After``; the page waits and asks again), never a 5xx.

An answer is kept as the route prepared it in the read's worker thread (the JSON bytes it
sends, masked already, or a summary chunk), so a shared answer costs little on the event loop.
Errors are shared with those waiting but never kept. The state belongs to the running event
loop (one per api-server worker); a new loop starts empty. It imports no Airflow.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

#: Seconds a first summary chunk is shared: whoever opens the DLQ within them follows the same scan (whose
#: total is then up to this old).
FIRST_CHUNK_TTL_S = 10.0
#: Seconds a following chunk (one cursor's answer, which the cursor fixes) is kept for those who follow.
NEXT_CHUNK_TTL_S = 60.0
#: Seconds the samples, topic list and backlog answers are kept: the newest dead letters may be this old.
SHORT_TTL_S = 5.0
#: Answers kept at most (a summary chunk is a few KB; 100 samples with stack traces a few hundred).
MAX_KEPT = 64
#: What a 429 tells the page to wait before asking again.
RETRY_AFTER_S = 2


#: What a read returns: the answer to share, and whether it may be kept for those who ask next.
Read = tuple[Any, bool]


class Busy(Exception):
    """Every read slot stayed taken for the whole wait: ask again after :data:`RETRY_AFTER_S` seconds."""

    def __init__(self, limit: int, wait_s: float) -> None:
        super().__init__(
            f"the DLQ view is reading Kafka for {limit} other questions already and none finished within "
            f"{wait_s:g} s; ask again in {RETRY_AFTER_S} s"
        )
        self.retry_after_s = RETRY_AFTER_S


@dataclass
class ReadStats:
    """What the reads of this loop did: reads started, answers shared from a read under way or kept, refusals."""

    reads: int = 0
    joined: int = 0
    kept: int = 0
    busy: int = 0


class SharedReads:
    """Single-flight, short-lived answers and a bound on concurrent reads (see the module docstring)."""

    def __init__(self, max_kept: int = MAX_KEPT, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_kept = max_kept
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Condition | None = None
        self.active = 0
        self._under_way: dict[Hashable, asyncio.Task[Any]] = {}
        self._kept: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self.stats = ReadStats()

    def _bind(self) -> asyncio.Condition:
        """This loop's slots and reads under way (a task or a condition belongs to the loop it was made on)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._slots is None:
            self._loop, self._slots, self.active = loop, asyncio.Condition(), 0
            self._under_way = {}
            self.stats = ReadStats()
        return self._slots

    def waiting(self, key: Hashable) -> bool:
        """Whether a read of ``key`` is under way (others asking it now join it)."""
        return key in self._under_way

    async def answer(
        self, key: Hashable, ttl_s: float, limit: int, wait_s: float, read: Callable[[], Awaitable[Read]]
    ) -> Any:
        """The answer to ``key``: kept, joined from a read under way, or read now within the bound.

        ``read`` returns the body and whether it may be kept (for ``ttl_s``): a summary chunk
        that read nothing (its records not fetched yet) is not, or everyone asking its cursor
        again would get the same cursor back until it expired. Raises :class:`Busy` when no
        slot freed within ``wait_s``, and whatever ``read`` raised (to everyone who waited for it).
        """
        self._bind()
        kept = self._kept.get(key)
        if kept is not None:
            if kept[0] > self._clock():
                self._kept.move_to_end(key)
                self.stats.kept += 1
                return kept[1]
            del self._kept[key]
        task = self._under_way.get(key)
        if task is None:
            task = asyncio.ensure_future(self._lead(key, ttl_s, limit, wait_s, read))
            self._under_way[key] = task
        else:
            self.stats.joined += 1
        # Shielded: a person who closes the page does not cancel the read the others wait for.
        return await asyncio.shield(task)

    async def _lead(
        self, key: Hashable, ttl_s: float, limit: int, wait_s: float, read: Callable[[], Awaitable[Read]]
    ) -> Any:
        try:
            async with self.slot(limit, wait_s):
                self.stats.reads += 1
                body, keep = await read()
            if keep and ttl_s > 0:
                self._keep(key, body, ttl_s)
            return body
        finally:
            self._under_way.pop(key, None)

    @asynccontextmanager
    async def slot(self, limit: int, wait_s: float) -> AsyncIterator[None]:
        """Hold one of ``limit`` read slots: at once if one is free, else after up to ``wait_s`` (or :class:`Busy`)."""
        slots = self._bind()
        async with slots:
            if self.active >= max(1, limit):
                if wait_s <= 0:
                    self.stats.busy += 1
                    raise Busy(limit, wait_s)
                try:
                    await asyncio.wait_for(slots.wait_for(lambda: self.active < max(1, limit)), wait_s)
                except TimeoutError:
                    self.stats.busy += 1
                    raise Busy(limit, wait_s) from None
            self.active += 1
        try:
            yield
        finally:
            async with slots:
                self.active -= 1
                slots.notify_all()

    def _keep(self, key: Hashable, body: Any, ttl_s: float) -> None:
        now = self._clock()
        for stale in [k for k, (until, _) in self._kept.items() if until <= now]:
            del self._kept[stale]
        self._kept[key] = (now + ttl_s, body)
        self._kept.move_to_end(key)
        while len(self._kept) > self.max_kept:
            self._kept.popitem(last=False)

    def forget(self) -> None:
        """Drop every kept answer (tests; a setting that changes what an answer holds)."""
        self._kept.clear()
