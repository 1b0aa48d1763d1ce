"""Tolerance guard costs: breach-to-paused latency, and 100 DLQ-sensor triggers in one event loop.

A. Latency. The guard (``tolerance_guard``, metrics-free DLQ mode, ``max_errors=10``)
   watches a sink connector on a real Kafka Connect worker. Each trial writes 50 DLQ
   records; latency runs from the first DLQ record's timestamp to ``/status``
   showing PAUSED. Several poke intervals.
B. Cost of waiting. 100 ``DeadLetterQueueTrigger`` instances (poll interval
   ``--poll``) share one asyncio loop for ``--seconds``; we report CPU seconds per
   minute of the process and the requests their clients sent to the broker, read
   from librdkafka's own statistics (``stats_cb``), by request type.

Writes ``benchmarks/results/guard_latency.json`` and ``guard_latency.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm

RESULTS = Path(__file__).resolve().parent / "results"
HERE = Path(__file__).resolve().parent


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def configure_airflow(home: Path, bootstrap: str, connect_url: tuple[str, int]) -> Path:
    from airflow_kerr.local.broker import connection_variables

    dags = home / "dags"
    dags.mkdir(parents=True)
    stats = {"statistics.interval.ms": 1000, "stats_cb": "kafka_stats.record"}
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW__APACHE_KAFKA__CALLBACK_ALLOWLIST": "kafka_stats.record",
            **connection_variables(bootstrap, *connect_url, kafka_extra=stats),
            "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
    )
    import subprocess

    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return dags


def write_breach(
    producer: Any, connect: Any, name: str, dag_id: str, interval: float, timeline: dict[str, float]
) -> None:
    """Once the breach sensor has sampled a few times, write 50 DLQ records; note when, and when PAUSED shows."""
    from airflow_kerr.local.demo import task_running

    while not task_running(dag_id, "tolerance_guard.wait_for_breach"):
        time.sleep(0.1)
    time.sleep(interval * 2.5)
    first = int(time.time() * 1000)
    for _ in range(50):
        producer.produce(f"{name}.dlq", value=b"{bad", timestamp=first)
    producer.flush(10)
    timeline["first_dlq_ms"] = first
    while connect.status(name)["connector"]["state"] != "PAUSED":
        time.sleep(0.01)
    timeline["paused_ms"] = time.time() * 1000


def latency_trials(bootstrap: str, connect: Any, dags: Path, intervals: list[float], trials: int) -> list[dict]:
    from airflow.dag_processing.dagbag import DagBag
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from airflow_kerr.local.connect_worker import connector_config

    config: dict[str, Any] = {"bootstrap.servers": bootstrap}
    admin = AdminClient(config)
    rows = []
    for interval in intervals:
        for trial in range(trials):
            name = f"lat-{str(interval).replace('.', '_')}-{trial}-{int(time.time())}"
            for topic in (name, f"{name}.dlq"):
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            connect.add_connector(name, connector_config(name, f"{name}.jsonl"))
            group = f"connect-{name}"
            dag_id = name.replace("-", "_")
            dag_file = dags / f"{dag_id}.py"
            dag_file.write_text(
                "import pendulum\n"
                "from airflow.sdk import DAG\n"
                "from airflow_kerr.task_groups.tolerance_guard import tolerance_guard\n"
                f"with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1),"
                " params={'resume_without_recovery': True}):\n"
                f"    tolerance_guard(connectors={name!r}, source='dlq', dlq_topic={name + '.dlq'!r},"
                f" source_topics=[{name!r}], consumer_group={group!r}, max_errors=10, min_records=50,"
                f" window=120, poke_interval={interval})\n"
            )
            # Only this trial's file: the folder holds every earlier trial's DAG too.
            dag = DagBag(dag_folder=str(dag_file)).get_dag(dag_id)
            producer = Producer(config)
            timeline: dict[str, float] = {}

            writer = threading.Thread(target=write_breach, args=(producer, connect, name, dag_id, interval, timeline))
            writer.start()
            run = dag.test()
            writer.join(timeout=120)
            states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
            latency = (timeline["paused_ms"] - timeline["first_dlq_ms"]) / 1000
            rows.append({"poke_interval_s": interval, "trial": trial, "latency_s": latency, "states": states})
            print(f"  poke {interval:>4} s, trial {trial}: breach-to-paused {latency:.2f} s", flush=True)
    return rows


async def run_triggers(topic: str, count: int, poll: float, seconds: float) -> None:
    from airflow_kerr.triggers.dead_letter_queue import DeadLetterQueueTrigger

    async def wait(trigger: DeadLetterQueueTrigger) -> None:
        async for _ in trigger.run():
            return

    triggers = [
        DeadLetterQueueTrigger(topic=topic, baseline={"0": 10**9}, min_records=1, poll_interval=poll)
        for _ in range(count)
    ]
    tasks = [asyncio.create_task(wait(t)) for t in triggers]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def trigger_cost(bootstrap: str, count: int, poll: float, seconds: float) -> dict[str, Any]:
    import kafka_stats
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"cost.dlq.{int(time.time())}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    asyncio.run(run_triggers(topic, count, poll, 3.0))
    before_requests = kafka_stats.totals()
    before_cpu = cpu_seconds()
    started = time.monotonic()
    asyncio.run(run_triggers(topic, count, poll, seconds))
    elapsed = time.monotonic() - started
    used = cpu_seconds() - before_cpu
    requests = kafka_stats.totals()
    requests.subtract(before_requests)
    per_minute = {name: round(n * 60 / elapsed) for name, n in requests.items() if n > 0}
    return {
        "triggers": count,
        "poll_interval_s": poll,
        "seconds": elapsed,
        "cpu_seconds_per_minute": used * 60 / elapsed,
        "broker_requests_per_minute": per_minute,
        "broker_requests_per_minute_total": sum(per_minute.values()),
        "note": "the first run (trigger start-up: connection, metadata) is excluded; clients persist across runs",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--intervals", type=float, nargs="+", default=[1.0, 2.0, 5.0])
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--triggers", type=int, default=100)
    parser.add_argument("--poll", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))

    from airflow_kerr.local.broker import LocalBroker
    from airflow_kerr.local.connect_worker import ConnectWorker

    workdir = Path(tempfile.mkdtemp(prefix="kerr-guard-bench-"))
    with LocalBroker() as broker:
        connect = ConnectWorker(broker.bootstrap_servers, workdir / "connect").start()
        try:
            dags = configure_airflow(workdir / "airflow", broker.bootstrap_servers, (connect.host, connect.port))
            print("A. breach-to-paused latency", flush=True)
            latency = latency_trials(broker.bootstrap_servers, connect, dags, args.intervals, args.trials)
            print(f"B. {args.triggers} DLQ triggers, poll {args.poll} s, {args.seconds} s", flush=True)
            cost = trigger_cost(broker.bootstrap_servers, args.triggers, args.poll, args.seconds)
            print(
                f"  {cost['cpu_seconds_per_minute']:.2f} CPU s/min, requests/min {cost['broker_requests_per_minute']}"
            )
        finally:
            connect.stop()
    write_results(latency, cost)
    return 0


def write_results(latency: list[dict[str, Any]], cost: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "guard_latency.json").write_text(
        json.dumps({"benchmark": "guard_latency", "latency": latency, "trigger_cost": cost}, indent=2) + "\n"
    )
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    intervals = sorted({row["poke_interval_s"] for row in latency})
    for interval in intervals:
        values = [row["latency_s"] for row in latency if row["poke_interval_s"] == interval]
        left.scatter([interval] * len(values), values, color="tab:blue")
    left.plot(intervals, [2 * i for i in intervals], "--", color="gray", label="2 poke intervals")
    left.set_xlabel("poke interval (s)")
    left.set_ylabel("first DLQ record → PAUSED (s)")
    left.set_title("Breach-to-paused latency")
    left.legend()
    names = sorted(cost["broker_requests_per_minute"])
    right.bar(names, [cost["broker_requests_per_minute"][n] for n in names])
    right.set_title(
        f"{cost['triggers']} DLQ triggers, poll {cost['poll_interval_s']:.0f} s: "
        f"{cost['cpu_seconds_per_minute']:.1f} CPU s/min"
    )
    right.set_ylabel("broker requests / minute")
    figure.tight_layout()
    figure.savefig(RESULTS / "guard_latency.png", dpi=120)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
