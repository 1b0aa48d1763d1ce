"""Orders on breach: a DAG started by a watched tolerance asset, with one alert per breach."""

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_kerr.assets.events import alert_once_per_breach
from airflow_kerr.assets.watched import tolerance_asset
from airflow_kerr.operators.connector_control import PauseConnectorOperator

BREACH = tolerance_asset(
    event="breach",
    pipeline="orders_pipeline",  # the pipeline's metrics records on kerr.metrics
    dlq_topic="orders.dlq",  # quoted in the alert
    max_error_rate=0.02,
    min_records=100,
    window=timedelta(minutes=5),
    poll_interval=1.0,
)

with DAG(
    dag_id="orders_on_breach",
    schedule=[BREACH],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
):
    PauseConnectorOperator(task_id="pause_connector", connector="orders-sink", poll_interval=0.5)

    @task(inlets=[BREACH])
    def alert(**context: Any) -> dict[str, Any] | None:
        # One alert per breach: the breach_id alerted last is kept in the asset's state store.
        # The webhook URL is in the slack_alerts connection (slack_webhook or http), read when the task runs.
        return alert_once_per_breach(context, BREACH, {"webhook_conn_id": "slack_alerts"})

    alert()
