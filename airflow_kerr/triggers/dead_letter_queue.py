"""``DeadLetterQueueTrigger``: wait on the triggerer until a DLQ topic gained enough records.

Each poll reads end offsets (a fetch-verified ListOffsets, never a full read) in a
worker thread, so the event loop never blocks on confluent-kafka.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.kafka.dead_letters import dlq_growth, newest_dead_letters
from airflow_kerr.kafka.offsets import offset_consumer
from airflow_kerr.triggers.base import KwargsTrigger


class DeadLetterQueueTrigger(KwargsTrigger):
    """Fire ``tripped`` once ``topic`` holds ``min_records`` more than ``baseline`` (partition -> offset).

    With ``deadline`` (Unix time) it fires ``timeout`` with the count reached once the deadline passes.
    """

    fields = ("topic", "baseline", "min_records", "sample_size", "poll_interval", "kafka_config_id", "deadline")

    def __init__(
        self,
        topic: str,
        baseline: dict[str, int],
        min_records: int = 1,
        sample_size: int = 5,
        poll_interval: float = 10.0,
        kafka_config_id: str = "kafka_default",
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.baseline = {str(k): int(v) for k, v in baseline.items()}
        self.min_records = min_records
        self.sample_size = sample_size
        self.poll_interval = poll_interval
        self.kafka_config_id = kafka_config_id
        self.deadline = deadline

    async def run(self) -> AsyncIterator[TriggerEvent]:
        config = await asyncio.to_thread(KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config)
        baseline = {int(k): v for k, v in self.baseline.items()}
        consumer = await asyncio.to_thread(offset_consumer, config)
        try:
            while True:
                try:
                    growth = await asyncio.to_thread(dlq_growth, config, self.topic, baseline, consumer)
                except Exception as exc:  # confluent-kafka raises KafkaException with no stable subclass
                    yield TriggerEvent({"status": "error", "message": f"reading {self.topic!r} failed: {exc}"})
                    return
                if growth.count >= self.min_records:
                    sample = await asyncio.to_thread(newest_dead_letters, config, self.topic, growth, self.sample_size)
                    yield TriggerEvent({"status": "tripped", "result": dead_letter_result(self.topic, growth, sample)})
                    return
                remaining = None if self.deadline is None else self.deadline - time.time()
                if remaining is not None and remaining <= 0:
                    yield TriggerEvent({"status": "timeout", "count": growth.count})
                    return
                self.log.info("%s gained %d of %d records", self.topic, growth.count, self.min_records)
                await asyncio.sleep(self.poll_interval if remaining is None else min(self.poll_interval, remaining))
        finally:
            await asyncio.to_thread(consumer.close)


def dead_letter_result(topic: str, growth: Any, sample: list[dict[str, Any]]) -> dict[str, Any]:
    """What the sensor returns (XCom): the count, the offsets it was measured between, and the sample."""
    return {
        "topic": topic,
        "count": growth.count,
        "baseline": {str(k): v for k, v in growth.baseline.items()},
        "ends": {str(k): v for k, v in growth.ends.items()},
        "sample": sample,
    }
