"""DLQ replay throughput against a raw confluent-kafka consume→produce loop, in one run.

A DLQ of ``--records`` orders (about 100-byte values, Connect's ten ``__connect.errors.*``
headers with a short stack trace, two partitions) is written once. Then, in ``--repeat``
rounds that each run every mode once (alternating, so drift of the machine hits all modes
alike), each mode reads all of it with a fresh consumer group and writes every record to a
fresh two-partition target topic (so no mode writes into a topic another one grew):

- ``raw``: the cheapest copy loop: ``consume`` batches, ``produce`` each record with its
  headers unchanged, one synchronous offset commit at the end; no parsing, no transactions;
- ``raw+txn``: the same loop with transactions on, as KIP-656's exactly-once sink does it:
  each batch of 1000 records and its offsets in one transaction;
- ``raw+txn+fix``: ``raw+txn`` that also applies the example's fix function
  (``repair_order``: JSON decode, repair, JSON encode) to each value;
- ``replay``: :class:`DlqReplay` with its defaults (transactions of 1000 records with the
  replay group's offsets, one process): parse, select, strip the error headers, add lineage;
- ``replay+fix``: the same with ``repair_order`` as the fix;
- ``raw+txn@500``, ``replay@500``: 500 records per transaction (Connect's
  ``max.poll.records``), to show what the transaction size costs.

Every figure is the median with min-max of the rounds. A ratio is taken per round (a mode
against its baseline in the same round) and its median is what a target is judged on:

- ``replay`` >= 0.9x ``raw+txn`` at the same transaction size: both do the same exactly-once
  work, so the ratio is the replay's own cost;
- ``replay+fix`` >= 0.8x ``raw+txn`` (the strict reading: the fix's work counts against the
  replay) and >= 0.8x ``raw+txn+fix`` (the same fix in the raw loop: the replay's own cost
  with a fix).

Each time covers everything from creating the clients to the last commit. After the rounds,
one ``replay`` and one ``replay+fix`` run under cProfile (the reading thread and the writer
thread both) say where the replay's time goes, in microseconds per record of the functions
that take most (profiling inflates every call, so these add up to more than the timed runs).
The broker is Tansu by default (``--broker``): noida-db 0.2.3, the embedded default, answers
a Fetch with every record up to each partition's end, and for this 200,000-record DLQ (two
partitions, one broker, one answer) that is about 160 MB, above librdkafka's
``receive.message.max.bytes``: the consumer asks again forever (see ``dlq_summary.py``).

``--dialect spring`` fills the DLQ with Spring Kafka's dead letters instead of Connect's: the
same orders (key, value, ``trace-id`` header, source topic, partition and offset), dead-lettered
by ``tests/dead_letter_writers.py``'s ``spring_dlt`` (``DeadLetterPublishingRecoverer``'s
``kafka_dlt-*`` headers, byte for byte). The raw loops copy them as they are; the replay strips
them and writes each order back to its source topic, as it does Connect's.

Writes ``benchmarks/results/replay.json`` and ``replay.png``. The file holds the latest run
of each dialect: the top-level keys are the Connect run's (the default dialect; any run's
when there is none), each run says its ``dialect``, and ``other_dialects`` holds the latest
run of every other dialect, each in the same form. The chart puts the dialects' bars side by
side.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread

#: An hour ago: the records keep a real event time, well inside the broker's retention (7 days), which
#: deletes a record whose timestamp is older (noida-db within a second of the write; Apache Kafka within 5 min).
RECENT_MS = int(time.time() * 1000) - 3_600_000

RESULTS = Path(__file__).resolve().parent / "results"
#: The repository's root: ``tests.dead_letter_writers`` is imported from there for Spring's dead letters.
ROOT = Path(__file__).resolve().parent.parent
#: The dead-letter writers the DLQ can be filled by; the first is the default.
DIALECTS = ("connect", "spring")
#: The issue's targets: replay against raw+txn at the same transaction size, and replay+fix.
REPLAY_TARGET = 0.9
FIX_TARGET = 0.8
FIX = "airflow_kerr.examples.orders.repair_order"
MODES = ("raw", "raw+txn", "raw+txn+fix", "replay", "replay+fix", "raw+txn@500", "replay@500")
_EOS_LOOP = "a raw confluent-kafka consume→produce loop with transactions on (each batch and its offsets in one "
#: The issue's targets: name, mode, the mode it is compared with, the ratio required, what the comparison is.
TARGETS = (
    ("replay", "replay", "raw+txn", REPLAY_TARGET, f"replay vs raw+txn: {_EOS_LOOP}transaction), both at 1000 records"),
    ("replay@500", "replay@500", "raw+txn@500", REPLAY_TARGET, "the same at 500 records per transaction"),
    (
        "replay+fix (strict)",
        "replay+fix",
        "raw+txn",
        FIX_TARGET,
        "replay+fix vs raw+txn without a fix (strict reading: the fix's own work counts against the replay)",
    ),
    (
        "replay+fix (same fix)",
        "replay+fix",
        "raw+txn+fix",
        FIX_TARGET,
        "replay+fix vs raw+txn+fix: the raw transactional loop applying the same fix function to each value "
        "(JSON decode, repair, JSON encode), so the ratio is the replay's own cost with a fix",
    ),
)
#: Order ``i``'s value: about 100 bytes of JSON; and the error its dead letter names.
VALUE = b'{"id": "o-%08d", "customer": "c-0042", "amount": -12.5, "currency": "EUR", "note": "xxxxx"}'
ERROR = "order has a non-positive amount: -12.5"
#: Functions listed per profiled mode in the JSON.
PROFILE_TOP = 15
#: Others' CPU below which a round starts (cores), and the longest wait for it.
QUIET_CORES = 0.3
#: The longest a raw loop may take to copy the DLQ (a broker that lost records would otherwise keep it waiting).
RAW_LOOP_TIMEOUT_S = 600.0


def connect_letters(source: str, dlq: str, count: int) -> Iterator[dict[str, Any]]:
    """Order ``i`` as our jobs dead-letter it (Connect's ten error headers): ``Producer.produce`` keyword arguments."""
    from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record

    try:
        raise ValueError(ERROR)
    except ValueError as caught:
        error = caught
    for i in range(count):
        record = SourceRecord(source, i % 2, i, RECENT_MS, key=b"o-%08d" % i, value=VALUE % i)
        record.headers = [("trace-id", b"%016x" % i)]
        context = ErrorContext(TaskId("orders_pipeline", i % 2), Stage.TRANSFORMATION, "bench.validate", error, record)
        yield build_dead_letter_record(context, topic=dlq).produce_kwargs()


def spring_letters(source: str, dlq: str, count: int) -> Iterator[dict[str, Any]]:
    """Order ``i`` as Spring's ``DeadLetterPublishingRecoverer`` dead-letters it: ``Producer.produce`` kwargs.

    The same original (topic, partition ``i % 2``, offset ``i``, timestamp, key, value and
    ``trace-id`` header) as :func:`connect_letters`; the DLQ partition is the original's, as
    Spring's default destination resolver picks it.
    """
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tests.dead_letter_writers import Original, spring_dlt

    for i in range(count):
        original = Original(
            source, i % 2, i, RECENT_MS, key=b"o-%08d" % i, value=VALUE % i, headers=[("trace-id", b"%016x" % i)]
        )
        yield spring_dlt(original, dlt_topic=dlq, cause="java.lang.IllegalArgumentException", cause_message=ERROR)


def write_dlq(config: dict[str, Any], source: str, dlq: str, count: int, dialect: str = "connect") -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(source, 2, 1), NewTopic(dlq, 2, 1)]).values():
        future.result(30)
    letters = spring_letters if dialect == "spring" else connect_letters
    producer = Producer(
        {**config, "linger.ms": 50, "batch.num.messages": 10000, "queue.buffering.max.messages": 500000}
    )
    for letter in letters(source, dlq, count):
        while True:
            try:
                producer.produce(**letter)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(120) == 0


