"""Live breach latency: the data crosses the guard's threshold → the sink PAUSED, while the task still runs.

Each cycle runs the error-aware job (real Spark, ``local[1]``, one task over one partition)
on a real broker. A paced transformation (``--pace-ms`` per record) passes records until
``BAD_FROM`` and fails every one from there; the task goes on for ``--tail-s`` seconds after
that, so it is still reading when the guard reacts. The guard is the tolerance guard's
breach sensor (``ToleranceSensor`` with ``pause_on_breach``, poking every ``--poke`` s, as
``tolerance_guard``'s ``wait_for_breach`` does) watching ``max_errors=E``: its rule holds
from the (E+1)-th failed record on, the *crossing record*. The transformation notes the time
it fails that record (t0). A real Kafka Connect worker runs ``live-sink`` (a FileStreamSink
on the job's output topic); ``/status`` is polled every 20 ms until it reads PAUSED.

Stages (their sum is the total, t0 → PAUSED): t0 → the first interim metrics record that
holds the crossing (its ``window_end_ms``: published every ``metrics_interval_ms``, 1 s by
default) → the start of the sensor's look that saw it → Connect accepted the pause
(``paused_on_breach.asked_at_ms``) → PAUSED seen. A cycle counts only if the task's final
metrics record was written after PAUSED (``task_running_at_paused``).

What is not Airflow here: the sensor's ``poke`` is called in a loop by this script, as the
sensor's own poke loop would (``dag.test()`` of the whole guard adds its later tasks, not
latency). No quiet-machine gate by default (``--quiet`` waits for one before each cycle);
the load is recorded with each cycle. Writes ``benchmarks/results/live_breach_latency.json``
and ``live_breach_latency.png``.

    .venv/bin/python benchmarks/live_breach_latency.py --cycles 10
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter

RESULTS = Path(__file__).resolve().parent / "results"
CONNECTOR = "live-sink"
METRICS_TOPIC = "live.metrics"
OUTPUT_TOPIC = "live.clean"
STATUS_POLL_S = 0.02
GOAL_MEDIAN_S = 2.0
GOAL_MAX_S = 4.0
QUIET_CORES = 0.15

STAGES = (
    ("cross_to_record", "crossing record failed → first interim metrics record holding it"),
    ("record_to_reading", "that record → the sensor's look that saw it"),
    ("reading_to_pause_asked", "that look → Connect accepted the pause"),
    ("pause_asked_to_paused", "pause accepted → connector PAUSED seen"),
)

PACED_MODULE = """
import os
import time
from pathlib import Path

PACE_S = float(os.environ["KERR_BENCH_PACE_S"])
BAD_FROM = int(os.environ["KERR_BENCH_BAD_FROM"])
CROSS = int(os.environ["KERR_BENCH_CROSS"])
MARK = Path(os.environ["KERR_BENCH_MARK"])


def paced(record):
    \"\"\"One record every PACE_S; from BAD_FROM on each fails; the CROSS-th notes when it failed (t0).\"\"\"
    time.sleep(PACE_S)
    n = record.value["n"]
    if n < BAD_FROM:
        return record
    if n == CROSS:
        MARK.write_text(repr(time.time()))
    raise ValueError(f"poison record {n}")
