"""The scan consumer cache: taking removes, at most ``max_entries`` kept, idle ones closed, evicted ones closed."""

from __future__ import annotations

import threading
import time

from airflow_kerr.inspection.scan_consumers import ScanConsumers, config_identity, scan_key


class FakeConsumer:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_take_removes_and_a_miss_is_none() -> None:
    cache = ScanConsumers(sweep=False)
    consumer = FakeConsumer()
    cache.put("a", consumer)
    assert cache.take("b") is None
    assert cache.take("a") is consumer
    assert cache.take("a") is None  # in use: nobody else gets it
    assert consumer.closed == 0


def test_the_least_recently_kept_beyond_the_limit_is_closed() -> None:
    cache = ScanConsumers(max_entries=2, sweep=False)
    kept = [FakeConsumer() for _ in range(3)]
    for i, consumer in enumerate(kept):
        cache.put(i, consumer)
    assert [c.closed for c in kept] == [1, 0, 0]
    assert len(cache) == 2 and cache.take(0) is None


def test_putting_under_a_key_in_use_closes_the_one_it_replaces() -> None:
    cache = ScanConsumers(sweep=False)
    old, new = FakeConsumer(), FakeConsumer()
    cache.put("k", old)
    cache.put("k", new)
    assert (old.closed, new.closed) == (1, 0)
    assert cache.take("k") is new


def test_an_idle_consumer_is_closed_and_not_handed_out() -> None:
    clock = Clock()
    cache = ScanConsumers(idle_s=30.0, clock=clock, sweep=False)
    idle, fresh = FakeConsumer(), FakeConsumer()
    cache.put("idle", idle)
    clock.now += 20
    cache.put("fresh", fresh)
    clock.now += 10
    assert cache.take("idle") is None and idle.closed == 1
    assert cache.take("fresh") is fresh and fresh.closed == 0


def test_the_sweeper_closes_idle_consumers_when_nobody_calls_again() -> None:
    cache = ScanConsumers(idle_s=0.2)
    consumer = FakeConsumer()
    cache.put("k", consumer)
    deadline = time.monotonic() + 5
    while consumer.closed == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert consumer.closed == 1 and len(cache) == 0


def test_threads_never_get_the_same_consumer() -> None:
    cache = ScanConsumers(max_entries=1000, sweep=False)
    consumers = [FakeConsumer() for _ in range(200)]
    for i, consumer in enumerate(consumers):
        cache.put(i % 20, consumer)  # 20 keys, each replaced 10 times: 180 closed
    got: list[object] = []
    lock = threading.Lock()

    def grab() -> None:
        for key in range(20):
            taken = cache.take(key)
            if taken is not None:
                with lock:
                    got.append(taken)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == len({id(c) for c in got}) == 20
    assert sum(c.closed for c in consumers) == 180


def test_keys_tell_configs_scans_and_positions_apart() -> None:
    config = {"bootstrap.servers": "b:9092", "security.protocol": "PLAINTEXT"}
    assert config_identity(config) == config_identity(dict(reversed(config.items())))
    assert config_identity(config) != config_identity({**config, "sasl.username": "x"})
    key = scan_key(config, "t.dlq", "sel", {0: (5, 10), 1: (10, 10)})
    assert key == scan_key(dict(config), "t.dlq", "sel", {1: (10, 10), 0: (5, 10)})
    assert key != scan_key(config, "t.dlq", "sel", {0: (6, 10), 1: (10, 10)})
    assert key != scan_key(config, "t.dlq", "sel", {0: (5, 10), 1: (10, 12)})
    assert key != scan_key(config, "t.dlq", "other", {0: (5, 10), 1: (10, 10)})
