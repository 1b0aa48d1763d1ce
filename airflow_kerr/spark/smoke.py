"""Smoke application: count a topic's records with Spark and write the count to a result topic.

Run by spark-submit (``dags/smoke_spark_kafka.py``); proves the broker, Spark and
the ``kerr_kafka`` source work together. Imports no Airflow.
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import Producer

from airflow_kerr.spark.kafka_source import FORMAT_NAME, register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--result-topic", required=True)
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"kerr-smoke-{args.topic}").getOrCreate()
    try:
        register(spark)
        count = (
            spark.read.format(FORMAT_NAME)
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .load()
            .count()
        )
    finally:
        spark.stop()
    result = {"topic": args.topic, "count": count}
    producer = Producer({"bootstrap.servers": args.bootstrap_servers})
    producer.produce(args.result_topic, key=args.topic.encode(), value=json.dumps(result).encode())
    if producer.flush(30) != 0:
        print(f"could not write the result to {args.result_topic}", file=sys.stderr)
        return 1
    print(f"kerr smoke: {args.topic} holds {count} records (written to {args.result_topic})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
