"""Always on: when the orders pipeline has recovered from a breach, resume the sink connector and check it runs.

Nobody triggers this DAG: the watched recovery asset starts it, once a window of at
least 100 records is back under the limit after a breach (an idle pipeline is not taken
as recovered). The watch settings are the breach DAG's (``on_tolerance_breach.py``), so
both watchers share one state and a recovery always follows its breach.

The breach DAG's asset comes from ``tolerance_asset``; this one is watched through Airflow's
standard door for event-driven scheduling, common.messaging's ``MessageQueueTrigger``,
whose ``kerr+tolerance`` scheme this provider registers. Both doors build the same
watch, so the two watchers still share one poll loop and one state on the triggerer.

Triggered by hand (Trigger in the UI, no asset event), it does what its name says at
once: resumes ``orders-sink`` and checks it runs. That is the way back after pausing the
connector by hand with ``on_tolerance_breach``, or once the cause of a breach is fixed
and waiting for the watcher's recovery window is not wanted. It reads nothing of the
event, so there is nothing to miss.
"""

from __future__ import annotations

import pendulum
from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import DAG, Asset, AssetWatcher

from airflow_kerr.examples.orders_tolerance import ORDERS_CONNECTOR, ORDERS_TOLERANCE
from airflow_kerr.operators.connector_control import ResumeConnectorOperator
from airflow_kerr.sensors.connector_state import ConnectorStateSensor

RECOVERY = Asset(
    name="kerr.tolerance_recovery.orders_pipeline",
    uri="kafka://kafka_default/kerr.metrics?event=recovery&pipeline=orders_pipeline",
    watchers=[
        AssetWatcher(
            name="kerr.tolerance_recovery.orders_pipeline",
            trigger=MessageQueueTrigger(scheme="kerr+tolerance", event="recovery", **ORDERS_TOLERANCE),
        )
    ],
)

with DAG(
    dag_id="on_tolerance_recovery",
    schedule=[RECOVERY],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["kerr", "example"],
) as dag:
    resume = ResumeConnectorOperator(task_id="resume_connector", connector=ORDERS_CONNECTOR, poll_interval=0.5)
    verify = ConnectorStateSensor(
        task_id="verify_running", connector=ORDERS_CONNECTOR, target_state="RUNNING", poke_interval=1, timeout=600
    )
    resume >> verify
