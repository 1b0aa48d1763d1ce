"""The error-aware job with every pipeline field the guide explains, as a DAG file."""

import pendulum
from airflow.sdk import DAG

from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

with DAG(
    dag_id="docs_error_aware_job",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    ErrorAwareSparkSubmitOperator(
        task_id="orders_pipeline",
        kafka_config_id="kafka_default",  # the apache-kafka provider's connection
        pipeline={
            "name": "orders_pipeline",
            "source": {"topics": ["orders"], "group_id": "orders-pipeline"},
            "key_converter": "string",  # bytes | string | json | a dotted-path callable
            "value_converter": "json",
            # dotted paths to your functions, record -> record | None
            "transformations": [
                "airflow_kerr.examples.orders.validate_order",
                "airflow_kerr.examples.orders.enrich_order",
            ],
            "sink": {"kind": "kafka", "topic": "orders.clean"},  # kafka | parquet | jsonl | callable
        },
        errors={
            "errors.tolerance": "all",
            "errors.retry.timeout": 30000,
            "errors.deadletterqueue.topic.name": "orders.dlq",
            "errors.deadletterqueue.context.headers.enable": True,
        },
    )
