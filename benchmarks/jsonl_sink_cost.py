"""One partition task's in-thread cost per clean record with a ``jsonl`` sink: json values, string keys.

The job of ``benchmarks/connect_peer.py`` (b) without Spark and without a broker: a real
:class:`PartitionProcessor` runs batches of 8,192 ~100-byte orders in the ``kerr_kafka``
Arrow schema through its converters and its ``jsonl`` sink, and the sink writes its file
once per round (the task's flush). Reports µs per record, median of the rounds with min-max,
and the machine's load; writes ``benchmarks/results/jsonl_sink_cost.json`` and a PNG chart.
Each run adds its rounds to those of its ``--label``, so code before and after a change can be
run alternately (``PYTHONPATH`` naming each tree in turn).

Run it from the worktree root: ``PYTHONPATH=$PWD .venv/bin/python benchmarks/jsonl_sink_cost.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from airflow_kerr.spark.kafka_source import _arrow_schema
from airflow_kerr.spark.partition import PartitionProcessor
from airflow_kerr.spark.spec import PipelineSpec

BATCH = 8_192
RESULTS = Path(__file__).parent / "results" / "jsonl_sink_cost.json"


def orders_batch(start: int, count: int = BATCH) -> Any:
    """``count`` clean orders of about 100 bytes, as the ``kerr_kafka`` source hands them to a task."""
    rows = range(start, start + count)
    values = [
        json.dumps({"id": row, "customer": f"c-{row % 997}", "amount": round(row * 0.37, 2), "currency": "EUR"})
        .encode()
        .ljust(100, b" ")
        for row in rows
    ]
    return pa.RecordBatch.from_pydict(
        {
            "key": [f"k-{row}".encode() for row in rows],
            "value": values,
            "topic": ["orders"] * count,
            "partition": pa.array([0] * count, pa.int32()),
            "offset": pa.array(list(rows), pa.int64()),
            "timestamp": pa.array([1_700_000_000_000_000 + row for row in rows], pa.timestamp("us", tz="UTC")),
            "timestamp_type": pa.array([0] * count, pa.int32()),
            "headers": pa.array([[] for _ in rows], _arrow_schema().field("headers").type),
        },
        schema=_arrow_schema(),
    )


def one_round(batches: list[Any], out: Path) -> float:
    """µs per record of one task over ``batches``: process every batch, then the sink's flush (its file)."""
    spec = PipelineSpec.from_dict(
        {
            "name": "sink-cost",
            "source": {"topics": ["orders"], "group_id": "sink-cost"},
            "key_converter": "string",
            "value_converter": "json",
            "sink": {"kind": "jsonl", "path": str(out)},
            "kafka": {"bootstrap.servers": "127.0.0.1:1"},  # never contacted: a clean jsonl task produces nothing
            "errors": {"errors.tolerance": "all"},
        }
    )
    processor = PartitionProcessor(spec, "bench", part_name="part-bench")
    started = time.perf_counter()
    for batch in batches:
        processor.process(batch)
    processor.sink.flush()
    seconds = time.perf_counter() - started
    assert processor.records_out == sum(batch.num_rows for batch in batches)
    return seconds / processor.records_out * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default="current")
    parser.add_argument("--fresh", action="store_true", help="forget the figures of earlier runs")
    args = parser.parse_args()
    batches = [orders_batch(index * BATCH) for index in range(args.batches)]
    with tempfile.TemporaryDirectory() as directory:
        one_round(batches[:1], Path(directory) / "warm-up")
        per_record = [one_round(batches, Path(directory) / f"round-{index}") for index in range(args.rounds)]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() and not args.fresh else {}
    # Each run adds its rounds to its label's: alternate labels (code before and after a change) run by run.
    taken = [*results.get(args.label, {}).get("rounds", []), *(round(value, 3) for value in per_record)]
    results[args.label] = {
        "records_per_round": args.batches * BATCH,
        "us_per_record_median": round(statistics.median(taken), 3),
        "us_per_record_min_max": [min(taken), max(taken)],
        "rounds": taken,
        "load_average_1m": [*results.get(args.label, {}).get("load_average_1m", []), round(os.getloadavg()[0], 2)],
        "cores": os.cpu_count(),
        "provisional": "taken while other sessions loaded the machine",
    }
    print(json.dumps({args.label: results[args.label]}))
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    chart(results, RESULTS.with_suffix(".png"))


def chart(results: dict[str, Any], path: Path) -> None:
    """One bar per label: the median µs per record with its min-max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(results)
    medians = [results[label]["us_per_record_median"] for label in labels]
    low = [median - results[label]["us_per_record_min_max"][0] for label, median in zip(labels, medians, strict=True)]
    high = [results[label]["us_per_record_min_max"][1] - median for label, median in zip(labels, medians, strict=True)]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(labels, medians, yerr=[low, high], capsize=4)
    for index, median in enumerate(medians):
        ax.annotate(f"{median:.2f}", (index, median), ha="center", va="bottom")
    ax.set_ylabel("µs per clean record, one task's thread")
    ax.set_title("jsonl sink task, json values, batches of 8,192 (provisional)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
