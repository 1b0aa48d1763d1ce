"""One set of Kafka clients per cluster for every watch in one event loop (the triggerer's).

Each asset watch used to hold its own clients: a DLQ watch a look-up consumer and a
cursor consumer, a tolerance watch a metrics-topic follower and a cursor consumer, each
with its connections and librdkafka threads, and each tolerance look blocked a worker
thread of the event loop for up to its ``poll_interval`` while it waited on the topic:
with the default six worker threads, a hundred such watches queued behind one another.
Here, per cluster (one librdkafka config), one :class:`SharedClients` serves them all:

- one consumer reads the end offsets of every watched DLQ topic per tick (one metadata
  request while the partitions are known, one ListOffsets request for all of them, and
  a fetch only for the partitions whose end moved, see :mod:`airflow_kerr.kafka.offsets`);
- one :class:`~airflow_kerr.kafka.metrics_topic.MetricsFollower` per metrics topic follows
  it for every pipeline watched on it, waiting on the topic between ticks;
- one admin client loads and saves every watch's cursor (the same consumer group commits
  :class:`~airflow_kerr.kafka.watch_cursor.WatchCursor` makes, so a saved position carries over).

The consumers run on one thread of their own, so no watch holds a worker thread of the
event loop while it waits. A watch awaits :meth:`SharedClients.news` of its topic or
pipeline (a DLQ watch only that; a tolerance watch at least every ``poll_interval``, as its
window slides) and then reads what the shared clients hold. The clients are
reference-counted: :func:`acquire` makes or reuses them, :meth:`SharedClients.release`
closes them with the last watch. No Airflow imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_kerr.kafka.metrics_topic import MetricsFollower
from airflow_kerr.kafka.offsets import (
    OffsetLookupError,
    Partition,
    listed_watermarks,
    offset_consumer,
    topic_partitions,
    watermarks,
)
from airflow_kerr.kafka.sharing import SHARING_ENV as SHARING_ENV  # the switch, here since watches first shared
from airflow_kerr.kafka.sharing import Shares
from airflow_kerr.kafka.sharing import settings_key as config_key
from airflow_kerr.kafka.sharing import sharing_enabled as sharing_enabled
from airflow_kerr.kafka.watch_cursor import WatchPosition, position_commits, position_from_commits

#: How long the shared clients keep a topic's partition list before they ask the broker again.
METADATA_REFRESH_S = 30.0
#: How long one look at the followed metrics topics waits for a record before the DLQ ends are looked at again.
FOLLOW_WAIT_S = 0.5
#: What a watch waits on: a DLQ topic ``(topic, None)``, or a pipeline ``(metrics topic, pipeline)``.
Subject = tuple[str, str | None]
#: How long one request of the shared clients may take.
_TIMEOUT_S = 10.0

log = logging.getLogger(__name__)


class SharedClients:
    """The clients every watch of one cluster shares in one event loop; see the module docstring."""

    def __init__(self, config: Mapping[str, Any], key: str, scopes: tuple[str, ...]) -> None:
        self.config = dict(config)
        self.key = key
        self.scopes = scopes
        #: Ticks done and clients made: evidence for tests and the benchmark.
        self.ticks = 0
        self.consumers_made = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kerr-watch-clients")
        self._admin: AdminClient | None = None
        self._offsets: Any = None
        self._dlq_topics: Counter[str] = Counter()
        self._partitions: dict[str, list[Partition]] = {}
        self._partitions_at = 0.0
        self._listed: dict[Partition, int] = {}
        self._ends: dict[Partition, int] = {}
        self._topic_errors: dict[str, Exception] = {}
        #: metrics topic -> its follower, and the windows (ms) of the watches on it.
        self._followers: dict[str, MetricsFollower] = {}
        self._windows: dict[str, Counter[int]] = {}
        self._intervals: Counter[float] = Counter()
        #: Per subject a watch waits on (a DLQ topic: ``(topic, None)``; a pipeline: ``(metrics topic, pipeline)``),
        #: the future the next read that brings it news resolves; and the subjects the last read brought news of
        #: (``(metrics topic, "*")``: all of that topic's pipelines).
        self._waiting: dict[Subject, asyncio.Future[None]] = {}
        self._news: set[Subject] = set()
        #: Subjects read at least once (a watch's first look waits for that, so it never judges an unread window).
        self._read_once: set[Subject] = set()
        self._task: asyncio.Task[None] | None = None
        self._last_dlq_read = 0.0
        self._wake = asyncio.Event()
        #: The event loop these clients serve (their ticks are its task): the owner in :data:`_SHARES`.
        self._loop = asyncio.get_running_loop()

    # Registration (event loop) ------------------------------------------------------------------------------

    def watch_dlq(self, topic: str, poll_interval: float) -> None:
        self._dlq_topics[topic] += 1
        self._intervals[poll_interval] += 1
        self._partitions_at = 0.0  # a new topic: ask for its partitions at the next tick
        self._start()

    def unwatch_dlq(self, topic: str, poll_interval: float) -> None:
        self._dlq_topics[topic] -= 1
        if self._dlq_topics[topic] <= 0:
            del self._dlq_topics[topic]
        self._drop_interval(poll_interval)

    def watch_metrics(self, topic: str, window_ms: int, poll_interval: float) -> None:
        windows = self._windows.setdefault(topic, Counter())
        windows[window_ms] += 1
        self._intervals[poll_interval] += 1
        self._start()

    def unwatch_metrics(self, topic: str, window_ms: int, poll_interval: float) -> None:
        windows = self._windows.get(topic, Counter())
        windows[window_ms] -= 1
        if windows[window_ms] <= 0:
            del windows[window_ms]
        self._drop_interval(poll_interval)

    def _drop_interval(self, poll_interval: float) -> None:
        self._intervals[poll_interval] -= 1
        if self._intervals[poll_interval] <= 0:
            del self._intervals[poll_interval]

    def _start(self) -> None:
        self._wake.set()  # a watch just came: the next tick reads for it now, not an interval later
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"kerr-watch-clients-{self.key[:8]}")

    async def news(self, subject: Subject, timeout_s: float) -> None:
        """Wait until a read brings news of ``subject`` (a DLQ topic's ends moved, a pipeline's records came, or
        an error), at most ``timeout_s``."""
        waiting = self._waiting.get(subject)
        if waiting is None or waiting.done():
            waiting = self._waiting[subject] = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiting), timeout_s)

    async def first_read(self, subject: Subject) -> None:
        """Wait until ``subject`` has been read (or failed to be) at least once: a watch's first look needs it."""
        while subject not in self._read_once and (subject[0], "*") not in self._read_once:
            await self.news(subject, 1.0)

    @property
    def refs(self) -> int:
        """How many watches hold these clients (0 once the last released them)."""
        return _SHARES.refs(self._loop, self.key)

    async def release(self) -> None:
        """One watch fewer; the last one stops the ticks and closes the clients."""
        if _SHARES.release(self._loop, self.key) is None:
            return
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_clients)
        self._executor.shutdown(wait=False)

    # Reads (any thread) ---------------------------------------------------------------------------------------

    def dlq_ends(self, topic: str) -> dict[int, int]:
        """The end offsets of ``topic`` read at the last tick, or that tick's error for it."""
        error = self._topic_errors.get(topic)
        if error is not None:
            raise error
        partitions = self._partitions.get(topic)
        if partitions is None:
            raise OffsetLookupError(f"topic {topic!r}: not read yet")
        ends = self._ends
        return {p: ends[(t, p)] for t, p in partitions}

    def metrics_records(self, topic: str, pipeline: str) -> list[dict[str, Any]]:
        """``pipeline``'s metrics records on ``topic`` as of the last tick (the follower keeps the widest window)."""
        error = self._topic_errors.get(topic)
        if error is not None:
            raise error
        follower = self._followers.get(topic)
        records = list(follower.records) if follower is not None else []
        return [r for r in records if r.get("pipeline") == pipeline]

    def load_position(self, group: str, topic: str) -> WatchPosition | None:
        """Group ``group``'s saved position on ``topic`` (as :meth:`WatchCursor.load`), through the admin client."""
        admin = self._admin_client()
        partitions = [TopicPartition(t, p) for t, p in topic_partitions(admin, topic, _TIMEOUT_S)]
        asked = ConsumerGroupTopicPartitions(group, partitions)
        found = admin.list_consumer_group_offsets([asked], request_timeout=_TIMEOUT_S)[group].result()
        return position_from_commits(found.topic_partitions)

    def save_position(self, group: str, topic: str, position: WatchPosition) -> None:
        """Commit ``position`` for ``group`` (as :meth:`WatchCursor.save`); raises the broker's error."""
        request = ConsumerGroupTopicPartitions(group, position_commits(group, topic, position))
        result = (
            self._admin_client().alter_consumer_group_offsets([request], request_timeout=_TIMEOUT_S)[group].result()
        )
        failed = [tp for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise OffsetLookupError(f"saving the position of group {group!r} failed: {failed[0].error}")

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            # An admin client is a producer to librdkafka, whose metadata requests create a missing topic: a watch
            # on a DLQ the first failure has not made yet must wait for it, not make it.
            self._admin = AdminClient({**self.config, "allow.auto.create.topics": False})
        return self._admin

    # The ticks (event loop, reads on the shared thread) ------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            interval = min(self._intervals, default=1.0)
            woken = self._wake.is_set()
            self._wake.clear()
            self._news = set()
            try:
                await loop.run_in_executor(self._executor, self._read, interval, woken)
            except Exception as error:  # each watch sees its topic's error through its look; this is the rest
                log.warning("shared watch clients could not read: %s", error)
            self.ticks += 1
            self._read_once |= self._news
            for subject, waiting in list(self._waiting.items()):
                if subject in self._news or (subject[0], "*") in self._news:
                    del self._waiting[subject]
                    if not waiting.done():
                        waiting.set_result(None)
            if not any(self._windows.values()):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), interval)

    def _read(self, interval: float, woken: bool) -> None:
        """One tick: the followed metrics topics (waiting up to :data:`FOLLOW_WAIT_S` for a record), then the DLQ
        ends when ``interval`` passed since they were last read; what changed goes to ``self._news``.

        ``woken``: a watch just came, so nothing waits and its topic is read at once.
        """
        for topic in [t for t in self._followers if not self._windows.get(t)]:
            self._followers.pop(topic).close()
        waited = False
        for topic, windows in self._windows.items():
            if not windows:
                continue
            follower = self._followers.get(topic)
            window_ms = max(windows)
            if follower is not None and follower.window_ms < window_ms:
                follower.close()  # a wider window joined: read it from its start
                follower = None
            if follower is None:
                follower = MetricsFollower(self.config, topic, lambda r: r.get("scope") in self.scopes, window_ms)
                self._followers[topic] = follower
                self.consumers_made += 1
            opens, before = follower.opens, _newest_by_pipeline(follower.records)
            try:
                follower.read(wait_s=0.0 if waited or woken else min(interval, FOLLOW_WAIT_S))
                if self._topic_errors.pop(topic, None) is not None or follower.opens != opens:
                    self._news.add((topic, "*"))
                after = _newest_by_pipeline(follower.records)
                self._news |= {(topic, p) for p in set(before) | set(after) if before.get(p) != after.get(p)}
            except Exception as error:
                self._topic_errors[topic] = error
                self._news.add((topic, "*"))
            waited = True
        if self._dlq_topics and (woken or time.monotonic() - self._last_dlq_read >= interval * 0.9):
            self._read_dlq_ends()

    def _read_dlq_ends(self) -> None:
        self._last_dlq_read = time.monotonic()
        if self._offsets is None:
            self._offsets = offset_consumer(self.config)
            self.consumers_made += 1
        topics = list(self._dlq_topics)
        if time.monotonic() - self._partitions_at > METADATA_REFRESH_S or any(
            t not in self._partitions or t in self._topic_errors for t in topics
        ):
            self._partitions_at = time.monotonic()
            metadata = self._offsets.list_topics(timeout=_TIMEOUT_S)  # one request for every topic
            for topic in topics:
                found = metadata.topics.get(topic)
                if found is None or found.error is not None or not found.partitions:
                    reason = found.error if found is not None and found.error is not None else "no partitions"
                    self._topic_errors[topic] = OffsetLookupError(
                        f"topic {topic!r} is not available on the broker: {reason}"
                    )
                    self._partitions.pop(topic, None)
                    self._news.add((topic, None))
                else:
                    if self._topic_errors.pop(topic, None) is not None or topic not in self._partitions:
                        self._news.add((topic, None))
                    self._partitions[topic] = [(topic, p) for p in sorted(found.partitions)]
        partitions = [tp for t in topics if t not in self._topic_errors for tp in self._partitions.get(t, [])]
        if not partitions:
            return
        # One ListOffsets request for all of them: their ends as listed.
        listed = {
            key: high for key, (_, high) in listed_watermarks(self._offsets, partitions, _TIMEOUT_S, low=False).items()
        }
        moved = [k for k in partitions if k not in self._ends or listed.get(k) != self._listed.get(k)]
        ends = dict(self._ends)
        if moved:  # only these need the fetch that verifies the end (see offsets.py)
            for key, (_, high) in watermarks(self._offsets, moved, _TIMEOUT_S).items():
                if ends.get(key) != high:
                    self._news.add((key[0], None))
                ends[key] = high
        self._listed.update(listed)
        self._ends = ends

    def _close_clients(self) -> None:
        for follower in self._followers.values():
            follower.close()
        self._followers.clear()
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None
        self._admin = None  # an AdminClient has no close(): dropping the last reference ends it


