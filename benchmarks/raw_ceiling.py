"""What this machine's broker and Kafka client allow at most: raw produce, consume and copy, in CPU per record.

Issue #18 asks for 300,000 records/s end to end on 2 cores (read from Kafka, decode,
validate, write to a Kafka sink). Whatever the job does, each record is consumed from the
broker and produced back to it, and on this machine the broker shares the two cores with
the job. This benchmark measures that floor, with no Spark, no decoding and no DLQ, for
each embedded broker:

- ``produce``: one confluent-kafka producer writes ``--records`` orders of about 100 bytes
  (1 % malformed, as ``spark_job.py`` writes them) to a fresh two-partition topic;
- ``consume``: the ``kerr_kafka`` source's own reader (``read_range``: one consumer per
  partition, assign, no group) reads them all;
- ``copy``: the same reader, and each record produced to a fresh topic by one idempotent
  producer (as the job's sink): the cheapest job there is.

Each mode's time and the CPU it took, this process and the broker process together, in
core-µs per record; ``2 cores / copy core-µs`` is the most records per second any job that
reads and writes each record could reach here, were both cores busy all the time. Modes
alternate over ``--repeat`` rounds; figures are medians with min-max. Writes
``benchmarks/results/raw_ceiling.json`` and ``raw_ceiling.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_RECORDS_PER_S = 300_000
MODES = ("produce", "consume", "copy")
QUIET_CORES = 0.3


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of one process (its own threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def create_topic(config: dict[str, Any], topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)


def delete_topics(config: dict[str, Any], names: list[str], *, missing_ok: bool = False) -> None:
    """Drop topics a run wrote, so the broker does not grow from run to run (the client is kept until it answers).

    With ``missing_ok`` a topic that was never created (a run that wrote nothing there) is not an error.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(config)
    for name, future in admin.delete_topics(names).items():
        try:
            future.result(30)
        except KafkaException as error:
            if not (missing_ok and error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                raise RuntimeError(f"could not delete {name}: {error}") from error


def produce(config: dict[str, Any], topic: str, count: int) -> int:
    """``spark_job.py``'s input, written the same way (it creates the topic)."""
    from spark_job import produce as produce_orders

    produce_orders(config, topic, count, 0.01)
    return count


def consume(config: dict[str, Any], topic: str) -> int:
    from airflow_kerr.spark.kafka_source import plan_offset_ranges, read_range

    return sum(len(batch) for r in plan_offset_ranges(config, [topic], "earliest") for batch in read_range(config, r))


def copy(config: dict[str, Any], source: str, target: str) -> int:
    """consume → produce, record by record, nothing else; every record delivered before it returns."""
    from confluent_kafka import Producer

    from airflow_kerr.spark.kafka_source import plan_offset_ranges, read_range

    producer = Producer(
        {
            **config,
            "enable.idempotence": True,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
        }
    )
    copied = 0
    for offsets in plan_offset_ranges(config, [source], "earliest"):
        for batch in read_range(config, offsets):
            for message in batch:
                while True:
                    try:
                        producer.produce(target, message.value(), message.key())
                        break
                    except BufferError:
                        producer.poll(0.05)
            copied += len(batch)
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"the copy to {target} did not deliver every record")
    return copied


def timed(broker_pid: int, records: int, run: Callable[[], int]) -> dict[str, float]:
    """One run: wall seconds, records/s and core-µs per record (this process + the broker)."""
    broker_before, own_before, started = process_cpu_s(broker_pid), own_cpu_s(), time.perf_counter()
    done = run()
    seconds = time.perf_counter() - started
    broker_s, own_s = process_cpu_s(broker_pid) - broker_before, own_cpu_s() - own_before
    if done != records:
        raise RuntimeError(f"a run handled {done} records, expected {records}")
    return {
        "seconds": seconds,
        "records_per_s": records / seconds,
        "core_us_per_record": (broker_s + own_s) / records * 1e6,
        "broker_core_us_per_record": broker_s / records * 1e6,
        "client_core_us_per_record": own_s / records * 1e6,
    }