def core_parse_us(config: dict[str, Any], dlq: str) -> float:
    """Microseconds the core's ``parse_dead_letter`` takes for one record of this DLQ."""
    import timeit

    from confluent_kafka import Consumer, TopicPartition

    from airflow_kerr.errors import parse_dead_letter

    consumer = Consumer({**config, "group.id": "bench.parse", "enable.auto.commit": False})
    consumer.assign([TopicPartition(dlq, 0, 0)])
    message = None
    while message is None or message.error() is not None:
        message = consumer.poll(5)
    consumer.close()
    headers, key, value = message.headers(), message.key(), message.value()
    runs = 20_000
    seconds = timeit.timeit(
        lambda: parse_dead_letter(headers, key, value, topic=dlq, partition=0, offset=0, timestamp=0), number=runs
    )
    return seconds / runs * 1e6


def raw_copy(config: dict[str, Any], dlq: str, target: str, count: int, group: str) -> int:
    """The baseline: consume → produce with headers unchanged, commit once at the end."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    producer = Producer({**config, "linger.ms": 5})
    consumer.assign([TopicPartition(dlq, 0, 0), TopicPartition(dlq, 1, 0)])
    copied = 0
    deadline = time.monotonic() + RAW_LOOP_TIMEOUT_S
    while copied < count:
        check_deadline(deadline, "raw", copied, count)
        for message in consumer.consume(500, 1.0):
            if message.error() is not None:
                continue
            while True:
                try:
                    producer.produce(target, message.value(), message.key(), headers=message.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer.commit(asynchronous=False)
    consumer.close()
    return copied


def check_deadline(deadline: float, mode: str, copied: int, count: int) -> None:
    """Fail a raw loop that has not read every record in time, rather than wait for it forever."""
    if time.monotonic() > deadline:
        raise TimeoutError(f"{mode} copied {copied} of {count} records in {RAW_LOOP_TIMEOUT_S:.0f} s")


def value_fix(fix: str | None) -> Callable[[bytes | None], bytes | None] | None:
    """The replay's fix function applied to a value alone, for the raw loop: the same work, no replay around it.

    The fix reads and sets only ``record.value``, so one record object is reused for every value.
    """
    if fix is None:
        return None
    from airflow_kerr.callables import import_callable
    from airflow_kerr.replay.policy import ReplayRecord

    repair = import_callable(fix)
    holder = ReplayRecord("", None, None, [], None)  # type: ignore[arg-type]

    def fixed(value: bytes | None) -> bytes | None:
        holder.value = value
        result = repair(holder)
        return None if result is None else result.value

    return fixed


def raw_transactional_copy(
    config: dict[str, Any], dlq: str, target: str, count: int, group: str, batch: int, fix: str | None = None
) -> int:
    """The baseline with KIP-656's loop added: ``batch`` records and their offsets per transaction.

    With ``fix``, each value goes through the fix function before it is produced (a dropped one is not).
    """
    from confluent_kafka import Consumer, Producer, TopicPartition

    repair = value_fix(fix)
    consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False, "isolation.level": "read_committed"})
    producer = Producer({**config, "transactional.id": f"bench.raw.{group}"})
    producer.init_transactions(30)
    consumer.assign([TopicPartition(dlq, 0, 0), TopicPartition(dlq, 1, 0)])
    positions: dict[int, int] = {}
    copied = 0
    deadline = time.monotonic() + RAW_LOOP_TIMEOUT_S
    while copied < count:
        check_deadline(deadline, "raw+txn", copied, count)
        messages = [m for m in consumer.consume(min(batch, count - copied), 1.0) if m.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        for message in messages:
            value = message.value()
            if repair is not None:
                value = repair(value)
            if value is not None:
                producer.produce(target, value, message.key(), headers=message.headers())
            positions[int(message.partition() or 0)] = int(message.offset() or 0) + 1
        offsets = [TopicPartition(dlq, p, o) for p, o in positions.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        copied += len(messages)
    consumer.close()
    return copied


def replay(config: dict[str, Any], dlq: str, target: str, group: str, fix: str | None, batch: int) -> int:
    from airflow_kerr.replay.engine import DlqReplay
    from airflow_kerr.replay.options import ReplayOptions

    options = ReplayOptions.build(dlq_topic=dlq, replay_group=group, target_topic=target, fix=fix, batch_size=batch)
    summary = DlqReplay(config, options, run_id=group, transactional_id_prefix=f"bench.{group}").run()
    assert summary.status == "completed", summary
    return summary.replayed


def batch_of(mode: str) -> int:
    """Records per transaction of a mode: the ``@N`` suffix, else the replay's default."""
    from airflow_kerr.replay.options import DEFAULT_BATCH_SIZE

    return int(mode.partition("@")[2] or DEFAULT_BATCH_SIZE)


