"""The asset watchers' event triggers on the real broker, run by Airflow's own shared-stream manager.

``SharedStreamManager`` is what the triggerer runs these triggers in: the tests drive it
as the triggerer's runner does (subscribe, filter, bind each event, confirm it once
stored). The one thing stood in for is the metadata database: an event counts as stored
when the test confirms it, and a triggerer crash is a manager dropped with events
unconfirmed. The same triggers run in a real triggerer in ``tests/ui/test_event_driven.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, cast

import pytest
from airflow.triggers.shared_stream import SharedStreamManager

from airflow_kerr.assets.watched import dead_letter_queue_asset, tolerance_asset
from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.kafka.offsets import group_offsets
from airflow_kerr.kafka.shared_clients import shared_clients_in
from airflow_kerr.local.dead_letters import Failure, write_task_metrics
from airflow_kerr.local.dead_letters import write_dead_letters as write_failures
from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterGrowthStream, DeadLetterQueueEventTrigger
from airflow_kerr.triggers.tolerance_events import ToleranceTransitionStream
from airflow_kerr.triggers.watch import CursorStream

POLL_S = 0.2


@pytest.fixture
def kafka_connection(kafka_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    return "kafka_default"


def write_dead_letters(kafka_config: dict[str, Any], dlq: str, count: int, *errors: Exception) -> None:
    """``count`` DLQ records in Connect's format, flushed together; they failed with ``errors`` in turn."""
    now_ms = int(time.time() * 1000)
    failures = [
        Failure(
            SourceRecord("orders", 0, o, now_ms, key=b"k", value=b"{bad"),
            Stage.VALUE_CONVERTER,
            errors[o % len(errors)],
        )
        for o in range(count)
    ]
    assert write_failures(kafka_config, dlq, failures) == count


#: Every watch stream (one poll loop) made while a test runs, in the order the manager made them.
STREAMS: list[CursorStream] = []


