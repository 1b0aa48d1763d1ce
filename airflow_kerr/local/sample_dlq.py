"""The sample dead letters the local UI starts with, so a dry run of ``dlq_replay`` has work to show."""

from __future__ import annotations

import json
import time

from airflow_kerr.local.airflow_env import LocalUIError
from airflow_kerr.local.broker import ensure_topics

#: The DLQ topic the ``dlq_replay`` form names by default; seeded so a dry run with the defaults has work to show.
SAMPLE_DLQ_TOPIC = "orders.dlq"
SAMPLE_SOURCE_TOPIC = "orders"


def seed_dead_letters(
    bootstrap_servers: str, dlq_topic: str, source_topic: str = SAMPLE_SOURCE_TOPIC, count: int = 20
) -> int:
    """Create ``dlq_topic`` and fill it with ``count`` invalid orders as the error-aware job writes them.

    Half have a negative amount (the example fix repairs them), half are cut-short JSON
    (the fix parks them), so a dry run of ``dlq_replay`` has a breakdown to show.
    """
    from airflow_kerr.errors import SourceRecord, Stage, TaskId
    from airflow_kerr.examples.orders import InvalidOrder
    from airflow_kerr.local.dead_letters import Failure, write_dead_letters

    ensure_topics(bootstrap_servers, {source_topic: 1, dlq_topic: 1})
    now_ms = int(time.time() * 1000)
    failures = []
    for index in range(count):
        order_id = f"o-{index}"
        error: Exception
        if index % 2:
            value = f'{{"id": "{order_id}", "amount": '.encode()
            stage, error = Stage.VALUE_CONVERTER, json.JSONDecodeError("Expecting value", value.decode(), len(value))
        else:
            value = json.dumps({"id": order_id, "amount": -12.5 - index}).encode()
            stage, error = Stage.TRANSFORMATION, InvalidOrder(f"order {order_id} has a non-positive amount")
        record = SourceRecord(source_topic, 0, index, now_ms, key=order_id.encode(), value=value)
        failures.append(Failure(record, stage, error))
    try:
        return write_dead_letters(
            {"bootstrap.servers": bootstrap_servers}, dlq_topic, failures, task=TaskId("orders_pipeline", 0)
        )
    except RuntimeError as exc:
        raise LocalUIError(f"could not write the sample dead letters to {dlq_topic}: {exc}") from exc
