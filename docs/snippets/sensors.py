"""The DLQ growth sensor and the tolerance sensor, as a DAG file."""

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_kerr.sensors.dead_letter_queue import DeadLetterQueueSensor
from airflow_kerr.sensors.tolerance import ToleranceSensor

with DAG(
    dag_id="docs_sensors",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
):
    dlq_grew = DeadLetterQueueSensor(
        task_id="dlq_grew",
        topic="orders.dlq",
        min_records=10,
        since="task_start",  # or "group:<consumer group>" or {partition: offset}
        deferrable=True,
    )  # XCom: the count and the newest error contexts (stage, exception, source offsets)

    breach = ToleranceSensor(
        task_id="breach",
        pipeline="orders_pipeline",
        metrics_topic="kerr.metrics",
        window=timedelta(minutes=5),
        max_error_rate=0.05,
        min_records=100,
        wait_for="breach",  # or "recovery"
        deferrable=True,
    )
