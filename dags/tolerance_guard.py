"""The tolerance guard: pause the downstream sink connector while the orders pipeline breaches its error rate.

wait for a breach (more than 2 % of the records failing over 5 minutes, once at
least 100 records were seen) → pause ``orders-sink`` → alert → ask the on-call person
in Airflow's Required actions (resume now, wait for recovery, replay the DLQ then
resume, keep paused; no answer in 15 minutes means wait for recovery) → resume →
verify RUNNING → a "resolved" message with the episode's figures. A reminder goes
out every 30 minutes while the guard waits for recovery. Trigger it when the pipeline
starts; it ends once the connector runs again.

The alert goes through the slack provider's ``SlackWebhookNotifier`` with the
``kerr_slack_alerts`` connection (type ``slack_webhook``: the webhook token as its password,
or the whole webhook URL), read only when the alert is sent; without that connection the
alert is in the task log, with a line naming the missing connection. The form's one field is
optional, so it triggers with the form's defaults (the go-ahead box unticked); that box is
deprecated: answer the question instead.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier
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
            title="Resume without asking (deprecated)",
            description="Deprecated: answer the guard's question in Required actions instead. Ticked, the guard "
            "resumes right after the alert without asking.",
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
        # The breach sensor reads the metrics topic every second (a small read) and pauses orders-sink the moment
        # it sees a breach; a longer interval is a longer wait before the pause.
        poke_interval=1,
        # text="" is filled with the breach message (text and blocks); see ToleranceBreachNotifier.
        notifier={"notifiers": [SlackWebhookNotifier(slack_webhook_conn_id="kerr_slack_alerts", text="")]},
        # After the alert, ask the on-call person; nobody answering in 15 minutes means "wait for recovery".
        ask=True,
        response_timeout=timedelta(minutes=15),
        reminder_interval=timedelta(minutes=30),
    )
