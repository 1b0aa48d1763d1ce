"""An error-aware job on an Avro topic, writing Avro, through the Schema Registry connection."""

import json

import pendulum
from airflow.sdk import DAG

from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

ORDER_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
    }
)

with DAG(
    dag_id="docs_schema_registry",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    ErrorAwareSparkSubmitOperator(
        task_id="orders_avro",
        schema_registry_conn_id="schema_registry_default",  # read at run time, only by a spec that needs it
        pipeline={
            "name": "orders_avro",
            "source": {"topics": ["orders"], "group_id": "orders-avro"},
            "key_converter": "string",
            "value_converter": "avro",  # or "protobuf", "json_schema"
            "sink": {"kind": "avro", "topic": "orders.clean", "schema": ORDER_SCHEMA},
            "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "orders.dlq"},
        },
    )
