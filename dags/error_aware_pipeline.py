"""An error-aware PySpark pipeline on an orders stream with poison in it.

``generate_orders`` writes orders with three kinds of bad record (malformed JSON,
a negative amount, a flaky lookup that succeeds when retried); ``orders_pipeline``
runs them through the error-aware job with ``errors.tolerance=all`` and a DLQ; the
last task prints the run's metrics, which the job also publishes to ``kerr.metrics``.
The ``errors`` dict is validated when this file is parsed.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

ORDERS_PIPELINE = {
    "name": "orders_pipeline",
    "source": {"topics": ["orders"], "group_id": "orders-pipeline"},
    "key_converter": "string",
    "value_converter": "json",
    "transformations": ["airflow_kerr.examples.orders.validate_order", "airflow_kerr.examples.orders.enrich_order"],
    "sink": {"kind": "kafka", "topic": "orders.clean"},
}

ORDERS_ERRORS = {
    "errors.tolerance": "all",
    "errors.retry.timeout": 30_000,
    "errors.retry.delay.max.ms": 2_000,
    "errors.log.enable": True,
    "errors.log.include.messages": True,
    "errors.deadletterqueue.topic.name": "orders.dlq",
    "errors.deadletterqueue.context.headers.enable": True,
}

with DAG(
    dag_id="error_aware_pipeline",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kerr", "example"],
    params={
        # minimum/maximum: the form's number inputs hold a typed value within them when the field loses focus.
        "orders": Param(2_000, type="integer", minimum=0, maximum=1_000_000, title="Orders to generate before the run"),
        "malformed_every": Param(
            50, type="integer", minimum=0, title="Every Nth order is malformed JSON", description="0: none"
        ),
        "invalid_every": Param(
            70, type="integer", minimum=0, title="Every Nth order has a negative amount", description="0: none"
        ),
        "flaky_every": Param(
            90, type="integer", minimum=0, title="Every Nth order fails once, then succeeds", description="0: none"
        ),
    },
) as dag:

    @task
    def generate(params: dict[str, Any] | None = None) -> dict[str, int]:
        """Write the orders stream, poison included."""
        from airflow_kerr.examples.orders import generate_orders
        from airflow_kerr.hooks.kafka import KafkaClusterHook

        assert params is not None
        config = KafkaClusterHook(kafka_config_id="kafka_default").client_config()
        return generate_orders(
            config,
            "orders",
            int(params["orders"]),
            malformed_every=int(params["malformed_every"]),
            invalid_every=int(params["invalid_every"]),
            flaky_every=int(params["flaky_every"]),
        ).as_dict()

    orders_pipeline = ErrorAwareSparkSubmitOperator(
        task_id="orders_pipeline",
        pipeline=ORDERS_PIPELINE,
        errors=ORDERS_ERRORS,
        kafka_config_id="kafka_default",
    )

    @task
    def report(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
        """Print what the run did; downstream tasks can branch on the same XCom."""
        print(f"orders_pipeline run metrics: {metrics}")
        return metrics

    generate() >> orders_pipeline
    report(orders_pipeline.output)  # type: ignore[arg-type]  # an XComArg: the task gets the XCom value at run time
