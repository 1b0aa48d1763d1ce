"""The DLQ replay engine against the real broker: selection, lineage, parking, pacing, stop, kill and faults.

DLQ records are written by the core's ``build_dead_letter_record`` (the same bytes the Spark
job and Connect write); ``test_dlq_replay_spark.py`` replays a DLQ written by the Spark job.

The default embedded broker, noida-db, hides aborted records from ``read_committed``
readers and fences a zombie producer as Apache Kafka does, so the kill and fencing trials
(marked ``transactions``) observe exactly-once for real. On Tansu (``KERR_BROKER=tansu``),
which shows aborted records and answers a fenced producer with a timeout, those two are
skipped and the rest check the transactional protocol (what was aborted, rewound, retried
and committed) and that every selected record arrived at least once.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from airflow_kerr.errors import (
    ErrorContext,
    HeaderFormat,
    SourceRecord,
    Stage,
    TaskId,
    build_dead_letter_record,
    connect_context_headers,
)
from airflow_kerr.kafka.offsets import end_offsets, offset_consumer, read_to_end
from airflow_kerr.replay.engine import DlqReplay, ReplayRetriesExhausted
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.pacing import RateLimiter
from airflow_kerr.replay.policy import (
    HEADER_PARKED_REASON,
    HEADER_REPLAY_COUNT,
    HEADER_REPLAY_RUN,
    HEADER_REPLAY_SOURCE,
)
from airflow_kerr.replay.transactions import ReplayFatalError
from tests.clock import RECENT_MS

#: An hour ago: the records keep a real event time, well inside the broker's retention (7 days), which
#: deletes a record whose timestamp is older (noida-db within a second of the write; Apache Kafka within 5 min).


class InvalidOrder(ValueError):
    """Stands for the pipeline's validation error in the DLQ headers."""


def read_all(kafka_config: dict[str, Any], topic: str, isolation: str = "read_committed") -> list[Any]:
    """Every record of ``topic`` up to its end offsets (commit markers included in the range)."""
    return read_to_end(kafka_config, topic, isolation_level=isolation)


