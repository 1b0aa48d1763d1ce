"""Always on: when the orders pipeline breaches its error rate, pause the sink connector and alert once.

Nobody triggers this DAG: the watched breach asset starts it. Its watcher runs on the
triggerer and reads the job's metrics every second; a breach (more than 2 % of the
records failing over 5 minutes, once at least 100 were seen) fires once, however long it
lasts. The alert goes out even if the pause fails, and only once per breach, also when
the event repeats after a triggerer restart. It goes to the webhook in the Airflow
Variable ``kerr_alert_webhook`` (Slack incoming-webhook compatible), or to the task log
only when that is not set. ``on_tolerance_recovery.py`` resumes the connector; for the
poll-based alternative (one DAG run that waits for a breach, then recovery) see
``tolerance_guard.py``.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_kerr.assets.events import alert_once_per_breach
from airflow_kerr.assets.watched import tolerance_asset
from airflow_kerr.examples.orders_tolerance import ORDERS_CONNECTOR, ORDERS_TOLERANCE
from airflow_kerr.operators.connector_control import PauseConnectorOperator

BREACH = tolerance_asset(event="breach", **ORDERS_TOLERANCE)

with DAG(
    dag_id="on_tolerance_breach",
    schedule=[BREACH],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["kerr", "example"],
) as dag:
    pause = PauseConnectorOperator(task_id="pause_connector", connector=ORDERS_CONNECTOR, poll_interval=0.5)

    @task(inlets=[BREACH])
    def alert(**context: Any) -> dict[str, Any] | None:
        """One alert per breach, with the breach's reading and the DLQ's newest exceptions."""
        return alert_once_per_breach(context, BREACH, {"webhook_url": "{{ var.value.get('kerr_alert_webhook', '') }}"})

    alert()  # beside the pause, not after it: a failed pause is one more reason to alert
