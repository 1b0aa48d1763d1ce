"""``ToleranceTrigger``: wait on the triggerer for a tolerance breach, or for recovery from one.

Readings (the metrics topic, or DLQ growth against a group's consumption) are
taken in a worker thread, so the event loop never blocks on confluent-kafka. The
DLQ mode keeps its samples in the trigger while it runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.kafka.tolerance import ToleranceWatch
from airflow_kerr.triggers.base import KwargsTrigger


class ToleranceTrigger(KwargsTrigger):
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

    async def run(self) -> AsyncIterator[TriggerEvent]:
        config = await asyncio.to_thread(KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config)
        watch = ToleranceWatch(kafka_config=config, **self.watch)
        while True:
            try:
                holds, reading = await asyncio.to_thread(watch.check)
            except Exception as exc:  # confluent-kafka raises KafkaException with no stable subclass
                yield TriggerEvent({"status": "error", "message": f"reading tolerance failed: {exc}"})
                return
            if holds and reading is not None:
                yield TriggerEvent({"status": watch.wait_for, "reading": reading.as_dict()})
                return
            remaining = None if self.deadline is None else self.deadline - time.time()
            if remaining is not None and remaining <= 0:
                yield TriggerEvent({"status": "timeout", "reading": reading.as_dict() if reading else None})
                return
            self.log.info("waiting for %s: %s", watch.wait_for, watch.describe(reading))
            await asyncio.sleep(self.poll_interval if remaining is None else min(self.poll_interval, remaining))
