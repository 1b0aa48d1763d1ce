"""Always on: when the orders pipeline breaches its error rate, pause the sink connector and alert once.

Nobody triggers this DAG: the watched breach asset starts it. Its watcher runs on the
triggerer and reads the job's metrics every second; a breach (more than 2 % of the
records failing over 5 minutes, once at least 100 were seen) fires once, however long it
lasts. The watcher itself asks Kafka Connect to pause ``orders-sink`` the moment it sees
the breach (``pause_on_breach`` in the shared settings), before this DAG's run exists:
the run's ``pause_connector`` follows up, asking again and waiting until every task reads
PAUSED, and retries if the watcher's ask failed. The alert goes out even if the pause fails,
and only once per breach, also when the event repeats after a triggerer restart. It goes
to the webhook whose URL the connection ``kerr_alert_webhook`` holds (an ``http`` connection whose host is the URL, or a
``slack_webhook`` connection: Slack incoming-webhook compatible JSON), read when the alert
is sent; without that connection the alert is in the task log, with a line naming the
missing connection. The URL is a credential, so it is never written here.
``on_tolerance_recovery.py`` resumes the connector; for the poll-based alternative (one
DAG run that waits for a breach, then recovery) see ``tolerance_guard.py``.

Triggered by hand (Trigger in the UI, no breach event), it is an emergency stop: it
pauses ``orders-sink`` as asked, and the ``alert`` task is skipped with a log line saying
the run was started by hand, because there is no breach reading to alert about (an alert
would page people about a breach that was not measured). Resume the connector with
``on_tolerance_recovery``, triggered by hand too.
"""

from __future__ import annotations

import logging
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_kerr.assets.events import alert_once_per_breach, event_payloads
from airflow_kerr.assets.watched import tolerance_asset
from airflow_kerr.compat import AirflowSkipException
from airflow_kerr.examples.orders_tolerance import ORDERS_CONNECTOR, ORDERS_TOLERANCE
from airflow_kerr.operators.connector_control import PauseConnectorOperator

BREACH = tolerance_asset(event="breach", **ORDERS_TOLERANCE)
BY_HAND = (
    "on_tolerance_breach was triggered by hand: no breach event came with this run, so there is no breach "
    f"reading to alert about and no alert is sent; pause_connector pauses {ORDERS_CONNECTOR} as asked. "
    "Resume it with on_tolerance_recovery."
)

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
        """One alert per breach, with the breach's reading and the DLQ's newest exceptions; skipped when run by hand."""
        events = context.get("triggering_asset_events") or {}
        if not any(payload.get("status") == "breach" for payload in event_payloads(events)):
            logging.getLogger(__name__).warning("%s", BY_HAND)
            raise AirflowSkipException(BY_HAND)
        return alert_once_per_breach(context, BREACH, {"webhook_conn_id": "kerr_alert_webhook"})

    alert()  # beside the pause, not after it: a failed pause is one more reason to alert
