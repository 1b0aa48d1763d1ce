"""A breach is seen while the job's task still runs: its interim metrics records, against a real broker and Spark.

What is real: the broker, ``spark-submit`` of the job (one task over one partition), the records the
task publishes, and :class:`~airflow_kerr.sensors.tolerance.ToleranceSensor` poking them. What is
arranged: a transformation fails every record from ``BAD_FROM`` on and holds the task at the last
record while a flag file exists, so the task is provably still running (no final record can exist)
when the sensor trips; then the flag goes and the task ends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_kerr.kafka.metrics_topic import read_metrics_records
from airflow_kerr.kafka.tolerance import ToleranceSpec, ToleranceWatch, metrics_window
from airflow_kerr.sensors.tolerance import ToleranceSensor
from airflow_kerr.spark import job
from airflow_kerr.spark.spec import PipelineSpec

pytestmark = pytest.mark.spark

RECORDS = 301
BAD_FROM = 200
HOLD_MODULE = """
import os
import time
from pathlib import Path


def fail_then_hold(record):
    \"\"\"Records from BAD_FROM on fail; the last one holds the task while the flag file exists (at most 240 s).\"\"\"
    n = record.value["n"]
    if n == RECORDS - 1:
        flag = Path(os.environ["KERR_TEST_HOLD_FLAG"])
        deadline = time.monotonic() + 240
        while flag.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return record
    if n >= BAD_FROM:
        raise ValueError(f"poison record {n}")
    return record
