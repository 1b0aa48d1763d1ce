"""Throughput of the error-aware job against the same transforms with no error handling, in one run.

1,000,000 orders of about 100 bytes with 0 %, 1 % and 10 % malformed JSON, read
through the ``kerr_kafka`` source by Spark ``local[2]`` and written to a Kafka
topic. "error-aware" is the real job (``errors.tolerance=all``, DLQ with context
headers, metrics); "plain" maps the same converter and transformation over each
Arrow batch in a list comprehension that drops a record that raises, and writes
the rest: the cheapest job that survives bad records at all. Both run in the same
Spark session against the same broker, alternating, best of ``--repeat``.

Writes ``benchmarks/results/spark_job.json`` and ``spark_job.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def produce(config: dict[str, Any], topic: str, count: int, bad_ratio: float) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer(
        {**config, "linger.ms": 50, "batch.num.messages": 10000, "queue.buffering.max.messages": 500000}
    )
    every = int(1 / bad_ratio) if bad_ratio else 0
    good = b'{"id": "o-%08d", "customer": "c-0042", "amount": 123.45, "currency": "EUR", "note": "xxxxxxxx"}'
    for i in range(count):
        value = b'{"id": "o-%08d", "customer": "c-0042", "amount": ' % i if every and i % every == 0 else good % i
        while True:
            try:
                producer.produce(topic, key=b"o-%08d" % i, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(120)


def plain_job(spark: Any, config: dict[str, Any], topic: str, sink: str) -> int:
    """Same source, converter, transformation and sink; a record that raises is dropped, nothing else."""
    from airflow_kerr.spark import kafka_source
    from airflow_kerr.spark.kafka_source import plan_offset_ranges, ranges_to_json, split_ranges

    ranges = plan_offset_ranges(config, [topic], "earliest")
    pieces = split_ranges(ranges, 200_000, spark.sparkContext.defaultParallelism)
    frame = spark.read.format(kafka_source.FORMAT_NAME).option("offsetRanges", ranges_to_json(pieces))
    for key, value in config.items():
        frame = frame.option(f"kafka.{key}", str(value))

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import spark_job_transforms

        from airflow_kerr.spark.job import BatchColumns
        from airflow_kerr.spark.sinks import ProducerChannel, encode_value
        from airflow_kerr.spark.stages import decode_json

        channel = ProducerChannel(config)
        written = 0

        def convert(raw: bytes) -> Any:
            try:
                return decode_json(raw)
            except ValueError:
                return None

        def apply(record: Any) -> Any:
            try:
                return spark_job_transforms.transform(record)
            except Exception:
                return None

        for batch in batches:
            columns = BatchColumns(batch)
            rows = list(range(batch.num_rows))
            keys = [None if k is None else k.decode() for k in columns.keys]
            values = [convert(v) for v in columns.values]
            kept = [row for row in rows if values[row] is not None]
            records = columns.pipeline_records(kept, [keys[r] for r in kept], [values[r] for r in kept])
            for record in map(apply, records):
                if record is not None:
                    channel.produce(sink, key=record.key.encode(), value=encode_value(record.value))
                    written += 1
        channel.flush()
        yield pa.RecordBatch.from_pylist([{"written": written}])

    return sum(row["written"] for row in frame.load().mapInArrow(run, "written long").collect())


def error_aware_job(spark: Any, config: dict[str, Any], topic: str, sink: str, tag: str) -> int:
    from airflow_kerr.spark.job import run_job
    from airflow_kerr.spark.spec import PipelineSpec

    spec = PipelineSpec.from_dict(
        {
            "name": "bench",
            "source": {"topics": [topic], "group_id": f"bench-{tag}", "starting_offsets": "group"},
            "key_converter": "string",
            "value_converter": "json",
            "transformations": ["spark_job_transforms.transform"],
            "sink": {"kind": "kafka", "topic": sink},
            "kafka": config,
            "metrics_topic": "bench.metrics",
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{topic}.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
            },
        }
    )
    return int(run_job(spark, spec, run_id=tag)["records_out"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--bad", type=float, nargs="+", default=[0.0, 0.01, 0.10])
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pyspark.sql import SparkSession

    from airflow_kerr.local.broker import LocalBroker, resolve_bootstrap_servers
    from airflow_kerr.spark import kafka_source

    broker = None if resolve_bootstrap_servers() else LocalBroker().start()
    config = {"bootstrap.servers": resolve_bootstrap_servers() or broker.bootstrap_servers}  # type: ignore[union-attr]
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", str(Path(__file__).resolve().parent))
        .getOrCreate()
    )
    kafka_source.register(spark)
    results: list[dict[str, Any]] = []
    try:
        for bad in args.bad:
            topic = f"bench.orders.{int(bad * 1000)}.{int(time.time())}"
            started = time.perf_counter()
            produce(config, topic, args.records, bad)
            print(
                f"bad={bad:.0%}: produced {args.records} records in {time.perf_counter() - started:.1f} s", flush=True
            )
            timings: dict[str, list[float]] = {"plain": [], "error_aware": []}
            outputs: dict[str, int] = {}
            for attempt in range(args.repeat):
                for mode in ("plain", "error_aware"):
                    sink = f"{topic}.{mode}.{attempt}"
                    started = time.perf_counter()
                    if mode == "plain":
                        outputs[mode] = plain_job(spark, config, topic, sink)
                    else:
                        outputs[mode] = error_aware_job(spark, config, topic, sink, f"{mode}-{attempt}-{topic}")
                    timings[mode].append(time.perf_counter() - started)
                    print(f"  {mode:<12} run {attempt}: {timings[mode][-1]:.1f} s, {outputs[mode]} written", flush=True)
            best = {mode: min(values) for mode, values in timings.items()}
            row = {
                "bad_ratio": bad,
                "records": args.records,
                "plain_records_per_s": args.records / best["plain"],
                "error_aware_records_per_s": args.records / best["error_aware"],
                "ratio": best["plain"] / best["error_aware"],
                "plain_written": outputs["plain"],
                "error_aware_written": outputs["error_aware"],
                "seconds": timings,
            }
            results.append(row)
            print(f"  error-aware / plain = {row['ratio']:.2f}x", flush=True)
    finally:
        spark.stop()
        if broker is not None:
            broker.stop()
    write_results(results)
    return 0


def write_results(results: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "spark_job",
        "machine": {"cpus": os.cpu_count(), "spark_master": "local[2]"},
        "targets": {"0.0": 0.9, "0.01": 0.8},
        "results": results,
    }
    (RESULTS / "spark_job.json").write_text(json.dumps(payload, indent=2) + "\n")
    labels = [f"{r['bad_ratio']:.0%} bad" for r in results]
    positions = range(len(results))
    figure, axis = plt.subplots(figsize=(7, 4))
    axis.bar([p - 0.2 for p in positions], [r["plain_records_per_s"] for r in results], 0.4, label="plain")
    axis.bar([p + 0.2 for p in positions], [r["error_aware_records_per_s"] for r in results], 0.4, label="error-aware")
    for p, r in zip(positions, results, strict=True):
        axis.annotate(f"{r['ratio']:.2f}x", (p + 0.2, r["error_aware_records_per_s"]), ha="center", va="bottom")
    axis.set_xticks(list(positions), labels)
    axis.set_ylabel("records / s")
    axis.set_title(f"Error-aware job vs plain job, {results[0]['records']:,} records, local[2]")
    axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "spark_job.png", dpi=120)


if __name__ == "__main__":
    sys.exit(main())