@pytest.fixture(autouse=True)
def record_streams(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep each stream the triggerer makes, so a test can see how many times it looked (never a sleep)."""
    made = CursorStream.__init__

    def init(self: CursorStream, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        STREAMS.append(self)

    monkeypatch.setattr(CursorStream, "__init__", init)
    yield
    STREAMS.clear()


class Triggerer:
    """Airflow's ``SharedStreamManager`` driven the way the triggerer's runner drives it.

    ``store`` decides whether fired events reach "the database" (are confirmed); a
    crash is leaving without confirming what was fired.
    """

    def __init__(self) -> None:
        self.first_stream = len(STREAMS)
        self.manager = SharedStreamManager(ack_timeout=30)
        self.fired: list[dict[str, Any]] = []
        self.store = True
        self._runs: list[tuple[asyncio.Task[None], int, Any]] = []

    def watch(self, trigger_id: int, trigger: Any) -> None:
        key = trigger.shared_stream_key()
        stream = self.manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)

        async def run() -> None:
            async for event in trigger.filter_shared_stream(stream):
                seq = self.manager.bind_pending_event(trigger_id=trigger_id, key=key)
                self.fired.append(event.payload)
                if self.store and seq is not None:
                    self.manager.confirm_persisted([seq])

        self._runs.append((asyncio.create_task(run()), trigger_id, key))

    async def next_event(self, timeout_s: float = 30.0, after: int | None = None) -> dict[str, Any]:
        """The next event fired after the ``after``-th one (default: after those seen so far)."""
        seen = len(self.fired) if after is None else after
        deadline = time.monotonic() + timeout_s
        while len(self.fired) <= seen:
            for task, _, _ in self._runs:
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            assert time.monotonic() < deadline, f"no event within {timeout_s} s (fired so far: {self.fired})"
            await asyncio.sleep(0.05)
        return self.fired[seen]

    async def streams(self) -> list[CursorStream]:
        """The poll loops of this triggerer's watches, once the manager has made them."""
        await until(lambda: len(STREAMS) > self.first_stream)
        return STREAMS[self.first_stream :]

    async def after_looks(self, looks: int = 2, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """What fired while every watch read its topic ``looks`` more times: it looked, and this is what it saw.

        Two looks, so that one began after the caller's last write, and the events of the one
        before have been handed on.
        """
        before = len(self.fired)
        streams = await self.streams()
        targets = [stream.looks + looks for stream in streams]
        await until(lambda: all(s.looks >= t for s, t in zip(streams, targets, strict=True)), timeout_s)
        return self.fired[before:]

    async def stop_one(self, trigger_id: int) -> None:
        """Cancel one watch, as the triggerer does when its asset is no longer watched."""
        for task, tid, key in [run for run in self._runs if run[1] == trigger_id]:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.manager.unsubscribe(tid, key)
        self._runs = [run for run in self._runs if run[1] != trigger_id]

    async def stop(self) -> None:
        for task, trigger_id, key in self._runs:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.manager.unsubscribe(trigger_id, key)
        self._runs.clear()


@asynccontextmanager
async def triggerer(*triggers: Any, store: bool = True) -> AsyncIterator[Triggerer]:
    running = Triggerer()
    running.store = store
    for trigger_id, trigger in enumerate(triggers, start=1):
        running.watch(trigger_id, trigger)
    try:
        yield running
    finally:
        await running.stop()


async def until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.05)


def test_dlq_watch_fires_on_growth_after_it_started_with_a_sample_and_counts_by_class(
    kafka_config: dict[str, Any], kafka_connection: str, create_topic: Callable[..., str], unique_topic: str
) -> None:
    dlq = create_topic(f"{unique_topic}.dlq", 2)
    write_dead_letters(kafka_config, dlq, 3, ValueError("before the watch"))  # the backlog is not news

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        trigger = DeadLetterQueueEventTrigger(topic=dlq, poll_interval=POLL_S, sample_size=2)
        async with triggerer(trigger) as running:
            assert await running.after_looks() == []
            write_dead_letters(kafka_config, dlq, 5, *[ValueError("bad json")] * 4, KeyError("customer"))
            event = await running.next_event()
            return event, await running.after_looks()

    event, after = asyncio.run(scenario())
    assert event["topic"] == dlq and event["status"] == "grew"
    assert event["count"] == 5 and sum(event["ends"].values()) - sum(event["baseline"].values()) == 5
    assert sum(event["baseline"].values()) == 3
    assert event["counts_by_class"] == {"ValueError": 4, "KeyError": 1}
    assert event["counts_cover"] == 5
    assert len(event["sample"]) == 2 and event["sample"][0]["exception_class"] == "KeyError"
    assert after == [], "one growth, one event"


def test_dlq_watch_repeats_an_unstored_event_after_a_restart_and_loses_no_growth(
    kafka_config: dict[str, Any], kafka_connection: str, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """At least once: fired but never stored (the triggerer died) → fired again, same baseline; stored → never again."""
    dlq = create_topic(f"{unique_topic}.dlq", 2)

    def trigger() -> DeadLetterQueueEventTrigger:
        return DeadLetterQueueEventTrigger(topic=dlq, poll_interval=POLL_S)

    async def scenario() -> list[dict[str, Any]]:
        events = []
        async with triggerer(trigger()) as running:  # first start: the position is saved at once
            await running.after_looks(1)
        async with triggerer(trigger(), store=False) as running:  # fires, then dies before Airflow stored it
            write_dead_letters(kafka_config, dlq, 5, ValueError("x"))
            events.append(await running.next_event())
        write_dead_letters(kafka_config, dlq, 2, ValueError("while the triggerer was down"))
        async with triggerer(trigger()) as running:
            events.append(await running.next_event())
            await running.after_looks()  # stored and moved past: the position is saved
        async with triggerer(trigger()) as running:
            assert await running.after_looks() == [], "a stored event is not fired again"
            write_dead_letters(kafka_config, dlq, 1, ValueError("y"))
            events.append(await running.next_event())
        return events

    lost, repeated, next_one = asyncio.run(scenario())
    assert lost["count"] == 5
    assert repeated["baseline"] == lost["baseline"] and repeated["count"] == 7, "the unstored event comes again"
    assert next_one["baseline"] == repeated["ends"] and next_one["count"] == 1


def test_tolerance_watch_fires_one_breach_then_one_recovery_with_the_same_breach_id(
    kafka_config: dict[str, Any], kafka_connection: str, create_topic: Callable[..., str], unique_topic: str
) -> None:
    metrics = create_topic(f"{unique_topic}.metrics")

    def asset(event: str) -> Any:
        return tolerance_asset(
            event=event,
            pipeline="orders",
            metrics_topic=metrics,
            max_error_rate=0.1,
            min_records=50,
            window=3.0,
            poll_interval=POLL_S,
        )

    breach_asset, recovery_asset = asset("breach"), asset("recovery")
    breach_trigger, recovery_trigger = breach_asset.watchers[0].trigger, recovery_asset.watchers[0].trigger
    assert breach_trigger.shared_stream_key() == recovery_trigger.shared_stream_key(), "one poll loop for both"
    assert breach_asset.uri != recovery_asset.uri and "event=breach" in breach_asset.uri

    async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
        async with triggerer(breach_trigger, recovery_trigger) as running:
            write_task_metrics(kafka_config, metrics, "orders", records_in=100, errors=2)
            assert await running.after_looks() == [], "2 % is under the 10 % limit"
            write_task_metrics(kafka_config, metrics, "orders", records_in=100, errors=40)
            breach = await running.next_event()
            while_breached = await running.after_looks()  # the window still breaches: nothing more
        async with triggerer(breach_trigger, recovery_trigger) as running:  # a restart during the breach
            while_breached += await running.after_looks()
            await asyncio.sleep(3.0)  # the bad window slides out
            write_task_metrics(kafka_config, metrics, "orders", records_in=100, errors=0)
            return breach, while_breached, await running.next_event()

    breach, while_breached, recovery = asyncio.run(scenario())
    assert while_breached == [], "one breach, one event: also across a restart during the breach"
    assert breach["status"] == "breach" and breach["errors"] == 42 and breach["records_in"] == 200
    assert breach["max_error_rate"] == 0.1 and breach["pipeline"] == "orders" and breach["window_s"] == 3.0
    assert recovery["status"] == "recovery" and recovery["breach_id"] == breach["breach_id"]


def test_dlq_asset_has_the_kafka_uri_of_its_topic_and_a_watcher(
    kafka_config: dict[str, Any], kafka_connection: str
) -> None:
    asset = dead_letter_queue_asset("orders.dlq")
    assert asset.uri == "kafka://kafka_default/orders.dlq"
    assert isinstance(asset.watchers[0].trigger, DeadLetterQueueEventTrigger)
    classpath, kwargs = asset.watchers[0].trigger.serialize()
    assert classpath == "airflow_kerr.triggers.dead_letter_queue_events.DeadLetterQueueEventTrigger"
    assert kwargs["cursor_group"].startswith("kerr-watch.dlq.orders.dlq.")


def test_tolerance_asset_names_each_bad_setting_when_the_dag_is_parsed(kafka_connection: str) -> None:
    with pytest.raises(ValueError) as raised:
        tolerance_asset(event="breach", source="metrics", max_error_rate=2.0, window=-1)
    message = str(raised.value)
    assert "max_error_rate=2.0: expected a fraction between 0 and 1" in message
    assert "window=-1" in message and "pipeline: required with source='metrics'" in message
    with pytest.raises(ValueError, match="event='breached': expected breach or recovery"):
        tolerance_asset(event="breached", pipeline="p", max_errors=1)


def test_a_watch_run_alone_fires_and_saves_the_look_once_resumed_for_the_next(
    kafka_config: dict[str, Any], kafka_connection: str, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Airflow 3.1/3.2 (no shared streams) call run(): a look's events fire, their position is saved a look later."""
    dlq = create_topic(f"{unique_topic}.alone", 1)
    trigger = DeadLetterQueueEventTrigger(topic=dlq, poll_interval=POLL_S)

    async def scenario() -> tuple[dict[str, Any], bool, bool]:
        events = cast(AsyncGenerator[Any, None], trigger.run())
        first = asyncio.ensure_future(anext(events))
        await until(lambda: bool(STREAMS) and STREAMS[-1].looks >= 1)
        stream = STREAMS[-1]
        write_dead_letters(kafka_config, dlq, 2, ValueError("alone"))
        event = (await asyncio.wait_for(first, 60)).payload
        saved_when_yielded = stream.saved == stream.position
        resumed = asyncio.ensure_future(anext(events))  # the triggerer asks for more: the look is saved
        await until(lambda: stream.saved == stream.position)
        resumed.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await resumed
        await events.aclose()
        return event, saved_when_yielded, stream.saved == stream.position

    event, saved_when_yielded, saved_after = asyncio.run(scenario())
    assert event["count"] == 2
    assert not saved_when_yielded and saved_after


def test_a_watch_started_before_its_topic_exists_waits_for_it_and_then_fires(
    kafka_config: dict[str, Any], kafka_connection: str, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Always on: a missing topic (a fresh deployment before the first run) is retried, not the end of the watch."""
    dlq = f"{unique_topic}.later"
    trigger = DeadLetterQueueEventTrigger(topic=dlq, poll_interval=POLL_S)

    async def scenario() -> dict[str, Any]:
        async with triggerer(trigger) as running:
            (stream,) = await running.streams()
            await until(lambda: stream.failures >= 2)  # it tried, twice, and fired nothing
            assert running.fired == []
            create_topic(dlq, 1)
            await until(lambda: bool(group_offsets(kafka_config, trigger.cursor_group, [(dlq, 0)])), timeout_s=60)
            write_dead_letters(kafka_config, dlq, 2, ValueError("late"))
            return await running.next_event(timeout_s=60)

    event = asyncio.run(scenario())
    assert event["count"] == 2 and event["baseline"] == {"0": 0}


def test_watches_of_one_cluster_share_one_set_of_clients_and_each_fires_only_its_own_events(
    kafka_config: dict[str, Any], kafka_connection: str, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Two DLQ watches and two tolerance watches on one cluster: one DLQ look-up consumer and one metrics
    follower serve all four (no watch holds a consumer of its own), and each still fires on its own topic or
    pipeline only, with the same payload a watch alone fires."""
    dlq_a, dlq_b = create_topic(f"{unique_topic}.a", 2), create_topic(f"{unique_topic}.b", 1)
    metrics = create_topic(f"{unique_topic}.metrics")

    def breach(pipeline: str) -> Any:
        asset = tolerance_asset(
            event="breach", pipeline=pipeline, metrics_topic=metrics, max_errors=5, min_records=0, poll_interval=POLL_S
        )
        return asset.watchers[0].trigger

    triggers = [
        DeadLetterQueueEventTrigger(topic=dlq_a, poll_interval=POLL_S),
        DeadLetterQueueEventTrigger(topic=dlq_b, poll_interval=POLL_S),
        breach("p1"),
        breach("p2"),
    ]

    async def scenario() -> tuple[list[dict[str, Any]], list[Any], int, list[CursorStream]]:
        async with triggerer(*triggers) as running:
            streams = await running.streams()
            await until(lambda: len(streams) == 4)
            await running.after_looks(1)
            (clients,) = shared_clients_in(asyncio.get_running_loop())
            write_dead_letters(kafka_config, dlq_b, 3, ValueError("b"))
            first = await running.next_event()
            write_task_metrics(kafka_config, metrics, "p2", records_in=100, errors=9)
            second = await running.next_event()
            write_dead_letters(kafka_config, dlq_a, 2, KeyError("a"))
            third = await running.next_event()
            assert await running.after_looks() == [], "p1 never breached, and each event fired once"
            return [first, second, third], [s.shared for s in streams], clients.consumers_made, streams

    (first, second, third), shared, consumers, streams = asyncio.run(scenario())
    assert (first["topic"], first["count"], first["status"]) == (dlq_b, 3, "grew")
    assert first["counts_by_class"] == {"ValueError": 3} and len(first["sample"]) == 3
    assert (second["status"], second["pipeline"], second["errors"]) == ("breach", "p2", 9)
    assert (third["topic"], third["count"]) == (dlq_a, 2)
    assert shared[0] is not None and all(s is shared[0] for s in shared), "one set of clients for the cluster"
    assert consumers == 2, "one consumer for every DLQ's ends, one follower for the metrics topic"
    dlq_streams = [s for s in streams if isinstance(s, DeadLetterGrowthStream)]
    tolerance_streams = [s for s in streams if isinstance(s, ToleranceTransitionStream)]
    assert len(dlq_streams) == len(tolerance_streams) == 2
    assert all(s._consumer is None for s in dlq_streams), "no DLQ watch made a look-up consumer of its own"
    assert all(s._watch is not None and s._watch.follower is None for s in tolerance_streams), "nor a follower"


def test_a_cancelled_watch_releases_the_shared_clients_and_the_last_one_closes_them(
    kafka_config: dict[str, Any], kafka_connection: str, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """The triggerer cancels a watch whose asset is gone: its share is released, the other watch goes on
    firing on the same clients, and when the last watch goes the clients are closed and forgotten."""
    dlq_a, dlq_b = create_topic(f"{unique_topic}.a", 1), create_topic(f"{unique_topic}.b", 1)

    async def scenario() -> tuple[int, bool, dict[str, Any], list[Any], Any]:
        async with triggerer(
            DeadLetterQueueEventTrigger(topic=dlq_a, poll_interval=POLL_S),
            DeadLetterQueueEventTrigger(topic=dlq_b, poll_interval=POLL_S),
        ) as running:
            await until(lambda: len(STREAMS) >= 2)
            await running.after_looks(1)
            (clients,) = shared_clients_in(asyncio.get_running_loop())
            await running.stop_one(1)
            refs_after_one, a_still_read = clients.refs, dlq_a in clients._dlq_topics
            write_dead_letters(kafka_config, dlq_b, 1, ValueError("b"))
            event = await running.next_event()
            await running.stop_one(2)
            return refs_after_one, a_still_read, event, shared_clients_in(asyncio.get_running_loop()), clients

    refs_after_one, a_still_read, event, left, clients = asyncio.run(scenario())
    assert refs_after_one == 1 and not a_still_read, "the cancelled watch released its share and its topic"
    assert event["topic"] == dlq_b and event["count"] == 1, "the other watch fires on the same clients"
    assert left == [] and clients.refs == 0 and clients._offsets is None, "the last watch closed the clients"
