"""Cost per record as the work grows: the job, the replay and the view's full count at 10^5 to 10^7 records.

Three parts, each timed from the outside on the embedded broker (``--broker``, default the
embedded default noida-db, with the local stack's client settings):

- ``job``: the error-aware job with a per-record transformation, as ``spark_job.py``'s
  ``error_aware`` mode runs it (its pieces are reused: input of about 100-byte orders at 1 %
  malformed in two partitions, ``errors.tolerance=all``, DLQ with context headers), Spark
  ``local[2]``; each run's sink and DLQ topics are deleted once it is timed;
- ``replay``: :class:`DlqReplay` with its defaults over a DLQ of Connect dead letters written
  by ``replay.py``'s writer (two partitions), into a fresh target topic, deleted after;
- ``count``: the DLQ view's full count: ``summarize`` chained with the page's bounds
  (200,000 records or 1 s a call) until ``complete``, over the same DLQ; the records it
  read must equal what was written.

Each size's input and DLQ are produced once and reused by every round; the parts alternate
within a round. Then the job alone at ``--partitions`` source partitions (1, 8, 64) over
``--partitions-records`` records, one input topic per count, alternating. Sizes from
``--large-from`` (10^7) come last and run up to ``--large-rounds`` rounds: a round after the
first starts only if, at the previous round's pace, it ends within ``--budget-minutes`` of
the start (the JSON says how many ran, ``storage.sizes.<n>.rounds_run``, and why it stopped).

Each run records its wall time, the CPU seconds of this process tree (the driver, Spark's
JVM and Python workers, the replay's and the count's clients) and of the broker apart, the
peak RSS of this tree without the broker (sampled every 0.25 s), what processes outside the
tree used meanwhile (``others_cores``) and the 1-minute load. A run waits first for the
broker to finish the work the previous one left it (noida-db rewrites its whole data file
after writes: ``broker_settle_cpu_s``, kept out of the per-record cost) and each round for a
quiet machine. Figures are medians with min-max over the rounds.

noida-db keeps every record twice: in memory, and in one JSON file (``kafka.json``) it
rewrites whole after writes. Its bytes per record on disk are measured here (``storage``):
a size whose projected file would not fit in ``--disk-fraction`` of the free disk, or
whose DLQ exceeds ``--max-dlq-records``, runs without that part, and the JSON says why.

Writes ``benchmarks/results/scaling.json`` and ``scaling.png`` (log-log: µs per record by size).

    .venv/bin/python benchmarks/scaling.py                                   # the full run
    .venv/bin/python benchmarks/scaling.py --sizes 100000 --rounds 1 --partitions-records 100000 --provisional
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread

RESULTS = Path(__file__).resolve().parent / "results"
PARTS = ("job", "replay", "count")
BAD_RATIO = 0.01
TRANSFORMATION = "spark_job_transforms.transform"
#: Others' CPU below which a round starts (cores).
QUIET_CORES = 0.3
#: The page's bounds for one summary call (``dlq_summary.py`` and the view's route use the same).
COUNT_CHUNK_RECORDS = 200_000
COUNT_CHUNK_SECONDS = 1.0


class RssPeak:
    """The peak resident memory of this process tree, the broker's subtree left out, while a run lasts.

    A thread sums ``VmRSS`` over the tree every ``interval_s``: what the job's workers, the
    replay or the count hold at most, to see whether memory grows with the record count.
    """

    def __init__(self, root: int, excluded: int | None, interval_s: float = 0.25) -> None:
        self.root, self.excluded, self.interval_s = root, excluded, interval_s
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, self.tree_rss_kib())
            self._stop.wait(self.interval_s)

    def tree_rss_kib(self) -> int:
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            pid = int(entry.name)
            children.setdefault(int(fields.get("PPid", "0")), []).append(pid)
            rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
        total, pending = 0, [self.root]
        while pending:
            pid = pending.pop()
            if pid == self.excluded:
                continue
            total += rss.get(pid, 0)
            pending.extend(children.get(pid, []))
        return total


class Stage:
    """The embedded broker, Spark and the meters a run needs, set up once."""

    def __init__(self, broker: Any, config: dict[str, Any], spark: Any, quiet_timeout: float) -> None:
        self.broker, self.config, self.spark, self.quiet_timeout = broker, config, spark, quiet_timeout
        self.broker_pid: int | None = broker.pid if broker is not None else None
        self.meter = CpuMeter({"broker": self.broker_pid} if self.broker_pid else {})
        self.meter.adopt_orphans()

    def broker_ticks(self) -> int:
        return self.meter.tree_ticks()[self.broker_pid] if self.broker_pid else 0

    def settle(self) -> tuple[float, float]:
        """Wait for the broker to finish what the last writes left it: (seconds waited, its CPU seconds meanwhile)."""
        from spark_job import wait_broker_idle

        before = self.broker_ticks()
        waited = wait_broker_idle(self.meter, self.broker_pid, timeout_s=300.0)
        return waited, (self.broker_ticks() - before) / self.meter.hz

    def timed(self, records: int, run: Callable[[], Outcome]) -> dict[str, Any]:
        """One run: wall, CPU of this tree and of the broker, peak RSS, others' cores, load; what it handled.

        The topics the run wrote are deleted after it is timed.
        """
        from spark_job import drop_topics

        settle_s, settle_cpu = self.settle()
        ticks_before = self.meter.tree_ticks()
        before = self.meter.sample()
        with RssPeak(os.getpid(), self.broker_pid) as rss:
            started = time.perf_counter()
            handled, written = run()
            seconds = time.perf_counter() - started
        after = self.meter.sample()
        ticks_after = self.meter.tree_ticks()
        if written:
            drop_topics(self.config, written)
        hz, root = self.meter.hz, self.meter.root
        cpu_all = (ticks_after[root] - ticks_before[root]) / hz
        broker_cpu = (ticks_after[self.broker_pid] - ticks_before[self.broker_pid]) / hz if self.broker_pid else 0.0
        return {
            "records": records,
            "handled": handled,
            "seconds": seconds,
            "cpu_s": cpu_all,
            "broker_cpu_s": broker_cpu,
            "client_cpu_s": cpu_all - broker_cpu,
            "wall_us_per_record": seconds / records * 1e6,
            "cpu_us_per_record": cpu_all / records * 1e6,
            "client_cpu_us_per_record": (cpu_all - broker_cpu) / records * 1e6,
            "broker_cpu_us_per_record": broker_cpu / records * 1e6,
            "peak_rss_mib": rss.peak_kib / 1024,
            "broker_settle_s": settle_s,
            "broker_settle_cpu_s": settle_cpu,
            "others_cores": self.meter.foreign_cores(before, after),
            "load_1m": os.getloadavg()[0],
        }


#: One timed run: the records it handled, and the topics it wrote, deleted once it is timed.
Outcome = tuple[int, list[str]]


def run_job(stage: Stage, topic: str, tag: str) -> Outcome:
    """The error-aware job over ``topic`` (``spark_job.py``'s ``error_aware`` mode); its sink and DLQ topics."""
    from spark_job import dead_letter_topic, real_job

    sink = f"{topic}.out.{tag}"
    return real_job(stage.spark, stage.config, topic, sink, tag, TRANSFORMATION), [sink, dead_letter_topic(topic, tag)]


def run_replay(stage: Stage, dlq: str, tag: str) -> Outcome:
    """The DLQ replay with its defaults into a fresh target topic (``replay.py``'s ``replay`` mode)."""
    from confluent_kafka.admin import AdminClient
    from replay import fresh_target, replay

    from airflow_kerr.replay.options import DEFAULT_BATCH_SIZE

    target, group = fresh_target(AdminClient(stage.config), f"scaling.{tag}")
    return replay(stage.config, dlq, target, group, None, DEFAULT_BATCH_SIZE), [target]


def full_count(config: dict[str, Any], dlq: str) -> Outcome:
    """The view's full count: chained ``summarize`` calls with the page's bounds until complete; records read."""
    from airflow_kerr.inspection.summary import summarize

    chunk = summarize(config, dlq, max_records=COUNT_CHUNK_RECORDS, max_seconds=COUNT_CHUNK_SECONDS)
    read = chunk.read
    while not chunk.complete:
        chunk = summarize(
            config, dlq, cursor=chunk.cursor, max_records=COUNT_CHUNK_RECORDS, max_seconds=COUNT_CHUNK_SECONDS
        )
        read += chunk.read
    return read, []


def run_part(stage: Stage, part: str, topic: str, dlq: str, tag: str) -> Outcome:
    """One run of ``part``: the job over ``topic``, or the replay or the full count over ``dlq``."""
    if part == "job":
        return run_job(stage, topic, tag)
    if part == "replay":
        return run_replay(stage, dlq, tag)
    return full_count(stage.config, dlq)


def data_dir_bytes(broker: Any) -> int | None:
    """Bytes under the broker's data directory (noida-db's ``kafka.json``); None for an in-memory broker."""
    directory = getattr(broker, "data_dir", None)
    if broker is None or directory is None or broker.kind != "noida":
        return None
    return int(subprocess.check_output(["du", "-sb", str(directory)]).split()[0])


def disk_free_bytes(path: str) -> int:
    return shutil.disk_usage(path).free


def stored_bytes(stage: Stage, before: int | None = None, timeout_s: float = 180.0) -> int | None:
    """The data file's size once noida-db has rewritten it after the last write (it starts a few seconds later).

    The size must differ from ``before`` (the size before the write), then hold for 3 s with the
    broker idle: the final run's first reading at 1,000,000 dead letters, taken when the size had
    merely held for 3 s, caught the file half rewritten (1.5 KB a record instead of 2.9).
    """
    if data_dir_bytes(stage.broker) is None:
        return None
    deadline = time.monotonic() + timeout_s
    last, steady = -1, 0
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = data_dir_bytes(stage.broker) or 0
        steady = steady + 1 if now == last and now != before else 0
        last = now
        if steady >= 3:
            stage.settle()
            if data_dir_bytes(stage.broker) == now:
                return now
            steady = 0
    return data_dir_bytes(stage.broker)


def summarize_rows(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians with min-max of a configuration's runs (one per round)."""
    keys = (
        "seconds",
        "wall_us_per_record",
        "cpu_us_per_record",
        "client_cpu_us_per_record",
        "broker_cpu_us_per_record",
        "peak_rss_mib",
        "broker_settle_cpu_s",
        "others_cores",
        "load_1m",
    )
    return {key: spread([run[key] for run in runs]) for key in keys} | {
        "records_per_s": spread([run["records"] / run["seconds"] for run in runs]),
        "handled": sorted({run["handled"] for run in runs}),
        "rounds": len(runs),
    }


def print_run(label: str, row: dict[str, Any]) -> None:
    print(
        f"  {label:<28} {row['seconds']:7.2f} s  {row['wall_us_per_record']:6.2f} µs/rec wall, "
        f"{row['client_cpu_us_per_record']:6.2f} + {row['broker_cpu_us_per_record']:5.2f} (broker) core-µs/rec, "
        f"peak {row['peak_rss_mib']:6.0f} MiB, others {row['others_cores']:.2f}, load {row['load_1m']:.2f}",
        flush=True,
    )


def size_limits(
    records: int, per_record: dict[str, float], free: int, args: argparse.Namespace, parts: list[str]
) -> tuple[list[str], dict[str, str]]:
    """Which parts fit at ``records``: the DLQ's projected data file and record count against the limits."""
    skipped: dict[str, str] = {}
    budget = free * args.disk_fraction
    need_input = per_record.get("input", 0.0) * records * 2  # the input, and one run's sink beside it
    need_dlq = per_record.get("dlq", 0.0) * records * 2  # the DLQ, and one replay's target beside it
    if "job" in parts and need_input > budget:
        skipped["job"] = f"the input and one run's output would take {need_input / 1e9:.1f} GB of {budget / 1e9:.1f} GB"
    dlq_parts = [p for p in ("replay", "count") if p in parts]
    if dlq_parts and records > args.max_dlq_records:
        reason = f"a DLQ of {records:,} records is above --max-dlq-records {args.max_dlq_records:,}"
        if per_record.get("dlq"):
            reason += (
                f" (noida-db would hold about {per_record['dlq'] * records / 1e9:.0f} GB on disk and rewrite it "
                f"whole after each write; {need_dlq / 1e9:.0f} GB with a replay's target)"
            )
        skipped |= dict.fromkeys(dlq_parts, reason)
    elif dlq_parts and need_dlq > budget:
        skipped |= dict.fromkeys(dlq_parts, f"the DLQ would take {need_dlq / 1e9:.1f} GB of {budget / 1e9:.1f} GB")
    return [p for p in parts if p not in skipped], skipped


def measure_sizes(
    stage: Stage, args: argparse.Namespace, stamp: int, sizes: list[int], storage: dict[str, Any], deadline: float
) -> list[dict[str, Any]]:
    """Every part at each of ``sizes``; each size's input and DLQ written once and reused by its rounds.

    ``storage`` carries the broker's bytes per record from size to size (what the next size
    would take is judged by them). A round after the first starts only if the previous one's
    time still fits before ``deadline`` (monotonic): the JSON says how many ran and why.
    """
    from replay import write_dlq
    from spark_job import drop_topics, produce

    rows: list[dict[str, Any]] = []
    per_record: dict[str, float] = storage["bytes_per_record"]
    for records in sorted(sizes):
        free = disk_free_bytes(
            str(stage.broker.data_dir) if stage.broker is not None and stage.broker.data_dir else "/tmp"
        )
        parts, skipped = size_limits(records, per_record, free, args, list(args.parts))
        rounds = args.rounds if records < args.large_from else args.large_rounds
        topic, source, dlq = (
            f"scale.in.{records}.{stamp}",
            f"scale.src.{records}.{stamp}",
            f"scale.dlq.{records}.{stamp}",
        )
        written: dict[str, Any] = {"free_disk_bytes_before": free, "skipped": skipped, "rounds": rounds}
        base = stored_bytes(stage) or 0
        if "job" in parts:
            started = time.perf_counter()
            produce(stage.config, topic, records, BAD_RATIO)
            written["input_write_s"] = time.perf_counter() - started
            size = stored_bytes(stage, base)
            if size is not None:
                per_record["input"] = (size - base) / records
                written["input_bytes_on_disk"], base = size - base, size
        if "replay" in parts or "count" in parts:
            started = time.perf_counter()
            write_dlq(stage.config, source, dlq, records)
            written["dlq_write_s"] = time.perf_counter() - started
            size = stored_bytes(stage, base)
            if size is not None:
                per_record["dlq"] = (size - base) / records
                written["dlq_bytes_on_disk"] = size - base
        written["data_dir_bytes"] = data_dir_bytes(stage.broker)
        written["free_disk_bytes_after"] = disk_free_bytes("/tmp")
        storage["sizes"][str(records)] = written
        storage["bytes_per_record"] = dict(per_record)
        print(f"{records:,} records: parts {parts}, {rounds} rounds; skipped {skipped}; storage {written}", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {part: [] for part in parts}
        last_round_s = 0.0
        for attempt in range(rounds):
            if attempt > 0 and time.monotonic() + last_round_s > deadline:
                written["rounds_stopped"] = (
                    f"after {attempt} of {rounds}: another round ({last_round_s:.0f} s) would pass the time budget"
                )
                print(f"  {written['rounds_stopped']}", flush=True)
                break
            round_started = time.monotonic()
            stage.meter.wait_quiet(QUIET_CORES, args.quiet_timeout)
            for part in parts:
                tag = f"{part}-{records}-{attempt}-{stamp}"
                row = stage.timed(records, partial(run_part, stage, part, topic, dlq, tag))
                expected = records - records // int(1 / BAD_RATIO) if part == "job" else records
                if row["handled"] != expected:
                    raise RuntimeError(f"{part} at {records:,} handled {row['handled']:,}, expected {expected:,}")
                row["round"] = attempt
                runs[part].append(row)
                print_run(f"{part} {records:,} round {attempt}", row)
            last_round_s = time.monotonic() - round_started
        written["rounds_run"] = len(next(iter(runs.values()), []))
        for part, part_runs in runs.items():
            rows.append(
                {
                    "series": "size",
                    "part": part,
                    "records": records,
                    "partitions": 2,
                    **summarize_rows(part_runs),
                    "runs": part_runs,
                }
            )
        drop_topics(stage.config, [topic, source, dlq])
        stage.settle()
    return rows


def measure_partitions(stage: Stage, args: argparse.Namespace, stamp: int) -> list[dict[str, Any]]:
    """The job over the same number of records in 1, 8, 64 source partitions, one topic per count, alternating."""
    from spark_job import drop_topics, produce

    records = args.partitions_records
    topics = {count: f"scale.parts.{count}.{stamp}" for count in args.partitions}
    for count, topic in topics.items():
        produce(stage.config, topic, records, BAD_RATIO, partitions=count)
    stored_bytes(stage)
    runs: dict[int, list[dict[str, Any]]] = {count: [] for count in topics}
    expected = records - records // int(1 / BAD_RATIO)
    for attempt in range(args.rounds):
        stage.meter.wait_quiet(QUIET_CORES, args.quiet_timeout)
        for count, topic in topics.items():
            tag = f"parts-{count}-{attempt}-{stamp}"
            row = stage.timed(records, partial(run_job, stage, topic, tag))
            if row["handled"] != expected:
                raise RuntimeError(f"job at {count} partitions handled {row['handled']:,}, expected {expected:,}")
            row["round"] = attempt
            runs[count].append(row)
            print_run(f"job {count} partitions round {attempt}", row)
    drop_topics(stage.config, list(topics.values()))
    return [
        {
            "series": "partitions",
            "part": "job",
            "records": records,
            "partitions": count,
            **summarize_rows(part_runs),
            "runs": part_runs,
        }
        for count, part_runs in runs.items()
    ]


def warm_up(stage: Stage, records: int, stamp: int) -> None:
    """One untimed job: the session's first starts Spark's Python workers."""
    from spark_job import drop_topics, produce

    topic = f"scale.warmup.{stamp}"
    produce(stage.config, topic, records, BAD_RATIO)
    _, written = run_job(stage, topic, f"warmup-{stamp}")
    drop_topics(stage.config, [topic, *written])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--rounds", type=int, default=5, help="rounds below --large-from records, and for partitions")
    parser.add_argument("--large-from", type=int, default=10_000_000, help="sizes from here run --large-rounds")
    parser.add_argument("--large-rounds", type=int, default=2)
    parser.add_argument("--partitions", type=int, nargs="*", default=[1, 8, 64])
    parser.add_argument("--partitions-records", type=int, default=1_000_000)
    parser.add_argument("--max-dlq-records", type=int, default=1_000_000, help="largest DLQ the embedded broker holds")
    parser.add_argument("--disk-fraction", type=float, default=0.3, help="share of the free disk a size may take")
    parser.add_argument("--quiet-timeout", type=float, default=60.0, help="longest wait for a quiet machine a round")
    parser.add_argument("--broker", choices=("noida", "tansu"), default=None, help="embedded broker (default: noida)")
    parser.add_argument(
        "--budget-minutes", type=float, default=22.0, help="a large size's further rounds start only within this"
    )
    parser.add_argument("--provisional", action="store_true", help="mark the figures provisional (a busy machine)")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pyspark.sql import SparkSession

    from airflow_kerr.local.broker import LocalBroker, resolve_bootstrap_servers
    from airflow_kerr.spark import kafka_source

    external = resolve_bootstrap_servers()
    broker = None if external else LocalBroker(kind=args.broker).start()
    config: dict[str, Any] = {"bootstrap.servers": external}
    if broker is not None:
        config = {**broker.client_config, "bootstrap.servers": broker.bootstrap_servers}
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYTHONPATH", str(Path(__file__).resolve().parent))
        .getOrCreate()
    )
    kafka_source.register(spark)
    stamp = int(time.time())
    stage = Stage(broker, config, spark, args.quiet_timeout)
    started = time.monotonic()
    deadline = started + args.budget_minutes * 60
    storage: dict[str, Any] = {"bytes_per_record": {}, "sizes": {}}
    load_before = os.getloadavg()
    try:
        warm_up(stage, 50_000, stamp)
        # The large sizes last: the partitions are measured whole before the budget decides their rounds.
        rows = measure_sizes(stage, args, stamp, [n for n in args.sizes if n < args.large_from], storage, deadline)
        if args.partitions:
            rows += measure_partitions(stage, args, stamp)
        rows += measure_sizes(stage, args, stamp, [n for n in args.sizes if n >= args.large_from], storage, deadline)
    finally:
        spark.stop()
        if broker is not None:
            broker.stop()
    broker_name = "KAFKA_BOOTSTRAP_SERVERS" if broker is None else f"embedded {broker.kind}"
    payload = {
        "benchmark": "scaling",
        "provisional": args.provisional,
        "machine": {"cpus": os.cpu_count(), "spark_master": "local[2]", "broker": broker_name},
        "statistic": "median (min-max) of the rounds; per record = the run's figure / its records",
        "cpu_note": (
            "cpu_us_per_record: CPU of this process tree (driver, Spark JVM and Python workers, clients) and the "
            "broker; client_ and broker_ split it; broker_settle_cpu_s is what the broker spent after the previous "
            "run's writes (noida-db rewrites its data file), kept out of the per-record figures"
        ),
        "settings": {
            "sizes": sorted(args.sizes),
            "rounds": args.rounds,
            "large_from": args.large_from,
            "large_rounds": args.large_rounds,
            "budget_minutes": args.budget_minutes,
            "partitions": args.partitions,
            "partitions_records": args.partitions_records,
            "bad_ratio": BAD_RATIO,
            "count_chunk": {"max_records": COUNT_CHUNK_RECORDS, "max_seconds": COUNT_CHUNK_SECONDS},
        },
        "storage": storage,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "total_minutes": round((time.monotonic() - started) / 60, 1),
        "results": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scaling.json").write_text(json.dumps(payload, indent=2) + "\n")
    chart(payload, RESULTS / "scaling.png")
    return 0


def chart(payload: dict[str, Any], path: Path) -> None:
    """Log-log: µs per record (wall, and core-µs) by size for each part; and the job by source partitions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (by_size, by_parts) = plt.subplots(1, 2, figsize=(13, 5))
    colors = {"job": "tab:blue", "replay": "tab:green", "count": "tab:orange"}
    sized = [r for r in payload["results"] if r["series"] == "size"]
    for part in PARTS:
        rows = sorted((r for r in sized if r["part"] == part), key=lambda r: r["records"])
        if not rows:
            continue
        xs = [r["records"] for r in rows]
        for key, style, label in (("wall_us_per_record", "-o", "wall"), ("cpu_us_per_record", "--s", "CPU")):
            medians = [r[key]["median"] for r in rows]
            low = [m - r[key]["min"] for m, r in zip(medians, rows, strict=True)]
            high = [r[key]["max"] - m for m, r in zip(medians, rows, strict=True)]
            by_size.errorbar(xs, medians, yerr=[low, high], fmt=style, color=colors[part], capsize=3,
                             label=f"{part}, {label}")  # fmt: skip
    by_size.set_xscale("log")
    by_size.set_yscale("log")
    by_size.set_xlabel("records")
    by_size.set_ylabel("µs per record (median, min-max); CPU = core-µs, broker included")
    by_size.set_title("cost per record by size (flat = linear)", fontsize=10)
    by_size.legend(fontsize=7)
    rows = sorted((r for r in payload["results"] if r["series"] == "partitions"), key=lambda r: r["partitions"])
    if rows:
        xs = [r["partitions"] for r in rows]
        for key, style, label in (
            ("wall_us_per_record", "-o", "wall"),
            ("cpu_us_per_record", "--s", "CPU, all"),
            ("broker_cpu_us_per_record", ":^", "CPU, broker"),
        ):
            medians = [r[key]["median"] for r in rows]
            low = [m - r[key]["min"] for m, r in zip(medians, rows, strict=True)]
            high = [r[key]["max"] - m for m, r in zip(medians, rows, strict=True)]
            by_parts.errorbar(xs, medians, yerr=[low, high], fmt=style, capsize=3, label=label)
        by_parts.set_xscale("log")
        by_parts.set_yscale("log")
        by_parts.set_xticks(xs, [str(x) for x in xs])
        by_parts.set_xlabel("source partitions")
        by_parts.set_ylabel("µs per record (median, min-max)")
        by_parts.set_title(f"the job, {rows[0]['records']:,} records, by source partitions", fontsize=10)
        by_parts.legend(fontsize=7)
    note = " (PROVISIONAL: busy machine)" if payload["provisional"] else ""
    figure.suptitle(f"Scaling, {payload['machine']['broker']}, local[2], 2 cores{note}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
