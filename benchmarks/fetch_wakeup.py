"""How soon an idle consumer reads a new record through the fetch shim: record written → record read.

The fetch shim (``airflow_kerr/local/fetch_shim.py``) holds an idle consumer's empty Fetch for up
to 500 ms and lets it go when a write is acknowledged. Without that wake-up a record written while
the fetch is held waits out the rest of the hold (about 250 ms on average); with it the consumer
should read about as soon as on bare noida-db, which answers every empty Fetch at once (and spins).
``tests/integration/test_fetch_shim.py`` checks that a write lets a held fetch go (counted by the
shim); this script measures how long it takes.

Each run starts a fresh broker, shimmed or bare (alternating), and takes ``--samples`` latencies: the
consumer idles 0.3 s (its fetch held), a record is produced, and the time runs from the ``produce``
call to ``poll`` returning the record (``ack_to_read``: from the producer's delivery acknowledgement,
``flush``, which bare noida-db's spinning consumer often beats). A run's figure is the median of
its samples; the report gives the median of the run figures with min and max, and the CPU others
used on the machine during each run (``machine_load.CpuMeter``) with the load average.

    .venv/bin/python benchmarks/fetch_wakeup.py --runs 5

Writes ``benchmarks/results/fetch_wakeup.json`` and ``fetch_wakeup.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ("shim", "bare")
FETCH_WAIT_MS = 500


def wakeup_latencies_ms(bootstrap: str, samples: int) -> tuple[list[float], list[float]]:
    """(written → read, acknowledged → read) latencies, in ms, of one idle consumer."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"wake-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"wake-{topic}", "fetch.wait.max.ms": FETCH_WAIT_MS}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    latencies: list[float] = []
    after_ack: list[float] = []
    try:
        while consumer.poll(0.5) is not None:
            pass
        for index in range(samples):
            consumer.poll(0.3)  # idle: the consumer's fetch is held (shim) or spinning (bare)
            written = time.monotonic()
            producer.produce(topic, b"%d" % index)
            if producer.flush(10) != 0:
                raise RuntimeError("a record was not acknowledged within 10 s")
            acknowledged = time.monotonic()
            message = consumer.poll(10)
            if message is None or message.error() is not None or message.value() != b"%d" % index:
                raise RuntimeError(f"record {index} was not read back: {message and message.error()}")
            read = time.monotonic()
            latencies.append((read - written) * 1000)
            after_ack.append((read - acknowledged) * 1000)
    finally:
        consumer.close()
    return latencies, after_ack


def one_run(kind: str, samples: int) -> dict[str, Any]:
    from airflow_kerr.local.broker import FETCH_SHIM_ENV, LocalBroker

    os.environ[FETCH_SHIM_ENV] = "1" if kind == "shim" else "0"
    broker = LocalBroker(kind="noida").start()
    meter = CpuMeter()
    try:
        before = meter.sample()
        latencies, after_ack = wakeup_latencies_ms(broker.bootstrap_servers, samples)
        after = meter.sample()
    finally:
        broker.stop()
    return {
        "kind": kind,
        "shimmed": broker.shimmed,
        "median_ms": statistics.median(latencies),
        "ack_to_read_median_ms": statistics.median(after_ack),
        "latencies_ms": latencies,
        "others_cores": meter.foreign_cores(before, after),
        "load_average": list(os.getloadavg()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=21)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        for kind in KINDS if run % 2 == 0 else reversed(KINDS):
            row = {"run": run, **one_run(kind, args.samples)}
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "latencies_ms"}), flush=True)
    summary = {
        kind: {
            **spread([row["median_ms"] for row in rows if row["kind"] == kind]),
            "others_cores_max": max(row["others_cores"] for row in rows if row["kind"] == kind),
        }
        for kind in KINDS
    }
    RESULTS.mkdir(exist_ok=True)
    report = {
        "what": "produce() called -> record read by an idle consumer, ms; a run's figure is its samples' median",
        "provisional": "taken while other sessions used the 2-core machine (see others_cores, load_average)",
        "fetch_wait_max_ms": FETCH_WAIT_MS,
        "samples_per_run": args.samples,
        "summary": summary,
        "runs": rows,
    }
    (RESULTS / "fetch_wakeup.json").write_text(json.dumps(report, indent=2) + "\n")
    chart(summary, RESULTS / "fetch_wakeup.png")
    print(json.dumps(summary, indent=2))
    return 0


def chart(summary: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    medians = [summary[kind]["median"] for kind in KINDS]
    errors = [
        [m - summary[k]["min"] for k, m in zip(KINDS, medians, strict=True)],
        [summary[k]["max"] - m for k, m in zip(KINDS, medians, strict=True)],
    ]
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.bar(["noida-db + shim", "bare noida-db"], medians, yerr=errors, capsize=6, color=["tab:green", "tab:gray"])
    axis.axhline(FETCH_WAIT_MS / 2, color="tab:red", linestyle="--", label="half the hold (no wake-up)")
    axis.set_yscale("log")
    axis.set_ylabel("record written → record read, ms (log)")
    axis.set_title("Idle consumer, fetch.wait.max.ms=500: median of runs, bars min to max", fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    exit_on_sigterm()
    raise SystemExit(main())
