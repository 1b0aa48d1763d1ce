"""The tolerance guard alerting Slack and email at once and asking the on-call person, as a DAG file."""

from datetime import timedelta

import pendulum
from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier
from airflow.providers.smtp.notifications.smtp import SmtpNotifier
from airflow.sdk import DAG

from airflow_kerr.task_groups.tolerance_guard import GO_AHEAD_PARAM, tolerance_guard

with DAG(
    dag_id="docs_orders_guard",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={GO_AHEAD_PARAM: False},  # "resume_without_recovery": deprecated with ask=True
):
    tolerance_guard(
        connectors="orders-sink",
        pipeline="orders_pipeline",
        max_error_rate=0.05,
        min_records=100,
        window=timedelta(minutes=5),
        notifier={
            "notifiers": [
                SlackWebhookNotifier(slack_webhook_conn_id="slack_alerts", text=""),
                SmtpNotifier(to="oncall@example.com", smtp_conn_id="smtp_default"),
            ],
        },
        ask=True,  # "resume now?" in Airflow's Required actions after the alert
        response_timeout=timedelta(minutes=15),  # then "wait for recovery"
        reminder_interval=timedelta(minutes=30),
    )