def _newest_by_pipeline(records: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per pipeline, how many records the follower keeps and the newest ``window_end_ms``: what tells news."""
    newest: dict[str, tuple[int, int]] = {}
    for record in records:
        pipeline = str(record.get("pipeline"))
        count, end = newest.get(pipeline, (0, 0))
        newest[pipeline] = (count + 1, max(end, int(record.get("window_end_ms", 0))))
    return newest


#: Per (event loop, config key): the shared clients of that cluster in that loop.
_SHARES: Shares[SharedClients] = Shares()


def acquire(config: Mapping[str, Any], scopes: tuple[str, ...]) -> SharedClients:
    """The running loop's shared clients for ``config`` (made on first use), one reference more."""
    key = config_key(config)
    return _SHARES.acquire(asyncio.get_running_loop(), key, lambda: SharedClients(config, key, scopes))


def shared_clients_in(loop: asyncio.AbstractEventLoop) -> list[SharedClients]:
    """The shared clients alive in ``loop`` (tests and the benchmark count them)."""
    return _SHARES.held(loop)


class SharedCursor:
    """A :class:`~airflow_kerr.kafka.watch_cursor.WatchCursor` (same group, same commits) on the shared admin client."""

    def __init__(self, clients: SharedClients, group: str, topic: str) -> None:
        self.clients = clients
        self.group = group
        self.topic = topic

    def load(self) -> WatchPosition | None:
        return self.clients.load_position(self.group, self.topic)

    def save(self, position: WatchPosition) -> None:
        self.clients.save_position(self.group, self.topic, position)

    def close(self) -> None:
        """Nothing of its own to close: the shared clients go with their last watch."""


class SharedMetricsView:
    """What a tolerance watch reads of the shared follower: its pipeline's records in its own window."""

    def __init__(self, clients: SharedClients, topic: str, pipeline: str, window_ms: int) -> None:
        self.clients = clients
        self.topic = topic
        self.pipeline = pipeline
        self.window_ms = window_ms

    def read(self, now_ms: int | None = None, wait_s: float = 0.0) -> list[dict[str, Any]]:
        """The window's records as of the last tick, oldest first (no wait: the watch awaited the tick)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        start_ms = now_ms - self.window_ms
        records = self.clients.metrics_records(self.topic, self.pipeline)
        inside = [r for r in records if int(r.get("window_end_ms", 0)) >= start_ms]
        return sorted(inside, key=lambda r: int(r.get("window_end_ms", 0)))

    def close(self) -> None:
        """Nothing of its own to close."""