def measure_broker(kind: str, records: int, repeat: int, quiet_timeout: float, meter: CpuMeter) -> dict[str, Any]:
    from airflow_kerr.local.broker import LocalBroker

    broker = LocalBroker(kind=kind).start()
    assert broker.pid is not None
    config = {"bootstrap.servers": broker.bootstrap_servers}
    stamp = int(time.time())
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    others: list[float] = []
    try:
        for attempt in range(repeat):
            meter.wait_quiet(QUIET_CORES, quiet_timeout)
            before = meter.sample()
            source, target = f"ceiling.{stamp}.{attempt}", f"ceiling.{stamp}.{attempt}.copy"
            create_topic(config, target)  # the source is created by produce
            steps: dict[str, Callable[[], int]] = {
                "produce": partial(produce, config, source, records),
                "consume": partial(consume, config, source),
                "copy": partial(copy, config, source, target),
            }
            for mode in MODES:
                runs[mode].append(timed(broker.pid, records, steps[mode]))
                row = runs[mode][-1]
                print(
                    f"  {kind} {mode:<8} run {attempt}: {row['records_per_s']:,.0f} records/s, "
                    f"{row['core_us_per_record']:.2f} core-µs/record (broker {row['broker_core_us_per_record']:.2f})",
                    flush=True,
                )
            others.append(meter.foreign_cores(before, meter.sample()))
            print(f"  {kind} round {attempt}: others used {others[-1]:.2f} cores", flush=True)
            delete_topics(config, [source, target])
    finally:
        broker.stop()
    summary = {mode: {key: spread([row[key] for row in rows]) for key in rows[0]} for mode, rows in runs.items()}
    copy_core_us = summary["copy"]["core_us_per_record"]["median"]
    cores = os.cpu_count() or 1
    return {
        "modes": summary,
        "cpu_bound_copy_records_per_s": cores / copy_core_us * 1e6,
        "others_cores_per_round": [round(x, 3) for x in others],
        "runs": runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--brokers", default="noida,tansu", help="comma-separated: noida, tansu")
    parser.add_argument("--quiet-timeout", type=float, default=120.0, help="seconds to wait for a quiet machine")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    meter = CpuMeter()
    brokers = {
        kind: measure_broker(kind, args.records, args.repeat, args.quiet_timeout, meter)
        for kind in args.brokers.split(",")
    }
    for kind, result in brokers.items():
        copy_rate = result["modes"]["copy"]["records_per_s"]["median"]
        print(
            f"{kind}: copy {copy_rate:,.0f} records/s; CPU-bound ceiling on {os.cpu_count()} cores "
            f"{result['cpu_bound_copy_records_per_s']:,.0f} records/s (target {TARGET_RECORDS_PER_S:,})"
        )
    write_results(args.records, brokers)
    return 0


def write_results(records: int, brokers: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "raw_ceiling",
        "machine": {"cpus": os.cpu_count()},
        "records": records,
        "statistic": "median with min-max of alternating rounds",
        "target_records_per_s": TARGET_RECORDS_PER_S,
        "brokers": brokers,
    }
    (RESULTS / "raw_ceiling.json").write_text(json.dumps(payload, indent=2) + "\n")
    figure, axis = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(brokers)
    for index, (kind, result) in enumerate(brokers.items()):
        rates = [result["modes"][mode]["records_per_s"] for mode in MODES]
        medians = [rate["median"] for rate in rates]
        errors = [
            [m - r["min"] for m, r in zip(medians, rates, strict=True)],
            [r["max"] - m for m, r in zip(medians, rates, strict=True)],
        ]
        xs = [x + index * width for x in range(len(MODES))]
        bars = axis.bar(xs, medians, width, yerr=errors, capsize=3, label=f"embedded {kind}")
        for bar, mode in zip(bars, MODES, strict=True):
            core_us = result["modes"][mode]["core_us_per_record"]["median"]
            axis.annotate(
                f"{core_us:.1f} core-µs",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    axis.axhline(TARGET_RECORDS_PER_S, color="#d62728", linestyle="--", linewidth=1, label="issue #18's 300k/s")
    axis.set_xticks([x + width * (len(brokers) - 1) / 2 for x in range(len(MODES))], MODES)
    axis.set_ylabel("records / s (median, min-max)")
    axis.set_title(f"Raw Kafka rates on this {os.cpu_count()}-core machine, {records:,} records of ~100 B", fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(RESULTS / "raw_ceiling.png", dpi=120)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
