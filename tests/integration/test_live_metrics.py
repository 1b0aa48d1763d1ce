"""A breach is seen while the job's task still runs: its interim metrics records, against a real broker and Spark.

What is real: the broker, ``spark-submit`` of the job (one task over one partition), the records the
task publishes, and :class:`~airflow_kerr.sensors.tolerance.ToleranceSensor` poking them. What is
arranged: a transformation fails every record from ``BAD_FROM`` on and holds the task at the last
record while a flag file exists, so the task is provably still running (no final record can exist)
when the sensor trips; then the flag goes and the task ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Callable
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


def started(tasks: list[asyncio.Task[Any]], run: AsyncIterator[Any]) -> asyncio.Task[Any]:
    """A task that runs the watch ``run`` to its next event (kept in ``tasks`` to stop them all at the end)."""

    async def next_event() -> Any:
        return await anext(run)

    tasks.append(asyncio.create_task(next_event()))
    return tasks[-1]


async def stopped(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` as the triggerer cancels a watch whose asset is gone, and wait until it ended."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def connect_connection(monkeypatch: pytest.MonkeyPatch, worker: Any) -> str:
    """``kafka_connect_default`` on the module's real Connect worker, as an environment variable."""
    connection = {"conn_type": "kafka_connect", "host": worker.host, "port": worker.port, "schema": "http"}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT", json.dumps(connection))
    return "kafka_connect_default"


def breach_record(pipeline: str) -> bytes:
    """An interim metrics record of ``pipeline`` over a ``max_errors=10`` limit."""
    record = {"pipeline": pipeline, "scope": "task", "attempt": "a", "seq": 0, "interim": True, "state": "running"}
    record |= {"window_end_ms": int(time.time() * 1000), "records_in": 100, "total-record-errors": 11}
    return json.dumps(record).encode()


def wait_for_paused(worker: Any, connector: str) -> None:
    deadline = time.monotonic() + 60  # a failure bound, not a speed claim
    while worker.status(connector)["connector"]["state"] != "PAUSED":
        assert time.monotonic() < deadline, worker.status(connector)
        time.sleep(0.1)