def fix_of(mode: str) -> str | None:
    """The fix function a mode applies: the example's ``repair_order`` for the ``+fix`` modes."""
    return FIX if mode.partition("@")[0].endswith("+fix") else None


def run_mode(config: dict[str, Any], mode: str, dlq: str, target: str, count: int, group: str) -> int:
    if mode == "raw":
        return raw_copy(config, dlq, target, count, group)
    if mode.startswith("raw+txn"):
        return raw_transactional_copy(config, dlq, target, count, group, batch_of(mode), fix_of(mode))
    return replay(config, dlq, target, group, fix_of(mode), batch_of(mode))


def fresh_target(admin: Any, name: str) -> tuple[str, str]:
    """A new two-partition target topic and a new group name for one run."""
    from confluent_kafka.admin import NewTopic

    target, group = f"bench.replay.target.{name}", f"bench.{name}"
    for future in admin.create_topics([NewTopic(target, 2, 1)]).values():
        future.result(30)
    return target, group


def run_name(mode: str, attempt: int | str, stamp: int) -> str:
    return f"{mode.replace('+', '-').replace('@', '-')}.{attempt}.{stamp}"


@contextmanager
def writer_thread_profiled(profile: cProfile.Profile) -> Iterator[None]:
    """Profile the replay's writer thread too: each ``TransactionalWriter.write`` runs under ``profile``.

    cProfile sees only the thread that enabled it; the writer runs in its own (one at a time),
    so enabling a second profiler there and adding its stats gives both threads' costs.
    """
    from airflow_kerr.replay.transactions import TransactionalWriter

    original = TransactionalWriter.write

    def write(self: TransactionalWriter, *args: Any, **kwargs: Any) -> bool:
        profile.enable()
        try:
            return original(self, *args, **kwargs)
        finally:
            profile.disable()

    TransactionalWriter.write = write  # type: ignore[method-assign]
    try:
        yield
    finally:
        TransactionalWriter.write = original  # type: ignore[method-assign]


