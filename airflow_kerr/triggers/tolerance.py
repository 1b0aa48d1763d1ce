"""``ToleranceTrigger``: wait on the triggerer for a tolerance breach, or for recovery from one.

Readings (the metrics topic, or DLQ growth against a group's consumption) are
taken in a worker thread, so the event loop never blocks on confluent-kafka. The
DLQ mode keeps its samples in the trigger while it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from airflow_kerr.hooks.breach_pause import pause_on_breach
from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.tolerance import ToleranceReading, ToleranceSpec, ToleranceWatch
from airflow_kerr.triggers.base import PollingTrigger
from airflow_kerr.triggers.tolerance_events import WATCH_FIELDS


class ToleranceTrigger(PollingTrigger):
    """Poll a :class:`ToleranceWatch` on ``spec`` until it sees ``wait_for`` (``breach`` or ``recovery``).

    ``spec`` is a :class:`~airflow_kerr.kafka.tolerance.ToleranceSpec`, or the dict its
    ``to_dict()`` wrote (what :meth:`serialize` stores and the triggerer hands back).
    With ``deadline`` (Unix time) it fires ``timeout`` with the last reading once the deadline passes.
    Waiting for a breach, it first asks Kafka Connect to pause ``pause_on_breach`` (see
    :mod:`airflow_kerr.hooks.breach_pause`); the event's ``paused_on_breach`` says how that went.

    ``watch`` is how a previous version serialized the settings (``wait_for`` and the spec's
    keys in one dict); it is still read, so a sensor deferred before an upgrade resumes after
    it. It takes the place of ``spec`` and ``wait_for``, and the trigger serializes the new way.
    """

    fields = (*WATCH_FIELDS, "wait_for", "deadline")

    def __init__(
        self,
        spec: ToleranceSpec | Mapping[str, Any] | None = None,
        wait_for: str = "breach",
        poll_interval: float = 30.0,
        kafka_config_id: str = "kafka_default",
        deadline: float | None = None,
        pause_on_breach: list[str] | None = None,
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
        watch: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if watch is not None:  # stored by a previous version: {"wait_for": ..., **spec}
            settings = dict(watch)
            wait_for = settings.pop("wait_for", wait_for)
            spec = spec if spec is not None else settings
        if spec is None:
            raise TypeError("ToleranceTrigger: spec is required (a ToleranceSpec or its to_dict())")
        self.spec = spec if isinstance(spec, ToleranceSpec) else ToleranceSpec.from_dict(spec)
        self.wait_for = wait_for
        self.poll_interval = poll_interval
        self.kafka_config_id = kafka_config_id
        self.deadline = deadline
        self.pause_on_breach = list(pause_on_breach or [])
        self.kafka_connect_conn_id = kafka_connect_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The fields, with the spec as the plain dict the triggerer can store as JSON."""
        classpath, kwargs = super().serialize()
        return classpath, {**kwargs, "spec": self.spec.to_dict()}

    async def open(self) -> None:
        config = await asyncio.to_thread(KafkaClusterHook(kafka_config_id=self.kafka_config_id).client_config)
        self._watch = ToleranceWatch(kafka_config=config, wait_for=self.wait_for, spec=self.spec)
        self._reading: ToleranceReading | None = None

    async def close(self) -> None:
        watch = getattr(self, "_watch", None)
        if watch is not None:  # its consumer follows the metrics topic from poll to poll
            await asyncio.to_thread(watch.close)

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
