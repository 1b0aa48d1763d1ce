"""Every writer's dead letters trip the DLQ sensor, fire the DLQ watcher and are named in the breach alert.

On the real broker, with the real sensor (poke, and execute deferred to its real trigger in an
event loop), the real watcher trigger run by Airflow's own shared-stream manager, and the
tolerance guard's own notify task posting to a local webhook. The dead letters are written
byte for byte as each writer writes them (:mod:`tests.dead_letter_writers`: Spring Kafka's
``DeadLetterPublishingRecoverer``, Schema Registry's DLQ rule action, KIP-1191, Kafka Streams,
Airflow's header-less ``dlq_topic``); Connect's by the job's own writer, as the other sensor
tests write them.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG, PokeReturnValue
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.shared_stream import SharedStreamManager
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kerr.assets.watched import dead_letter_queue_asset, tolerance_asset
from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.kafka.offsets import group_offsets
from airflow_kerr.local.dead_letters import Failure
from airflow_kerr.local.dead_letters import write_dead_letters as write_connect_dead_letters
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier
from airflow_kerr.sensors.dead_letter_queue import DeadLetterQueueSensor
from airflow_kerr.task_groups.tolerance_guard import tolerance_guard
from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterQueueEventTrigger
from airflow_kerr.triggers.watch import CursorStream
from tests.clock import RECENT_MS
from tests.dead_letter_writers import (
    Original,
    avro_wire,
    header_less,
    kip_1191,
    schema_registry_rule,
    spring_dlt,
    streams_bakdata,
)

SPRING_CAUSE = "java.lang.IllegalStateException"
JSON_ERROR = "json.decoder.JSONDecodeError"
STREAMS_ERROR = "org.apache.kafka.common.errors.SerializationException"
POLL_S = 0.2


@pytest.fixture
def kafka_connection(kafka_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    return "kafka_default"


def original(offset: int, topic: str = "orders") -> Original:
    """The record that failed: partition 0 of ``topic``, stamped from the session's clock."""
    return Original(topic, 0, offset, RECENT_MS + offset, f"o-{offset}".encode(), b'{"id": ', [("trace-id", b"t")])


