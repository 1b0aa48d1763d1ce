"""The embedded noida-db behind the fetch shim (``airflow_kerr/local/fetch_shim.py``), with real clients.

Clients stay on the shim (Metadata and FindCoordinator name its port), transactions and
read_committed still behave, an idle consumer's empty fetches are held (a bounded number
of fetches per second, counted by librdkafka), a write lets a held fetch go (counted by
the shim), and a partition larger than a client's receive limit is read with the local
stack's client settings. How fast a write wakes a held fetch is measured by
``benchmarks/fetch_wakeup.py``, not here.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.local.broker import LocalBroker, free_port
from airflow_kerr.local.fetch_shim import HOLD_CAP_MS, FetchShim

#: What librdkafka reports when one answer is larger than ``receive.message.max.bytes``.
RECEIVE_LIMIT_ERROR = re.compile(r"Invalid response size (\d+) \(0\.\.(\d+)\): increase receive\.message\.max\.bytes")
#: Bytes of each record's value in the large-partition test: 300 of them make 3 MB.
VALUE_SIZE = 10_000


@pytest.fixture(scope="module")
def broker() -> Iterator[LocalBroker]:
    with LocalBroker(kind="noida") as started:
        assert started.shimmed, "KERR_FETCH_SHIM=0 in the environment: these tests need the shim"
        yield started


def new_topic(broker: LocalBroker, partitions: int = 1) -> str:
    topic = f"shim-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    return topic


def test_clients_are_told_the_shims_port_not_noidas(broker: LocalBroker) -> None:
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=10)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", broker.port)]
    assert broker.upstream_port != broker.port


def test_transactions_and_read_committed_through_the_shim(broker: LocalBroker) -> None:
    topic = new_topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for value, commit in ((b"first", True), (b"aborted", False), (b"second", True)):
        producer.begin_transaction()
        producer.produce(topic, value)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"g-{topic}",  # a group: FindCoordinator, JoinGroup and OffsetCommit go through the shim
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value() or b"")
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    assert seen == [b"first", b"second"]
    assert committed[0].offset > 0


def test_an_idle_consumers_fetches_are_held(broker: LocalBroker) -> None:
    """Without the shim one idle consumer sent about 11,800 fetches a second (benchmarks/idle_fetch.py)."""
    topic = new_topic(broker)
    samples: list[tuple[int, int]] = []  # (librdkafka's stats time in µs, fetch requests sent so far)

    def stats(raw: str) -> None:
        report = json.loads(raw)
        fetches = sum(b.get("req", {}).get("Fetch", 0) for b in report["brokers"].values() if b.get("nodeid", -1) >= 0)
        samples.append((report["ts"], fetches))

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"idle-{topic}",
            "fetch.wait.max.ms": 500,
            "statistics.interval.ms": 500,
            "stats_cb": stats,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while len(samples) < 8:  # 3.5 s of stats after the first report
            consumer.poll(0.1)
    finally:
        consumer.close()
    (t0, f0), (t1, f1) = samples[2], samples[-1]  # skip the connection set-up
    rate = (f1 - f0) / ((t1 - t0) / 1e6)
    assert f1 > f0, "the consumer should keep fetching"
    assert rate <= 1.5 * 1000 / HOLD_CAP_MS, f"{rate:.0f} fetches/s from one idle consumer"


def produce_values(broker: LocalBroker, topic: str, count: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for index in range(count):
        producer.produce(topic, index.to_bytes(4, "big") + b"x" * (size - 4))
        if index % 100 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def read_all(
    broker: LocalBroker, topic: str, expected: int, extra: dict[str, Any], timeout_s: float, errors: list[str]
) -> list[int]:
    """Indices of the records one consumer reads from offset 0, until it has ``expected`` or hits its receive limit.

    The client's errors (``error_cb``) are appended to ``errors``; ``timeout_s`` only bounds a consumer that
    does neither.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": f"big-{uuid.uuid4().hex}",
            "error_cb": lambda error: errors.append(error.str()),
            **extra,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[int] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(seen) < expected and not any(map(RECEIVE_LIMIT_ERROR.search, errors)):
            assert time.monotonic() < deadline, f"read {len(seen)} of {expected} records; client errors: {errors}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() != KafkaError._MSG_TIMED_OUT
                continue
            seen.append(int.from_bytes((message.value() or b"")[:4], "big"))
    finally:
        consumer.close()
    return seen


