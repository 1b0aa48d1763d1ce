"""How soon the DLQ view shows figures for a large DLQ: first figures, and full counts, over ``--records`` dead letters.

A DLQ of ``--records`` records (default 1,000,000) is written once to ``--partitions``
partitions: about 100-byte JSON values with Connect's ten ``__connect.errors.*`` headers
(four exception classes, three stages, three source topics, one pipeline), their
timestamps spread over six hours. Then ``--runs`` times, with the functions of
``airflow_kerr.inspection`` as the view's routes call them:

- **first figures**: what the page asks for before it can show anything for a DLQ, one
  call after another (the page may overlap them; in sequence is the upper bound): the topic
  list (``list_dead_letter_queues`` with this DLQ configured), the replay group's backlog
  (``unread_for_group``), the 20 newest examples (``sample_dead_letters``) and the first
  summary chunk (``summarize`` with the route's defaults, ``max_records=200_000``,
  ``max_seconds=1.0``). Goal: 2 s, met when the figures hold counted records
  (``first_counted_s``: until the first chunk that counted any, as a page shows them).
- **full counts**: from the start of that first ``summarize`` call until a chained call
  (each with the previous ``cursor`` and the same bounds, as the page makes them) says
  ``complete``. Goal: 10 s. The chunks' counts, added up, are compared with what was
  written (``counts_exact``).

Each ``--partitions`` count (default ``1,3``) gets its own DLQ, the DLQs alternating run by
run, on each ``--broker`` in turn (default: the embedded default, noida-db). Figures are the
median with min and max over the runs (default 5); nothing is asserted. Each configuration
says ``met`` per goal (medians), and ``met_all`` whether every configuration met it. Before each
run the benchmark waits (up to ``--quiet-timeout`` seconds) until processes outside its own
tree (the broker is its child) use less than 0.3 cores, and records how many cores they
used during the run (``others_cores``): on a shared 2-core machine that is what the figures
mostly measure. The process's CPU seconds per run are recorded too.

The broker is the embedded default (noida-db behind ``local/fetch_shim.py``; ``--broker``
picks another), with the librdkafka settings the local stack's ``kafka_default`` connection
has (``LocalBroker.client_config``). noida-db 0.2.3 answers a Fetch with every record from
the fetch offset to the end of the partition, ignoring ``fetch.max.bytes`` and
``max.partition.fetch.bytes``; above librdkafka's default ``receive.message.max.bytes``
(100 MB, about 150,000 of these records) the consumer would refuse the answer and ask again
forever, so the local connection raises that limit to librdkafka's maximum (2 GB): one
answer then carries the partition's whole backlog. ``--partitions 1`` puts all the dead
letters in one partition. ``KAFKA_BOOTSTRAP_SERVERS`` runs against an existing cluster instead.

``--dialect spring`` writes Spring Kafka's dead letters instead of Connect's: the same keys,
values, timestamps, source topics and exception classes (as the root cause,
``kafka_dlt-exception-cause-fqcn``, which the view counts them under), built byte for byte by
``tests/dead_letter_writers.py``'s ``spring_dlt`` (``DeadLetterPublishingRecoverer``'s eleven
``kafka_dlt-*`` headers, big-endian partition, offset and timestamp). Spring writes no stage, so
every record counts under stage ``(none)``.

Writes ``benchmarks/results/dlq_summary.json`` and ``dlq_summary.png``. The file holds the
latest run of each dialect: the top-level keys are the Connect run's (the default dialect; any
run's when there is none) for its first broker and largest partition count, ``configurations``
holds every broker and partition count of that run (keyed ``noida/1``, ``noida/3``...), each run
says its ``dialect``, and ``other_dialects`` holds the latest
run of every other dialect, each in the same form. The chart has one row per dialect.

    .venv/bin/python benchmarks/dlq_summary.py                     # 1,000,000 records, 1 and 3 partitions, 5 runs
    .venv/bin/python benchmarks/dlq_summary.py --broker noida,tansu  # the same on each broker
    .venv/bin/python benchmarks/dlq_summary.py --dialect spring    # the same as Spring dead letters
    .venv/bin/python benchmarks/dlq_summary.py --records 50000 --runs 1 --quiet-timeout 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter

RESULTS = Path(__file__).resolve().parent / "results"
#: The repository's root: ``tests.dead_letter_writers`` is imported from there for Spring's dead letters.
ROOT = Path(__file__).resolve().parent.parent
#: The dead-letter writers the DLQ can be filled by; the first is the default.
DIALECTS = ("connect", "spring")
FIRST_FIGURES_GOAL_S = 2.0
FULL_COUNTS_GOAL_S = 10.0
QUIET_CORES = 0.3
#: An hour ago: the records keep a real event time, well inside the broker's retention (7 days), which
#: deletes a record whose timestamp is older (noida-db within a second of the write; Apache Kafka within 5 min).
T0_MS = int(time.time() * 1000) - 3_600_000
SPAN_MS = 6 * 3_600_000
CLASSES = ("ValueError", "KeyError", "json.decoder.JSONDecodeError", "airflow_kerr.errors.RetriableError")
STAGES = ("TRANSFORMATION", "VALUE_CONVERTER", "TASK_PUT")
SOURCES = ("orders", "payments", "refunds")
REPLAY_GROUP = "bench.dlq_summary.replay"
#: Record ``i``'s value: about 100 bytes of JSON.
VALUE = b'{"id": "o-%08d", "customer": "c-0042", "amount": -12.5, "currency": "EUR", "note": "xxxxx"}'


def combination(i: int) -> tuple[str, str, str]:
    """The (exception class, stage, source topic) of record ``i``: skewed, as real failures are."""
    return CLASSES[i % 7 % 4], STAGES[i % 5 % 3], SOURCES[i % 11 % 3]


def expected_counts(count: int, dialect: str = "connect") -> dict[str, Counter[str]]:
    """What the summary must count: Spring writes no stage, so its records count under ``(none)``."""
    from airflow_kerr.inspection.selection import NONE_KEY

    counts: dict[str, Counter[str]] = {"exception_class": Counter(), "stage": Counter(), "source_topic": Counter()}
    for i in range(count):
        cls, stage, source = combination(i)
        counts["exception_class"][cls] += 1
        counts["stage"][stage if dialect == "connect" else NONE_KEY] += 1
        counts["source_topic"][source] += 1
    return counts


def error_named(name: str, message: str) -> Exception:
    """An exception whose class name (as the DLQ header writes it) is ``name``, dotted module and all."""
    module, _, short = name.rpartition(".")
    return type(short, (Exception,), {"__module__": module or "builtins"})(message)


def spring_letters(topic: str, count: int, partitions: int) -> Iterator[dict[str, Any]]:
    """Record ``i`` as Spring would dead-letter it: ``Producer.produce`` keyword arguments.

    The same key, value, timestamp, source topic and (root cause) exception class as the
    Connect record ``i``; the source partition and offset are ``i % 3`` and ``i`` as there.
    """
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tests.dead_letter_writers import Original, spring_dlt

    for i in range(count):
        cls_name, _, source = combination(i)
        original = Original(
            topic=source,
            partition=i % 3,
            offset=i,
            timestamp=T0_MS + i * SPAN_MS // count,
            key=b"o-%08d" % i,
            value=VALUE % i,
        )
        letter = spring_dlt(
            original, dlt_topic=topic, cause=cls_name, cause_message="order has a non-positive amount: -12.5"
        )
        letter["partition"] = i % partitions
        yield letter


def connect_letters(topic: str, count: int, partitions: int) -> Iterator[dict[str, Any]]:
    """Record ``i`` as Connect would dead-letter it (ten context headers): ``Producer.produce`` keyword arguments."""
    from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, connect_context_headers

    # One header list per combination; per record only the source partition and offset headers change.
    templates: dict[tuple[str, str, str], list[tuple[str, str | bytes | None]]] = {}
    for cls_name in CLASSES:
        for stage in STAGES:
            for source in SOURCES:
                error = error_named(cls_name, "order has a non-positive amount: -12.5")
                context = ErrorContext(
                    TaskId("orders_pipeline", 0), Stage(stage), "bench.validate", error, SourceRecord(source, 0, 0)
                )
                templates[(cls_name, stage, source)] = list(connect_context_headers(context))
    for i in range(count):
        headers = list(templates[combination(i)])
        headers[1] = (headers[1][0], b"%d" % (i % 3))
        headers[2] = (headers[2][0], b"%d" % i)
        yield {
            "topic": topic,
            "value": VALUE % i,
            "key": b"o-%08d" % i,
            "partition": i % partitions,
            "headers": headers,
            "timestamp": T0_MS + i * SPAN_MS // count,
        }


def write_dlq(config: dict[str, Any], topic: str, count: int, partitions: int, dialect: str = "connect") -> float:
    """Write the DLQ as ``dialect``'s writer would; the seconds it took."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    letters = spring_letters if dialect == "spring" else connect_letters
    producer = Producer(
        {**config, "linger.ms": 50, "batch.num.messages": 10000, "queue.buffering.max.messages": 500000}
    )
    started = time.perf_counter()
    for letter in letters(topic, count, partitions):
        while True:
            try:
                producer.produce(**letter)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError(f"could not write {count} records to {topic}")
    return time.perf_counter() - started


