"""The embedded brokers side by side: noida-db and Tansu, measured the same way, alternating.

For each run and each broker (``--runs`` runs, the brokers alternating within a run), a
fresh broker is started and measured:

- ``start_s``: process start until it answers a metadata request;
- ``produce_per_s``: ``--records`` records of ~100 bytes, one producer, batched;
- ``consume_assign_per_s``: the same records read back with ``assign`` (what the Spark
  source does);
- ``consume_group_per_s``: read back through a consumer group (``subscribe``: what Kafka
  Connect sinks and the replay do), group join included; ``group_join_s`` is the time
  to the first record;
- ``rss_mib``: the broker's resident memory after the load;
- ``connector_running_s`` and ``first_sink_record_s``: a real Kafka Connect worker on the
  broker: a FileStreamSink created until it and its task read RUNNING, then one record
  produced until the sink wrote it (each rebalance and group join on the broker counts);
- the transactional behaviours the replay's exactly-once depends on, checked each run:
  ``read_committed_hides_aborted``, ``zombie_fenced`` and ``delete_records``.

Figures are medians with min and max over the runs. Writes ``benchmarks/results/brokers.json``
and ``brokers.png``; the README's choice of the default broker cites them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ("noida", "tansu")
VALUE = b'{"id": "o-00000000", "customer": "c-0042", "amount": 12.5, "currency": "EUR", "note": "xxxxxxxxxxxx"}'


def produce(config: dict[str, Any], topic: str, count: int) -> float:
    from confluent_kafka import Producer

    producer = Producer(
        {**config, "linger.ms": 20, "batch.num.messages": 10000, "queue.buffering.max.messages": 1000000}
    )
    started = time.perf_counter()
    for i in range(count):
        producer.produce(topic, value=VALUE, key=b"%08d" % i)
        if i % 100000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return count / (time.perf_counter() - started)


def consume(config: dict[str, Any], topic: str, count: int, group: bool) -> tuple[float, float]:
    """(records per second, seconds to the first record) reading ``count`` records by assign or by group."""
    from confluent_kafka import Consumer, TopicPartition

    settings = {**config, "group.id": f"bench-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "fetch.max.bytes": 52428800}  # fmt: skip
    consumer = Consumer(settings)
    started = time.perf_counter()
    if group:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, 0, 0)])
    seen, first = 0, 0.0
    deadline = time.monotonic() + 600
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(10000, timeout=1.0):
            if message.error() is None:
                if not seen:
                    first = time.perf_counter() - started
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    assert seen >= count, f"read {seen} of {count} records"
    return count / elapsed, first


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def transactional_behaviours(config: dict[str, Any], topic: str) -> dict[str, bool]:
    """What the replay's exactly-once needs from a broker, checked by doing it."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    def transactional(tid: str) -> Any:
        producer = Producer({**config, "transactional.id": tid, "transaction.timeout.ms": 10000})
        producer.init_transactions(10)
        return producer

    aborting = transactional(f"bench-{topic}-a")
    aborting.begin_transaction()
    for _ in range(3):
        aborting.produce(topic, value=b"aborted")
    aborting.flush(10)
    aborting.abort_transaction(10)
    committing = transactional(f"bench-{topic}-c")
    committing.begin_transaction()
    for _ in range(3):
        committing.produce(topic, value=b"committed")
    committing.commit_transaction(10)
    reader = Consumer({**config, "group.id": f"bench-{uuid.uuid4().hex[:8]}", "isolation.level": "read_committed"})
    reader.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes | None] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(values) < 3:
        values += [m.value() for m in reader.consume(100, timeout=0.5) if m.error() is None]
    time.sleep(0.5)
    values += [m.value() for m in reader.consume(100, timeout=0.5) if m.error() is None]
    reader.close()
    hides_aborted = values == [b"committed"] * 3

    zombie = transactional(f"bench-{topic}-z")
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(10)
    transactional(f"bench-{topic}-z")  # a new instance with the same id fences the first
    try:
        zombie.commit_transaction(10)
        fenced = False
    except KafkaException as exc:
        fenced = exc.args[0].fatal() or "fenced" in str(exc).lower()

    admin = AdminClient(config)
    try:
        futures = admin.delete_records([TopicPartition(topic, 0, 1)], request_timeout=10)
        for future in futures.values():
            future.result(10)
        delete_records = True
    except Exception:
        delete_records = False
    return {
        "read_committed_hides_aborted": hides_aborted,
        "zombie_fenced": bool(fenced),
        "delete_records": delete_records,
    }


