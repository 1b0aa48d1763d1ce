"""A Spark worker's next task of the same run takes the producers the last task gave back, on a real broker.

Why it matters: a new idempotent producer waits half a second or more for its producer id,
twice per task (sink and DLQ), so a job over many small source partitions spent most of
its time waiting (``benchmarks/scaling.py``). The pool must never hand over a producer that
still holds records or saw a failure, nor one of another run, and what the taking task
writes must be reported to it, not to the task that gave the producer back.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record
from airflow_kerr.spark.sinks import PRODUCER_POOL, ProducerChannel
from tests.clock import RECENT_MS

pytestmark = pytest.mark.timeout(120)


def _dead_letter(dlq: str, offset: int) -> Any:
    record = SourceRecord("orders", 0, offset, RECENT_MS, key=b"k", value=b'{"id": 1}')
    context = ErrorContext(TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "x.v", ValueError("bad"), record)
    return build_dead_letter_record(context, topic=dlq)


def _values(kafka_config: dict[str, Any], topic: str, count: int) -> list[bytes | None]:
    consumer = Consumer({**kafka_config, "group.id": f"{topic}.check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes | None] = []
    try:
        for _ in range(100):
            values += [m.value() for m in consumer.consume(count - len(values), 0.2) if m.error() is None]
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


def test_the_runs_next_task_takes_the_flushed_producers_and_gets_its_own_reports(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    sink, dlq = create_topic(unique_topic, 1), create_topic(f"{unique_topic}.dlq", 1)
    first = ProducerChannel(kafka_config, pool_key=f"{unique_topic}-run")
    first.open_dead_letters()
    first.produce(sink, value=b"first")
    first.send_dead_letter(_dead_letter(dlq, 1))
    first.flush()
    first.release()
    assert len(PRODUCER_POOL) == 2

    second = ProducerChannel(kafka_config, pool_key=f"{unique_topic}-run")
    assert second.producer is first.producer
    reused_dead_letters = second.open_dead_letters()
    assert len(PRODUCER_POOL) == 0
    second.produce(sink, value=b"second")
    second.send_dead_letter(_dead_letter(dlq, 2))
    second.flush()

    assert _values(kafka_config, sink, 2) == [b"first", b"second"]
    assert first.dead_letter_spans.spans() == {0: ((0, 1),)}
    assert second.dead_letter_spans.spans() == {0: ((1, 2),)}  # its own DLQ record's report, not the first's
    assert not first.failures and not second.failures
    second.release()
    third = ProducerChannel(kafka_config, pool_key=f"{unique_topic}-run")
    assert third.open_dead_letters() is reused_dead_letters
    third.release()


def test_a_producer_with_records_queued_or_of_another_run_is_not_handed_over(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    sink = create_topic(unique_topic, 1)
    slow = {**kafka_config, "linger.ms": 60_000}  # the record stays queued until the flush
    queued = ProducerChannel(slow, pool_key=f"{unique_topic}-a")
    queued.produce(sink, value=b"queued")
    queued.release()
    after_queued = ProducerChannel(slow, pool_key=f"{unique_topic}-a")
    assert after_queued.producer is not queued.producer
    queued.flush()  # nothing lost: the record held back is delivered by its own channel
    assert _values(kafka_config, sink, 1) == [b"queued"]

    after_queued.release()
    assert len(PRODUCER_POOL) == 1
    other_run = ProducerChannel(slow, pool_key=f"{unique_topic}-b")
    assert other_run.producer is not after_queued.producer
    other_run.release()
    assert len(PRODUCER_POOL) == 1  # run a's idle producer was dropped when run b's came back
    assert ProducerChannel(slow, pool_key=f"{unique_topic}-a").producer is not after_queued.producer

    unpooled = ProducerChannel(kafka_config)
    unpooled.release()
    assert ProducerChannel(kafka_config).producer is not unpooled.producer


def test_an_idle_producer_is_closed_after_the_idle_time_without_another_task(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's own thread closes it: a producer kept for a task that never comes must not outlive its run."""
    sink = create_topic(unique_topic, 1)
    PRODUCER_POOL.close_all()  # what earlier tests left: the only producer closed below is this test's
    monkeypatch.setattr(PRODUCER_POOL, "idle_s", 0.5)
    closed_before = PRODUCER_POOL.closed
    channel = ProducerChannel(kafka_config, pool_key=f"{unique_topic}-run")
    channel.produce(sink, value=b"only")
    channel.flush()
    channel.release()
    assert len(PRODUCER_POOL) == 1

    assert PRODUCER_POOL.wait_closed(closed_before + 1, timeout_s=60)  # no take(): the pool's thread closed it

    assert len(PRODUCER_POOL) == 0
    with pytest.raises(RuntimeError, match="closed"):
        channel.producer.produce(sink, value=b"after")
    assert _values(kafka_config, sink, 1) == [b"only"]  # closing wrote nothing and lost nothing


def test_a_process_that_exits_closes_the_producers_it_kept(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """A real Python process gives a producer back to its pool and exits normally (as a worker that ends does)."""
    sink = create_topic(unique_topic, 1)
    script = f"""
import atexit

def report():  # registered first, so it runs after the pool's own exit handler
    from airflow_kerr.spark.sinks import PRODUCER_POOL
    print("kept at exit:", len(PRODUCER_POOL), "closed:", PRODUCER_POOL.closed)

atexit.register(report)
from airflow_kerr.spark.sinks import PRODUCER_POOL, ProducerChannel

channel = ProducerChannel({kafka_config!r}, pool_key="exit-run")
channel.produce({sink!r}, value=b"kept")
channel.flush()
channel.release()
print("kept before exit:", len(PRODUCER_POOL), "closed:", PRODUCER_POOL.closed)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)

    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["kept before exit: 1 closed: 0", "kept at exit: 0 closed: 1"]
    assert _values(kafka_config, sink, 1) == [b"kept"]


def test_a_dropped_channel_takes_its_producers_with_it_without_a_garbage_collection(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """A channel and its producers are no reference cycle: dropped (as the driver drops its metrics channel when a
    run ends), they go at once, not at some later collection while their producers reconnect to a stopped broker."""
    sink = create_topic(unique_topic, 1)
    gc.disable()
    try:
        channel = ProducerChannel(kafka_config)
        channel.open_dead_letters()
        channel.produce(sink, value=b"delivered")
        channel.flush()
        gone = weakref.ref(channel)
        del channel
        assert gone() is None
    finally:
        gc.enable()
    assert _values(kafka_config, sink, 1) == [b"delivered"]
