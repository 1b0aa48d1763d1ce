"""End to end: a paused connector stops consuming (its group lag grows) and catches up after resume.

Real Kafka Connect's FileStreamSink consumes the topic. Lag is measured
independently of Connect: records produced minus the sink group's committed
offset, read with the Kafka AdminClient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from airflow_kerr.operators.connector_control import PauseConnectorOperator, ResumeConnectorOperator

# A stall shows up as a failure with every thread's stack, not as a slow run.
# func_only: the module's worker starts in the first test's setup, bounded by its own start timeout.
pytestmark = pytest.mark.timeout(90, func_only=True)


def committed_offset(admin: AdminClient, group: str, topic: str) -> int:
    request = ConsumerGroupTopicPartitions(group)
    result = admin.list_consumer_group_offsets([request])[group].result(timeout=15)
    offsets = [tp.offset for tp in result.topic_partitions or [] if tp.topic == topic and tp.offset >= 0]
    return sum(offsets)


def test_paused_connector_stops_consuming_and_catches_up_after_resume(
    connect_conn: str,
    connect: Any,
    sink: Callable[..., tuple[str, str]],
    produce: Callable[..., None],
    kafka_bootstrap: str,
    context: Any,
    wait_until: Callable[..., Any],
) -> None:
    name, topic = sink()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap, "log_level": 0})
    group = f"connect-{name}"

    def lag(produced: int) -> int:
        return produced - committed_offset(admin, group, topic)

    def lines() -> int:
        return len(connect.output_lines(name))

    produce(topic, [f"before-{i}" for i in range(5)])
    wait_until(lambda: lag(5) == 0, timeout_s=30)
    assert lines() == 5

    PauseConnectorOperator(task_id="pause", connector=name, poll_interval=0.1).execute(context)
    produce(topic, [f"paused-{i}" for i in range(5)])
    # A running sink on the same topic, on the same worker, reads the records the paused one must not:
    # once it has written them, they were there to be read, and the paused connector's group has not moved.
    sentinel, _ = sink(topic=topic)
    wait_until(lambda: len(connect.output_lines(sentinel)) == 10, timeout_s=30)
    assert lag(10) == 5, "nothing is consumed while paused"
    produce(topic, [f"paused-late-{i}" for i in range(3)])
    wait_until(lambda: len(connect.output_lines(sentinel)) == 13, timeout_s=30)
    assert lag(13) == 8, "the lag grows while paused"
    assert lines() == 5
    assert connect.states(name) == ("PAUSED", ["PAUSED"])

    ResumeConnectorOperator(task_id="resume", connector=name, poll_interval=0.1).execute(context)
    wait_until(lambda: lag(13) == 0, timeout_s=30)
    wait_until(lambda: lines() == 13)
    values = [line for line in connect.output_lines(name) if line == "paused-late-2"]
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
    connect: Any,
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
