"""``ConnectorStateTrigger``: wait, on the triggerer, until connectors show a target state in ``/status``.

It polls ``GET /connectors/{c}/status`` with the hook's asynchronous client, so
it never blocks the event loop, and fires one event: ``success`` with every
connector's final status, ``timeout`` with what was still awaited, or ``error``
when waiting cannot help (the connector is gone, or FAILED where the target
does not allow it). The deadline is an absolute time, so a trigger that is
moved to another triggerer keeps the original timeout.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_kerr.connect.errors import TRANSIENT_ERRORS, KafkaConnectError
from airflow_kerr.connect.status import ConnectorTarget, StatusWatch
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.triggers.base import PollingTrigger


class ConnectorStateTrigger(PollingTrigger):
    """Poll connectors' status until each meets its :class:`ConnectorTarget` or the deadline passes.

    :param targets: connector name -> ``ConnectorTarget.to_dict()``.
    :param deadline: Unix time after which the trigger gives up with a ``timeout`` event; None waits on.
    :param poll_interval: seconds between polls.
    :param kafka_connect_conn_id: the ``kafka_connect`` connection.
    """

    fields = ("targets", "deadline", "poll_interval", "kafka_connect_conn_id")

    def __init__(
        self,
        targets: dict[str, dict[str, Any]],
        deadline: float | None,
        poll_interval: float = 5.0,
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
    ) -> None:
        super().__init__()
        self.targets = targets
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.kafka_connect_conn_id = kafka_connect_conn_id

    async def open(self) -> None:
        self._watch = StatusWatch({name: ConnectorTarget.from_dict(data) for name, data in self.targets.items()})
        self._hook = KafkaConnectHook(self.kafka_connect_conn_id)
        if self.deadline is not None:
            # No poll outlasts the wait: a slow worker's request is cut at the deadline like the worker-side wait's.
            self._hook.deadline = time.monotonic() + (self.deadline - time.time())

    async def close(self) -> None:
        await self._hook.aclose()

    async def poll(self) -> dict[str, Any] | None:
        for name in self._watch.targets:
            reading: dict[str, Any] | KafkaConnectError
            configured: list[int] | None = None
            try:
                if self._watch.needs_task_configs(name):  # first: see StatusWatch.record
                    configured = await self._hook.aget_task_ids(name)
                reading = await self._hook.aget_status(name)
            except TRANSIENT_ERRORS as exc:
                # The worker may be restarting or rebalancing: keep polling until the deadline.
                reading = exc
            fatal = self._watch.record(name, reading, configured)
            if fatal:
                return {"status": "error", "message": fatal, "statuses": self._watch.statuses}
        if self._watch.pending:
            return None
        return {"status": "success", "statuses": self._watch.statuses}

    def progress(self) -> str:
        return f"Waiting for {self._watch.describe_pending()}"

    def error_event(self, error: Exception) -> dict[str, Any]:
        return {"status": "error", "message": str(error), "statuses": self._watch.statuses}

    def timeout_event(self) -> dict[str, Any]:
        return {"status": "timeout", "pending": self._watch.pending, "statuses": self._watch.statuses}
