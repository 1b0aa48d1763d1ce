"""The DLQ view's full count, a base revision's code against this tree's, on one broker and one DLQ.

Why not ``ab_compare.py dlq_summary.py``: each ``dlq_summary.py`` run starts its own broker
and writes its own million dead letters, and how the producer's batches land in the log
moves with the machine while it writes. On this 2-core machine the same code's full count
then ranged 15-25 s, and its process CPU 12.7-21 s, from run to run (``ab_compare``'s runs
of 2026-11-26), more than the 5 % the two sides are compared to. Here the broker and the
DLQ are written once, as ``dlq_summary.py`` writes them (Connect's ten headers per record),
and each side counts that same log in a fresh process, in the page's way (chained
``summarize`` chunks of at most 1 s), with the sides in ABBA order so that a drift of the
machine falls on both. Each count records its wall time, the process's CPU time and the
main thread's (the Python loop; librdkafka's threads are the rest).

    git worktree add /tmp/kerr-base 9b12ef9
    .venv/bin/python benchmarks/dlq_count_ab.py --base /tmp/kerr-base            # 6 rounds, 1,000,000 records

Writes ``benchmarks/results/dlq_count_ab.json`` and ``dlq_count_ab.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from dlq_summary import write_dlq
from graceful import exit_on_sigterm
from machine_load import CpuMeter

RESULTS = Path(__file__).resolve().parent / "results"
HERE = Path(__file__).resolve().parent.parent
QUIET_CORES = 0.3
FIGURES = ("wall_s", "cpu_s", "main_thread_cpu_s")
#: One full count with whichever ``airflow_kerr`` is first on ``PYTHONPATH``; prints its figures as JSON.
COUNT = """
import json, resource, sys, time
try:
    from airflow_kerr.inspection.summary import summarize
except ImportError:  # a checkout from before DLQ inspection had its own room
    from airflow_kerr.kafka.dead_letter_inspection import summarize
config, topic = json.loads(sys.argv[1]), sys.argv[2]
before, started, thread = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), time.thread_time()
chunks = [summarize(config, topic, max_records=200_000, max_seconds=1.0)]
while not chunks[-1].complete:
    chunks.append(summarize(config, topic, cursor=chunks[-1].cursor, max_records=200_000, max_seconds=1.0))
wall, thread = time.perf_counter() - started, time.thread_time() - thread
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "main_thread_cpu_s": thread,
                  "read": sum(c.read for c in chunks), "chunks": len(chunks)}))
"""


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def count_once(tree: Path, config: dict[str, Any], topic: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", COUNT, json.dumps(config), topic],
        env=env,
        cwd="/",  # not a tree: only PYTHONPATH decides whose airflow_kerr is imported
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the base revision's work tree (git worktree add)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds; each counts once per side")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--quiet-timeout", type=float, default=120.0, help="longest wait for quiet before a count")
    args = parser.parse_args()

    from airflow_kerr.local.broker import LocalBroker

    trees = {"base": args.base.resolve(), "new": HERE}
    commits = {
        side: subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        for side, tree in trees.items()
    }
    broker = LocalBroker().start()
    config: dict[str, Any] = {"bootstrap.servers": broker.bootstrap_servers, **broker.client_config}
    topic = f"bench.dlq_count_ab.{uuid.uuid4().hex[:8]}.dlq"
    meter = CpuMeter()
    runs: list[dict[str, Any]] = []
    try:
        written_s = write_dlq(config, topic, args.records, args.partitions)
        print(f"wrote {args.records:,} dead letters in {written_s:.1f} s", flush=True)
        for index in range(args.rounds):
            for side in ("base", "new") if index % 2 == 0 else ("new", "base"):
                waited, others = meter.wait_quiet(QUIET_CORES, args.quiet_timeout)
                row = count_once(trees[side], config, topic)
                if row["read"] != args.records:
                    raise SystemExit(f"{side} counted {row['read']} records of {args.records}")
                row.update(side=side, round=index, waited_for_quiet_s=waited, others_cores_before=others)
                row["load_average_after"] = list(os.getloadavg())
                runs.append(row)
                print(f"[{side} {index}] " + ", ".join(f"{k} {row[k]:.2f}" for k in FIGURES), flush=True)
    finally:
        broker.stop()
    summary: dict[str, Any] = {}
    for name in FIGURES:
        sides = {side: spread([r[name] for r in runs if r["side"] == side]) for side in trees}
        summary[name] = {**sides, "new / base": sides["new"]["median"] / sides["base"]["median"]}
        print(f"{name:<18} new / base {summary[name]['new / base']:.3f}")
    report = {
        "benchmark": "dlq_count_ab",
        "records": args.records,
        "partitions": args.partitions,
        "commits": commits,
        "write_s": written_s,
        "machine": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "summary": summary,
        "runs": runs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "dlq_count_ab.json").write_text(json.dumps(report, indent=2) + "\n")
    chart(report, RESULTS / "dlq_count_ab.png")
    return 0


def chart(report: dict[str, Any], path: Path) -> None:
    """One group of bars per figure: each side's median with its min-max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for offset, side in ((-0.2, "base"), (0.2, "new")):
        medians = [report["summary"][f][side]["median"] for f in FIGURES]
        low = [m - report["summary"][f][side]["min"] for f, m in zip(FIGURES, medians, strict=True)]
        high = [report["summary"][f][side]["max"] - m for f, m in zip(FIGURES, medians, strict=True)]
        xs = [i + offset for i in range(len(FIGURES))]
        ax.bar(xs, medians, width=0.4, yerr=[low, high], capsize=4, label=f"{side} ({report['commits'][side]})")
    ax.set_xticks(range(len(FIGURES)), [f"{f}\nnew/base {report['summary'][f]['new / base']:.3f}" for f in FIGURES])
    ax.set_ylabel("seconds for the full count")
    ax.set_title(f"DLQ view full count of {report['records']:,} Connect dead letters, one log, ABBA")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
