"""How hard an idle consumer polls each embedded broker: fetch requests per second on an empty partition.

A broker should hold a fetch for up to ``fetch.max.wait.ms`` (here 500 ms) when it has no
data, so an idle consumer sends about two fetches a second. For each run and each broker
(the brokers alternating), a fresh broker is started, one confluent-kafka consumer is
assigned to an empty partition with ``fetch.wait.max.ms=500``, and librdkafka's own
statistics count the fetch requests it sent in ``--seconds`` seconds. This is why the
embedded Kafka Connect worker runs at a lower priority (``local/connect_worker.py``).

Figures are medians with min and max over the runs. Writes
``benchmarks/results/idle_fetch.json`` and ``idle_fetch.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm

RESULTS = Path(__file__).resolve().parent / "results"
KINDS = ("noida", "tansu")
FETCH_WAIT_MS = 500


def idle_fetches_per_s(bootstrap: str, seconds: float) -> float:
    """Fetch requests per second one consumer sends while its partition stays empty."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"idle-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    fetches: list[int] = []

    def stats(raw: str) -> None:
        brokers = json.loads(raw)["brokers"].values()
        fetches.append(sum(b.get("req", {}).get("Fetch", 0) for b in brokers if b.get("nodeid", -1) >= 0))

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"idle-{uuid.uuid4().hex[:8]}",
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            "statistics.interval.ms": 1000,
            "stats_cb": stats,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        deadline = time.monotonic() + 2  # settle: connect and find the leader first
        while time.monotonic() < deadline:
            consumer.poll(0.2)
        start, started = (fetches[-1] if fetches else 0), time.monotonic()
        while time.monotonic() - started < seconds:
            consumer.poll(0.2)
        return (fetches[-1] - start) / (time.monotonic() - started)
    finally:
        consumer.close()


def main() -> int:
    from airflow_kerr.local.broker import LocalBroker

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for run in range(args.runs):
        for kind in KINDS if run % 2 == 0 else reversed(KINDS):
            broker = LocalBroker(kind=kind).start()
            try:
                row = {
                    "run": run,
                    "broker": kind,
                    "fetches_per_s": idle_fetches_per_s(broker.bootstrap_servers, args.seconds),
                }
            finally:
                broker.stop()
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {}
    for kind in KINDS:
        values = [row["fetches_per_s"] for row in rows if row["broker"] == kind]
        summary[kind] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "idle_fetch.json").write_text(
        json.dumps(
            {"fetch_wait_max_ms": FETCH_WAIT_MS, "seconds": args.seconds, "runs": rows, "summary": summary}, indent=2
        )
        + "\n"
    )
    chart(summary, RESULTS / "idle_fetch.png")
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
    axis.bar(KINDS, medians, yerr=errors, capsize=6, color=["tab:green", "tab:orange"])
    axis.set_yscale("log")
    axis.set_ylabel("fetch requests per second (log)")
    axis.set_title(f"One idle consumer, fetch.wait.max.ms={FETCH_WAIT_MS}: median, bars min to max", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    exit_on_sigterm()
    raise SystemExit(main())
