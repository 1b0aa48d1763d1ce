"""DLQ and tolerance sensors, their triggers and the breach notifier, against the real broker and real Spark metrics."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSensorTimeout, TaskDeferred
from confluent_kafka import Producer

from airflow_kerr.errors import ErrorMetrics, SourceRecord, Stage
from airflow_kerr.examples.orders import generate_orders
from airflow_kerr.kafka.metrics_topic import InputRange, input_range_fields, read_metrics_records
from airflow_kerr.kafka.tolerance import ToleranceSpec, ToleranceWatch, metrics_window
from airflow_kerr.local.dead_letters import Failure
from airflow_kerr.local.dead_letters import write_dead_letters as write_failures
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier
from airflow_kerr.sensors.dead_letter_queue import DeadLetterQueueSensor
from airflow_kerr.sensors.tolerance import ToleranceSensor
from airflow_kerr.spark import job
from airflow_kerr.spark.driver import run_job
from airflow_kerr.spark.spec import PipelineSpec
from airflow_kerr.triggers.dead_letter_queue import DeadLetterQueueTrigger
from airflow_kerr.triggers.tolerance import ToleranceTrigger
from tests.clock import RECENT_MS

#: An hour ago: the records keep a real event time, well inside the broker's retention (7 days), which
#: deletes a record whose timestamp is older (noida-db within a second of the write; Apache Kafka within 5 min).


@pytest.fixture
def kafka_connection(kafka_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    return "kafka_default"


def write_dead_letters(kafka_config: dict[str, Any], dlq: str, source: str, count: int) -> None:
    """``count`` records of ``source`` that failed to parse as JSON, in the DLQ as the job writes them."""
    try:
        json.loads(b"{bad")
    except ValueError as error:
        malformed = error
    records = (SourceRecord(source, 0, o, RECENT_MS + o, key=b"k", value=b"{bad") for o in range(count))
    failures = (
        Failure(r, Stage.VALUE_CONVERTER, malformed, "airflow_kerr.spark.stages.JsonConverter") for r in records
    )
    assert write_failures(kafka_config, dlq, failures) == count


def poke_once(sensor: Any) -> Any:
    return sensor.poke({})


def test_dlq_sensor_trips_on_growth_since_task_start_with_a_parsed_sample(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, kafka_connection: str
) -> None:
    dlq = create_topic(f"{unique_topic}.dlq", partitions=2)
    write_dead_letters(kafka_config, dlq, "orders", 4)
    sensor = DeadLetterQueueSensor(task_id="dlq", topic=dlq, min_records=3, sample_size=2)

    assert poke_once(sensor) is False
    write_dead_letters(kafka_config, dlq, "orders", 2)
    assert poke_once(sensor) is False
    write_dead_letters(kafka_config, dlq, "orders", 1)
    result = poke_once(sensor)

    assert result.is_done and result.xcom_value["count"] == 3
    sample = result.xcom_value["sample"]
    assert len(sample) == 2
    assert sample[0]["stage"] == "VALUE_CONVERTER"
    assert sample[0]["exception_class"] == "json.decoder.JSONDecodeError"
    assert sample[0]["source_topic"] == "orders" and sample[0]["source_partition"] == 0


def test_dlq_sensor_counts_what_a_group_has_not_consumed(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, kafka_connection: str
) -> None:
    dlq = create_topic(f"{unique_topic}.dlq")
    write_dead_letters(kafka_config, dlq, "orders", 5)
    sensor = DeadLetterQueueSensor(task_id="dlq", topic=dlq, since="group:never-read", min_records=5)
    assert poke_once(sensor).xcom_value["count"] == 5
    explicit = DeadLetterQueueSensor(task_id="dlq2", topic=dlq, since={0: 3}, min_records=3)
    assert poke_once(explicit) is False


def test_dlq_sensor_rejects_bad_arguments_naming_them() -> None:
    with pytest.raises(ValueError, match=r"since='yesterday'"):
        DeadLetterQueueSensor(task_id="a", topic="d", since="yesterday")
    with pytest.raises(ValueError, match=r"min_records=0"):
        DeadLetterQueueSensor(task_id="b", topic="d", min_records=0)
    with pytest.raises(ValueError, match="mode='reschedule'"):
        DeadLetterQueueSensor(task_id="c", topic="d", mode="reschedule")


@pytest.mark.parametrize(
    "trigger",
    [
        DeadLetterQueueTrigger(topic="orders.dlq", baseline={"0": 4, "1": 0}, min_records=3, poll_interval=2.0),
        ToleranceTrigger(
            spec=ToleranceSensor(
                task_id="t", pipeline="orders", max_error_rate=0.05, min_records=10, window=60
            ).tolerance_spec(),
            poll_interval=1.0,
        ),
    ],
)
def test_triggers_serialize_to_a_classpath_and_plain_kwargs(trigger: Any) -> None:
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert json.loads(json.dumps(kwargs)) == kwargs


async def _first_event(trigger: Any, timeout: float) -> Any:
    async def first() -> Any:
        async for event in trigger.run():
            return event.payload

    return await asyncio.wait_for(first(), timeout)


def test_dlq_trigger_fires_without_blocking_the_event_loop(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, kafka_connection: str
) -> None:
    dlq = create_topic(f"{unique_topic}.dlq")
    trigger = DeadLetterQueueTrigger(topic=dlq, baseline={"0": 0}, min_records=2, poll_interval=0.2)

    async def scenario() -> tuple[Any, int]:
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        beat = asyncio.create_task(heartbeat())
        waiting = asyncio.create_task(_first_event(trigger, 30))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(write_dead_letters, kafka_config, dlq, "orders", 2)
        event = await waiting
        beat.cancel()
        return event, ticks

    event, ticks = asyncio.run(scenario())
    assert event["status"] == "tripped" and event["result"]["count"] == 2
    assert ticks >= 15, "the event loop was blocked while the trigger polled"


def test_deferred_sensors_time_out_on_their_triggers_deadline_with_an_explanation(
    create_topic: Callable[..., str], unique_topic: str, kafka_connection: str
) -> None:
    dlq = DeadLetterQueueSensor(
        task_id="dlq",
        topic=create_topic(f"{unique_topic}.dlq"),
        min_records=5,
        deferrable=True,
        timeout=0.5,
        poke_interval=0.1,
    )
    breach = ToleranceSensor(
        task_id="breach",
        pipeline="orders",
        metrics_topic=create_topic(f"{unique_topic}.metrics"),
        max_errors=0,
        deferrable=True,
        timeout=0.5,
        poke_interval=0.1,
    )
    for sensor, message in ((dlq, "gained only 0 of 5 records"), (breach, "no breach within the timeout")):
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute({})
        classpath, kwargs = deferred.value.trigger.serialize()
        assert kwargs["deadline"] is not None
        assert deferred.value.timeout is not None and deferred.value.timeout.total_seconds() > 60, "only a backstop"
        module, _, name = classpath.rpartition(".")
        event = asyncio.run(_first_event(getattr(importlib.import_module(module), name)(**kwargs), 30))
        assert event["status"] == "timeout"
        with pytest.raises(AirflowSensorTimeout, match=message):
            sensor.execute_complete({}, event)


@pytest.fixture
def orders_metrics(
    spark: Any, kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> Callable[..., str]:
    """Run the real job over a fresh batch of orders and return the metrics topic."""
    topic = create_topic(unique_topic, partitions=2)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)

    def run(count: int, malformed_every: int) -> str:
        generate_orders(kafka_config, topic, count, malformed_every=malformed_every, invalid_every=0, flaky_every=0)
        spec = PipelineSpec.from_dict(
            {
                "name": topic,
                "source": {"topics": [topic], "group_id": f"{topic}-g"},
                "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
                "kafka": kafka_config,
                "metrics_topic": f"{topic}.metrics",
                "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{topic}.dlq"},
            }
        )
        run_job(spark, spec, run_id=f"run-{count}-{malformed_every}")
        return topic

    return run


@pytest.mark.spark
def test_tolerance_sensor_breach_needs_enough_records_then_trips(
    kafka_config: dict[str, Any], orders_metrics: Callable[..., str], kafka_connection: str
) -> None:
    topic = orders_metrics(40, malformed_every=4)
    sensor = ToleranceSensor(
        task_id="breach",
        pipeline=topic,
        metrics_topic=f"{topic}.metrics",
        window=300,
        max_error_rate=0.05,
        min_records=100,
    )
    assert poke_once(sensor) is False, "40 records are under min_records=100: no breach yet"

    orders_metrics(200, malformed_every=4)
    result = poke_once(sensor)

    assert result.is_done
    reading = result.xcom_value
    assert reading["records_in"] == 240 and reading["errors"] == 60
    assert reading["error_rate"] == pytest.approx(0.25)
    assert reading["max_error_rate"] == 0.05 and reading["pipeline"] == topic


@pytest.mark.spark
def test_tolerance_sensor_recovery_after_clean_records(
    kafka_config: dict[str, Any], orders_metrics: Callable[..., str], kafka_connection: str
) -> None:
    topic = orders_metrics(200, malformed_every=0)
    recovery = ToleranceSensor(
        task_id="recovery",
        pipeline=topic,
        metrics_topic=f"{topic}.metrics",
        window=300,
        max_error_rate=0.05,
        min_records=100,
        wait_for="recovery",
    )
    result = poke_once(recovery)
    assert result.is_done and result.xcom_value["errors"] == 0


def task_metrics_record(
    pipeline: str, run_id: str, source: str, partition: int, start: int, end: int, errors: int
) -> dict[str, Any]:
    """A task's metrics record as the job writes it: the counters, the window, the range ``[start, end)`` it read."""
    counters = ErrorMetrics(
        total_record_failures=errors, total_record_errors=errors, total_records_skipped=errors, records_in=end - start
    )
    now_ms = int(time.time() * 1000)
    record = counters.to_record(
        pipeline=pipeline, task=0, run_id=run_id, window_start_ms=now_ms - 500, window_end_ms=now_ms
    )
    return {
        **record,
        "scope": "task",
        "state": "success",
        "records_out": end - start - errors,
        "source": f"{source}-{partition}",
        **input_range_fields(source, partition, start, end - 1),
    }


