"""``ToleranceTrigger``: wait on the triggerer for a tolerance breach, or for recovery from one.

Readings (the metrics topic, or DLQ growth against a group's consumption) are
taken in a worker thread, so the event loop never blocks on confluent-kafka. The
DLQ mode keeps its samples in the trigger while it runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.kafka.tolerance import ToleranceReading, ToleranceWatch
from airflow_kerr.triggers.base import PollingTrigger


class ToleranceTrigger(PollingTrigger):
    """Poll a :class:`ToleranceWatch` built from ``watch`` (its plain settings) until its condition holds.

    With ``deadline`` (Unix time) it fires ``timeout`` with the last reading once the deadline passes.
    """

    fields = ("watch", "poll_interval", "kafka_config_id", "deadline")

    def __init__(
        self,
        watch: dict[str, Any],
        poll_interval: float = 30.0,
        kafka_config_id: str = "kafka_default",
        deadline: float | None = None,
    ) -> None:
        super().__init__()
        self.watch = watch
        self.poll_interval = poll_interval
        self.kafka_config_id = kafka_config_id
        self.deadline = deadline

    async def open(self) -> None:
        config = await asyncio.to_thread(KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config)
        self._watch = ToleranceWatch(kafka_config=config, **self.watch)
        self._reading: ToleranceReading | None = None

    async def poll(self) -> dict[str, Any] | None:
        holds, self._reading = await asyncio.to_thread(self._watch.check)
        if holds and self._reading is not None:
            return {"status": self._watch.wait_for, "reading": self._reading.as_dict()}
        return None

    def progress(self) -> str:
        return f"waiting for {self._watch.wait_for}: {self._watch.describe(self._reading)}"

    def error_event(self, error: Exception) -> dict[str, Any]:
        return {"status": "error", "message": f"reading tolerance failed: {error}"}

    def timeout_event(self) -> dict[str, Any]:
        return {"status": "timeout", "reading": self._reading.as_dict() if self._reading else None}
