"""Orders: an error-aware PySpark job on Kafka, and a guard on the Kafka Connect sink downstream."""

from datetime import timedelta

import pendulum
from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier
from airflow.sdk import DAG

from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator
from airflow_kerr.task_groups.tolerance_guard import GO_AHEAD_PARAM, tolerance_guard

with DAG(
    dag_id="orders_pipeline",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    # Reads what the consumer group has not yet read from `orders`, runs each record through the
    # transformations and writes the good ones to `orders.clean`. A record that still fails after
    # retries goes to `orders.dlq` with Kafka Connect's __connect.errors.* headers; the run goes on.
    ErrorAwareSparkSubmitOperator(
        task_id="orders_pipeline",
        kafka_config_id="kafka_default",  # the apache-kafka provider's connection
        conn_id="spark_default",
        pipeline={
            "name": "orders_pipeline",
            "source": {"topics": ["orders"], "group_id": "orders-pipeline"},
            "key_converter": "string",
            "value_converter": "json",
            # dotted paths to your functions, record -> record | None
            "transformations": ["mypkg.orders.validate", "mypkg.orders.enrich"],
            "sink": {"kind": "kafka", "topic": "orders.clean"},
        },
        errors={
            "errors.tolerance": "all",
            "errors.retry.timeout": 30_000,
            "errors.deadletterqueue.topic.name": "orders.dlq",
            "errors.deadletterqueue.context.headers.enable": True,
        },
    )

# Trigger it when the pipeline starts: once more than 2 % of the records fail over 5 minutes it
# pauses the `orders-sink` connector, alerts Slack through the `slack_alerts` connection, waits
# for the rate to recover (or for the go-ahead ticked in the trigger form), resumes the connector
# and checks that it runs.
with DAG(
    dag_id="orders_guard",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={GO_AHEAD_PARAM: False},  # "resume_without_recovery": the on-call person's override
):
    tolerance_guard(
        connectors="orders-sink",
        pipeline="orders_pipeline",
        dlq_topic="orders.dlq",  # named in the alert
        max_error_rate=0.02,
        min_records=100,
        window=timedelta(minutes=5),
        deferrable=True,
        # text="" is filled with the breach message; the connection is read when the alert is sent.
        notifier={"notifiers": [SlackWebhookNotifier(slack_webhook_conn_id="slack_alerts", text="")]},
    )
