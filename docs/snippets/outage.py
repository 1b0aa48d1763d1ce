"""The error-aware job with the outage breaker on: an outage fails the run instead of filling the DLQ."""

import pendulum
from airflow.sdk import DAG

from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

with DAG(
    dag_id="docs_outage",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    ErrorAwareSparkSubmitOperator(
        task_id="orders_pipeline",
        kafka_config_id="kafka_default",
        pipeline={
            "name": "orders_pipeline",
            "source": {"topics": ["orders"], "group_id": "orders-pipeline"},
            # each record is enriched from a lookup service: what an outage takes down
            "transformations": ["airflow_kerr.examples.lookup.lookup_customer"],
            "sink": {"kind": "kafka", "topic": "orders.clean"},
            "batch_size": 2048,  # the records judged together
        },
        errors={
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "orders.dlq",
            "errors.outage.enable": True,
            "errors.outage.consecutive.failures": 100,  # in a row, one class, one stage (0: off)
            "errors.outage.batch.failure.percent": 50,  # more than half of a batch ... (100: off)
            "errors.outage.batch.min.records": 100,  # ... of at least 100 records
        },
    )
