"""The DLQ replay fanned out: 1, 2 and 4 replay tasks over one 8-partition DLQ, on this machine.

A DLQ of ``--records`` orders (``replay.py``'s Connect dead letters: about 100-byte values,
the ten ``__connect.errors.*`` headers) is written once to 8 partitions. Then, in ``--repeat``
rounds that each run every task count once (alternating, so drift of the machine hits all
alike), the DLQ is replayed by N processes, each what one mapped ``replay_partitions`` task
runs: :class:`DlqReplay` over its group of partitions
(:func:`airflow_kerr.replay.fanout.split_partitions`), with its own ``transactional.id`` and
the same fresh replay group, writing to a fresh 8-partition target topic. The processes start
and import first, then are released together: the time is from the release to the last one's
end (what Airflow adds per task, a worker slot and the task's start, is not in it).

Per run, the CPU of the replay processes and of the broker (its process tree) is read from
``/proc``, so each row says how many cores the replay and the broker kept busy: on this 2-core
machine that, not the number of tasks, is the ceiling. Each round waits for a quiet machine
(``machine_load.py``) and records what others used during it. The broker is Tansu, as in
``replay.py`` (noida-db answers a fetch with a whole partition). ``--provisional`` marks the
file as taken on a busy machine.

Writes ``benchmarks/results/replay_fanout.json`` and ``replay_fanout.png``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread
from replay import QUIET_CORES, connect_letters

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 8
TASK_COUNTS = (1, 2, 4)


def write_dlq(config: dict[str, Any], source: str, dlq: str, count: int) -> None:
    """``count`` Connect dead letters on an 8-partition DLQ (the producer's partitioner spreads them by key)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(source, 2, 1), NewTopic(dlq, PARTITIONS, 1)]).values():
        future.result(30)
    producer = Producer(
        {**config, "linger.ms": 50, "batch.num.messages": 10000, "queue.buffering.max.messages": 500000}
    )
    for letter in connect_letters(source, dlq, count):
        letter.pop("partition", None)
        while True:
            try:
                producer.produce(**letter)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0


def replay_task(  # noqa: PLR0913 - one mapped task's arguments, handed to a spawned process
    config: dict[str, Any],
    dlq: str,
    target: str,
    group: str,
    partitions: list[int],
    index: int,
    ready: Any,
    go: Any,
    results: Any,
) -> None:
    """One mapped replay task in its own process: import, say ready, wait for the release, replay its partitions."""
    from airflow_kerr.replay.engine import DlqReplay
    from airflow_kerr.replay.options import ReplayOptions

    options = ReplayOptions.build(dlq_topic=dlq, replay_group=group, target_topic=target, partitions=partitions)
    engine = DlqReplay(config, options, run_id=group, transactional_id_prefix=f"bench.{group}.{index}")
    ready.release()
    go.wait()
    before = resource.getrusage(resource.RUSAGE_SELF)
    summary = engine.run()
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    results.put({"index": index, "replayed": summary.replayed, "status": summary.status, "cpu_s": cpu})


def run_fanout(config: dict[str, Any], admin: Any, dlq: str, tasks: int, name: str, meter: CpuMeter) -> dict[str, Any]:
    """Replay the whole DLQ with ``tasks`` processes; wall seconds, records and CPU of the replay and the broker."""
    from confluent_kafka.admin import NewTopic

    from airflow_kerr.replay.fanout import split_partitions

    target, group = f"bench.fanout.target.{name}", f"bench.fanout.{name}"
    for future in admin.create_topics([NewTopic(target, PARTITIONS, 1)]).values():
        future.result(30)
    spawn = multiprocessing.get_context("spawn")
    ready, go, results = spawn.Semaphore(0), spawn.Event(), spawn.Queue()
    groups = split_partitions(list(range(PARTITIONS)), tasks)
    workers = [
        spawn.Process(target=replay_task, args=(config, dlq, target, group, part, i, ready, go, results))
        for i, part in enumerate(groups)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        assert ready.acquire(timeout=120), "a replay process did not start"
    broker_before = meter.tree_ticks()[meter.components["broker"]]
    started = time.perf_counter()
    go.set()
    reports = [results.get(timeout=900) for _ in workers]
    seconds = time.perf_counter() - started
    broker_cpu = (meter.tree_ticks()[meter.components["broker"]] - broker_before) / meter.hz
    for worker in workers:
        worker.join(30)
    assert all(r["status"] == "completed" for r in reports), reports
    replay_cpu = sum(r["cpu_s"] for r in reports)
    return {
        "seconds": seconds,
        "replayed": sum(r["replayed"] for r in reports),
        "replay_cpu_s": replay_cpu,
        "broker_cpu_s": broker_cpu,
        "replay_cores": replay_cpu / seconds,
        "broker_cores": broker_cpu / seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5, help="rounds; every task count runs once per round")
    parser.add_argument("--quiet-timeout", type=float, default=20.0, help="longest wait for a quiet machine per round")
    parser.add_argument("--provisional", action="store_true", help="mark the figures as taken on a busy machine")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results/ alone")
    parser.add_argument("--redraw", action="store_true", help="only draw the chart again from the results file")
    args = parser.parse_args()
    if args.redraw:
        redraw()
        return 0

    from confluent_kafka.admin import AdminClient

    from airflow_kerr.local.broker import LocalBroker

    broker = LocalBroker(kind="tansu").start()
    config = {**broker.client_config, "bootstrap.servers": broker.bootstrap_servers}
    assert broker.pid is not None
    meter = CpuMeter({"broker": broker.pid})
    stamp = int(time.time())
    source, dlq = f"bench.fanout.orders.{stamp}", f"bench.fanout.orders.{stamp}.dlq"
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in TASK_COUNTS}
    others: list[float] = []
    load_before = os.getloadavg()
    admin = AdminClient(config)
    try:
        started = time.perf_counter()
        write_dlq(config, source, dlq, args.records)
        print(f"wrote {args.records} DLQ records on {PARTITIONS} partitions in {time.perf_counter() - started:.1f} s")
        for attempt in range(args.repeat):
            if args.quiet_timeout > 0:
                meter.wait_quiet(QUIET_CORES, args.quiet_timeout)
            before = meter.sample()
            order = TASK_COUNTS if attempt % 2 == 0 else tuple(reversed(TASK_COUNTS))
            for tasks in order:
                run = run_fanout(config, admin, dlq, tasks, f"{tasks}.{attempt}.{stamp}", meter)
                assert run["replayed"] == args.records, f"{tasks} tasks replayed {run['replayed']} of {args.records}"
                runs[tasks].append(run)
                print(
                    f"  {tasks} task(s) run {attempt}: {run['seconds']:.2f} s, {args.records / run['seconds']:,.0f} "
                    f"records/s, replay {run['replay_cores']:.2f} cores, broker {run['broker_cores']:.2f} cores",
                    flush=True,
                )
            others.append(meter.foreign_cores(before, meter.sample()))
            print(f"  round {attempt}: others used {others[-1]:.2f} cores", flush=True)
    finally:
        broker.stop()
    results = summarize(args.records, runs)
    results["load"] = {
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "others_cores_per_round": [round(x, 2) for x in others],
    }
    results["provisional"] = args.provisional
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=1))
    if not args.no_write:
        write_results(results)
    return 0


