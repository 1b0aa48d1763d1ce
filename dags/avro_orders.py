"""Avro orders through the Schema Registry: Connect's converter failures, record by record.

``generate`` writes orders with confluent-kafka's ``AvroSerializer`` (the schema goes to the
registry of ``schema_registry_default``), and among them, in turn, a JSON value, a value
shorter than the 5-byte header, an unknown schema id, a truncated body, a tombstone and an
order with a negative amount. ``avro_orders`` reads them with ``value_converter="avro"``: the
four undecodable kinds go to ``orders.avro.dlq`` at ``VALUE_CONVERTER`` with the texts Connect's
``AvroConverter`` writes; a negative amount fails ``add_amount_cents`` and goes there at
``TRANSFORMATION`` with its Avro bytes (replay it with the fix ``repair_amount``); the good
orders, with their amount in cents, and the tombstones go to ``orders.avro.clean`` as Avro,
under the subject ``orders.avro.clean-value``. On the local stack (``make ui``,
``kerr local up``) both connections point at the embedded broker and registry.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_kerr.examples.avro_orders import ENRICHED_ORDER_SCHEMA
from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

AVRO_ORDERS_PIPELINE = {
    "name": "avro_orders",
    "source": {"topics": ["orders.avro"], "group_id": "avro-orders"},
    "key_converter": "string",
    "value_converter": "avro",
    "transformations": ["airflow_kerr.examples.avro_orders.add_amount_cents"],
    "sink": {"kind": "avro", "topic": "orders.avro.clean", "schema": ENRICHED_ORDER_SCHEMA},
}

AVRO_ORDERS_ERRORS = {
    "errors.tolerance": "all",
    # A registry that cannot be reached, times out or answers 5xx is retried this long, record by record.
    "errors.retry.timeout": 30_000,
    "errors.retry.delay.max.ms": 2_000,
    "errors.deadletterqueue.topic.name": "orders.avro.dlq",
    "errors.deadletterqueue.context.headers.enable": True,
}

with DAG(
    dag_id="avro_orders",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kerr", "example", "schema-registry"],
    params={
        "orders": Param(500, type="integer", minimum=0, maximum=1_000_000, title="Records to generate before the run"),
        "bad_every": Param(
            20,
            type="integer",
            minimum=0,
            title="Every Nth record is special",
            description="in turn: JSON, too short, unknown schema id, truncated, tombstone, negative amount; 0: none",
        ),
    },
) as dag:

    @task
    def generate(params: dict[str, Any] | None = None) -> dict[str, int]:
        """Write the Avro orders, bad records included, registering their schema."""
        from airflow_kerr.examples.avro_orders import generate_avro_orders
        from airflow_kerr.hooks.kafka import KafkaClusterHook
        from airflow_kerr.hooks.schema_registry import SchemaRegistryHook

        assert params is not None
        return generate_avro_orders(
            KafkaClusterHook(kafka_config_id="kafka_default").client_config(),
            SchemaRegistryHook("schema_registry_default").client_config(),
            "orders.avro",
            int(params["orders"]),
            bad_every=int(params["bad_every"]),
        )

    avro_orders = ErrorAwareSparkSubmitOperator(
        task_id="avro_orders",
        pipeline=AVRO_ORDERS_PIPELINE,
        errors=AVRO_ORDERS_ERRORS,
        kafka_config_id="kafka_default",
        schema_registry_conn_id="schema_registry_default",
    )

    @task
    def report(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
        """Print what the run did: records in, dead letters, retries."""
        print(f"avro_orders run metrics: {metrics}")
        return metrics

    generate() >> avro_orders
    report(avro_orders.output)  # type: ignore[arg-type]  # an XComArg: the task gets the XCom value at run time
