"""DLQ replay throughput against a raw confluent-kafka consume→produce loop, in one run.

A DLQ of ``--records`` orders (about 100-byte values, Connect's ten ``__connect.errors.*``
headers with a short stack trace, two partitions) is written once. Then, alternating and
best of ``--repeat``, each mode reads all of it with a fresh consumer group and writes every
record to the source topic:

- ``raw``: the cheapest copy loop: ``consume`` batches, ``produce`` each record with its
  headers unchanged, one synchronous offset commit at the end; no parsing, no transactions;
- ``raw+txn``: the same loop in KIP-656 transactions of 500 records with the offsets, to
  separate the cost of the transactions from the cost of the replay's own work;
- ``replay``: :class:`DlqReplay` with transactions on (500 records per transaction, the
  offsets committed in each): parse, select, strip the error headers, add lineage;
- ``replay+fix``: the same with the example's ``repair_order`` fix (JSON decode and encode);
- ``raw+txn@5000``, ``replay@5000``, ``replay+fix@5000``: the same three at 5000 records per
  transaction (``--large-batch``; the replay's ``batch_size``), as a bulk replay is configured.

The target (replay >= 0.5x) is evaluated against ``raw+txn`` at the same transaction batch
size: both loops then do the same exactly-once work, so the ratio measures the replay's own
per-record cost. The ratio to ``raw`` (no transactions at all) is reported too.

Each time covers everything from creating the clients to the last commit. Writes
``benchmarks/results/replay.json`` and ``replay.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_RATIO = 0.5


def write_dlq(config: dict[str, Any], source: str, dlq: str, count: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record

    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(source, 2, 1), NewTopic(dlq, 2, 1)]).values():
        future.result(30)
    try:
        raise ValueError("order has a non-positive amount: -12.5")
    except ValueError as caught:
        error = caught
    producer = Producer(
        {**config, "linger.ms": 50, "batch.num.messages": 10000, "queue.buffering.max.messages": 500000}
    )
    for i in range(count):
        value = b'{"id": "o-%08d", "customer": "c-0042", "amount": -12.5, "currency": "EUR", "note": "xxxxx"}' % i
        record = SourceRecord(source, i % 2, i, 1_795_250_000_000, key=b"o-%08d" % i, value=value)
        record.headers = [("trace-id", b"%016x" % i)]
        context = ErrorContext(TaskId("orders_pipeline", i % 2), Stage.TRANSFORMATION, "bench.validate", error, record)
        built = build_dead_letter_record(context, topic=dlq)
        while True:
            try:
                producer.produce(**built.produce_kwargs())
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0


def core_parse_us(config: dict[str, Any], dlq: str) -> float:
    """Microseconds the core's ``parse_dead_letter`` takes for one record of this DLQ: the replay's largest cost."""
    import timeit

    from confluent_kafka import Consumer, TopicPartition

    from airflow_kerr.errors import parse_dead_letter

    consumer = Consumer({**config, "group.id": "bench.parse", "enable.auto.commit": False})
    consumer.assign([TopicPartition(dlq, 0, 0)])
    message = None
    while message is None or message.error() is not None:
        message = consumer.poll(5)
    consumer.close()
    headers, key, value = message.headers(), message.key(), message.value()
    runs = 20_000
    seconds = timeit.timeit(
        lambda: parse_dead_letter(headers, key, value, topic=dlq, partition=0, offset=0, timestamp=0), number=runs
    )
    return seconds / runs * 1e6


def raw_copy(config: dict[str, Any], dlq: str, target: str, count: int, group: str) -> int:
    """The baseline: consume → produce with headers unchanged, commit once at the end."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    producer = Producer({**config, "linger.ms": 5})
    consumer.assign([TopicPartition(dlq, 0, 0), TopicPartition(dlq, 1, 0)])
    copied = 0
    while copied < count:
        for message in consumer.consume(500, 1.0):
            if message.error() is not None:
                continue
            while True:
                try:
                    producer.produce(target, message.value(), message.key(), headers=message.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer.commit(asynchronous=False)
    consumer.close()
    return copied


def raw_transactional_copy(
    config: dict[str, Any], dlq: str, target: str, count: int, group: str, batch: int = 500
) -> int:
    """The baseline with KIP-656's loop added: ``batch`` records and their offsets per transaction."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed"})
    producer = Producer({**config, "transactional.id": f"bench.raw.{group}"})
    producer.init_transactions(30)
    consumer.assign([TopicPartition(dlq, 0, 0), TopicPartition(dlq, 1, 0)])
    positions: dict[int, int] = {}
    copied = 0
    while copied < count:
        messages = [m for m in consumer.consume(min(batch, count - copied), 1.0) if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            producer.produce(target, message.value(), message.key(), headers=message.headers())
            positions[int(message.partition() or 0)] = int(message.offset() or 0) + 1
        offsets = [TopicPartition(dlq, p, o) for p, o in positions.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        copied += len(messages)
    consumer.close()
    return copied


def replay(config: dict[str, Any], dlq: str, group: str, fix: str | None, batch: int = 500) -> int:
    from airflow_kerr.kafka.replay import DlqReplay
    from airflow_kerr.kafka.replay_options import ReplayOptions

    options = ReplayOptions.build(dlq_topic=dlq, replay_group=group, fix=fix, batch_size=batch)
    summary = DlqReplay(config, options, run_id=group, transactional_id_prefix=f"bench.{group}").run()
    assert summary.status == "completed", summary
    return summary.replayed


def batch_of(mode: str) -> int:
    """Records per transaction of a mode: the ``@N`` suffix, else 500."""
    return int(mode.partition("@")[2] or 500)


def same_batch_raw_txn(mode: str) -> str:
    """The ``raw+txn`` mode with the same transaction batch size as ``mode``."""
    return "raw+txn" + mode[len(mode.partition("@")[0]) :]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--large-batch", type=int, default=5000, help="records per transaction of the @N runs")
    args = parser.parse_args()

    from airflow_kerr.local.broker import LocalBroker, resolve_bootstrap_servers

    broker = None if resolve_bootstrap_servers() else LocalBroker().start()
    config = {"bootstrap.servers": resolve_bootstrap_servers() or broker.bootstrap_servers}  # type: ignore[union-attr]
    stamp = int(time.time())
    source, dlq = f"bench.replay.orders.{stamp}", f"bench.replay.orders.{stamp}.dlq"
    large = f"@{args.large_batch}"
    modes = ["raw", "raw+txn", "replay", "replay+fix", f"raw+txn{large}", f"replay{large}", f"replay+fix{large}"]
    timings: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        started = time.perf_counter()
        write_dlq(config, source, dlq, args.records)
        print(f"wrote {args.records} DLQ records in {time.perf_counter() - started:.1f} s", flush=True)
        for attempt in range(args.repeat):
            for mode in timings:
                group = f"bench.{mode.replace('+', '-').replace('@', '-')}.{attempt}.{stamp}"
                batch = batch_of(mode)
                started = time.perf_counter()
                if mode == "raw":
                    written = raw_copy(config, dlq, source, args.records, group)
                elif mode.startswith("raw+txn"):
                    written = raw_transactional_copy(config, dlq, source, args.records, group, batch)
                else:
                    fix = "airflow_kerr.examples.orders.repair_order" if mode.startswith("replay+fix") else None
                    written = replay(config, dlq, group, fix, batch)
                timings[mode].append(time.perf_counter() - started)
                assert written == args.records, f"{mode} wrote {written} of {args.records}"
                rate = args.records / timings[mode][-1]
                print(f"  {mode:<16} run {attempt}: {timings[mode][-1]:.2f} s, {rate:,.0f} records/s", flush=True)
        parse_us = core_parse_us(config, dlq)
    finally:
        if broker is not None:
            broker.stop()
    best = {mode: args.records / min(values) for mode, values in timings.items()}
    replays = [mode for mode in modes if mode.startswith("replay")]
    to_raw_txn = {mode: round(best[mode] / best[same_batch_raw_txn(mode)], 3) for mode in replays}
    results = {
        "records": args.records,
        "transaction_batch_sizes": sorted({batch_of(mode) for mode in modes if mode != "raw"}),
        "records_per_s": {mode: round(rate) for mode, rate in best.items()},
        "ratio_to_raw": {mode: round(rate / best["raw"], 3) for mode, rate in best.items() if mode != "raw"},
        "ratio_to_raw_txn": to_raw_txn,
        "target": {
            "ratio": TARGET_RATIO,
            "evaluated_against": (
                "raw+txn at the same transaction batch size: replay vs a raw confluent-kafka consume→produce "
                "loop, both with transactions on (records and offsets in one transaction per batch)"
            ),
            "met": {mode: to_raw_txn[mode] >= TARGET_RATIO for mode in replays},
            "ratio_to_raw_without_transactions": {mode: round(best[mode] / best["raw"], 3) for mode in replays},
        },
        "microseconds_per_record": {mode: round(1e6 / rate, 1) for mode, rate in best.items()},
        "core_parse_dead_letter_us": round(parse_us, 1),
        "seconds": timings,
    }
    for mode in replays:
        verdict = "met" if results["target"]["met"][mode] else "NOT met"
        print(
            f"{mode} / {same_batch_raw_txn(mode)} = {to_raw_txn[mode]:.2f}x (target >= {TARGET_RATIO}x: {verdict}); "
            f"/ raw without transactions = {results['ratio_to_raw'][mode]:.2f}x"
        )
    print(f"per record (us): {results['microseconds_per_record']}; core parse_dead_letter: {parse_us:.1f} us")
    write_results(results)
    return 0


def write_results(results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "replay",
        "machine": {"cpus": os.cpu_count()},
        "broker": "KAFKA_BOOTSTRAP_SERVERS" if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") else "embedded Tansu 0.6.0",
        "target_ratio": TARGET_RATIO,
        **results,
    }
    (RESULTS / "replay.json").write_text(json.dumps(payload, indent=2) + "\n")
    modes = list(results["records_per_s"])
    rates = [results["records_per_s"][mode] for mode in modes]
    colors = {"raw": "#888888", "raw+txn": "#bbbbbb", "replay": "#1f77b4", "replay+fix": "#2ca02c"}
    figure, axis = plt.subplots(figsize=(9, 4.5))
    bars = axis.bar(range(len(modes)), rates, color=[colors[mode.partition("@")[0]] for mode in modes])
    axis.set_xticks(range(len(modes)), [mode if "@" in mode or mode == "raw" else f"{mode}@500" for mode in modes])
    axis.tick_params(axis="x", labelsize=8)
    target_label = f"target {TARGET_RATIO}x raw+txn at the same batch size"
    for bar, mode in zip(bars, modes, strict=True):
        if mode in results["ratio_to_raw_txn"]:
            label = f"{results['ratio_to_raw_txn'][mode]:.2f}x txn"
            target = results["records_per_s"][same_batch_raw_txn(mode)] * TARGET_RATIO
            axis.hlines(target, bar.get_x(), bar.get_x() + bar.get_width(), color="#d62728", label=target_label)
            target_label = "_nolegend_"
        else:
            label = "baseline" if mode == "raw" else f"{results['ratio_to_raw'][mode]:.2f}x raw"
        x = bar.get_x() + bar.get_width() / 2
        axis.annotate(label, (x, bar.get_height()), ha="center", va="bottom", fontsize=8)
    axis.set_ylabel("records / s")
    axis.set_title(f"DLQ replay vs raw consume→produce, {results['records']:,} records (@N: records per transaction)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(RESULTS / "replay.png", dpi=120)


if __name__ == "__main__":
    sys.exit(main())
