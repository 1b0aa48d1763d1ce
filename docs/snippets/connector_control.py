"""Pause, restart, resume a Kafka Connect connector and wait until it runs, as a DAG file."""

import pendulum
from airflow.sdk import DAG

from airflow_kerr.operators.connector_control import (
    PauseConnectorOperator,
    RestartConnectorOperator,
    ResumeConnectorOperator,
)
from airflow_kerr.sensors.connector_state import ConnectorStateSensor

with DAG(
    dag_id="docs_connector_control",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"connector": "orders-sink"},
):
    pause = PauseConnectorOperator(
        task_id="pause", connector="{{ params.connector }}", deferrable=True, wait_timeout=300
    )
    restart = RestartConnectorOperator(
        task_id="restart_failed", connector="{{ params.connector }}", include_tasks=True, only_failed=True
    )
    resume = ResumeConnectorOperator(task_id="resume", connector_regex="orders-.*", deferrable=True)
    running = ConnectorStateSensor(
        task_id="running", connector="{{ params.connector }}", target_state="RUNNING", deferrable=True, timeout=600
    )
    pause >> restart >> resume >> running
