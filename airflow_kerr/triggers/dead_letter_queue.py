"""``DeadLetterQueueTrigger``: wait on the triggerer until a DLQ topic gained enough records.

Each poll reads end offsets (a fetch-verified ListOffsets, never a full read) in a
worker thread, so the event loop never blocks on confluent-kafka.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.kafka.dead_letters import dlq_growth, newest_dead_letters
from airflow_kerr.kafka.offsets import offset_consumer
from airflow_kerr.triggers.base import PollingTrigger


class DeadLetterQueueTrigger(PollingTrigger):
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

    async def open(self) -> None:
        hook = KafkaClusterHook(kafka_config_id=self.kafka_config_id)
        self._config = await asyncio.to_thread(hook.client_config)
        self._consumer = await asyncio.to_thread(offset_consumer, self._config)
        self._baseline = {int(k): v for k, v in self.baseline.items()}
        self._count = 0

    async def close(self) -> None:
        await asyncio.to_thread(self._consumer.close)

    async def poll(self) -> dict[str, Any] | None:
        growth = await asyncio.to_thread(dlq_growth, self._config, self.topic, self._baseline, self._consumer)
        self._count = growth.count
        if growth.count < self.min_records:
            return None
        sample = await asyncio.to_thread(newest_dead_letters, self._config, self.topic, growth, self.sample_size)
        return {"status": "tripped", "result": dead_letter_result(self.topic, growth, sample)}

    def progress(self) -> str:
        return f"{self.topic} gained {self._count} of {self.min_records} records"

    def error_event(self, error: Exception) -> dict[str, Any]:
        return {"status": "error", "message": f"reading {self.topic!r} failed: {error}"}

    def timeout_event(self) -> dict[str, Any]:
        return {"status": "timeout", "count": self._count}


def dead_letter_result(topic: str, growth: Any, sample: list[dict[str, Any]]) -> dict[str, Any]:
    """What the sensor returns (XCom): the count, the offsets it was measured between, and the sample."""
    return {
        "topic": topic,
        "count": growth.count,
        "baseline": {str(k): v for k, v in growth.baseline.items()},
        "ends": {str(k): v for k, v in growth.ends.items()},
        "sample": sample,
    }
