"""``ToleranceTrigger``: wait on the triggerer for a tolerance breach, or for recovery from one.

Readings (the metrics topic, or DLQ growth against a group's consumption) are
taken in a worker thread, so the event loop never blocks on confluent-kafka. The
DLQ mode keeps its samples in the trigger while it runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_kerr.hooks.breach_pause import pause_on_breach
from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.tolerance import ToleranceReading, ToleranceWatch
from airflow_kerr.triggers.base import PollingTrigger


class ToleranceTrigger(PollingTrigger):
    """Poll a :class:`ToleranceWatch` built from ``watch`` (its plain settings) until its condition holds.

    With ``deadline`` (Unix time) it fires ``timeout`` with the last reading once the deadline passes.
    Waiting for a breach, it first asks Kafka Connect to pause ``pause_on_breach`` (see
    :mod:`airflow_kerr.hooks.breach_pause`); the event's ``paused_on_breach`` says how that went.
    """

    fields = ("watch", "poll_interval", "kafka_config_id", "deadline", "pause_on_breach", "kafka_connect_conn_id")

    def __init__(
        self,
        watch: dict[str, Any],
        poll_interval: float = 30.0,
        kafka_config_id: str = "kafka_default",
        deadline: float | None = None,
        pause_on_breach: list[str] | None = None,
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
    ) -> None:
        super().__init__()
        self.watch = watch
        self.poll_interval = poll_interval
        self.kafka_config_id = kafka_config_id
        self.deadline = deadline
        self.pause_on_breach = list(pause_on_breach or [])
        self.kafka_connect_conn_id = kafka_connect_conn_id

    async def open(self) -> None:
        config = await asyncio.to_thread(KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config)
        self._watch = ToleranceWatch(kafka_config=config, **self.watch)
        self._reading: ToleranceReading | None = None

    async def poll(self) -> dict[str, Any] | None:
        holds, self._reading = await asyncio.to_thread(self._watch.check)
        if not holds or self._reading is None:
            return None
        event: dict[str, Any] = {"status": self._watch.wait_for, "reading": self._reading.as_dict()}
        if self._watch.wait_for == "breach" and self.pause_on_breach:
            event["paused_on_breach"] = await asyncio.to_thread(
                pause_on_breach, self.kafka_connect_conn_id, self.pause_on_breach
            )
        return event

    def progress(self) -> str:
        return f"waiting for {self._watch.wait_for}: {self._watch.describe(self._reading)}"

    def error_event(self, error: Exception) -> dict[str, Any]:
        return {"status": "error", "message": f"reading tolerance failed: {error}"}

    def timeout_event(self) -> dict[str, Any]:
        return {"status": "timeout", "reading": self._reading.as_dict() if self._reading else None}