def profile_replay(config: dict[str, Any], admin: Any, mode: str, dlq: str, count: int, stamp: int) -> dict[str, Any]:
    """One run of ``mode`` under cProfile, both threads: the functions that take most, in µs per record."""
    target, group = fresh_target(admin, run_name(mode, "profile", stamp))
    reader, writer = cProfile.Profile(), cProfile.Profile()
    with writer_thread_profiled(writer):
        reader.enable()
        try:
            written = run_mode(config, mode, dlq, target, count, group)
        finally:
            reader.disable()
    assert written == count, f"{mode} wrote {written} of {count}"
    threads = {"reader": reader, "writer": writer}
    report: dict[str, Any] = {}
    for thread, profile in threads.items():
        stats = pstats.Stats(profile)
        rows = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)  # type: ignore[attr-defined]
        report[thread] = {
            "total_us_per_record": round(stats.total_tt / count * 1e6, 2),  # type: ignore[attr-defined]
            "top_own_time_us_per_record": {
                f"{Path(path).name}:{line}({name})": round(own / count * 1e6, 3)
                for (path, line, name), (_, _, own, _, _) in rows[:PROFILE_TOP]
            },
        }
    return report


def target_entry(
    name: str, mode: str, baseline: str, required: float, comparison: str, ratios: dict[str, list[float]]
) -> dict[str, Any]:
    """One target: which comparison it is, the median with min-max of the per-round ratios, and whether it is met."""
    measured = spread(ratios[f"{mode} / {baseline}"])
    return {
        "name": name,
        "mode": mode,
        "against": baseline,
        "comparison": comparison,
        "required": required,
        "measured": measured,
        "met": measured["median"] >= required,
    }