def produce(kafka_config: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Produce ``Producer.produce`` keyword arguments as their writer would, and make sure the broker took each."""
    producer = Producer(kafka_config)
    failed: list[Any] = []
    for record in records:
        producer.produce(**record, on_delivery=lambda error, _: failed.append(error) if error else None)
    assert producer.flush(30) == 0 and failed == [], failed


def connect(kafka_config: dict[str, Any], dlq: str, offsets: range) -> None:
    """Connect-format dead letters of JSON that did not parse, as the job writes them."""
    try:
        json.loads(b"{bad")
    except ValueError as error:
        malformed = error
    failures = [
        Failure(
            SourceRecord("orders", 0, o, RECENT_MS + o, key=b"k", value=b"{bad"),
            Stage.VALUE_CONVERTER,
            malformed,
            "airflow_kerr.spark.stages.JsonConverter",
        )
        for o in offsets
    ]
    assert write_connect_dead_letters(kafka_config, dlq, failures) == len(failures)


#: Each writer's dead letters of originals at the given offsets, and the class the sample names them by.
WRITERS: dict[str, tuple[Callable[[str, int], dict[str, Any]], str | None]] = {
    "spring": (lambda dlq, o: spring_dlt(original(o), dlt_topic=dlq), SPRING_CAUSE),
    "schema_registry": (
        lambda dlq, o: schema_registry_rule(
            Original("orders", 0, o, 0, avro_wire(1, b"k"), avro_wire(2, b"\x06ssn")), dlq_topic=dlq
        ),
        "rule:checkSsnLen",
    ),
    "kip_1191": (lambda dlq, o: kip_1191(original(o), dlq_topic=dlq), None),
    "streams": (lambda dlq, o: streams_bakdata(original(o), dlq_topic=dlq), STREAMS_ERROR),
    "header_less": (lambda dlq, o: header_less(original(o), dlq_topic=dlq), None),
}


def write(kafka_config: dict[str, Any], writer: str, dlq: str, offsets: range) -> None:
    if writer == "connect":
        connect(kafka_config, dlq, offsets)
    else:
        produce(kafka_config, [WRITERS[writer][0](dlq, o) for o in offsets])


def named(writer: str) -> str | None:
    return JSON_ERROR if writer == "connect" else WRITERS[writer][1]


# ------------------------------------------------------------------------------------------------ the sensor


@pytest.mark.parametrize("writer", ["connect", *WRITERS])
def test_every_writers_dead_letters_trip_the_dlq_sensor_as_connects_do(
    writer: str,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    kafka_connection: str,
) -> None:
    """The same pokes over the same counts trip the sensor for each writer; its sample names what failed."""
    dlq = create_topic(f"{unique_topic}.dlq")
    write(kafka_config, writer, dlq, range(0, 4))  # before the task started: not counted
    sensor = DeadLetterQueueSensor(task_id="dlq", topic=dlq, min_records=3, sample_size=2)

    assert sensor.poke({}) is False
    write(kafka_config, writer, dlq, range(4, 6))
    assert sensor.poke({}) is False
    write(kafka_config, writer, dlq, range(6, 7))
    result = sensor.poke({})

    assert isinstance(result, PokeReturnValue) and result.is_done
    xcom = result.xcom_value
    assert isinstance(xcom, dict)
    assert xcom["count"] == 3
    sample = xcom["sample"]
    assert len(sample) == 2 and [item["dlq_offset"] for item in sample] == [6, 5]
    assert all(item["exception_class"] == named(writer) for item in sample), sample
    if writer in ("connect", "spring", "kip_1191", "streams"):
        assert [(i["source_topic"], i["source_partition"], i["source_offset"]) for i in sample] == [
            ("orders", 0, 6),
            ("orders", 0, 5),
        ]
    if writer == "spring":  # the numbers came from Spring's big-endian headers
        assert sample[0]["exception_message"] == "Listener method threw exception; bad order"
        assert sample[0]["stage"] is None


def test_a_deferred_dlq_sensor_resumes_with_spring_dead_letters_named_by_their_root_cause(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, kafka_connection: str
) -> None:
    """The sensor defers to its trigger, the trigger runs in an event loop while Spring dead-letters three
    records, and the task resumes with them counted and named."""
    dlq = create_topic(f"{unique_topic}.dlq")
    sensor = DeadLetterQueueSensor(
        task_id="dlq", topic=dlq, min_records=3, sample_size=3, deferrable=True, poke_interval=POLL_S, timeout=60
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    classpath, kwargs = deferred.value.trigger.serialize()
    module, _, name = classpath.rpartition(".")
    trigger = getattr(importlib.import_module(module), name)(**kwargs)

    async def scenario() -> dict[str, Any]:
        async def first() -> dict[str, Any]:
            async for event in trigger.run():
                return dict(event.payload)
            raise AssertionError("the trigger ended without an event")

        waiting = asyncio.create_task(first())
        await asyncio.to_thread(produce, kafka_config, [spring_dlt(original(o), dlt_topic=dlq) for o in range(3)])
        return await asyncio.wait_for(waiting, 30)

    event = asyncio.run(scenario())
    assert event["status"] == "tripped", event
    result = sensor.execute_complete({}, event)

    assert result["count"] == 3
    assert [item["exception_class"] for item in result["sample"]] == [SPRING_CAUSE] * 3
    assert [item["header_set"] for item in result["sample"]] == ["spring"] * 3, "the sample says which writer"
    assert sorted(item["source_offset"] for item in result["sample"]) == [0, 1, 2]


# ------------------------------------------------------------------------------------------------ the watcher


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> list[CursorStream]:
    """Each watch stream (one poll loop) the manager makes, so a test can see that it looked (never a sleep)."""
    made: list[CursorStream] = []
    init = CursorStream.__init__

    def recording(self: CursorStream, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(CursorStream, "__init__", recording)
    return made


class Triggerer:
    """Airflow's ``SharedStreamManager`` run as the triggerer's runner runs it: each fired event is bound and
    confirmed stored (the metadata database stood in for), so the watch moves on."""

    def __init__(self) -> None:
        self.manager = SharedStreamManager(ack_timeout=30)
        self.fired: list[dict[str, Any]] = []
        self.runs: list[tuple[asyncio.Task[None], int, Any]] = []

    def watch(self, trigger_id: int, trigger: Any) -> None:
        key = trigger.shared_stream_key()
        stream = self.manager.subscribe(trigger_id=trigger_id, trigger=trigger, key=key)

        async def run() -> None:
            async for event in trigger.filter_shared_stream(stream):
                seq = self.manager.bind_pending_event(trigger_id=trigger_id, key=key)
                self.fired.append(event.payload)
                if seq is not None:
                    self.manager.confirm_persisted([seq])

        self.runs.append((asyncio.create_task(run()), trigger_id, key))

    async def until(self, predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            for task, _, _ in self.runs:
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            assert time.monotonic() < deadline, f"{what} within {timeout_s} s (fired so far: {self.fired})"
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        for task, trigger_id, key in self.runs:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.manager.unsubscribe(trigger_id, key)


def test_the_dlq_watcher_fires_for_a_mixed_dlq_and_counts_each_writers_classes(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, kafka_connection: str
) -> None:
    """One DLQ fed by every writer: the asset's watcher fires once for all of them, counts them all, and
    names each by the class the reader gives it (Spring's root cause, Schema Registry's rule)."""
    dlq = create_topic(f"{unique_topic}.dlq")
    asset = dead_letter_queue_asset(dlq, poll_interval=POLL_S, sample_size=3)
    trigger = asset.watchers[0].trigger
    assert isinstance(trigger, DeadLetterQueueEventTrigger)

    async def scenario() -> list[dict[str, Any]]:
        running = Triggerer()
        running.watch(1, trigger)
        try:  # the watch saves where it starts before it counts anything: then the DLQ grows
            await running.until(lambda: bool(group_offsets(kafka_config, trigger.cursor_group, [(dlq, 0)])), "started")
            await asyncio.to_thread(connect, kafka_config, dlq, range(0, 1))
            await asyncio.to_thread(
                produce,
                kafka_config,
                [
                    *(spring_dlt(original(o), dlt_topic=dlq) for o in range(1, 4)),
                    WRITERS["schema_registry"][0](dlq, 4),
                    kip_1191(original(5), dlq_topic=dlq),
                    streams_bakdata(original(6), dlq_topic=dlq),
                    header_less(original(7), dlq_topic=dlq),
                ],
            )
            # Growth seen mid-write comes in more than one event: together they count each record once.
            await running.until(lambda: sum(e["count"] for e in running.fired) >= 8, "events counting all 8")
            return running.fired
        finally:
            await running.stop()

    events = asyncio.run(scenario())

    assert all(e["status"] == "grew" and e["topic"] == dlq for e in events)
    assert sum(e["count"] for e in events) == 8 and sum(e["counts_cover"] for e in events) == 8
    assert [e["baseline"] for e in events[1:]] == [e["ends"] for e in events[:-1]], "no record counted twice"
    counts: Counter[str] = Counter()
    for e in events:
        counts.update(e["counts_by_class"])
    assert counts == {
        SPRING_CAUSE: 3,
        "unknown": 2,  # KIP-1191 and header-less dead letters name no class
        JSON_ERROR: 1,
        "rule:checkSsnLen": 1,
        STREAMS_ERROR: 1,
    }


# ------------------------------------------------------------------------------------------------ the alert


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[Any]]]:
    received: list[Any] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/alerts", received
    server.shutdown()


def guard_notify(dlq: str, url: str) -> Callable[..., dict[str, Any]]:
    """The tolerance guard's own notify task (what runs after the connectors are paused), as its callable."""
    with DAG(f"guard_{dlq}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        tolerance_guard(
            connectors="orders-sink",
            pipeline="orders",
            dlq_topic=dlq,
            max_error_rate=0.05,
            notifier={"webhook_url": url},
        )
    task = dag.get_task("tolerance_guard.notify")
    notify: Callable[..., dict[str, Any]] = task.python_callable  # type: ignore[union-attr]
    return functools.partial(notify, ti=NotifyTaskInstance(dag.dag_id))


@dataclass
class NotifyTaskInstance:
    """What the notify task reads of its task instance: the run it alerts for (its episode key), no XCom."""

    dag_id: str
    run_id: str = "manual__2026-01-01T00:00:00+00:00"
    log_url: str | None = None

    def xcom_pull(self, **_: Any) -> None:
        return None


def test_the_guards_alert_names_spring_dead_letters_by_their_root_cause(
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    kafka_connection: str,
    webhook: tuple[str, list[Any]],
) -> None:
    """The alert reads the DLQ's newest dead letters: Spring's count under the exception their listener threw,
    not under Spring's ListenerExecutionFailedException around it; Connect's and the rule's beside them."""
    dlq = create_topic(f"{unique_topic}.dlq")
    connect(kafka_config, dlq, range(0, 2))
    produce(
        kafka_config,
        [
            *(spring_dlt(original(o), dlt_topic=dlq) for o in range(2, 7)),
            *(
                spring_dlt(original(o), dlt_topic=dlq, cause="java.lang.NullPointerException", cause_message=None)
                for o in range(7, 10)
            ),
            WRITERS["schema_registry"][0](dlq, 10),
        ],
    )
    url, received = webhook

    details = guard_notify(dlq, url)()

    (alert,) = received
    text = alert["blocks"][0]["text"]["text"]
    assert f"Top exceptions: {SPRING_CAUSE} (5), java.lang.NullPointerException (3), {JSON_ERROR} (2)" in text, text
    assert "ListenerExecutionFailedException" not in text, text
    assert f"Dead letter queue: {dlq} (counts above: its newest 11 dead letters)" in text, text
    assert details["top_exception_classes"] == [
        [SPRING_CAUSE, 5],
        ["java.lang.NullPointerException", 3],
        [JSON_ERROR, 2],
    ]
    assert details["sample_size"] == 11 and details["sample_error"] is None


def test_the_guards_alert_on_share_group_dead_letters_quotes_their_messages(
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    kafka_connection: str,
    webhook: tuple[str, list[Any]],
) -> None:
    """KIP-1191 dead letters carry their error context but no exception class: the alert says so and quotes
    their messages, instead of telling the reader to switch on Connect's context headers."""
    dlq = create_topic(f"{unique_topic}.dlq")
    produce(
        kafka_config,
        [
            *(kip_1191(original(o), dlq_topic=dlq) for o in range(0, 3)),
            kip_1191(original(3), dlq_topic=dlq, message="record rejected by the consumer"),
        ],
    )
    url, received = webhook

    guard_notify(dlq, url)()

    (alert,) = received
    text = alert["blocks"][0]["text"]["text"]
    assert "errors.deadletterqueue.context.headers.enable" not in text, text
    assert "the newest 4 dead letters name no exception class or stage" in text, text
    assert "Top messages: delivery attempts exhausted (3), record rejected by the consumer (1)" in text, text


def test_a_tolerance_breach_of_spring_dead_letters_carries_them_named_to_the_alert(
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    kafka_connection: str,
    streams: list[CursorStream],
) -> None:
    """The metrics-free tolerance watch (DLQ growth over a group's consumption) counts Spring's dead letters as
    errors, and its breach event carries them, named, to the alert its DAG sends."""
    source = create_topic(unique_topic)
    dlq = create_topic(f"{unique_topic}.dlq")
    group = f"{unique_topic}-listener"
    asset = tolerance_asset(
        event="breach",
        source="dlq",
        dlq_topic=dlq,
        source_topics=[source],
        consumer_group=group,
        max_errors=4,
        window=60,
        poll_interval=POLL_S,
    )
    trigger = asset.watchers[0].trigger

    def listener_consumed_100_and_dead_lettered_5() -> None:
        consumer = Consumer({**kafka_config, "group.id": group})
        consumer.commit(offsets=[TopicPartition(source, 0, 100)], asynchronous=False)
        consumer.close()
        produce(kafka_config, [spring_dlt(original(o, source), dlt_topic=dlq) for o in range(5)])

    async def scenario() -> dict[str, Any]:
        running = Triggerer()
        running.watch(1, trigger)
        try:
            # The DLQ mode needs a reading before the growth to measure it against: the watch has looked once.
            await running.until(lambda: bool(streams) and streams[0].looks >= 1, "a first reading")
            await asyncio.to_thread(listener_consumed_100_and_dead_lettered_5)
            await running.until(lambda: bool(running.fired), "a breach")
            return running.fired[0]
        finally:
            await running.stop()

    breach = asyncio.run(scenario())

    assert breach["status"] == "breach" and breach["errors"] == 5, breach
    assert [item["exception_class"] for item in breach["sample"]] == [SPRING_CAUSE] * 5
    assert {item["source_topic"] for item in breach["sample"]} == {source}
    sender = ToleranceBreachNotifier(reading=breach, sample=breach["sample"], sample_error=breach["sample_error"])
    text = sender.text(sender.details({}))
    assert f"Top exceptions: {SPRING_CAUSE} (5)" in text, text


def test_the_guards_alert_on_a_mixed_dlq_names_the_classes_and_the_messages_of_the_rest(
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    kafka_connection: str,
    webhook: tuple[str, list[Any]],
) -> None:
    """Spring and KIP-1191 dead letters in one DLQ: the classes the Spring ones name, and what the share-group
    ones say; the counts are of the newest dead letters."""
    dlq = create_topic(f"{unique_topic}.dlq")
    produce(
        kafka_config,
        [
            *(spring_dlt(original(o), dlt_topic=dlq) for o in range(0, 2)),
            *(kip_1191(original(o), dlq_topic=dlq) for o in range(2, 5)),
        ],
    )
    url, received = webhook

    guard_notify(dlq, url)()

    (alert,) = received
    text = alert["blocks"][0]["text"]["text"]
    assert f"Top exceptions: {SPRING_CAUSE} (2)" in text, text
    assert "Top messages of those without an exception class: delivery attempts exhausted (3)" in text, text
    assert "unknown" not in text and "errors.deadletterqueue.context.headers.enable" not in text, text
    assert f"Dead letter queue: {dlq} (counts above: its newest 5 dead letters)" in text, text
