"""The replay fails promptly when the broker goes away, saying the broker was unreachable and what was committed.

The test starts its own embedded broker (the session one must survive), lets the replay commit
a few paced batches, then SIGKILLs the broker mid-transaction. Before the transaction budget,
``send_offsets_to_transaction`` blocked about 60 s per attempt and was retried as retriable: a
run was still going minutes later. Now the run fails with the budget's own error, which names the
budget; that the budget holds to the second (plus the short abort) is shown on a fake clock by
tests/unit/replay/test_transactions.py, not timed here.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record
from airflow_kerr.kafka.offsets import end_offsets
from airflow_kerr.local.broker import LocalBroker
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.options import ReplayOptions
from airflow_kerr.replay.transactions import BrokerUnreachable, abort_grace_s
from tests.clock import RECENT_MS

#: An hour ago: the records keep a real event time, well inside the broker's retention (7 days), which
#: deletes a record whose timestamp is older (noida-db within a second of the write; Apache Kafka within 5 min).

BUDGET_S = 4.0
#: Closing the clients and the thread hand-over, beyond the budget and the abort's grace.
SLACK_S = 3.0
RECORDS = 2000


@pytest.fixture
def own_broker(tmp_path: Any) -> Iterator[LocalBroker]:
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    try:
        yield broker
    finally:
        broker.stop()


def seed(config: dict[str, Any]) -> None:
    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(name, 1, 1) for name in ("orders", "orders.dlq")]).values():
        future.result(10)
    producer = Producer(config)
    for i in range(RECORDS):
        record = SourceRecord("orders", 0, i, RECENT_MS, key=f"o-{i}".encode(), value=b'{"amount": 1}')
        context = ErrorContext(TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "v", ValueError("neg"), record)
        producer.produce(**build_dead_letter_record(context, topic="orders.dlq").produce_kwargs())
    assert producer.flush(10) == 0


@pytest.mark.timeout(90)
def test_a_killed_broker_fails_the_replay_within_the_budget_naming_what_was_committed(
    own_broker: LocalBroker,
) -> None:
    config = {"bootstrap.servers": own_broker.bootstrap_servers, "log_level": 0}
    seed(config)
    options = ReplayOptions.build(
        dlq_topic="orders.dlq", max_records_per_second=200, batch_size=100, transaction_timeout_s=BUDGET_S
    )
    engine = DlqReplay(config, options, run_id="broker-loss", idle_timeout_s=60)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["summary"] = engine.run()
        except BaseException as error:
            outcome["error"] = error

    replay = threading.Thread(target=run, daemon=True)
    replay.start()
    deadline = time.monotonic() + 30
    while end_offsets(config, [("orders", 0)], timeout_s=5)[("orders", 0)] < 300:
        assert replay.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.05)
    assert own_broker.pid is not None
    os.kill(own_broker.pid, signal.SIGKILL)

    # Only a give-up for a replay that hangs (as it did, for minutes, before the budget): five times its bound.
    replay.join(5 * (BUDGET_S + abort_grace_s(BUDGET_S) + SLACK_S))
    assert not replay.is_alive(), "the replay was still running long after its transaction budget"
    error = outcome.get("error")
    assert isinstance(error, BrokerUnreachable), outcome
    message = str(error)
    assert message.startswith("the broker was unreachable: "), message
    assert "within the transaction budget of 4 s (transaction_timeout_s)" in message
    assert "Committed by this run before it: " in message and " transactions with " in message
    assert "the replay group kerr-replay.orders.dlq is at offsets {0: " in message