def committed(kafka_config: dict[str, Any], group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


def ends(kafka_config: dict[str, Any], topic: str, partitions: int) -> dict[int, int]:
    found = end_offsets(kafka_config, [(topic, p) for p in range(partitions)])
    return {p: offset for (_, p), offset in found.items()}


def header(message: Any, name: str) -> bytes | None:
    values = [value for key, value in message.headers() or [] if key == name]
    return values[-1] if values else None


@dataclass
class Topics:
    source: str
    dlq: str
    parked: str


@pytest.fixture
def topics(create_topic: Callable[..., str], unique_topic: str) -> Topics:
    create_topic(unique_topic, 2)
    create_topic(f"{unique_topic}.dlq", 2)
    create_topic(f"{unique_topic}.dlq.parked", 2)
    return Topics(unique_topic, f"{unique_topic}.dlq", f"{unique_topic}.dlq.parked")


def order(index: int, amount: float = -5.0) -> bytes:
    return json.dumps({"id": f"o-{index}", "amount": amount}).encode()


def write_dlq(  # noqa: PLR0913 - a DLQ builder: past the topic and count, keyword-only fields a test varies
    kafka_config: dict[str, Any],
    dlq: str,
    source: str,
    count: int,
    *,
    stage: Stage = Stage.TRANSFORMATION,
    error: Exception | None = None,
    headers: list[tuple[str, bytes | None]] | None = None,
    header_format: HeaderFormat = HeaderFormat.CONNECT,
    start: int = 0,
) -> None:
    """``count`` DLQ records for orders ``start..start+count-1`` of ``source``, as the job writes them."""
    producer = Producer({**kafka_config, "linger.ms": 5})
    for i in range(start, start + count):
        record = SourceRecord(
            source, i % 2, i, RECENT_MS + i, key=f"o-{i}".encode(), value=order(i), headers=headers or []
        )
        context = ErrorContext(
            TaskId("orders_pipeline", 0), stage, "mypkg.validate", error or InvalidOrder(f"o-{i} negative"), record
        )
        built = build_dead_letter_record(context, topic=dlq, header_format=header_format)
        producer.produce(**built.produce_kwargs())
    assert producer.flush(30) == 0


def replay(kafka_config: dict[str, Any], run_id: str = "run-1", engine_kwargs: Any = None, **options: Any) -> Any:
    engine = DlqReplay(
        kafka_config,
        ReplayOptions.build(**options),
        run_id=run_id,
        idle_timeout_s=10,
        **(engine_kwargs or {}),
    )
    return engine.run()


def test_replay_lands_selected_records_with_lineage_and_commits_the_group(
    kafka_config: dict[str, Any], topics: Topics
) -> None:
    write_dlq(kafka_config, topics.dlq, topics.source, 30, headers=[("kind", b"invalid")])
    write_dlq(kafka_config, topics.dlq, topics.source, 10, stage=Stage.VALUE_CONVERTER, error=ValueError("x"), start=30)
    write_dlq(kafka_config, topics.dlq, topics.source, 5, header_format=HeaderFormat.DLQ, start=40)
    before = ends(kafka_config, topics.source, 2)

    summary = replay(
        kafka_config,
        dlq_topic=topics.dlq,
        stages=["TRANSFORMATION"],
        exception_class_regex="InvalidOrder$",
        header_match={"kind": "invalid"},
        fix="airflow_kerr.examples.orders.repair_order",
        batch_size=8,
    )

    assert (summary.status, summary.scanned, summary.selected, summary.replayed) == ("completed", 45, 30, 30)
    assert summary.skipped == 15 and summary.parked == 0
    landed = [m for m in read_all(kafka_config, topics.source) if header(m, HEADER_REPLAY_RUN) == b"run-1"]
    assert len(landed) == 30
    assert sum(ends(kafka_config, topics.source, 2).values()) > sum(before.values())
    sources = set()
    for message in landed:
        names = [name for name, _ in message.headers()]
        assert not any(name.startswith("__connect.errors.") for name in names)
        assert header(message, "kind") == b"invalid" and header(message, HEADER_REPLAY_COUNT) == b"1"
        value = json.loads(message.value())
        assert value["amount"] == 5.0 and value["repaired"] is True
        assert message.key() == value["id"].encode()
        sources.add(header(message, HEADER_REPLAY_SOURCE))
    assert len(sources) == 30 and all(s is not None and s.startswith(topics.dlq.encode() + b"/") for s in sources)
    group = f"kerr-replay.{topics.dlq}"
    assert committed(kafka_config, group, topics.dlq, 2) == ends(kafka_config, topics.dlq, 2)
    assert summary.committed_offsets == ends(kafka_config, topics.dlq, 2)

    again = replay(kafka_config, run_id="run-2", dlq_topic=topics.dlq)
    assert (again.status, again.scanned, again.replayed) == ("completed", 0, 0)


def test_dry_run_writes_nothing_and_counts_by_target_stage_and_exception(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, dlq = create_topic(unique_topic, 2), create_topic(f"{unique_topic}.dlq", 2)
    slots: list[RateLimiter] = []  # every slot a rate limiter hands out: a paced write waits for one
    real_acquire = RateLimiter.acquire

    def counted_acquire(limiter: RateLimiter) -> bool:
        slots.append(limiter)
        return real_acquire(limiter)

    monkeypatch.setattr(RateLimiter, "acquire", counted_acquire)
    write_dlq(kafka_config, dlq, source, 12)
    write_dlq(kafka_config, dlq, source, 4, stage=Stage.VALUE_CONVERTER, error=ValueError("bad json"), start=12)
    write_dlq(kafka_config, dlq, "__consumer_offsets", 2, start=16)
    source_ends = ends(kafka_config, source, 2)

    summary = replay(kafka_config, dlq_topic=dlq, dry_run=True, max_records_per_second=1)

    assert summary.dry_run and summary.status == "completed" and summary.transactions == 0
    assert (summary.selected, summary.would_replay, summary.would_park) == (18, 16, 2)
    reported = summary.to_dict()
    assert (reported["would_replay"], reported["would_park"], reported["would_drop"]) == (16, 2, 0)
    assert (reported["replayed"], reported["parked"], reported["dropped"]) == (0, 0, 0), "a dry run writes nothing"
    rows = {
        (r["action"], r["topic"], r["stage"], r["exception_class"]): r["count"] for r in summary.to_dict()["breakdown"]
    }
    assert rows == {
        ("replay", source, "TRANSFORMATION", f"{__name__}.InvalidOrder"): 12,
        ("replay", source, "VALUE_CONVERTER", "ValueError"): 4,
        ("park", f"{dlq}.parked", "TRANSFORMATION", f"{__name__}.InvalidOrder"): 2,
    }
    assert slots == [], "a dry run is not paced: it asked for no write slot"
    assert ends(kafka_config, source, 2) == source_ends
    assert committed(kafka_config, f"kerr-replay.{dlq}", dlq, 2) == {0: -1001, 1: -1001}
    assert any("does not exist; a real run creates it" in note for note in summary.notes)
    metadata = offset_consumer(kafka_config)
    try:
        assert f"{dlq}.parked" not in metadata.list_topics(timeout=10).topics
    finally:
        metadata.close()


def test_unsafe_records_are_parked_with_a_reason(
    kafka_config: dict[str, Any], topics: Topics, create_topic: Callable[..., str]
) -> None:
    """One DLQ holding every kind of record that must not go back, plus two that may."""
    other = create_topic(f"x{topics.source}")
    write_dlq(kafka_config, topics.dlq, topics.source, 2)
    write_dlq(kafka_config, topics.dlq, "__consumer_offsets", 1, start=2)
    write_dlq(kafka_config, topics.dlq, other, 1, start=3)
    write_dlq(kafka_config, topics.dlq, f"{topics.source}-deleted", 1, start=4)
    write_dlq(kafka_config, topics.dlq, topics.source, 1, headers=[(HEADER_REPLAY_COUNT, b"2")], start=5)
    context = ErrorContext(TaskId("p", 0), Stage.TASK_POLL, "x", RuntimeError("poll"))
    no_source: list[tuple[str, str | bytes | None]] = list(connect_context_headers(context))
    producer = Producer(kafka_config)
    producer.produce(topics.dlq, key=b"o-6", value=order(6), headers=no_source)
    producer.produce(topics.dlq, key=b"o-7", value=b"{not json", headers=no_source)
    assert producer.flush(30) == 0, "the broker did not take the records within 30 s"

    summary = replay(
        kafka_config,
        dlq_topic=topics.dlq,
        target_allowlist=re.escape(topics.source) + ".*",
        max_replays=2,
        fix="airflow_kerr.examples.orders.repair_order",
    )

    assert (summary.selected, summary.replayed, summary.parked) == (8, 2, 6)
    parked = read_all(kafka_config, topics.parked)
    reasons = sorted((header(m, HEADER_PARKED_REASON) or b"").decode().split(":")[0] for m in parked)
    assert reasons == [
        "forbidden_target",
        "max_replays",
        "no_source_topic",
        "no_source_topic",
        "target_not_allowed",
        "unknown_target",
    ]
    for message in parked:
        assert header(message, "__connect.errors.exception.class.name") is not None
        assert header(message, HEADER_REPLAY_SOURCE) is not None
    by_reason: Counter[str] = Counter()
    for row in summary.to_dict()["breakdown"]:
        by_reason[row["reason"]] += row["count"] if row["action"] == "park" else 0
    assert +by_reason == {
        "forbidden_target": 1,
        "max_replays": 1,
        "no_source_topic": 2,
        "target_not_allowed": 1,
        "unknown_target": 1,
    }
    assert read_all(kafka_config, other) == []


def test_a_fix_that_raises_parks_the_record_with_the_exception(kafka_config: dict[str, Any], topics: Topics) -> None:
    producer = Producer(kafka_config)
    record = SourceRecord(topics.source, 0, 9, RECENT_MS, key=b"o-9", value=b'{"id": "o-9", "amount": ')
    context = ErrorContext(TaskId("p", 0), Stage.VALUE_CONVERTER, "json", ValueError("truncated"), record)
    producer.produce(**build_dead_letter_record(context, topic=topics.dlq).produce_kwargs())
    assert producer.flush(30) == 0, "the broker did not take the records within 30 s"

    summary = replay(kafka_config, dlq_topic=topics.dlq, fix="airflow_kerr.examples.orders.repair_order")

    assert (summary.parked, summary.replayed) == (1, 0)
    (parked,) = read_all(kafka_config, topics.parked)
    reason = (header(parked, HEADER_PARKED_REASON) or b"").decode()
    assert reason.startswith("fix_failed: json.decoder.JSONDecodeError: Expecting value")
    assert parked.value() == record.value


def test_loop_protection_parks_a_record_that_keeps_coming_back(kafka_config: dict[str, Any], topics: Topics) -> None:
    """Replay, fail again in the pipeline (the replayed record goes back to the DLQ), replay: parked."""
    write_dlq(kafka_config, topics.dlq, topics.source, 1)
    first = replay(kafka_config, run_id="first", dlq_topic=topics.dlq, max_replays=1)
    assert first.replayed == 1
    (replayed,) = [m for m in read_all(kafka_config, topics.source) if header(m, HEADER_REPLAY_RUN) == b"first"]
    assert header(replayed, HEADER_REPLAY_COUNT) == b"1"

    failed_again = SourceRecord.from_message(replayed)
    context = ErrorContext(
        TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "v", InvalidOrder("still bad"), failed_again
    )
    producer = Producer(kafka_config)
    producer.produce(**build_dead_letter_record(context, topic=topics.dlq).produce_kwargs())
    assert producer.flush(30) == 0, "the broker did not take the records within 30 s"
    source_ends = ends(kafka_config, topics.source, 2)

    second = replay(kafka_config, run_id="second", dlq_topic=topics.dlq, max_replays=1)

    assert (second.selected, second.replayed, second.parked) == (1, 0, 1)
    assert ends(kafka_config, topics.source, 2) == source_ends
    (parked,) = read_all(kafka_config, topics.parked)
    assert header(parked, HEADER_PARKED_REASON) == b"max_replays: replayed 1 times already"
    assert header(parked, HEADER_REPLAY_COUNT) == b"1"


def test_the_rate_limit_holds_within_ten_percent(kafka_config: dict[str, Any], topics: Topics) -> None:
    write_dlq(kafka_config, topics.dlq, topics.source, 300)

    summary = replay(kafka_config, dlq_topic=topics.dlq, max_records_per_second=100, batch_size=500)

    assert summary.replayed == 300
    stamps = sorted(m.timestamp()[1] for m in read_all(kafka_config, topics.source))
    rate = (len(stamps) - 1) / ((stamps[-1] - stamps[0]) / 1000)
    assert 90 <= rate <= 110, f"{rate:.1f} records/s written for a limit of 100"
    assert summary.transactions >= 3, "a rate-limited batch holds at most one second's worth"


def test_max_records_stops_and_the_next_run_continues(kafka_config: dict[str, Any], topics: Topics) -> None:
    write_dlq(kafka_config, topics.dlq, topics.source, 20)
    write_dlq(kafka_config, topics.dlq, topics.source, 10, stage=Stage.VALUE_CONVERTER, start=20)

    first = replay(kafka_config, dlq_topic=topics.dlq, stages=["VALUE_CONVERTER"], max_records=4)
    second = replay(kafka_config, dlq_topic=topics.dlq, stages=["VALUE_CONVERTER"])

    assert (first.status, first.replayed) == ("max_records", 4)
    assert (second.status, second.replayed) == ("completed", 6)
    assert committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2) == ends(kafka_config, topics.dlq, 2)


def test_unknown_topics_and_bad_settings_are_rejected_before_any_record_is_read(
    kafka_config: dict[str, Any], topics: Topics
) -> None:
    write_dlq(kafka_config, topics.dlq, topics.source, 3)
    with pytest.raises(InvalidReplayOptions) as caught:
        replay(kafka_config, dlq_topic=f"{topics.dlq}-missing", target_topic="nowhere")
    assert f"dlq_topic='{topics.dlq}-missing'" in str(caught.value)
    assert "target_topic='nowhere': the topic does not exist" in str(caught.value)
    with pytest.raises(InvalidReplayOptions, match=r"source_topics=.*\['gone'\] do not exist"):
        replay(kafka_config, dlq_topic=topics.dlq, source_topics=["gone", topics.source])
    assert committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2) == {0: -1001, 1: -1001}


