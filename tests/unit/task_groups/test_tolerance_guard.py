"""tolerance_guard's arguments: the TaskGroup id and the Kafka consumer group cannot be mistaken for each other."""

from __future__ import annotations

from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_kerr.sensors.tolerance import ToleranceSensor
from airflow_kerr.task_groups.tolerance_guard import tolerance_guard

DLQ_GUARD: dict[str, Any] = {
    "connectors": "orders-sink",
    "source": "dlq",
    "dlq_topic": "orders.dlq",
    "source_topics": ["orders"],
    "max_errors": 10,
}


def a_dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))


def test_group_id_names_the_task_group_and_consumer_group_the_kafka_group() -> None:
    with a_dag("guard_names") as dag:
        group = tolerance_guard(group_id="orders_guard", consumer_group="connect-orders-sink", **DLQ_GUARD)

    assert group.group_id == "orders_guard"
    for task_id in ("orders_guard.wait_for_breach", "orders_guard.wait_for_recovery"):
        sensor = dag.get_task(task_id)
        assert isinstance(sensor, ToleranceSensor)
        assert sensor.group_id == "connect-orders-sink"


def test_a_dlq_guard_without_consumer_group_says_which_argument_is_missing() -> None:
    with a_dag("guard_no_consumer_group"), pytest.raises(ValueError, match=r"consumer_group .* is required") as raised:
        tolerance_guard(group_id="orders_guard", **DLQ_GUARD)
    assert "group_id ('orders_guard') is the TaskGroup's id" in str(raised.value)


def test_an_unknown_keyword_is_refused_by_name() -> None:
    with a_dag("guard_unknown"), pytest.raises(TypeError, match="unexpected keyword argument 'consumer_group_id'"):
        tolerance_guard(consumer_group_id="connect-orders-sink", **DLQ_GUARD)  # type: ignore[call-arg]