"""


@pytest.fixture
def kafka_connection(kafka_config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    return "kafka_default"


def test_a_breach_is_seen_from_interim_records_while_the_task_runs_and_counted_once_after(
    kafka_config: dict[str, Any],
    kafka_connection: str,
    create_topic: Callable[..., str],
    unique_topic: str,
    tmp_path: Path,
    java_home: str,
) -> None:
    topic = create_topic(unique_topic, partitions=1)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    producer = Producer(kafka_config)
    for n in range(RECORDS):
        producer.produce(topic, value=json.dumps({"n": n}).encode())
    assert producer.flush(30) == 0
    module = HOLD_MODULE.replace("BAD_FROM", str(BAD_FROM)).replace("RECORDS", str(RECORDS))
    (tmp_path / "kerr_test_live.py").write_text(textwrap.dedent(module))
    flag = tmp_path / "hold"
    flag.touch()
    spec = PipelineSpec.from_dict(
        {
            "name": topic,
            "source": {"topics": [topic], "group_id": f"{topic}-g"},
            "value_converter": "json",
            "transformations": ["kerr_test_live.fail_then_hold"],
            "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
            "kafka": kafka_config,
            "metrics_topic": f"{topic}.metrics",
            "metrics_interval_ms": 200,
            "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{topic}.dlq"},
        }
    )
    (tmp_path / "spec.json").write_text(spec.to_json())
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, "KERR_TEST_HOLD_FLAG": str(flag)}
    command = [
        str(Path(sys.executable).parent / "spark-submit"),
        *("--master", "local[1]", "--conf", "spark.ui.enabled=false"),
        *(job.__file__, "--spec-file", str(tmp_path / "spec.json"), "--run-id", "live"),
    ]
    sensor = ToleranceSensor(
        task_id="live_breach",
        pipeline=topic,
        metrics_topic=f"{topic}.metrics",
        window=600,
        max_error_rate=0.1,
        min_records=100,
    )

    def run_records() -> list[dict[str, Any]]:
        return read_metrics_records(kafka_config, f"{topic}.metrics", 0, lambda r: r.get("run_id") == "live")

    log_path = tmp_path / "job.log"
    with open(log_path, "wb") as log:
        submitted = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        result: Any = False
        while not result:
            assert submitted.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the sensor saw no breach while the task was held"
            result = sensor.poke({})
            time.sleep(0.2)
        # The sensor tripped while the task was held at its last record: no final record can exist yet.
        seen = run_records()
        assert submitted.poll() is None and flag.exists()
        assert seen and all(r["interim"] and r["state"] == "running" for r in seen), seen
        reading = result.xcom_value
        assert (reading["records_in"], reading["errors"]) == (RECORDS, RECORDS - 1 - BAD_FROM)
    finally:
        flag.unlink(missing_ok=True)
    assert submitted.wait(timeout=240) == 0, log_path.read_text()[-3000:]

    records = run_records()
    tasks = [r for r in records if r["scope"] == "task"]
    final = [r for r in tasks if not r["interim"]]
    assert len(final) == 1 and final[0]["state"] == "success"
    assert {r["attempt"] for r in tasks} == {final[0]["attempt"]}
    assert final[0]["seq"] == max(r["seq"] for r in tasks) and len(tasks) > 1
    # Interim and final records of the task are all in the window: the task's input counts once.
    after = metrics_window(kafka_config, f"{topic}.metrics", topic, window_ms=600_000)
    assert (after.records_in, after.errors) == (RECORDS, RECORDS - 1 - BAD_FROM)


def test_a_watch_waiting_on_the_metrics_topic_takes_a_record_written_meanwhile_on_the_same_consumer(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """The watchers wait on the topic instead of looking every poll interval: the look under way returns
    with the record written while it waited, read by the consumer that read the window before."""
    topic = create_topic(f"{unique_topic}.metrics")
    producer = Producer(kafka_config)

    def task_record(attempt: str, records_in: int, errors: int) -> None:
        record = {
            "pipeline": "p",
            "run_id": "r",
            "scope": "task",
            "attempt": attempt,
            "seq": 0,
            "interim": True,
            "state": "running",
            "window_end_ms": int(time.time() * 1000),
            "records_in": records_in,
            "total-record-errors": errors,
        }
        producer.produce(topic, key=b"p", value=json.dumps(record).encode())
        assert producer.flush(30) == 0

    task_record("a1", 200, 0)
    watch = ToleranceWatch(kafka_config, "breach", ToleranceSpec(max_error_rate=0.1, pipeline="p", metrics_topic=topic))
    try:
        holds, first = watch.check()
        assert not holds and first is not None and first.records_in == 200
        found: list[Any] = []
        waiting = threading.Thread(target=lambda: found.append(watch.check(wait_s=120)))
        waiting.start()
        task_record("a2", 200, 100)
        waiting.join()
        holds, reading = found[0]
        assert holds and reading is not None and (reading.records_in, reading.errors) == (400, 100)
        assert watch.follower is not None and watch.follower.opens == 1
    finally:
        watch.close()


def test_the_watcher_pauses_the_sink_with_the_client_it_prepared_when_the_watch_opened(
    kafka_config: dict[str, Any],
    kafka_connection: str,
    create_topic: Callable[..., str],
    unique_topic: str,
    connect_worker: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real broker, real Kafka Connect: the tolerance watcher's stream reads the Connect connection and makes
    its client when it opens, and the breach's pause goes through that same client to a PAUSED connector."""
    from airflow_kerr.local.connect_worker import connector_config
    from airflow_kerr.triggers.tolerance_events import ToleranceTransitionStream

    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT",
        json.dumps(
            {"conn_type": "kafka_connect", "host": connect_worker.host, "port": connect_worker.port, "schema": "http"}
        ),
    )
    metrics = create_topic(f"{unique_topic}.metrics")
    sink_topic = create_topic(f"{unique_topic}.clean")
    connector = f"sink-{unique_topic}"[:60]
    connect_worker.add_connector(connector, connector_config(sink_topic, str(tmp_path / "sink.jsonl")))
    stream = ToleranceTransitionStream(
        spec=ToleranceSpec(max_errors=10, min_records=0, pipeline="p", metrics_topic=metrics),
        cursor_group=f"{unique_topic}-cursor",
        kafka_config_id=kafka_connection,
        poll_interval=1.0,
        pause_on_breach=[connector],
    )
    try:
        stream.open()
        prepared = stream.pauser._hook
        assert prepared is not None, "the Connect client was not made when the watch opened"
        producer = Producer(kafka_config)
        record = {"pipeline": "p", "scope": "task", "attempt": "a", "seq": 0, "interim": True, "state": "running"}
        record |= {"window_end_ms": int(time.time() * 1000), "records_in": 100, "total-record-errors": 11}
        producer.produce(metrics, key=b"p", value=json.dumps(record).encode())
        assert producer.flush(30) == 0

        [(event, _)] = stream.observe()

        assert event["status"] == "breach"
        assert event["paused_on_breach"][connector]["error"] is None
        assert event["paused_on_breach"][connector]["asked_at_ms"] is not None
        assert stream.pauser._hook is prepared, "the pause did not go through the prepared client"
        deadline = time.monotonic() + 60
        while connect_worker.status(connector)["connector"]["state"] != "PAUSED":
            assert time.monotonic() < deadline, connect_worker.status(connector)
            time.sleep(0.1)
    finally:
        stream.pauser.close()
        if stream._watch is not None:
            stream._watch.close()
        if stream._cursor is not None:
            stream._cursor.close()
        connect_worker.rest("DELETE", f"/connectors/{connector}")