def test_a_stop_mid_replay_aborts_the_open_transaction_and_a_rerun_completes(
    kafka_config: dict[str, Any], topics: Topics, faulty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop comes (as from on_kill, on another thread) while a paced batch's transaction is open.

    The writer is held at the tenth slot of the second batch (the first is committed) until the stop
    was sent, so where the stop lands does not depend on how fast either thread runs.
    """
    write_dlq(kafka_config, topics.dlq, topics.source, 300)
    engine_kwargs, made = faulty({})
    engine = DlqReplay(
        kafka_config,
        ReplayOptions.build(dlq_topic=topics.dlq, max_records_per_second=100, batch_size=50),
        run_id="stopped",
        **engine_kwargs,
    )
    group = f"kerr-replay.{topics.dlq}"
    slots: list[RateLimiter] = []
    in_second_transaction, stop_sent = threading.Event(), threading.Event()
    real_acquire = RateLimiter.acquire

    def acquire(limiter: RateLimiter) -> bool:
        slots.append(limiter)
        if len(slots) == 60:  # batches of 50: the first is committed, the second's transaction is open
            in_second_transaction.set()
            stop_sent.wait(30)
        return real_acquire(limiter)

    def stop_in_the_second_transaction() -> None:
        if in_second_transaction.wait(30):
            engine.stop()
        stop_sent.set()

    monkeypatch.setattr(RateLimiter, "acquire", acquire)
    stopper = threading.Thread(target=stop_in_the_second_transaction)
    stopper.start()
    stopped = engine.run()
    stopper.join()

    assert in_second_transaction.is_set(), f"the replay ended after {len(slots)} write slots"
    assert stopped.status == "stopped"
    assert made[0].log[-2:] == ["abort_transaction", "close"]
    assert stopped.replayed == 50, "only the committed batch counts"
    at_stop = committed(kafka_config, group, topics.dlq, 2)
    assert sum(max(o, 0) for o in at_stop.values()) == stopped.replayed
    assert stopped.committed_offsets == {p: max(o, -1) for p, o in at_stop.items()}

    rerun = replay(kafka_config, run_id="rerun", dlq_topic=topics.dlq)

    assert rerun.status == "completed" and stopped.replayed + rerun.replayed == 300
    assert committed(kafka_config, group, topics.dlq, 2) == ends(kafka_config, topics.dlq, 2)
    sources = {header(m, HEADER_REPLAY_SOURCE) for m in read_all(kafka_config, topics.source)}
    assert len(sources) == 300


KILLED_REPLAY = """
import json, sys, time
from airflow_kerr.replay import transactions
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.options import ReplayOptions
config, dlq = json.loads(sys.argv[1]), sys.argv[2]
commit = transactions.TransactionalWriter._commit
commits = []

def commit_twice_then_hold(writer):
    if len(commits) == 2:
        writer.producer.flush(30)
        print("transaction open", flush=True)
        time.sleep(600)
    commits.append(1)
    commit(writer)

transactions.TransactionalWriter._commit = commit_twice_then_hold
options = ReplayOptions.build(dlq_topic=dlq, batch_size=40)
DlqReplay(config, options, run_id="killed", transactional_id_prefix="kerr-replay.test").run()
"""


def killed_then_rerun(kafka_config: dict[str, Any], topics: Topics, count: int) -> tuple[Any, list[Any]]:
    """Replay in a child process, SIGKILL it mid-transaction, replay again with the same transactional.id.

    The child commits two batches and holds the third transaction open (its records and
    offsets sent to the broker, the commit not yet asked for) until it is killed: the kill
    then lands inside an open transaction on any machine load, where a timed kill may fall
    between two transactions.
    """
    write_dlq(kafka_config, topics.dlq, topics.source, count)
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_REPLAY, json.dumps(kafka_config), topics.dlq],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready and child.stdout.readline().strip() == "transaction open", "the child replay never held a batch"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    killed_at = committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2)
    assert 0 < sum(max(o, 0) for o in killed_at.values()) < count, "killed mid-replay"

    rerun = replay(
        kafka_config,
        run_id="rerun",
        dlq_topic=topics.dlq,
        engine_kwargs={"transactional_id_prefix": "kerr-replay.test"},
    )
    return rerun, read_all(kafka_config, topics.source)


def test_a_killed_replay_rerun_replays_every_selected_record(kafka_config: dict[str, Any], topics: Topics) -> None:
    """At least once on any broker; the committed group decides where the re-run starts."""
    rerun, landed = killed_then_rerun(kafka_config, topics, 300)

    assert rerun.status == "completed"
    assert committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2) == ends(kafka_config, topics.dlq, 2)
    dlq_ends = ends(kafka_config, topics.dlq, 2)
    assert {header(m, HEADER_REPLAY_SOURCE) for m in landed} == {
        f"{topics.dlq}/{p}/{o}".encode() for p, end in dlq_ends.items() for o in range(end)
    }


@pytest.mark.transactions
def test_a_killed_replay_rerun_has_no_duplicates_under_read_committed(
    kafka_config: dict[str, Any], topics: Topics
) -> None:
    """SIGKILL mid-transaction, then a re-run: every DLQ record lands exactly once under read_committed.

    The killed run's open transaction is aborted when the re-run's init_transactions fences it.
    """
    _, landed = killed_then_rerun(kafka_config, topics, 300)

    sources = Counter(header(m, HEADER_REPLAY_SOURCE) for m in landed)
    assert len(landed) == 300 and set(sources.values()) == {1}
    dirty = read_all(kafka_config, topics.source, isolation="read_uncommitted")
    assert len(dirty) > len(landed), "the killed run's aborted records are in the log, hidden from read_committed"


FENCED_REPLAY = """
import json, sys
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.options import ReplayOptions
config, dlq, ready = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
options = ReplayOptions.build(dlq_topic=dlq, max_records_per_second=100, batch_size=200)
engine = DlqReplay(config, options, run_id="older", transactional_id_prefix="kerr-replay.fence")
open(ready, "w").write("started")
engine.run()
"""


@pytest.mark.transactions
def test_a_second_replay_with_the_same_transactional_id_fences_the_first(
    kafka_config: dict[str, Any], topics: Topics, tmp_path: Any
) -> None:
    """Two replays of one DLQ with one transactional.id: the newer fences the older, which fails saying so,
    and the older's open transaction leaves nothing visible under read_committed."""
    write_dlq(kafka_config, topics.dlq, topics.source, 600)
    ready = tmp_path / "ready"
    older = subprocess.Popen(
        [sys.executable, "-c", FENCED_REPLAY, json.dumps(kafka_config), topics.dlq, str(ready)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while sum(ends(kafka_config, topics.source, 2).values()) < 250:  # its second transaction is open
            assert older.poll() is None, f"the older replay ended early: {older.stderr.read() if older.stderr else ''}"
            assert time.monotonic() < deadline, "the older replay wrote nothing"
            time.sleep(0.05)
        newer = replay(
            kafka_config,
            run_id="newer",
            dlq_topic=topics.dlq,
            engine_kwargs={"transactional_id_prefix": "kerr-replay.fence"},
        )
        _, stderr = older.communicate(timeout=90)
    finally:
        if older.poll() is None:
            older.kill()
            older.wait(10)

    assert newer.status == "completed"
    assert older.returncode != 0, "the fenced replay must fail, not report success"
    failure = stderr.strip().splitlines()[-1]
    assert failure.startswith("airflow_kerr.replay.transactions.ReplayFatalError: "), stderr[-3000:]
    assert "Another replay with the same transactional.id started and fenced this one" in failure, failure
    landed = read_all(kafka_config, topics.source)
    sources = Counter(header(m, HEADER_REPLAY_SOURCE) for m in landed)
    assert len(landed) == 600 and set(sources.values()) == {1}, "each record once: nothing of the fenced transaction"
    assert committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2) == ends(kafka_config, topics.dlq, 2)


class FaultyProducer:
    """A real transactional producer with faults injected before chosen calls.

    The faults are fakes of what Tansu cannot produce on demand: ``KafkaError`` objects with
    the flags librdkafka sets for an abortable error (``txn_requires_abort``), a fatal one
    (``fatal``, as PRODUCER_FENCED is) and a commit timeout (retriable ``_TIMED_OUT``). A
    faulted call raises instead of reaching the broker; every other call is real.
    """

    def __init__(self, config: dict[str, Any], faults: dict[tuple[str, int], BaseException]) -> None:
        self.real = Producer(config)
        self.faults = faults
        self.calls: Counter[str] = Counter()
        self.log: list[str] = []

    def _maybe_fail(self, name: str) -> None:
        self.calls[name] += 1
        self.log.append(name)
        fault = self.faults.get((name, self.calls[name]))
        if fault is not None:
            raise fault

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def send_offsets_to_transaction(self, positions: Any, metadata: Any, timeout: float = 30) -> None:
        self._maybe_fail("send_offsets_to_transaction")
        self.real.send_offsets_to_transaction(positions, metadata, timeout)

    def commit_transaction(self, timeout: float = 30) -> None:
        self._maybe_fail("commit_transaction")
        self.real.commit_transaction(timeout)

    def abort_transaction(self, timeout: float = 30) -> None:
        self._maybe_fail("abort_transaction")
        self.real.abort_transaction(timeout)

    def close(self) -> None:
        self.log.append("close")
        self.real.close()


ABORTABLE = KafkaException(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "injected", txn_requires_abort=True))
FATAL = KafkaException(KafkaError(KafkaError._FENCED, "injected: fenced by a newer producer", fatal=True))
COMMIT_TIMEOUT = KafkaException(KafkaError(KafkaError._TIMED_OUT, "injected commit timeout", retriable=True))


@pytest.fixture
def faulty() -> Iterator[Callable[..., tuple[dict[str, Any], list[FaultyProducer]]]]:
    def make(faults: dict[tuple[str, int], BaseException]) -> tuple[dict[str, Any], list[FaultyProducer]]:
        made: list[FaultyProducer] = []

        def factory(config: dict[str, Any]) -> FaultyProducer:
            made.append(FaultyProducer(config, faults))
            return made[-1]

        return {"producer_factory": factory, "retry_backoff_max_ms": 100}, made

    yield make


def test_an_abortable_error_aborts_rewinds_and_retries_the_batch(
    kafka_config: dict[str, Any], topics: Topics, faulty: Any
) -> None:
    write_dlq(kafka_config, topics.dlq, topics.source, 50)
    engine_kwargs, made = faulty({("commit_transaction", 2): ABORTABLE})

    summary = replay(kafka_config, dlq_topic=topics.dlq, batch_size=20, engine_kwargs=engine_kwargs)

    (producer,) = made
    assert producer.log[:4] == ["send_offsets_to_transaction", "commit_transaction"] * 2
    assert producer.log[4] == "abort_transaction", "an abortable error aborts at once"
    assert (summary.status, summary.aborted_batches, summary.replayed, summary.scanned) == ("completed", 1, 50, 50)
    assert producer.calls["commit_transaction"] == summary.transactions + 1
    assert committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2) == ends(kafka_config, topics.dlq, 2)
    landed = Counter(header(m, HEADER_REPLAY_SOURCE) for m in read_all(kafka_config, topics.source))
    assert len(landed) == 50, "the rewound batch was read and written again"


