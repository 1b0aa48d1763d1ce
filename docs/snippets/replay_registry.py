"""The DLQ replay on Avro values: the fix gets each record's value decoded, the replay re-encodes it."""

import pendulum
from airflow.sdk import DAG

from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator

with DAG(
    dag_id="docs_replay_registry",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    DeadLetterQueueReplayOperator(
        task_id="replay_orders",
        dlq_topic="orders.avro.dlq",
        fix="airflow_kerr.examples.avro_orders.repair_amount",  # gets record.value as a dict
        value_format="avro",
        schema_registry_conn_id="schema_registry_default",
        reencode_with="record",  # or "latest"
    )
