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

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.kafka.replay_select import ReplayRecord
from airflow_kerr.kafka.replay_summary import partition_ranges
from airflow_kerr.kafka.replay_txn import BackgroundWriter, BatchAborted, ReplayFatalError, TransactionalWriter

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


RECORDS = [
    ReplayRecord("orders", b"k", b"v%d" % i, [], parse_dead_letter([], b"k", b"v", topic="d", partition=0, offset=i))
    for i in range(3)
]


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
