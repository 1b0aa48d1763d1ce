"""The transactional batch protocol and its KIP-691 error handling, on a scripted producer.

The errors are real confluent-kafka ``KafkaError`` objects built with the flags librdkafka
sets (fatal, retriable, txn_requires_abort); the producer is a fake that records the calls
and raises what each test scripts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kerr.replay.background import BackgroundWriter
from airflow_kerr.replay.policy import Outgoing
from airflow_kerr.replay.summary import partition_ranges
from airflow_kerr.replay.transactions import (
    BatchAborted,
    BrokerUnreachable,
    ReplayFatalError,
    TransactionalWriter,
    abort_grace_s,
    transactional_config,
)

FENCED = KafkaException(KafkaError(KafkaError._FENCED, "producer fenced", fatal=True))
ABORTABLE = KafkaException(KafkaError(KafkaError._TIMED_OUT, "produce timed out", txn_requires_abort=True))
TIMEOUT = KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True))
RETRIABLE = KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, "loading", retriable=True))
STATE = KafkaException(KafkaError(KafkaError._STATE, "wrong state"))


class ScriptedProducer:
    """Records calls; ``fail[call]`` is a list of exceptions raised by the next calls of that name."""

    def __init__(self, **fail: list[BaseException]) -> None:
        self.calls: list[str] = []
        self.fail: dict[str, list[BaseException]] = defaultdict(list, fail)
        self.produced: list[tuple[str, Any]] = []

    def _step(self, name: str) -> None:
        self.calls.append(name)
        if self.fail[name]:
            raise self.fail[name].pop(0)

    def init_transactions(self, timeout: float = 0) -> None:
        self._step("init_transactions")

    def begin_transaction(self) -> None:
        self._step("begin_transaction")

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        self._step("produce")
        self.produced.append((topic, value))

    def poll(self, timeout: float = 0) -> int:
        self.calls.append("poll")
        return 0

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float = 0) -> None:
        self._step("send_offsets_to_transaction")

    def commit_transaction(self, timeout: float = 0) -> None:
        self._step("commit_transaction")

    def abort_transaction(self, timeout: float = 0) -> None:
        self._step("abort_transaction")


RECORDS: list[Outgoing] = [("orders", b"v%d" % i, b"k", [], None) for i in range(3)]


def writer(producer: ScriptedProducer) -> TransactionalWriter:
    return TransactionalWriter(producer, sleep=lambda s: None, call_attempts=3, commit_attempts=3)


def txn_calls(producer: ScriptedProducer) -> list[str]:
    return [call for call in producer.calls if call not in ("produce", "poll")]


def test_a_batch_is_begin_produce_send_offsets_commit() -> None:
    producer = ScriptedProducer()
    sink = writer(producer)
    assert sink.write(RECORDS, ["offsets"], "group")
    assert producer.calls == [
        "begin_transaction",
        *["produce"] * 3,
        "send_offsets_to_transaction",
        "commit_transaction",
    ]
    assert not sink.in_transaction and sink.commits == 1


@pytest.mark.parametrize("call", ["produce", "send_offsets_to_transaction", "commit_transaction"])
def test_an_abortable_error_aborts_and_asks_for_a_retry(call: str) -> None:
    faults: dict[str, list[BaseException]] = {call: [ABORTABLE]}
    producer = ScriptedProducer(**faults)
    sink = writer(producer)
    with pytest.raises(BatchAborted, match=f"{call}.*abortable.*_TIMED_OUT"):
        sink.write(RECORDS, ["offsets"], "group")
    assert txn_calls(producer)[-1] == "abort_transaction" and sink.aborts == 1 and not sink.in_transaction


@pytest.mark.parametrize("call", ["begin_transaction", "produce", "send_offsets_to_transaction", "commit_transaction"])
def test_a_fatal_error_fails_naming_the_cause_and_never_aborts(call: str) -> None:
    faults: dict[str, list[BaseException]] = {call: [FENCED]}
    producer = ScriptedProducer(**faults)
    with pytest.raises(ReplayFatalError, match=r"_FENCED: producer fenced \[fatal\]"):
        writer(producer).write(RECORDS, ["offsets"], "group")
    assert "abort_transaction" not in producer.calls


def test_a_non_retriable_error_of_a_transactional_call_is_fatal() -> None:
    producer = ScriptedProducer(send_offsets_to_transaction=[STATE])
    with pytest.raises(ReplayFatalError, match="non_retriable"):
        writer(producer).write(RECORDS, [], "group")
    assert "abort_transaction" not in producer.calls


def test_a_timeout_inside_commit_retries_the_commit_and_never_aborts() -> None:
    producer = ScriptedProducer(commit_transaction=[TIMEOUT, TIMEOUT])
    sink = writer(producer)
    assert sink.write(RECORDS, [], "group")
    assert txn_calls(producer)[-3:] == ["commit_transaction"] * 3
    assert "abort_transaction" not in producer.calls and sink.commit_retries == 2


def test_a_commit_whose_outcome_stays_unknown_fails_without_aborting() -> None:
    producer = ScriptedProducer(commit_transaction=[TIMEOUT] * 3)
    with pytest.raises(ReplayFatalError, match="outcome still unknown after 3 attempts"):
        writer(producer).write(RECORDS, [], "group")
    assert "abort_transaction" not in producer.calls


def test_a_retriable_call_is_retried_then_given_up() -> None:
    producer = ScriptedProducer(send_offsets_to_transaction=[RETRIABLE])
    assert writer(producer).write(RECORDS, [], "group")
    assert producer.calls.count("send_offsets_to_transaction") == 2

    producer = ScriptedProducer(init_transactions=[RETRIABLE] * 3)
    with pytest.raises(ReplayFatalError, match="init_transactions failed after 3 attempts"):
        writer(producer).init()


def test_a_full_queue_is_drained_and_the_record_produced() -> None:
    producer = ScriptedProducer(produce=[BufferError("queue full")])
    assert writer(producer).write(RECORDS[:1], [], "group")
    assert producer.calls[:4] == ["begin_transaction", "produce", "poll", "produce"]


def test_a_stop_while_pacing_aborts_the_open_transaction() -> None:
    producer = ScriptedProducer()
    paced = iter([True, False])
    sink = writer(producer)
    assert not sink.write(RECORDS, [], "group", pace=lambda: next(paced))
    assert producer.calls == ["begin_transaction", "produce", "abort_transaction"]
    assert not sink.in_transaction


def test_a_stop_seen_by_the_unpaced_check_aborts_the_open_transaction() -> None:
    producer = ScriptedProducer()
    halts = iter([False, True])
    sink = writer(producer)
    assert not sink.write(RECORDS, [], "group", halted=lambda: next(halts))
    assert producer.calls == ["begin_transaction", "produce", "abort_transaction"]
    assert not sink.in_transaction


def test_the_unpaced_check_reads_no_clock_per_record() -> None:
    def clock_readings(records: list[Outgoing]) -> int:
        readings: list[float] = []

        def clock() -> float:
            readings.append(0.0)
            return 0.0

        sink = TransactionalWriter(ScriptedProducer(), sleep=lambda s: None, clock=clock)
        assert sink.write(records, [], "group", halted=lambda: False)
        return len(readings)

    assert clock_readings(RECORDS) == clock_readings(RECORDS[:1])


def test_a_background_batch_reports_its_outcome_before_the_next_is_handed_over() -> None:
    producer = ScriptedProducer(commit_transaction=[ABORTABLE])
    background = BackgroundWriter(writer(producer))
    background.submit(RECORDS, ["offsets"], "group")
    assert background.busy
    with pytest.raises(RuntimeError, match="still in flight"):
        background.submit(RECORDS, ["offsets"], "group")
    with pytest.raises(BatchAborted, match="commit_transaction"):
        background.result()
    assert not background.busy and txn_calls(producer)[-1] == "abort_transaction"

    background.submit(RECORDS, ["offsets"], "group")
    assert background.result() is True
    assert txn_calls(producer)[-2:] == ["send_offsets_to_transaction", "commit_transaction"]
    background.close()


def test_closing_waits_for_the_batch_in_flight() -> None:
    producer = ScriptedProducer()
    background = BackgroundWriter(writer(producer))
    background.submit(RECORDS, ["offsets"], "group")
    background.close()
    assert not background.busy and producer.calls[-1] == "commit_transaction"


def test_partition_sets_have_short_stable_names() -> None:
    assert partition_ranges([3, 0, 1, 2, 7, 9, 10]) == "0-3,7,9-10"
    assert partition_ranges([0]) == "0"


class Clock:
    """A fake monotonic clock that the slow producer below advances."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class SlowProducer(ScriptedProducer):
    """Each call that talks to the broker takes ``cost[call]`` seconds (and records the timeout it was given)."""

    def __init__(self, clock: Clock, cost: dict[str, float], **fail: list[BaseException]) -> None:
        super().__init__(**fail)
        self.clock = clock
        self.cost = cost
        self.timeouts: list[tuple[str, float]] = []

    def _timed(self, name: str, timeout: float) -> None:
        self.timeouts.append((name, timeout))
        self.clock.now += min(self.cost.get(name, 0.0), timeout)
        self._step(name)

    def init_transactions(self, timeout: float = 0) -> None:
        self._timed("init_transactions", timeout)

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float = 0) -> None:
        self._timed("send_offsets_to_transaction", timeout)

    def commit_transaction(self, timeout: float = 0) -> None:
        self._timed("commit_transaction", timeout)

    def abort_transaction(self, timeout: float = 0) -> None:
        self._timed("abort_transaction", timeout)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        self.calls.append("purge")

    def close(self) -> None:
        self.calls.append("close")