def redraw() -> None:
    """Draw the chart again from the results file (``--redraw``), without measuring."""
    write_results(json.loads((RESULTS / "replay_fanout.json").read_text()))


def summarize(records: int, runs: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """Rates, per-round speed-ups over one task, and the cores the replay and the broker kept busy."""
    rates = {n: [records / r["seconds"] for r in rs] for n, rs in runs.items()}
    speedups = {
        f"{n} tasks / 1 task": spread([a / b for a, b in zip(rates[n], rates[1], strict=True)])
        for n in TASK_COUNTS
        if n != 1
    }
    return {
        "benchmark": "replay_fanout",
        "machine": {"cpus": os.cpu_count()},
        "broker": "embedded tansu",
        "records": records,
        "partitions": PARTITIONS,
        "rounds": len(runs[1]),
        "statistic": "median with min-max of the rounds; speed-ups are per round (same round's runs), then the median",
        "records_per_s": {str(n): spread(values) for n, values in rates.items()},
        "speedup_over_one_task": speedups,
        "replay_cores": {str(n): spread([r["replay_cores"] for r in rs]) for n, rs in runs.items()},
        "broker_cores": {str(n): spread([r["broker_cores"] for r in rs]) for n, rs in runs.items()},
        "busy_cores": {str(n): spread([r["replay_cores"] + r["broker_cores"] for r in rs]) for n, rs in runs.items()},
        "replay_cpu_us_per_record": {
            str(n): spread([r["replay_cpu_s"] / records * 1e6 for r in rs]) for n, rs in runs.items()
        },
        "broker_cpu_us_per_record": {
            str(n): spread([r["broker_cpu_s"] / records * 1e6 for r in rs]) for n, rs in runs.items()
        },
        "runs": {str(n): rs for n, rs in runs.items()},
    }


def write_results(results: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "replay_fanout.json").write_text(json.dumps(results, indent=2) + "\n")
    counts = [str(n) for n in TASK_COUNTS]
    rates = results["records_per_s"]
    medians = [rates[n]["median"] for n in counts]
    low = [m - rates[n]["min"] for m, n in zip(medians, counts, strict=True)]
    high = [rates[n]["max"] - m for m, n in zip(medians, counts, strict=True)]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6))
    bars = left.bar(counts, medians, yerr=[low, high], capsize=4, color="#1f77b4", edgecolor="#333333")
    for bar, n in zip(bars, counts, strict=True):
        speedup = results["speedup_over_one_task"].get(f"{n} tasks / 1 task")
        text = f"{bar.get_height():,.0f}/s" + (f"\n{speedup['median']:.2f}x one task" if speedup else "")
        top = rates[n]["max"]  # above the error bar
        left.annotate(text, (bar.get_x() + bar.get_width() / 2, top), ha="center", va="bottom", fontsize=8)
    left.set_xlabel("replay tasks (processes)")
    left.set_ylabel("records / s (median, min-max)")
    left.set_ylim(0, max(medians) * 1.3)
    left.set_title(f"{results['records']:,} dead letters, {results['partitions']} partitions", fontsize=10)
    replay = [results["replay_cores"][n]["median"] for n in counts]
    broker = [results["broker_cores"][n]["median"] for n in counts]
    right.bar(counts, replay, color="#1f77b4", label="replay processes")
    right.bar(counts, broker, bottom=replay, color="#bbbbbb", label="broker (Tansu)")
    others = statistics.median(results["load"]["others_cores_per_round"])
    right.bar(
        counts,
        [others] * len(counts),
        bottom=[r + b for r, b in zip(replay, broker, strict=True)],
        color="white",
        edgecolor="#888888",
        hatch="//",
        label="others on the machine (median of the rounds)",
    )
    right.axhline(results["machine"]["cpus"], color="#d62728", linestyle="--", linewidth=1, label="cores here")
    right.set_xlabel("replay tasks (processes)")
    right.set_ylabel("cores busy during the run (median)")
    right.set_ylim(0, results["machine"]["cpus"] * 1.4)
    right.legend(fontsize=8)
    right.set_title("what the cores did", fontsize=10)
    note = " (provisional: machine busy)" if results.get("provisional") else ""
    figure.suptitle(f"DLQ replay fanned out over N tasks, {results['machine']['cpus']} cores{note}", fontsize=11)
    figure.tight_layout()
    figure.savefig(RESULTS / "replay_fanout.png", dpi=120)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