def test_a_partition_larger_than_the_receive_limit_is_read_with_the_local_settings(broker: LocalBroker) -> None:
    """noida-db answers a Fetch with all of a partition past the offset; the local settings raise the limit.

    Scaled down: a 3 MB partition and a 1 MB receive limit stand for a DLQ of several hundred
    MB and librdkafka's default 100 MB.
    """
    topic = new_topic(broker)
    count = 300
    produce_values(broker, topic, count, VALUE_SIZE)
    small = {"receive.message.max.bytes": 1_000_000, "fetch.max.bytes": 500_000, "message.max.bytes": 400_000}
    errors: list[str] = []
    assert read_all(broker, topic, count, small, timeout_s=60, errors=errors) == []
    # The client says why it read nothing: the broker's first answer is the whole partition, over its limit.
    refused = [match for error in errors if (match := RECEIVE_LIMIT_ERROR.search(error))]
    assert refused, errors
    size, limit = map(int, refused[0].groups())
    assert limit == 1_000_000 and size > count * VALUE_SIZE, (size, limit)

    local = {**small, **broker.client_config}
    errors = []
    assert read_all(broker, topic, count, local, timeout_s=60, errors=errors) == list(range(count)), errors


@contextmanager
def own_shim(broker: LocalBroker, hold_cap_ms: int) -> Iterator[FetchShim]:
    """A FetchShim of this process in front of the module's noida-db, so the test can read its counters.

    The same class the broker's shim process runs (``python -m airflow_kerr.local.fetch_shim``), on an
    event loop in a thread here; clients that bootstrap from it stay on it (it rewrites noida-db's port).
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    shim = FetchShim(free_port(), broker.upstream_port, hold_cap_ms=hold_cap_ms)

    async def stop() -> None:
        assert shim.server is not None
        shim.server.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(shim.start(), loop).result(30)
        yield shim
    finally:
        asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def test_a_write_lets_a_held_fetch_go(broker: LocalBroker) -> None:
    """A held empty Fetch is answered when a write is acknowledged, not at the end of its hold.

    The hold is a minute here, so the only way a consumer whose fetch is held gets a new record
    before giving up (after 30 s) is the write's wake-up, which the shim counts (``woken``).
    """
    topic = new_topic(broker)
    hold_ms = 60_000
    with own_shim(broker, hold_cap_ms=hold_ms) as shim:
        config = {"bootstrap.servers": f"127.0.0.1:{shim.port}"}
        producer = Producer({**config, "linger.ms": 0})
        consumer = Consumer({**config, "group.id": f"wake-{topic}", "fetch.wait.max.ms": hold_ms})
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            for index in range(5):
                woken = shim.stats["woken"]
                # The consumer's one outstanding fetch is held (started holding, not yet let go).
                wait_for(lambda: shim.stats["held"] > shim.stats["woken"], consumer)
                producer.produce(topic, b"%d" % index)
                assert producer.flush(30) == 0
                message = consumer.poll(30)
                assert message is not None, f"the held fetch was not let go by the write: {shim.stats}"
                assert message.error() is None and message.value() == b"%d" % index, message.error()
                assert shim.stats["woken"] == woken + 1, shim.stats
        finally:
            producer.produce(topic, b"wake the last held fetch")  # so the consumer's close need not wait on it
            producer.flush(30)
            consumer.close()


def wait_for(predicate: Any, consumer: Consumer, timeout_s: float = 30) -> None:
    """Poll the consumer (which reads nothing meanwhile) until ``predicate()``; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "the consumer's fetch was never held"
        assert consumer.poll(0.05) is None, "a record arrived while none was written"