def connect_latency(bootstrap: str, workdir: Path) -> tuple[float, float]:
    """(create until RUNNING, one record produced until the sink wrote it) on a real Connect worker."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_kerr.local.connect_worker import ConnectWorker, connector_config

    topic = f"sink-in-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    with ConnectWorker(bootstrap, workdir / "connect", start_timeout_s=180) as worker:
        started = time.perf_counter()
        worker.add_connector("bench-sink", connector_config(topic, "bench.txt"), timeout_s=180)
        running = time.perf_counter() - started
        producer = Producer({"bootstrap.servers": bootstrap})
        started = time.perf_counter()
        producer.produce(topic, value=b'"one"')
        producer.flush(10)
        output = worker.output_file("bench.txt")
        deadline = time.monotonic() + 180
        while not (output.exists() and output.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return running, time.perf_counter() - started


def measure(kind: str, records: int, with_connect: bool) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_kerr.local.broker import LocalBroker

    workdir = Path(tempfile.mkdtemp(prefix=f"kerr-bench-{kind}-"))
    broker = LocalBroker(kind=kind)
    started = time.perf_counter()
    broker.start()
    row: dict[str, Any] = {"broker": kind, "start_s": time.perf_counter() - started}
    try:
        config: dict[str, Any] = {"bootstrap.servers": broker.bootstrap_servers, "log_level": 0}
        admin = AdminClient(config)
        for name in ("load", "txn"):
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
        row["produce_per_s"] = produce(config, "load", records)
        row["consume_assign_per_s"], _ = consume(config, "load", records, group=False)
        row["consume_group_per_s"], row["group_join_s"] = consume(config, "load", records, group=True)
        assert broker.pid is not None
        row["rss_mib"] = rss_mib(broker.pid)
        row.update(transactional_behaviours(config, "txn"))
        if with_connect:
            row["connector_running_s"], row["first_sink_record_s"] = connect_latency(broker.bootstrap_servers, workdir)
    finally:
        broker.stop()
    return row


NUMERIC = ("start_s", "produce_per_s", "consume_assign_per_s", "consume_group_per_s", "group_join_s", "rss_mib",
           "connector_running_s", "first_sink_record_s")  # fmt: skip


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [row for row in rows if row["broker"] == kind]
        entry: dict[str, Any] = {}
        for metric in NUMERIC:
            values = [row[metric] for row in mine if metric in row]
            if values:
                entry[metric] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        for behaviour in ("read_committed_hides_aborted", "zombie_fenced", "delete_records"):
            entry[behaviour] = all(row[behaviour] for row in mine)
        summary[kind] = entry
    return summary


def chart(summary: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("produce_per_s", "produce (records/s)"),
        ("consume_assign_per_s", "consume, assign (records/s)"),
        ("consume_group_per_s", "consume, group (records/s)"),
        ("connector_running_s", "Connect sink created → RUNNING (s)"),
        ("first_sink_record_s", "record produced → in the sink (s)"),
        ("rss_mib", "broker RSS after the load (MiB)"),
    ]
    figure, axes = plt.subplots(2, 3, figsize=(13, 7))
    for axis, (metric, title) in zip(axes.flat, panels, strict=True):
        kinds = [kind for kind in KINDS if metric in summary[kind]]
        medians = [summary[kind][metric]["median"] for kind in kinds]
        errors = [
            [m - summary[k][metric]["min"] for k, m in zip(kinds, medians, strict=True)],
            [summary[k][metric]["max"] - m for k, m in zip(kinds, medians, strict=True)],
        ]
        axis.bar(kinds, medians, yerr=errors, capsize=6, color=["tab:green", "tab:orange"][: len(kinds)])
        axis.set_title(title, fontsize=10)
    figure.suptitle("Embedded brokers: median of alternating runs, bars show min to max")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-connect", action="store_true", help="skip the Kafka Connect latencies")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        for kind in KINDS if run % 2 == 0 else reversed(KINDS):
            row = measure(kind, args.records, not args.no_connect)
            row["run"] = run
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = summarize(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    machine = {"cores": __import__("os").cpu_count(), "python": sys.version.split()[0]}
    report = {"benchmark": "brokers", "records": args.records, "runs": args.runs, "machine": machine}
    report.update(summary=summary, rows=rows)
    (RESULTS / "brokers.json").write_text(json.dumps(report, indent=2) + "\n")
    chart(summary, RESULTS / "brokers.png")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