def write_metrics(kafka_config: dict[str, Any], topic: str, records: list[dict[str, Any]]) -> None:
    """Write metrics records one after the other, keyed by pipeline as the job writes them."""
    producer = Producer(kafka_config)
    for record in records:
        producer.produce(topic, key=record["pipeline"].encode(), value=json.dumps(record).encode())
        assert producer.flush(10) == 0
        time.sleep(0.002)


def test_a_killed_runs_metrics_are_counted_once_with_the_reruns(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, kafka_connection: str
) -> None:
    """The exact records a run killed before its commit leaves on a real metrics topic: its finished tasks'
    records, no run record. The rerun reads the same offsets again (split differently) plus what arrived
    since, and writes its own. Each input counts once, as the rerun counted it, and no breach is reported."""
    metrics = create_topic(f"{unique_topic}.metrics")
    pipeline, source = unique_topic, f"{unique_topic}.src"
    killed = [
        task_metrics_record(pipeline, "killed", source, 0, 0, 300, errors=6),
        task_metrics_record(pipeline, "killed", source, 1, 0, 150, errors=3),
    ]
    rerun = [
        task_metrics_record(pipeline, "rerun", source, 0, 0, 200, errors=4),
        task_metrics_record(pipeline, "rerun", source, 0, 200, 400, errors=4),
        task_metrics_record(pipeline, "rerun", source, 1, 0, 400, errors=8),
    ]
    run_record = {
        **ErrorMetrics(total_record_errors=16, records_in=800).to_record(
            pipeline=pipeline, task=None, run_id="rerun", window_start_ms=0, window_end_ms=int(time.time() * 1000)
        ),
        "scope": "run",
        "state": "success",
    }
    write_metrics(kafka_config, metrics, [*killed, *rerun, run_record])
    breach = ToleranceSensor(
        task_id="breach", pipeline=pipeline, metrics_topic=metrics, window=300, max_errors=16, min_records=0
    )

    assert poke_once(breach) is False, "the killed run's records were counted again: a breach that did not happen"
    reading = breach.watch().read()
    assert reading is not None and (reading.records_in, reading.errors) == (800, 16)