def one_run(config: dict[str, Any], topic: str, expected: dict[str, Counter[str]]) -> dict[str, Any]:
    """The page's calls for one DLQ, timed: first figures, then chained summary chunks to full counts."""
    from airflow_kerr.inspection.backlog import unread_for_group
    from airflow_kerr.inspection.discovery import list_dead_letter_queues
    from airflow_kerr.inspection.samples import sample_dead_letters
    from airflow_kerr.inspection.summary import summarize

    parts: dict[str, float] = {}
    cpu_before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    mark = started
    topics = list_dead_letter_queues(config, [topic])
    parts["list_s"], mark = time.perf_counter() - mark, time.perf_counter()
    backlog = unread_for_group(config, topic, REPLAY_GROUP)
    parts["unread_s"], mark = time.perf_counter() - mark, time.perf_counter()
    sample = sample_dead_letters(config, topic, limit=20)
    parts["sample_s"], mark = time.perf_counter() - mark, time.perf_counter()
    summary_started = mark
    chunk = summarize(config, topic, max_records=200_000, max_seconds=1.0)
    parts["first_summary_s"] = time.perf_counter() - mark
    first_figures = time.perf_counter() - started
    chunks = [chunk]
    first_counted = first_figures if chunk.read > 0 or chunk.complete else None
    while not chunks[-1].complete and len(chunks) < 10_000:
        chunks.append(summarize(config, topic, cursor=chunks[-1].cursor, max_records=200_000, max_seconds=1.0))
        if first_counted is None and (chunks[-1].read > 0 or chunks[-1].complete):
            first_counted = time.perf_counter() - started
    ended = time.perf_counter()
    full_counts = ended - summary_started
    cpu_after = resource.getrusage(resource.RUSAGE_SELF)
    added: dict[str, Counter[str]] = {}
    for c in chunks:
        for name, values in c.counts.items():
            added.setdefault(name, Counter()).update(values)
    exact = all(added.get(name) == counts for name, counts in expected.items())
    return {
        "first_figures_s": first_figures,
        "first_counted_s": first_counted if first_counted is not None else ended - started,
        "full_counts_s": full_counts,
        "parts_s": parts,
        "first_chunk_records": chunks[0].read,
        "chunks": len(chunks),
        "chunk_records": [c.read for c in chunks],
        "records_read": sum(c.read for c in chunks),
        "complete": chunks[-1].complete,
        "counts_exact": exact,
        "bucket_ms": chunks[0].bucket_ms,
        "timeline_buckets": len({b for c in chunks for b in c.timeline}),
        "topic_listed": any(t.name == topic and t.discovered for t in topics),
        "unread": backlog.unread,
        "sampled": len(sample.records),
        "process_cpu_s": (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime),
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def configuration_report(
    rows: list[dict[str, Any]], *, dialect: str, records: int, partitions: int, broker: str, config: dict[str, Any]
) -> dict[str, Any]:
    """One broker's and one partition count's runs: the figures' spread and whether each goal is met (medians)."""
    return {
        "benchmark": "dlq_summary",
        "dialect": dialect,
        "records": records,
        "partitions": partitions,
        "broker": broker,
        "client_config": {k: v for k, v in config.items() if k != "bootstrap.servers"},
        "machine": {
            "cores": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_after": list(os.getloadavg()),
        },
        "goals_s": {"first_figures": FIRST_FIGURES_GOAL_S, "full_counts": FULL_COUNTS_GOAL_S},
        "summary": {
            "first_figures_s": spread([r["first_figures_s"] for r in rows]),
            "first_counted_s": spread([r["first_counted_s"] for r in rows]),
            "first_chunk_records": spread([r["first_chunk_records"] for r in rows]),
            "full_counts_s": spread([r["full_counts_s"] for r in rows]),
            "others_cores": spread([r["others_cores"] for r in rows]),
            "load_average_1m": spread([r["load_average_1m"] for r in rows]),
            "records_per_s_full": spread([r["records_read"] / r["full_counts_s"] for r in rows]),
        },
        # First figures count only once they hold counted records: an empty first chunk is no figure.
        "met": {
            "first_figures": statistics.median(r["first_counted_s"] for r in rows) <= FIRST_FIGURES_GOAL_S,
            "full_counts": statistics.median(r["full_counts_s"] for r in rows) <= FULL_COUNTS_GOAL_S,
            "counts_exact": all(r["counts_exact"] for r in rows),
        },
        "runs": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument(
        "--partitions", default="1,3", help="comma-separated partition counts, one DLQ each (default: 1,3)"
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per DLQ, the DLQs alternating (default: 5)")
    parser.add_argument(
        "--broker",
        default=None,
        help="comma-separated embedded brokers, each in turn (noida, tansu; default: the embedded default)",
    )
    parser.add_argument("--quiet-timeout", type=float, default=600.0, help="seconds to wait for a quiet machine")
    parser.add_argument(
        "--dialect", choices=DIALECTS, default=DIALECTS[0], help="whose dead letters fill the DLQ (default: connect)"
    )
    args = parser.parse_args()

    from airflow_kerr.local.broker import BROKER_KINDS, LocalBroker, resolve_bootstrap_servers

    partition_counts = [int(p) for p in args.partitions.split(",")]
    kinds: list[str | None] = [k.strip() for k in args.broker.split(",")] if args.broker else [None]
    for kind in kinds:
        if kind is not None and kind not in BROKER_KINDS:
            parser.error(f"--broker {kind!r}: expected one of {', '.join(BROKER_KINDS)}")
    external = resolve_bootstrap_servers()
    meter = CpuMeter()
    configurations: dict[str, dict[str, Any]] = {}
    for kind in [None] if external else kinds:
        broker = None if external else LocalBroker(kind=kind).start()
        config: dict[str, Any] = (
            {"bootstrap.servers": external}
            if broker is None
            else {"bootstrap.servers": broker.bootstrap_servers, **broker.client_config}
        )
        broker_name = "KAFKA_BOOTSTRAP_SERVERS" if broker is None else f"embedded {broker.kind}"
        rows: dict[int, list[dict[str, Any]]] = {n: [] for n in partition_counts}
        written: dict[int, float] = {}
        try:
            topics = {n: f"bench.dlq_summary.{uuid.uuid4().hex[:8]}.p{n}.dlq" for n in partition_counts}
            for n, topic in topics.items():
                written[n] = write_dlq(config, topic, args.records, n, args.dialect)
                print(f"{broker_name}: wrote {args.records:,} {args.dialect} dead letters to {n} partition(s) "
                      f"in {written[n]:.1f} s", flush=True)  # fmt: skip
            expected = expected_counts(args.records, args.dialect)
            for run in range(args.runs):
                for n, topic in topics.items():  # the DLQs alternate, so a drift of the machine falls on each
                    waited, quiet_reading = (0.0, -1.0)
                    if args.quiet_timeout > 0:
                        waited, quiet_reading = meter.wait_quiet(QUIET_CORES, args.quiet_timeout)
                    before = meter.sample()
                    row = one_run(config, topic, expected)
                    row.update(run=run, dialect=args.dialect, waited_for_quiet_s=waited)
                    row["others_cores_before"] = quiet_reading
                    row["others_cores"] = meter.foreign_cores(before, meter.sample())
                    row["load_average_1m"] = os.getloadavg()[0]
                    rows[n].append(row)
                    print(
                        f"{broker_name}, {n} partition(s), run {run}: first figures {row['first_figures_s']:.2f} s "
                        f"({row['first_chunk_records']:,} records; counted ones at {row['first_counted_s']:.2f} s), "
                        f"full counts {row['full_counts_s']:.2f} s in {row['chunks']} chunks, "
                        f"exact={row['counts_exact']}, others used {row['others_cores']:.2f} cores, "
                        f"load {row['load_average_1m']:.2f}",
                        flush=True,
                    )
        finally:
            if broker is not None:
                broker.stop()
        for n in partition_counts:
            report = configuration_report(
                rows[n], dialect=args.dialect, records=args.records, partitions=n, broker=broker_name, config=config
            )
            report["write_s"] = written[n]
            configurations[f"{broker_name.removeprefix('embedded ')}/{n}"] = report
    # The top level is the default broker's largest partition count (as the file held before), with every
    # configuration under "configurations" and "met_all": each goal met by every configuration of this run.
    primary = dict(list(configurations.values())[len(partition_counts) - 1])
    primary["configurations"] = configurations
    primary["met_all"] = {
        goal: all(c["met"][goal] for c in configurations.values()) for goal in ("first_figures", "full_counts")
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "dlq_summary.json"
    merged = with_other_dialects(primary, json.loads(path.read_text()) if path.exists() else {})
    path.write_text(json.dumps(merged, indent=2) + "\n")
    chart(merged, RESULTS / "dlq_summary.png")
    for name, c in configurations.items():
        print(name, json.dumps({k: c["summary"][k] for k in ("first_counted_s", "full_counts_s")}), c["met"])
    return 0


def with_other_dialects(report: dict[str, Any], previous: dict[str, Any]) -> dict[str, Any]:
    """``report`` and the latest run of each other dialect in ``previous`` (the file as it was), in one file.

    The top-level keys are the default dialect's run when there is one, so that what the
    READMEs quote keeps describing Connect records; ``other_dialects`` holds the rest, each
    as a whole report. A previous file without ``dialect`` (written before there was a choice)
    is left out: its setup is not known to match.
    """
    latest: dict[str, dict[str, Any]] = {}
    if previous.get("benchmark") == report["benchmark"] and "dialect" in previous:
        latest[previous["dialect"]] = {k: v for k, v in previous.items() if k != "other_dialects"}
        latest.update(previous.get("other_dialects", {}))
    latest[report["dialect"]] = report
    primary = latest.get(DIALECTS[0], report)
    others = {name: latest[name] for name in DIALECTS if name in latest and name != primary["dialect"]}
    return {**primary, "other_dialects": others}


def chart(report: dict[str, Any], path: Path) -> None:
    """One row per dialect in the file: first figures (stacked by call) and full counts, per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reports = [
        configuration
        for shown in (report, *report.get("other_dialects", {}).values())
        for configuration in shown.get("configurations", {"": shown}).values()
    ]
    figure, grid = plt.subplots(len(reports), 2, figsize=(12, 4.2 * len(reports)), squeeze=False)
    panels = (
        (
            "first_figures_s",
            "first figures",
            FIRST_FIGURES_GOAL_S,
            ("list_s", "unread_s", "sample_s", "first_summary_s"),
        ),
        ("full_counts_s", "full counts", FULL_COUNTS_GOAL_S, ()),
    )
    for row, shown in zip(grid, reports, strict=True):
        runs = shown["runs"]
        xs = [str(r["run"]) for r in runs]
        for axis, (key, title, goal, parts) in zip(row, panels, strict=True):
            if parts:
                bottom = [0.0] * len(runs)
                for part in parts:
                    values = [r["parts_s"][part] for r in runs]
                    axis.bar(xs, values, bottom=bottom, label=part.removesuffix("_s"))
                    bottom = [b + v for b, v in zip(bottom, values, strict=True)]
                axis.legend(fontsize=7, loc="upper left")
            else:
                axis.bar(xs, [r[key] for r in runs], color="tab:blue")
            axis.axhline(goal, color="tab:red", linestyle="--", linewidth=1, label=f"goal {goal:g} s")
            stats = shown["summary"][key]
            counted = shown["summary"].get("first_counted_s") if parts else None
            if counted is not None:  # what "met" is judged on: until the figures hold counted records
                title = f"first figures (with counts at {counted['median']:.2f} s)"
            axis.set_title(
                f"{shown['dialect']}, {shown['broker']}, {shown['partitions']} p., {title}: "
                f"median {stats['median']:.2f} s "
                f"({stats['min']:.2f}-{stats['max']:.2f}), goal {goal:g} s",
                fontsize=8,
            )
            axis.set_xlabel("run")
            axis.set_ylabel("seconds")
            axis.set_ylim(0, max(goal, max(r[key] for r in runs)) * 1.25)
    described = "\n".join(
        f"{r['dialect']}: {r['records']:,} records, {r['broker']}, {r['partitions']} partitions, "
        f"others used {r['summary']['others_cores']['median']:.2f} cores (median)"
        for r in reports
    )
    figure.suptitle(f"DLQ view\n{described}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
