"""End to end: a paused connector stops consuming (its group lag grows) and catches up after resume.

Lag is measured independently of the stand-in: records produced (one flush
each) minus the group's committed offset read with the Kafka AdminClient.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from airflow_kerr.local.connect import ConnectStandIn
from airflow_kerr.operators.connector_control import PauseConnectorOperator, ResumeConnectorOperator

# A stall shows up as a failure with every thread's stack, not as a slow run.
pytestmark = pytest.mark.timeout(90)


def committed_offset(admin: AdminClient, group: str, topic: str) -> int:
    request = ConsumerGroupTopicPartitions(group)
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=15)
    offsets = [tp.offset for tp in result.topic_partitions or [] if tp.topic == topic and tp.offset >= 0]
    return sum(offsets)


def test_paused_connector_stops_consuming_and_catches_up_after_resume(
    connect_conn: str,
    connect: ConnectStandIn,
    sink: Callable[..., tuple[str, str]],
    produce: Callable[..., None],
    kafka_bootstrap: str,
    context: dict[str, Any],
    wait_until: Callable[..., Any],
) -> None:
    name, topic = sink()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap, "log_level": 0})
    group = f"connect-{name}"

    def lag(produced: int) -> int:
        return produced - committed_offset(admin, group, topic)

    def lines() -> int:
        path = connect.output_file(name)
        return len(path.read_text().splitlines()) if path.exists() else 0

    produce(topic, [f"before-{i}" for i in range(5)])
    wait_until(lambda: lag(5) == 0, timeout_s=30)
    assert lines() == 5

    PauseConnectorOperator(task_id="pause", connector=name, poll_interval=0.1).execute(context)
    produce(topic, [f"paused-{i}" for i in range(5)])
    time.sleep(2)
    assert lag(10) == 5, "nothing is consumed while paused"
    produce(topic, [f"paused-late-{i}" for i in range(3)])
    time.sleep(1)
    assert lag(13) == 8, "the lag grows while paused"
    assert lines() == 5

    ResumeConnectorOperator(task_id="resume", connector=name, poll_interval=0.1).execute(context)
    wait_until(lambda: lag(13) == 0, timeout_s=30)
    wait_until(lambda: lines() == 13)
    values = [line for line in connect.output_file(name).read_text().splitlines() if '"paused-late-2"' in line]
    assert len(values) == 1, "each record is written once"


DAG_FILE = """
import datetime

from airflow.sdk import DAG, Param

from airflow_kerr.operators.connector_control import PauseConnectorOperator, ResumeConnectorOperator
from airflow_kerr.sensors.connector_state import ConnectorStateSensor

with DAG(
    "kerr_connect_control_test",
    schedule=None,
    start_date=datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc),
    params={"connector": Param("", type="string")},
) as dag:
    pause = PauseConnectorOperator(
        task_id="pause", connector="{{ params.connector }}", deferrable=True, poll_interval=0.2, wait_timeout=30
    )
    paused = ConnectorStateSensor(
        task_id="paused",
        connector="{{ params.connector }}",
        target_state="PAUSED",
        deferrable=True,
        poke_interval=0.2,
        timeout=30,
    )
    resume = ResumeConnectorOperator(
        task_id="resume", connector_regex="{{ params.connector }}", poll_interval=0.2, wait_timeout=30
    )
    pause >> paused >> resume
"""


@pytest.mark.airflow
def test_a_dag_pauses_waits_and_resumes_with_deferrable_tasks(
    connect_conn: str,
    connect: ConnectStandIn,
    sink: Callable[..., tuple[str, str]],
    run_dag: Callable[..., dict[str, str | None]],
    write_dag: Callable[[str, str], Any],
) -> None:
    name, _ = sink()
    dag = write_dag("kerr_connect_control_test", DAG_FILE)
    assert run_dag(dag, connector=name) == {"pause": "success", "paused": "success", "resume": "success"}
    assert connect.status(name)["connector"]["state"] == "RUNNING"
    calls = [(r.method, r.path) for r in connect.requests]
    assert ("PUT", f"/connectors/{name}/pause") in calls
    assert ("PUT", f"/connectors/{name}/resume") in calls


def test_the_stand_in_runs_as_a_process_until_sigterm(kafka_bootstrap: str, tmp_path: Path) -> None:
    """What ``kerr local up`` starts: ``python -m airflow_kerr.local.connect`` prints its URL and serves."""
    from airflow_kerr.local.broker import free_port

    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_kerr.local.connect",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert f"listening on http://127.0.0.1:{port}" in line
        assert "development and tests only" in line
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