HOLD_MODULE = """
import os
import time
from pathlib import Path


def hold_partition_one(record):
    \"\"\"Hold partition 1's task while the flag file exists, so the run is killed with that task unfinished.

    Released (flag gone, or 120 s passed), a held worker exits without writing anything, as a killed one would.
    \"\"\"
    flag = Path(os.environ["KERR_TEST_HOLD_FLAG"])
    if record.partition != 1 or not flag.exists():
        return record
    deadline = time.monotonic() + 120
    while flag.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os._exit(1)
"""


@pytest.mark.spark
def test_a_spark_submit_killed_mid_run_is_not_counted_twice(
    spark: Any,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    tmp_path: Path,
    java_home: str,
) -> None:
    """What is real: the broker, ``spark-submit`` of the job, its metrics records, and SIGKILL of the whole
    spark-submit process group once the first task's metrics record is on the topic. What is arranged: a
    transformation holds partition 1's task, so the kill always lands between one finished task and one
    unfinished one (no run record, no commit). The rerun (the same pipeline in the test session's Spark: the
    state the kill left is what it must meet) reads everything again; the tolerance window then counts each
    source record once."""
    topic = create_topic(unique_topic, partitions=2)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    generated = generate_orders(kafka_config, topic, 400, malformed_every=20, invalid_every=0, flaky_every=0)
    (tmp_path / "kerr_test_hold.py").write_text(textwrap.dedent(HOLD_MODULE))
    flag = tmp_path / "hold"
    flag.touch()
    pipeline = {
        "name": topic,
        "source": {"topics": [topic], "group_id": f"{topic}-g"},
        "value_converter": "json",
        "transformations": ["kerr_test_hold.hold_partition_one"],
        "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
        "kafka": kafka_config,
        "metrics_topic": f"{topic}.metrics",
        "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{topic}.dlq"},
    }
    spec = PipelineSpec.from_dict(pipeline)
    (tmp_path / "spec.json").write_text(spec.to_json())
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, "KERR_TEST_HOLD_FLAG": str(flag)}

    def submit(run_id: str, **popen: Any) -> subprocess.Popen[bytes]:
        command = [
            str(Path(sys.executable).parent / "spark-submit"),
            *("--master", "local[2]", "--conf", "spark.ui.enabled=false"),
            *(job.__file__, "--spec-file", str(tmp_path / "spec.json"), "--run-id", run_id),
        ]
        return subprocess.Popen(command, env=env, **popen)

    def finished_task_records(run_id: str) -> list[dict[str, Any]]:
        found = read_metrics_records(kafka_config, f"{topic}.metrics", 0, lambda r: r.get("run_id") == run_id)
        return [r for r in found if r.get("scope") == "task" and r.get("state") == "success"]

    with open(tmp_path / "killed.log", "wb") as log:
        killed = submit("killed", stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not finished_task_records("killed"):  # the held task's interim records come first
            assert killed.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no task of the killed run finished in time"
            time.sleep(0.5)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        flag.unlink()
    # Left behind: the finished tasks' records, and maybe a failed one from a worker that saw the driver die.
    left = read_metrics_records(kafka_config, f"{topic}.metrics", 0, lambda r: r.get("run_id") == "killed")
    finished = [r for r in left if r["state"] == "success"]
    assert finished and all(r["scope"] == "task" for r in left), f"no finished task, or a run record: {left}"
    assert all(InputRange.of(r) is not None for r in left if r["records_in"]), (
        f"the job's task records name no input range; it must add {sorted(input_range_fields('t', 0, 0, 0))}: {left}"
    )
    assert sum(r["records_in"] for r in finished) < generated.total, "the kill did not land mid-run"

    # The rerun: the same pipeline less the hold (a pass-through once its flag is gone), in this session's Spark.
    run_job(spark, PipelineSpec.from_dict({**pipeline, "transformations": []}), run_id="rerun")

    reading = metrics_window(kafka_config, f"{topic}.metrics", topic, window_ms=600_000)
    assert (reading.records_in, reading.errors) == (generated.total, generated.bad)
    assert not reading.breaches(max_error_rate=None, max_errors=generated.bad, min_records=0)


def test_metrics_free_mode_divides_dlq_growth_by_group_consumption(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    source = create_topic(unique_topic)
    dlq = create_topic(f"{unique_topic}.dlq")
    watch = ToleranceWatch(
        kafka_config=kafka_config,
        wait_for="breach",
        spec=ToleranceSpec(
            window_ms=60_000,
            max_error_rate=0.1,
            min_records=50,
            source="dlq",
            dlq_topic=dlq,
            source_topics=(source,),
            group_id=f"{unique_topic}-sink",
        ),
    )
    assert watch.check() == (False, None)
    consumer = Consumer({**kafka_config, "group.id": f"{unique_topic}-sink"})
    consumer.commit(offsets=[TopicPartition(source, 0, 100)], asynchronous=False)
    consumer.close()
    write_dead_letters(kafka_config, dlq, source, 20)

    holds, reading = watch.check()

    assert holds and reading is not None
    assert (reading.records_in, reading.errors) == (100, 20)


class _Receiver(BaseHTTPRequestHandler):
    received: list[Any] = []
    fail_first: int = 0

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).received.append(body)
        failing = len(type(self).received) <= type(self).fail_first
        self.send_response(503 if failing else 200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def webhook() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type("Receiver", (_Receiver,), {"received": [], "fail_first": 0})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hook", handler
    server.shutdown()


BREACH = {
    "pipeline": "orders_pipeline",
    "error_rate": 0.25,
    "max_error_rate": 0.05,
    "errors": 60,
    "max_errors": None,
    "records_in": 240,
    "window_s": 300,
    "dlq_topic": "orders.dlq",
}
SAMPLE = [
    {"stage": "VALUE_CONVERTER", "exception_class": "json.decoder.JSONDecodeError"},
    {"stage": "VALUE_CONVERTER", "exception_class": "json.decoder.JSONDecodeError"},
    {"stage": "TRANSFORMATION", "exception_class": "airflow_kerr.examples.orders.InvalidOrder"},
]


def test_notifier_posts_a_slack_compatible_breach_message(webhook: tuple[str, type[_Receiver]]) -> None:
    url, receiver = webhook
    ToleranceBreachNotifier(webhook_url=url, reading=BREACH, sample=SAMPLE).notify({})

    (payload,) = receiver.received
    assert payload["text"].startswith("Tolerance breached in pipeline orders_pipeline: error rate 25.00%")
    assert payload["blocks"][0]["type"] == "section"
    assert "Dead letter queue: orders.dlq" in payload["blocks"][0]["text"]["text"]
    details = payload["kerr"]
    assert details["event"] == "tolerance_breach"
    assert details["top_exception_classes"][0] == ["json.decoder.JSONDecodeError", 2]
    assert details["top_stages"] == [["VALUE_CONVERTER", 2], ["TRANSFORMATION", 1]]


def test_a_failing_webhook_is_retried_then_logged_never_raised(webhook: tuple[str, type[_Receiver]]) -> None:
    url, receiver = webhook
    receiver.fail_first = 5
    notifier = ToleranceBreachNotifier(webhook_url=url, reading=BREACH, webhook_attempts=3, webhook_backoff_s=0.01)
    notifier.notify({})
    assert len(receiver.received) == 3

    receiver.fail_first = 1
    receiver.received.clear()
    assert notifier.send_webhook(notifier.payload(notifier.details({}))) is True
    assert len(receiver.received) == 2


def test_notifier_to_an_unreachable_webhook_does_not_raise() -> None:
    notifier = ToleranceBreachNotifier(
        webhook_url="http://127.0.0.1:9/nothing", reading=BREACH, webhook_attempts=2, webhook_backoff_s=0.01
    )
    notifier.notify({})
