"""The tolerance guard: pause the downstream sink connector while the orders pipeline breaches its error rate.

wait for a breach (more than 2 % of the records failing over 5 minutes, once at
least 100 records were seen) → pause ``orders-sink`` → alert → wait for recovery,
or resume at once when the trigger form's go-ahead box is ticked → resume →
verify RUNNING. Trigger it when the pipeline starts; it ends once the connector
runs again.

Both form fields are optional, so it triggers with the form's defaults: the go-ahead box
unticked, and no webhook (the alert goes to the task log only).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_kerr.task_groups.tolerance_guard import GO_AHEAD_PARAM, tolerance_guard

with DAG(
    dag_id="tolerance_guard",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kerr", "example"],
    params={
        # "null" in each type keeps Airflow's form from marking the field required (it never sends null for a box).
        GO_AHEAD_PARAM: Param(
            False,
            type=["null", "boolean"],
            title="Resume without waiting for recovery",
            description="Tick to resume the connector right after the alert, e.g. once the cause is fixed upstream.",
        ),
        "webhook_url": Param(
            None,
            type=["null", "string"],
            maxLength=2048,
            title="Alert webhook",
            description="Slack incoming-webhook (or any JSON webhook) URL; empty sends the alert to the log only.",
        ),
    },
) as dag:
    tolerance_guard(
        connectors="orders-sink",
        pipeline="orders_pipeline",
        metrics_topic="kerr.metrics",
        dlq_topic="orders.dlq",
        max_error_rate=0.02,
        min_records=100,
        window=timedelta(minutes=5),
        poke_interval=15,
        # ``or ''``: an empty field is null, which would render as the text "None".
        notifier={"webhook_url": "{{ params.webhook_url or '' }}"},
    )
