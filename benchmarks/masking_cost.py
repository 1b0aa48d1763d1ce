"""What masking costs on long text: ``mask_text`` on a run of identifier characters, 128 KB to 1 MB.

A failed record's message can quote a hex dump or a long token; every exit (the DLQ view, a
trigger's event, an alert) masks it. The key pattern is possessive (``[A-Za-z0-9_.\\-]*+``), so
the time grows with the text, not with its square. ``tests/unit/errors/test_masking_texts.py``
checks what a long identifier masks to; this script measures how long it takes.

Each run masks, for each size (sizes alternating in order run to run), ``"a" * size + ": b"`` (an
identifier that is no credential) and ``"a" * size + " password=x"`` (one that is), timing each with
``time.perf_counter``. A run's figure per size is the median of ``--repeats`` calls; the report gives
the median of the runs with min and max, microseconds per KB (flat when linear), and the CPU others
used on the machine during the runs (``machine_load.CpuMeter``) with the load average.

    .venv/bin/python benchmarks/masking_cost.py --runs 5

Writes ``benchmarks/results/masking_cost.json`` and ``masking_cost.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (128_000, 256_000, 512_000, 1_000_000)
CASES = {"no credential": ": b", "credential": " password=hunter2"}


def time_ms(text: str, repeats: int) -> float:
    """The median of ``repeats`` timings of ``mask_text(text)``, in ms."""
    from airflow_kerr.errors.masking import mask_text

    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        mask_text(text)
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    meter = CpuMeter()
    rows: list[dict[str, Any]] = []
    before = meter.sample()
    for run in range(args.runs):
        for size in SIZES if run % 2 == 0 else reversed(SIZES):
            for case, tail in CASES.items():
                row = {"run": run, "size": size, "case": case, "ms": time_ms("a" * size + tail, args.repeats)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    after = meter.sample()
    summary = {
        case: {
            str(size): {
                **spread([row["ms"] for row in rows if row["case"] == case and row["size"] == size]),
                "us_per_kb": statistics.median(
                    row["ms"] * 1000 / (size / 1000) for row in rows if row["case"] == case and row["size"] == size
                ),
            }
            for size in SIZES
        }
        for case in CASES
    }
    report = {
        "what": "mask_text on 'a' * size + a tail, ms; a run's figure is the median of its repeats",
        "provisional": "taken while other sessions used the 2-core machine (see others_cores, load_average)",
        "others_cores": meter.foreign_cores(before, after),
        "load_average": list(os.getloadavg()),
        "summary": summary,
        "runs": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "masking_cost.json").write_text(json.dumps(report, indent=2) + "\n")
    chart(summary, RESULTS / "masking_cost.png")
    print(json.dumps(summary, indent=2))
    return 0


def chart(summary: dict[str, dict[str, dict[str, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6, 4))
    kb = [size / 1000 for size in SIZES]
    for case, by_size in summary.items():
        medians = [by_size[str(size)]["median"] for size in SIZES]
        errors = [
            [m - by_size[str(s)]["min"] for s, m in zip(SIZES, medians, strict=True)],
            [by_size[str(s)]["max"] - m for s, m in zip(SIZES, medians, strict=True)],
        ]
        axis.errorbar(kb, medians, yerr=errors, capsize=4, marker="o", label=case)
    axis.set_xlabel("identifier run, KB")
    axis.set_ylabel("mask_text, ms")
    axis.set_title("mask_text on a long identifier: median of runs, bars min to max", fontsize=9)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    exit_on_sigterm()
    raise SystemExit(main())