def budgeted(producer: SlowProducer, clock: Clock, budget: float = 10.0) -> TransactionalWriter:
    return TransactionalWriter(
        producer, transaction_timeout_s=budget, call_attempts=100, commit_attempts=100, sleep=clock.sleep, clock=clock
    )


def test_every_transactional_call_gets_the_time_left_of_the_one_budget() -> None:
    clock = Clock()
    producer = SlowProducer(clock, {"send_offsets_to_transaction": 3.0, "commit_transaction": 2.0})

    assert budgeted(producer, clock).write(RECORDS, ["offsets"], "group")

    assert producer.timeouts == [("send_offsets_to_transaction", 10.0), ("commit_transaction", 7.0)]


def test_a_retriable_error_is_not_retried_past_the_budget_and_the_transaction_is_aborted() -> None:
    """The broker gone: each attempt times out; the run learns it within the budget plus a short abort."""
    clock = Clock()
    gone = KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to add offsets: Local: Timed out", retriable=True))
    producer = SlowProducer(
        clock,
        {"send_offsets_to_transaction": 4.0, "abort_transaction": 60.0},
        send_offsets_to_transaction=[gone] * 100,
        abort_transaction=[TIMEOUT],
    )
    sink = budgeted(producer, clock)
    started = clock.now

    with pytest.raises(BrokerUnreachable) as caught:
        sink.write(RECORDS, ["offsets"], "group")

    message = str(caught.value)
    assert message.startswith(
        "the broker was unreachable: send_offsets_to_transaction did not complete within the transaction budget "
        "of 10 s (transaction_timeout_s) (last error: _TIMED_OUT: Failed to add offsets"
    )
    assert "could not be aborted within 2.5 s" in message and "next run's init_transactions fences it" in message
    calls = [name for name, _ in producer.timeouts]
    assert calls.count("send_offsets_to_transaction") == 3, "4 + 4 + 2 s: never past the budget"
    assert producer.timeouts[-1] == ("abort_transaction", 2.5)
    assert clock.now - started <= 10.0 + abort_grace_s(10.0)
    assert "commit_transaction" not in calls and sink.unreachable and not sink.in_transaction


