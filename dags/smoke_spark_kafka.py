"""Smoke test of the three real parts: a Kafka topic, a Spark job, Airflow.

The Spark provider's SparkSubmitOperator (connection ``spark_default``) runs a
PySpark application that counts the records of ``topic`` through the
``kerr_kafka`` source and writes the count to ``result_topic``; the second task
reads it back with the ``kafka_default`` connection and returns it.
"""

from __future__ import annotations

import json

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, task

from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.spark import smoke

with DAG(
    dag_id="smoke_spark_kafka",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kerr", "smoke"],
    params={
        "topic": Param("kerr.smoke.input", type="string", minLength=1, maxLength=249, title="Topic to count"),
        "result_topic": Param(
            "kerr.smoke.result", type="string", minLength=1, maxLength=249, title="Topic the count is written to"
        ),
    },
) as dag:
    count_records = SparkSubmitOperator(
        task_id="count_records",
        conn_id="spark_default",
        application=smoke.__file__,
        name="kerr-smoke",
        application_args=[
            "--bootstrap-servers",
            "{{ conn.kafka_default.extra_dejson['bootstrap.servers'] }}",
            "--topic",
            "{{ params.topic }}",
            "--result-topic",
            "{{ params.result_topic }}",
        ],
    )

    @task
    def read_result(params: dict[str, str] | None = None) -> int:
        """Return the newest count the Spark job wrote for this topic."""
        assert params is not None
        config = KafkaClusterHook(kafka_config_id="kafka_default").client_config()
        count = None
        for message in read_to_end(config, params["result_topic"]):
            if message.key() == params["topic"].encode():
                count = int(json.loads(message.value())["count"])
        if count is None:
            raise ValueError(f"no count for {params['topic']!r} in {params['result_topic']!r}")
        print(f"smoke result: {params['topic']} holds {count} records")
        return count

    count_records >> read_result()