def test_a_fatal_error_closes_and_fails_naming_the_cause(
    kafka_config: dict[str, Any], topics: Topics, faulty: Any
) -> None:
    write_dlq(kafka_config, topics.dlq, topics.source, 50)
    engine_kwargs, made = faulty({("send_offsets_to_transaction", 2): FATAL})

    with pytest.raises(ReplayFatalError, match=r"send_offsets_to_transaction failed \(fatal\): _FENCED"):
        replay(kafka_config, dlq_topic=topics.dlq, batch_size=20, engine_kwargs=engine_kwargs)

    (producer,) = made
    assert "abort_transaction" not in producer.log and producer.log[-1] == "close"
    group = committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2)
    assert sum(max(o, 0) for o in group.values()) == 20, "only the first batch committed"


def test_a_commit_timeout_retries_the_commit_and_never_aborts(
    kafka_config: dict[str, Any], topics: Topics, faulty: Any
) -> None:
    write_dlq(kafka_config, topics.dlq, topics.source, 30)
    engine_kwargs, made = faulty({("commit_transaction", 1): COMMIT_TIMEOUT})

    summary = replay(kafka_config, dlq_topic=topics.dlq, batch_size=20, engine_kwargs=engine_kwargs)

    (producer,) = made
    assert "abort_transaction" not in producer.log
    assert (summary.status, summary.commit_retries, summary.aborted_batches, summary.replayed) == (
        "completed",
        1,
        0,
        30,
    )
    assert len(read_all(kafka_config, topics.source)) == 30
    assert committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2) == ends(kafka_config, topics.dlq, 2)