def test_a_commit_that_outlasts_the_budget_fails_without_an_abort() -> None:
    clock = Clock()
    producer = SlowProducer(clock, {"commit_transaction": 4.0}, commit_transaction=[TIMEOUT] * 100)

    with pytest.raises(BrokerUnreachable, match=r"commit_transaction did not complete.*outcome of this batch's commit"):
        budgeted(producer, clock).write(RECORDS, ["offsets"], "group")

    assert "abort_transaction" not in producer.calls


def test_init_transactions_has_the_same_budget() -> None:
    clock = Clock()
    producer = SlowProducer(clock, {"init_transactions": 5.0}, init_transactions=[TIMEOUT] * 100)

    with pytest.raises(BrokerUnreachable, match=r"init_transactions did not complete .* 10 s .*nothing was written"):
        budgeted(producer, clock).init()

    assert [timeout for _, timeout in producer.timeouts] == [10.0, 4.5], "5 s, a 0.5 s pause, then what is left"


def test_a_full_queue_is_drained_only_while_the_budget_lasts() -> None:
    clock = Clock()

    class AlwaysFull(SlowProducer):
        def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
            raise BufferError("queue full")

        def poll(self, timeout: float = 0) -> int:
            clock.now += timeout
            return 0

    producer = AlwaysFull(clock, {})
    with pytest.raises(BrokerUnreachable, match=r"the local queue stayed full.*the open transaction was aborted"):
        budgeted(producer, clock, budget=2.0).write(RECORDS, ["offsets"], "group")
    assert clock.now - 1000.0 <= 2.0 + abort_grace_s(2.0)


def test_waiting_for_the_rate_limiter_does_not_use_up_the_budget() -> None:
    clock = Clock()
    producer = SlowProducer(clock, {"send_offsets_to_transaction": 1.0})

    def slow_pace() -> bool:
        clock.now += 30.0
        return True

    assert budgeted(producer, clock).write(RECORDS, ["offsets"], "group", pace=slow_pace)
    assert producer.timeouts == [("send_offsets_to_transaction", 10.0), ("commit_transaction", 9.0)]


def test_after_an_unreachable_broker_the_producer_is_purged_not_closed() -> None:
    """``Producer.close`` aborts and flushes without a limit: with the broker gone it would hang the task."""
    clock = Clock()
    producer = SlowProducer(clock, {"init_transactions": 20.0}, init_transactions=[TIMEOUT])
    sink = budgeted(producer, clock)
    with pytest.raises(BrokerUnreachable):
        sink.init()

    sink.close()

    assert producer.calls[-1] == "purge" and "close" not in producer.calls
    healthy = SlowProducer(clock, {})
    budgeted(healthy, clock).close()
    assert healthy.calls == ["close"]


def test_the_producer_config_carries_the_budget_as_the_transaction_timeout() -> None:
    config = transactional_config({"bootstrap.servers": "b", "socket.timeout.ms": 60000}, "tid", 5.0)

    assert config == {
        "bootstrap.servers": "b",
        "transactional.id": "tid",
        "transaction.timeout.ms": 5000,
        "socket.timeout.ms": 4900,
    }
    assert "message.timeout.ms" not in transactional_config({}, "tid", 5.0)