def main() -> int:  # noqa: PLR0915 - a benchmark's main: its rounds and checks read top to bottom as one script
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5, help="rounds; every mode runs once per round")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of: " + ", ".join(MODES))
    parser.add_argument("--quiet-timeout", type=float, default=20.0, help="longest wait for a quiet machine per round")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile runs")
    parser.add_argument("--no-write", action="store_true", help="print only; leave results/ alone")
    parser.add_argument("--broker", choices=("tansu", "noida"), default="tansu", help="the embedded broker to start")
    parser.add_argument(
        "--dialect", choices=DIALECTS, default=DIALECTS[0], help="whose dead letters fill the DLQ (default: connect)"
    )
    args = parser.parse_args()
    modes = [mode for mode in args.modes.split(",") if mode]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown modes {unknown}")

    from confluent_kafka.admin import AdminClient

    from airflow_kerr.local.broker import LocalBroker, resolve_bootstrap_servers

    external = resolve_bootstrap_servers()
    broker = None if external else LocalBroker(kind=args.broker).start()
    # The local stack's client settings (LOCAL_CLIENT_CONFIG: noida-db's whole-partition fetch answers).
    config: dict[str, Any] = {"bootstrap.servers": external}
    if broker is not None:
        config = {**broker.client_config, "bootstrap.servers": broker.bootstrap_servers}
    stamp = int(time.time())
    source, dlq = f"bench.replay.orders.{stamp}", f"bench.replay.orders.{stamp}.dlq"
    timings: dict[str, list[float]] = {mode: [] for mode in modes}
    others: list[float] = []
    meter = CpuMeter()
    load_before = os.getloadavg()
    admin = AdminClient(config)
    profiles: dict[str, Any] = {}
    try:
        started = time.perf_counter()
        write_dlq(config, source, dlq, args.records, args.dialect)
        print(f"wrote {args.records} {args.dialect} DLQ records in {time.perf_counter() - started:.1f} s", flush=True)
        for attempt in range(args.repeat):
            if args.quiet_timeout > 0:
                meter.wait_quiet(QUIET_CORES, args.quiet_timeout)
            before = meter.sample()
            for mode in modes:
                target, group = fresh_target(admin, run_name(mode, attempt, stamp))
                started = time.perf_counter()
                written = run_mode(config, mode, dlq, target, args.records, group)
                timings[mode].append(time.perf_counter() - started)
                assert written == args.records, f"{mode} wrote {written} of {args.records}"
                rate = args.records / timings[mode][-1]
                print(f"  {mode:<12} run {attempt}: {timings[mode][-1]:.2f} s, {rate:,.0f} records/s", flush=True)
            others.append(meter.foreign_cores(before, meter.sample()))
            print(f"  round {attempt}: others used {others[-1]:.2f} cores", flush=True)
        parse_us = core_parse_us(config, dlq)
        if not args.no_profile:
            for mode in ("replay", "replay+fix"):
                profiles[mode] = profile_replay(config, admin, mode, dlq, args.records, stamp)
    finally:
        if broker is not None:
            broker.stop()
    results = {"dialect": args.dialect, **summarize(args.records, modes, timings)}
    results["core_parse_dead_letter_us"] = round(parse_us, 2)
    results["profile_us_per_record"] = profiles
    results["profile_note"] = (
        "own time per function (cProfile tottime) divided by the records of one run, reader and writer thread; "
        "profiling inflates every Python call, so the totals exceed the timed runs' microseconds per record"
    )
    results["load"] = {
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "others_cores_per_round": [round(x, 2) for x in others],
    }
    report(results)
    if not args.no_write:
        broker_name = "KAFKA_BOOTSTRAP_SERVERS" if external else f"embedded {broker.kind}"  # type: ignore[union-attr]
        write_results(results, broker_name)
    return 0


def summarize(records: int, modes: list[str], timings: dict[str, list[float]]) -> dict[str, Any]:
    """Rates, per-round ratios and targets from the timings (seconds per run, rounds in order)."""
    rates = {mode: [records / s for s in seconds] for mode, seconds in timings.items()}
    measured = [target for target in TARGETS if target[1] in rates and target[2] in rates]
    pairs = [(mode, baseline) for _, mode, baseline, _, _ in measured]
    pairs += [(mode, "raw") for mode in modes if mode != "raw" and "raw" in rates]
    ratios = {f"{m} / {b}": [a / c for a, c in zip(rates[m], rates[b], strict=True)] for m, b in pairs}
    targets = [target_entry(*target, ratios) for target in measured]
    return {
        "records": records,
        "rounds": len(next(iter(timings.values()))),
        "statistic": "median with min-max of the rounds; ratios are per round (same round's runs), then the median",
        "transaction_sizes": {mode: batch_of(mode) for mode in modes if mode != "raw"},
        "records_per_s": {mode: spread(values) for mode, values in rates.items()},
        "microseconds_per_record": {mode: spread([1e6 / r for r in values]) for mode, values in rates.items()},
        "ratios": {name: spread(values) for name, values in ratios.items()},
        "targets": targets,
        "seconds": timings,
    }


