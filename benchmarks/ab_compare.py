"""A/B of one benchmark: a base revision's copy of the script against this tree's, runs alternating.

Why a driver: on this shared 2-core machine one run of each side says little. Alternating
(base, new, base, new, …) spreads the machine's drift over both sides, and the load noted
before each run (load average, and the cores processes outside this driver's tree used over
the last quiet-wait span) says which runs a busy machine may have slowed. Each side runs its
own tree's script with its own tree's ``airflow_kerr`` first on ``PYTHONPATH`` (the venv's
editable install would otherwise give both sides this tree's package), with the same
arguments; each run's results JSON is copied to ``--out``.

    git worktree add /tmp/kerr-base 9b12ef9
    .venv/bin/python benchmarks/ab_compare.py --base /tmp/kerr-base --out /tmp/ab/dlq dlq_summary.py
    .venv/bin/python benchmarks/ab_compare.py --base /tmp/kerr-base --out /tmp/ab/replay \\
        replay.py --modes raw+txn,replay --no-profile

Prints, for each figure, median (min-max) of every inner run per side and the ratio of the
medians (new / base), and writes them with every run's load to ``--out``/ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine_load import CpuMeter

HERE = Path(__file__).resolve().parent.parent
QUIET_CORES = 0.3


def dlq_summary_figures(report: dict[str, Any]) -> dict[str, list[float]]:
    runs = report["runs"]
    return {
        "first_figures_s": [r["first_figures_s"] for r in runs],
        "full_counts_s": [r["full_counts_s"] for r in runs],
        "records_per_s_full": [r["records_read"] / r["full_counts_s"] for r in runs],
    }


def replay_figures(report: dict[str, Any]) -> dict[str, list[float]]:
    records = report["records"]
    figures = {f"{mode} records/s": [records / s for s in seconds] for mode, seconds in report["seconds"].items()}
    if "raw+txn" in report["seconds"] and "replay" in report["seconds"]:
        pairs = zip(report["seconds"]["raw+txn"], report["seconds"]["replay"], strict=True)
        figures["replay / raw+txn"] = [raw / replay for raw, replay in pairs]
    return figures


#: Script → (its results JSON under benchmarks/results/, the figures read from it).
SCRIPTS: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, list[float]]]]] = {
    "dlq_summary.py": ("dlq_summary.json", dlq_summary_figures),
    "replay.py": ("replay.json", replay_figures),
}


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the base revision's work tree (git worktree add)")
    parser.add_argument("--out", type=Path, required=True, help="folder for each run's JSON and ab.json")
    parser.add_argument("--runs", type=int, default=5, help="runs of each side")
    parser.add_argument("--quiet-timeout", type=float, default=900.0, help="longest wait for quiet before a run")
    parser.add_argument("script", choices=sorted(SCRIPTS))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for both sides' script")
    args = parser.parse_args()
    results_name, figures_of = SCRIPTS[args.script]
    args.out.mkdir(parents=True, exist_ok=True)
    meter = CpuMeter()
    runs: list[dict[str, Any]] = []
    for index in range(args.runs):
        for side, tree in (("base", args.base.resolve()), ("new", HERE)):
            waited, others = meter.wait_quiet(QUIET_CORES, args.quiet_timeout)
            load = os.getloadavg()
            git = ["git", "-C", str(tree)]
            head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True)
            # Others may be editing the package while this runs: note any uncommitted change to it.
            dirty = subprocess.run([*git, "status", "--porcelain", "airflow_kerr"], capture_output=True)
            print(f"[{side} {index}] waited {waited:.0f} s; others {others:.2f} cores, load {load[0]:.2f}", flush=True)
            started = time.monotonic()
            env = {**os.environ, "PYTHONPATH": str(tree)}
            command = [sys.executable, str(tree / "benchmarks" / args.script), *args.args]
            subprocess.run(command, cwd=tree, env=env, check=True)
            copy = args.out / f"{index}-{side}.json"
            shutil.copyfile(tree / "benchmarks" / "results" / results_name, copy)
            runs.append(
                {
                    "side": side,
                    "index": index,
                    "commit": head.stdout.decode().strip(),
                    "uncommitted_in_airflow_kerr": dirty.stdout.decode().split("\n")[:-1],
                    "waited_for_quiet_s": round(waited, 1),
                    "others_cores_before": round(others, 3),
                    "load_average_before": [round(x, 2) for x in load],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()],
                    "seconds": round(time.monotonic() - started, 1),
                    "figures": figures_of(json.loads(copy.read_text())),
                }
            )
    summary: dict[str, Any] = {}
    for name in runs[0]["figures"]:
        sides = {s: spread([v for r in runs if r["side"] == s for v in r["figures"][name]]) for s in ("base", "new")}
        summary[name] = {**sides, "new / base": sides["new"]["median"] / sides["base"]["median"]}
        base, new = sides["base"], sides["new"]
        print(
            f"{name:<24} base {base['median']:.4g} ({base['min']:.4g}-{base['max']:.4g}), "
            f"new {new['median']:.4g} ({new['min']:.4g}-{new['max']:.4g}), new/base {summary[name]['new / base']:.3f}"
        )
    report = {"script": args.script, "args": args.args, "base": str(args.base), "summary": summary, "runs": runs}
    (args.out / "ab.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