def test_a_batch_that_keeps_aborting_fails_with_the_group_left_in_place(
    kafka_config: dict[str, Any], topics: Topics, faulty: Any
) -> None:
    write_dlq(kafka_config, topics.dlq, topics.source, 10)
    engine_kwargs, made = faulty({("commit_transaction", n): ABORTABLE for n in (1, 2, 3)})
    engine_kwargs["max_batch_attempts"] = 3

    with pytest.raises(ReplayRetriesExhausted, match=r"aborted 3 times.*NOT_ENOUGH_REPLICAS: injected"):
        replay(kafka_config, dlq_topic=topics.dlq, engine_kwargs=engine_kwargs)

    assert made[0].calls["abort_transaction"] == 3
    assert committed(kafka_config, f"kerr-replay.{topics.dlq}", topics.dlq, 2) == {0: -1001, 1: -1001}


def test_dead_letters_retention_deleted_before_the_group_read_them_are_counted_and_named(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """The group's committed offset lies below the log start: the run says how many were lost, and where.

    Retention is stood in for by DeleteRecords (what retention does to the log start offset, at once).
    """
    from confluent_kafka.admin import AdminClient

    source, dlq = create_topic(unique_topic, 2), create_topic(f"{unique_topic}.dlq", 1)
    create_topic(f"{unique_topic}.dlq.parked", 1)
    write_dlq(kafka_config, dlq, source, 4)
    assert replay(kafka_config, run_id="first", dlq_topic=dlq).replayed == 4
    write_dlq(kafka_config, dlq, source, 6, start=4)
    admin = AdminClient(kafka_config)
    for future in admin.delete_records([TopicPartition(dlq, 0, 7)]).values():
        future.result(timeout=30)

    second = replay(kafka_config, run_id="second", dlq_topic=dlq)

    assert (second.expired, second.replayed, second.start_offsets) == (3, 3, {0: 7})
    assert f"3 dead letters of {dlq} were deleted by the topic's retention" in " ".join(second.notes)
    assert "partition 0: 3 before offset 7" in " ".join(second.notes)
    assert second.to_dict()["expired"] == 3
    landed = [m for m in read_all(kafka_config, source) if header(m, HEADER_REPLAY_RUN) == b"second"]
    assert sorted(m.key() for m in landed) == [b"o-7", b"o-8", b"o-9"]
