"""The job's Kafka source on its own: a Spark 4 Python Data Source that needs no connector jar."""

from typing import Any

from airflow_kerr.spark.kafka_source import register


def read_orders(spark: Any) -> Any:
    register(spark)
    return (
        spark.read.format("kerr_kafka")
        .option("kafka.bootstrap.servers", "broker:9092")
        .option("subscribe", "orders")
        .option("groupId", "orders-pipeline")  # start at the group's committed offsets
        .load()
    )  # key, value, topic, partition, offset, timestamp, timestamp_type, headers