"""


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_before": list(os.getloadavg()),
    }


class Stack:
    """Broker, Connect worker with ``live-sink``, a Spark session whose Python workers import the paced module."""

    def __init__(self, workdir: Path, args: argparse.Namespace) -> None:
        self.workdir = workdir
        self.args = args
        self.mark = workdir / "crossed"

    def __enter__(self) -> Stack:
        from airflow_kerr.local.broker import LocalBroker, connection_variables, ensure_topics
        from airflow_kerr.local.connect_worker import ConnectWorker, connector_config

        modules = self.workdir / "modules"
        modules.mkdir()
        (modules / "kerr_bench_live.py").write_text(textwrap.dedent(PACED_MODULE))
        os.environ.update(
            {
                "PYTHONPATH": os.pathsep.join(filter(None, [str(modules), os.environ.get("PYTHONPATH")])),
                "KERR_BENCH_PACE_S": str(self.args.pace_ms / 1000),
                "KERR_BENCH_BAD_FROM": str(self.bad_from),
                "KERR_BENCH_CROSS": str(self.bad_from + self.args.max_errors),
                "KERR_BENCH_MARK": str(self.mark),
                "PYSPARK_PYTHON": sys.executable,  # the data source's workers too, not the first python3 on PATH
            }
        )
        self.broker = LocalBroker(log_path=self.workdir / "broker.log").__enter__()
        self.bootstrap = self.broker.bootstrap_servers
        ensure_topics(self.bootstrap, {METRICS_TOPIC: 1, OUTPUT_TOPIC: 1, "live.dlq": 1})
        self.connect = ConnectWorker(self.bootstrap, self.workdir / "connect").start()
        self.connect.add_connector(CONNECTOR, connector_config(OUTPUT_TOPIC, str(self.workdir / "sink.jsonl")))
        os.environ.update(connection_variables(self.bootstrap, self.connect.host, self.connect.port))
        from pyspark.sql import SparkSession

        self.spark = (
            SparkSession.builder.master("local[1]")
            .appName("kerr-live-breach")
            .config("spark.ui.enabled", "false")
            .config("spark.pyspark.python", sys.executable)
            .getOrCreate()
        )
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.spark.stop()
        finally:
            try:
                self.connect.stop()
            finally:
                self.broker.__exit__(None, None, None)

    @property
    def bad_from(self) -> int:
        return int(self.args.clean_s * 1000 / self.args.pace_ms)

    @property
    def records(self) -> int:
        return self.bad_from + self.args.max_errors + int(self.args.tail_s * 1000 / self.args.pace_ms)

    def state(self) -> str:
        try:
            return str(self.connect.status(CONNECTOR)["connector"]["state"])
        except Exception:  # a worker busy rebalancing answers 409: look again
            return "?"

    def resume(self) -> None:
        self.connect.rest("PUT", f"/connectors/{CONNECTOR}/resume")
        while self.state() != "RUNNING":
            time.sleep(0.1)


def cycle(stack: Stack, number: int, meter: CpuMeter) -> dict[str, Any]:
    from confluent_kafka import Producer

    from airflow_kerr.kafka.metrics_topic import read_metrics_records
    from airflow_kerr.local.broker import ensure_topics
    from airflow_kerr.sensors.tolerance import ToleranceSensor
    from airflow_kerr.spark.driver import run_job
    from airflow_kerr.spark.spec import PipelineSpec

    args = stack.args
    name = f"live-{number}-{int(time.time())}"
    ensure_topics(stack.bootstrap, {name: 1})
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    for n in range(stack.records):
        producer.produce(name, value=json.dumps({"n": n}).encode())
        producer.poll(0)
    producer.flush(60)
    stack.mark.unlink(missing_ok=True)
    spec = PipelineSpec.from_dict(
        {
            "name": name,
            "source": {"topics": [name], "group_id": f"{name}-g"},
            "value_converter": "json",
            "transformations": ["kerr_bench_live.paced"],
            "sink": {"kind": "kafka", "topic": OUTPUT_TOPIC},
            "kafka": {"bootstrap.servers": stack.bootstrap},
            "metrics_topic": METRICS_TOPIC,
            "metrics_interval_ms": args.interval_ms,
            "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "live.dlq"},
        }
    )
    sensor = ToleranceSensor(
        task_id="wait_for_breach",
        pipeline=name,
        metrics_topic=METRICS_TOPIC,
        window=600,
        max_errors=args.max_errors,
        min_records=0,
        pause_on_breach=[CONNECTOR],
        poke_interval=args.poke,
    )
    found: dict[str, Any] = {}
    stop = threading.Event()

    def guard() -> None:
        while not stop.is_set():
            result = sensor.poke({})
            if result:
                found["reading"] = getattr(result, "xcom_value", None)
                return
            stop.wait(args.poke)

    def watch_status() -> None:
        while not stop.is_set():
            if stack.state() == "PAUSED":
                found["paused_s"] = time.time()
                return
            time.sleep(STATUS_POLL_S)

    if args.quiet:
        meter.wait_quiet(QUIET_CORES, 1800.0)
    before = meter.sample()
    threads = [threading.Thread(target=guard), threading.Thread(target=watch_status)]
    for thread in threads:
        thread.start()
    try:
        run_job(stack.spark, spec, run_id=name)
    finally:
        stop.set()  # the guard looks no more once the run ended, breach or not
        for thread in threads:
            thread.join(timeout=60)
    after = meter.sample()
    if "paused_s" not in found or "reading" not in found:
        raise RuntimeError(f"cycle {number}: no breach seen or no PAUSED: {found}")
    t0 = float(stack.mark.read_text())
    records = read_metrics_records({"bootstrap.servers": stack.bootstrap}, METRICS_TOPIC, int(t0 * 1000) - 600_000)
    mine = [r for r in records if r.get("pipeline") == name and r.get("scope") == "task"]
    holding = [r for r in mine if int(r["total-record-errors"]) > args.max_errors]
    first = min(holding, key=lambda r: int(r["window_end_ms"]))
    final = [r for r in mine if not r.get("interim")]
    reading = found["reading"]
    asked_ms = ((reading.get("paused_on_breach") or {}).get(CONNECTOR) or {}).get("asked_at_ms")
    moments = {
        "t0": t0,
        "record": int(first["window_end_ms"]) / 1000,
        "reading": int(reading["window_end_ms"]) / 1000,
        "asked": asked_ms / 1000 if asked_ms else None,
        "paused": found["paused_s"],
    }
    keys = ["t0", "record", "reading", "asked", "paused"]
    stages = {
        key: (moments[b] - moments[a]) if moments[a] is not None and moments[b] is not None else None
        for (key, _), a, b in zip(STAGES, keys[:-1], keys[1:], strict=True)
    }
    final_ms = int(final[0]["window_end_ms"]) if final else None
    stack.resume()
    return {
        "cycle": number,
        "total_s": found["paused_s"] - t0,
        "stages_s": stages,
        "task_running_at_paused": final_ms is not None and final_ms / 1000 > found["paused_s"],
        "task_final_record_after_paused_s": final_ms / 1000 - found["paused_s"] if final_ms else None,
        "records": stack.records,
        "others_cores": meter.foreign_cores(before, after),
        "load_average_1m": os.getloadavg()[0],
    }


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["cycles"]
    labels = [f"cycle {row['cycle']}" for row in rows]
    figure, axis = plt.subplots(figsize=(9, 0.45 * len(labels) + 2.2))
    left = [0.0] * len(labels)
    for (key, label), color in zip(STAGES, ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=True):
        values = [row["stages_s"][key] or 0.0 for row in rows]
        axis.barh(labels, values, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, values, strict=True)]
    axis.axvline(GOAL_MEDIAN_S, color="gray", linestyle="--", label=f"goal (median): {GOAL_MEDIAN_S:g} s")
    axis.invert_yaxis()
    total = report["summary"]["total_s"]
    axis.set_xlabel("seconds after the crossing record failed")
    axis.set_title(
        f"Live breach → live-sink PAUSED, task still running: median {total['median']:.2f} s "
        f"({total['min']:.2f} to {total['max']:.2f}), n={total['n']}",
        fontsize=8,
    )
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--pace-ms", type=float, default=2.0, help="time per record in the job's transformation")
    parser.add_argument("--clean-s", type=float, default=6.0, help="seconds of clean records before the bad ones")
    parser.add_argument("--tail-s", type=float, default=20.0, help="seconds the task runs on after the crossing")
    parser.add_argument("--max-errors", type=int, default=50, help="the guard's max_errors")
    parser.add_argument("--poke", type=float, default=1.0, help="the guard sensor's poke interval (make demo: 1 s)")
    parser.add_argument("--interval-ms", type=int, default=1000, help="the job's metrics_interval_ms")
    parser.add_argument("--quiet", action="store_true", help="wait for a quiet machine before each cycle")
    parser.add_argument("--out", type=Path, default=RESULTS / "live_breach_latency.json")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "live_breach_latency",
        "machine": machine(),
        "settings": {
            key: getattr(args, key) for key in ("cycles", "pace_ms", "clean_s", "tail_s", "max_errors", "poke")
        }
        | {
            "metrics_interval_ms": args.interval_ms,
            "quiet_gate": args.quiet,
            "goal_median_s": GOAL_MEDIAN_S,
            "goal_max_s": GOAL_MAX_S,
            "spark": "local[1], one task over one partition",
        },
        "stages": dict(STAGES),
        "cycles": [],
    }
    meter = CpuMeter()
    with tempfile.TemporaryDirectory(prefix="kerr-live-bench-") as workdir, Stack(Path(workdir), args) as stack:
        report["settings"]["records_per_run"] = stack.records
        for number in range(1, args.cycles + 1):
            row = cycle(stack, number, meter)
            report["cycles"].append(row)
            print(
                f"cycle {number}: {row['total_s']:.2f} s, running at PAUSED: {row['task_running_at_paused']}, "
                f"{ {k: round(v, 3) for k, v in row['stages_s'].items() if v is not None} }",
                flush=True,
            )
    counted = [row for row in report["cycles"] if row["task_running_at_paused"]]
    report["machine"]["load_average_after"] = list(os.getloadavg())
    report["summary"] = {"total_s": spread([row["total_s"] for row in counted])} if counted else {}
    if counted:
        report["summary"]["stages_s"] = {
            key: spread([row["stages_s"][key] for row in counted if row["stages_s"][key] is not None])
            for key, _ in STAGES
        }
    report["summary"]["not_counted"] = len(report["cycles"]) - len(counted)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if counted:
        chart(report, args.out.with_suffix(".png"))
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    raise SystemExit(main())
