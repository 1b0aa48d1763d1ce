"""The DLQ replay operator: repair the negative amounts and put them back, exactly once, as a DAG file."""

import pendulum
from airflow.sdk import DAG

from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator

with DAG(
    dag_id="docs_replay",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    DeadLetterQueueReplayOperator(
        task_id="replay",
        kafka_config_id="kafka_default",
        dlq_topic="orders.dlq",
        stages=["TRANSFORMATION"],
        fix="airflow_kerr.examples.orders.repair_order",
        max_records_per_second=500,
        dry_run=False,
    )