def test_breach_watches_on_one_connect_connection_share_one_client_and_the_last_closes_it(  # noqa: PLR0915 - one scenario, told in order
    kafka_config: dict[str, Any],
    kafka_connection: str,
    create_topic: Callable[..., str],
    unique_topic: str,
    connect_worker: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two tolerance watchers with ``pause_on_breach`` on one Kafka Connect connection, each run as the
    triggerer runs a watch alone (``run()``: opens and looks in worker threads), on the real broker and the
    real worker: both hold one client; a breach of each pipeline pauses that watch's own connector through it;
    a cancelled watch releases its share while the other keeps the client open; the last one closes it."""
    from airflow_kerr.hooks.breach_pause import _CONNECT_CLIENTS
    from airflow_kerr.local.connect_worker import connector_config
    from airflow_kerr.triggers.tolerance_events import ToleranceEventTrigger, ToleranceTransitionStream
    from airflow_kerr.triggers.watch import CursorStream

    connect_conn = connect_connection(monkeypatch, connect_worker)
    metrics = create_topic(f"{unique_topic}.metrics")
    connectors = {}
    for pipeline in ("p1", "p2"):
        sink_topic = create_topic(f"{unique_topic}.{pipeline}")
        connectors[pipeline] = f"sink-{pipeline}-{unique_topic}"[:60]
        connect_worker.add_connector(connectors[pipeline], connector_config(sink_topic, str(tmp_path / pipeline)))
    made: list[ToleranceTransitionStream] = []
    init = CursorStream.__init__

    def keep(self: CursorStream, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if isinstance(self, ToleranceTransitionStream):
            made.append(self)

    monkeypatch.setattr(CursorStream, "__init__", keep)
    triggers = {
        pipeline: ToleranceEventTrigger(
            spec=ToleranceSpec(max_errors=10, min_records=0, pipeline=pipeline, metrics_topic=metrics),
            kafka_config_id=kafka_connection,
            poll_interval=0.2,
            pause_on_breach=[connector],
            kafka_connect_conn_id=connect_conn,
            cursor_group=f"{unique_topic}-{pipeline}",
            fire_on="breach",
        )
        for pipeline, connector in connectors.items()
    }

    async def until_opened() -> dict[str, ToleranceTransitionStream]:
        deadline = time.monotonic() + 120  # a failure bound, not a speed claim
        while len(made) < 2 or any(s.pauser._hook is None or s._cursor is None for s in made):
            assert time.monotonic() < deadline, "the watches did not open"
            await asyncio.sleep(0.05)
        return {str(stream.spec.pipeline): stream for stream in made}

    async def scenario() -> dict[str, Any]:
        runs = {pipeline: trigger.run() for pipeline, trigger in triggers.items()}
        tasks: list[asyncio.Task[Any]] = []
        try:
            firsts = {p: started(tasks, run) for p, run in runs.items()}
            streams = await until_opened()
            shared = streams["p1"].pauser._hook
            client = shared._client if shared is not None else None
            seen: dict[str, Any] = {"shared": shared, "client": client, "same": streams["p2"].pauser._hook is shared}
            producer = Producer(kafka_config)
            for pipeline in connectors:
                producer.produce(metrics, key=pipeline.encode(), value=breach_record(pipeline))
            assert producer.flush(30) == 0
            events = {p: (await asyncio.wait_for(first, 120)).payload for p, first in firsts.items()}
            seen["paused"] = {p: event["paused_on_breach"] for p, event in events.items()}
            seen["through_shared"] = all(s.pauser._hook is shared for s in streams.values())
            # The watches go on (resumed, looking again) until the triggerer cancels them, one after the other.
            looks = {p: stream.looks for p, stream in streams.items()}
            looking = {p: started(tasks, run) for p, run in runs.items()}
            deadline = time.monotonic() + 60  # a failure bound, not a speed claim
            while any(stream.looks <= looks[p] for p, stream in streams.items()):  # both running, looking again
                assert time.monotonic() < deadline, "the watches did not look again"
                await asyncio.sleep(0.05)
            await stopped(looking["p1"])
            seen["after_one"] = (streams["p1"].pauser._hook, streams["p2"].pauser._hook, client and client.is_closed)
            await stopped(looking["p2"])
            seen["after_both"] = (streams["p2"].pauser._hook, client and client.is_closed)
            seen["left"] = _CONNECT_CLIENTS.held(os.getpid())
            return seen
        finally:  # a failed step leaves no watch running
            for task in tasks:
                await stopped(task)

    try:
        seen = asyncio.run(scenario())
        assert seen["shared"] is not None and seen["client"] is not None, "the watch made no client when it opened"
        assert seen["same"], "two watches on one Connect connection made a client each"
        for pipeline, connector in connectors.items():
            asked = seen["paused"][pipeline]
            assert list(asked) == [connector] and asked[connector]["error"] is None, asked
            assert asked[connector]["asked_at_ms"] is not None
            wait_for_paused(connect_worker, connector)
        assert seen["through_shared"], "a pause did not go through the shared client"
        assert seen["after_one"] == (None, seen["shared"], False), "the cancelled watch took the client with it"
        assert seen["after_both"] == (None, True), "the last watch left the client open"
        assert seen["shared"] not in seen["left"], "the closed client is still handed out"
    finally:
        for connector in connectors.values():
            connect_worker.rest("DELETE", f"/connectors/{connector}")


def test_with_sharing_off_each_breach_watch_pauses_through_a_client_of_its_own(
    connect_worker: Any,
    create_topic: Callable[..., str],
    unique_topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``KERR_SHARED_WATCH_CLIENTS=0``: two pausers on one connection make a client each (as before sharing),
    each pauses through its own on the real worker, and closing one leaves the other's open."""
    from airflow_kerr.hooks.breach_pause import BreachPauser
    from airflow_kerr.local.connect_worker import connector_config

    monkeypatch.setenv("KERR_SHARED_WATCH_CLIENTS", "0")
    connect_conn = connect_connection(monkeypatch, connect_worker)
    connector = f"sink-{unique_topic}"[:60]
    connect_worker.add_connector(
        connector, connector_config(create_topic(f"{unique_topic}.clean"), str(tmp_path / "s"))
    )
    first, second = BreachPauser(connect_conn, [connector]), BreachPauser(connect_conn, [connector])
    try:
        first.prepare()
        second.prepare()
        assert first._hook is not None and second._hook is not None
        own_clients = first._hook._client, second._hook._client
        assert first._hook is not second._hook and own_clients[0] is not own_clients[1]

        asked = [first.pause()[connector], second.pause()[connector]]

        assert all(a["error"] is None and a["asked_at_ms"] is not None for a in asked), asked
        wait_for_paused(connect_worker, connector)
        first.close()
        assert own_clients[0] is not None and own_clients[0].is_closed
        assert own_clients[1] is not None and not own_clients[1].is_closed, "closing one closed the other's client"
    finally:
        first.close()
        second.close()
        connect_worker.rest("DELETE", f"/connectors/{connector}")
