"""What 100 breach pausers on one Kafka Connect connection hold, sharing one client or each its own.

A tolerance watch with ``pause_on_breach`` prepares its Connect client when it opens
(:class:`airflow_kerr.hooks.breach_pause.BreachPauser`); an ``httpx`` client builds an SSL
context and a connection pool, so 100 watches used to hold 100 of them. Now the pausers of
one process on the same connection settings share one; ``KERR_SHARED_WATCH_CLIENTS=0`` gives
each its own again (how they ran before), which is the other set-up here.

Each run is a fresh Python process (alternating shared / own, ``--runs`` of each) that imports
the hook, reads VmRSS, prepares ``--watches`` pausers on one ``kafka_connect`` connection
(a port nothing listens on: preparing reads the connection and makes the client, no request
goes out), and reads VmRSS again. Reported: the RSS growth, median (min-max) per set-up, and the
CPU others used meanwhile (``machine_load.CpuMeter``).

    .venv/bin/python benchmarks/connect_client_sharing.py --runs 5

Writes ``benchmarks/results/connect_client_sharing.json`` and ``connect_client_sharing.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread

RESULTS = Path(__file__).resolve().parent / "results"
MODES = {"shared": "1", "own": "0"}


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(watches: int) -> dict[str, Any]:
    """One process: RSS before and after ``watches`` pausers prepared their client (sharing per the env)."""
    import gc

    from airflow_kerr.hooks.breach_pause import BreachPauser

    connection = {"conn_type": "kafka_connect", "host": "127.0.0.1", "port": 9, "schema": "http"}
    os.environ["AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"] = json.dumps(connection)
    warm = BreachPauser("kafka_connect_default", ["warm-up"])  # imports and first-use caches, in both set-ups
    warm.prepare()
    warm.close()
    gc.collect()
    before = rss_mib()
    pausers = [BreachPauser("kafka_connect_default", [f"sink-{n}"]) for n in range(watches)]
    for pauser in pausers:
        pauser.prepare()
    gc.collect()
    after = rss_mib()
    clients = len({id(pauser._hook) for pauser in pausers if pauser._hook is not None})
    for pauser in pausers:
        pauser.close()
    return {"rss_before_mib": before, "rss_after_mib": after, "growth_mib": after - before, "clients": clients}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--watches", type=int, default=100)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.watches)))
        return 0
    meter = CpuMeter()
    rows: list[dict[str, Any]] = []
    before = meter.sample()
    for run in range(args.runs):
        for mode in MODES if run % 2 == 0 else reversed(list(MODES)):
            env = {**os.environ, "KERR_SHARED_WATCH_CLIENTS": MODES[mode]}
            command = [sys.executable, __file__, "--child", "--watches", str(args.watches)]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=300)
            row = {"run": run, "mode": mode, **json.loads(out.stdout.strip().splitlines()[-1])}
            rows.append(row)
            print(json.dumps(row), flush=True)
    after = meter.sample()
    summary = {
        mode: {
            "growth_mib": spread([r["growth_mib"] for r in rows if r["mode"] == mode]),
            "clients": spread([r["clients"] for r in rows if r["mode"] == mode]),
        }
        for mode in MODES
    }
    report = {
        "what": f"RSS growth of one process as {args.watches} BreachPausers on one connection prepare their client",
        "provisional": "taken while other sessions used the 2-core machine (see others_cores, load_average)",
        "watches": args.watches,
        "others_cores": meter.foreign_cores(before, after),
        "load_average": list(os.getloadavg()),
        "summary": summary,
        "runs": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "connect_client_sharing.json").write_text(json.dumps(report, indent=2) + "\n")
    chart(summary, args.watches, RESULTS / "connect_client_sharing.png")
    print(json.dumps(summary, indent=2))
    return 0


def chart(summary: dict[str, dict[str, dict[str, float]]], watches: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 3.5))
    labels = [f"{mode} ({summary[mode]['clients']['median']:.0f} clients)" for mode in MODES]
    growth = [summary[mode]["growth_mib"] for mode in MODES]
    medians = [g["median"] for g in growth]
    errors = [
        [m - g["min"] for m, g in zip(medians, growth, strict=True)],
        [g["max"] - m for m, g in zip(medians, growth, strict=True)],
    ]
    axis.bar(labels, medians, yerr=errors, capsize=6)
    axis.set_ylabel("RSS growth, MiB")
    axis.set_title(f"{watches} breach pausers on one Connect connection: median, bars min to max", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    exit_on_sigterm()
    raise SystemExit(main())