def report(results: dict[str, Any]) -> None:
    for mode, rate in results["records_per_s"].items():
        us = results["microseconds_per_record"][mode]
        print(
            f"{mode:<12} {rate['median']:>9,.0f} records/s ({rate['min']:,.0f}-{rate['max']:,.0f}), "
            f"{us['median']:.2f} µs/record"
        )
    for name, ratio in results["ratios"].items():
        print(f"  {name:<28} {ratio['median']:.3f}x ({ratio['min']:.3f}-{ratio['max']:.3f})")
    for target in results["targets"]:
        verdict = "met" if target["met"] else "NOT met"
        print(
            f"target {target['name']}: >= {target['required']}x {target['against']}: "
            f"{target['measured']['median']:.3f}x, {verdict}"
        )
    print(f"core parse_dead_letter: {results['core_parse_dead_letter_us']:.2f} µs; load {results['load']}")
    for mode, threads in results["profile_us_per_record"].items():
        for thread, profile in threads.items():
            print(f"profile {mode} {thread}: {profile['total_us_per_record']} µs/record (under cProfile)")
            for function, us in list(profile["top_own_time_us_per_record"].items())[:8]:
                print(f"    {us:7.3f}  {function}")


def write_results(results: dict[str, Any], broker: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "replay",
        "machine": {"cpus": os.cpu_count()},
        "broker": broker,
        **results,
    }
    path = RESULTS / "replay.json"
    merged = with_other_dialects(payload, json.loads(path.read_text()) if path.exists() else {})
    path.write_text(json.dumps(merged, indent=2, ensure_ascii=False) + "\n")
    reports = [merged, *merged["other_dialects"].values()]
    modes = [mode for mode in MODES if any(mode in r["records_per_s"] for r in reports)]
    colors = {"raw": "#888888", "raw+txn": "#bbbbbb", "raw+txn+fix": "#d9d9d9", "replay": "#1f77b4"}
    colors["replay+fix"] = "#2ca02c"
    hatches = dict(zip(DIALECTS, ("", "//"), strict=True))
    width = 0.8 / len(reports)
    figure, axis = plt.subplots(figsize=(10 + 2 * (len(reports) - 1), 4.8))
    highest = 0.0
    for index, shown in enumerate(reports):
        rates = shown["records_per_s"]
        present = [mode for mode in modes if mode in rates]
        xs = [modes.index(mode) + (index - (len(reports) - 1) / 2) * width for mode in present]
        medians = [rates[mode]["median"] for mode in present]
        low = [m - rates[mode]["min"] for m, mode in zip(medians, present, strict=True)]
        high = [rates[mode]["max"] - m for m, mode in zip(medians, present, strict=True)]
        highest = max(highest, *medians)
        bars = axis.bar(
            xs,
            medians,
            width=width,
            yerr=[low, high],
            capsize=3,
            color=[colors[mode.partition("@")[0]] for mode in present],
            hatch=hatches.get(shown["dialect"], ".."),
            edgecolor="#333333",
            linewidth=0.5,
            label=f"{shown['dialect']} dead letters ({shown['records']:,}, {shown['rounds']} rounds)",
        )
        labels: dict[str, list[str]] = {mode: [] for mode in present}
        for target in shown["targets"]:
            labels[target["mode"]].append(f"{target['measured']['median']:.2f}x {target['against']}")
        for bar, mode in zip(bars, present, strict=True):
            ratio = shown["ratios"].get(f"{mode} / raw")
            text = [shown["dialect"], *labels[mode]] + ([f"{ratio['median']:.2f}x raw"] if ratio else [])
            x = bar.get_x() + bar.get_width() / 2
            axis.annotate("\n".join(text), (x, bar.get_height()), ha="center", va="bottom", fontsize=6)
    axis.set_xticks(range(len(modes)), modes)
    axis.tick_params(axis="x", labelsize=8)
    if "raw+txn" in merged["records_per_s"]:
        base = merged["records_per_s"]["raw+txn"]["median"]
        label = f"0.9x raw+txn ({merged['dialect']})"
        axis.axhline(base * REPLAY_TARGET, color="#d62728", linestyle="--", linewidth=1, label=label)
        axis.axhline(base * FIX_TARGET, color="#ff7f0e", linestyle=":", linewidth=1, label=label.replace("0.9", "0.8"))
    axis.set_ylabel("records / s (median, min-max)")
    axis.set_title(
        f"DLQ replay vs raw consume→produce by dead-letter dialect, {merged['broker']} "
        "(transactions of 1000 records unless @N)",
        fontsize=10,
    )
    axis.set_ylim(0, highest * 1.35)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(RESULTS / "replay.png", dpi=120)


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


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
