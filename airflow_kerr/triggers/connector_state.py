"""``ConnectorStateTrigger``: wait, on the triggerer, until connectors show a target state in ``/status``.

It polls ``GET /connectors/{c}/status`` with the hook's asynchronous client, so
it never blocks the event loop, and fires one event: ``success`` with every
connector's final status, ``timeout`` with what was still awaited, or ``error``
when waiting cannot help (the connector is gone, or FAILED where the target
does not allow it). The deadline is an absolute time, so a trigger that is
moved to another triggerer keeps the original timeout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_kerr.connect.errors import TRANSIENT_ERRORS, KafkaConnectError
from airflow_kerr.connect.status import ConnectorTarget, StatusWatch
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.triggers.base import KwargsTrigger, deadline_and_backstop


class ConnectorStateTrigger(KwargsTrigger):
    """Poll connectors' status until each meets its :class:`ConnectorTarget` or the deadline passes.

    :param targets: connector name -> ``ConnectorTarget.to_dict()``.
    :param deadline: Unix time after which the trigger gives up with a ``timeout`` event.
    :param poll_interval: seconds between polls.
    :param kafka_connect_conn_id: the ``kafka_connect`` connection.
    """

    fields = ("targets", "deadline", "poll_interval", "kafka_connect_conn_id")

    def __init__(
        self,
        targets: dict[str, dict[str, Any]],
        deadline: float,
        poll_interval: float = 5.0,
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
    ) -> None:
        super().__init__()
        self.targets = targets
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.kafka_connect_conn_id = kafka_connect_conn_id

    @classmethod
    def deferral(
        cls,
        targets: dict[str, ConnectorTarget],
        timeout_s: float,
        poll_interval: float,
        kafka_connect_conn_id: str,
    ) -> tuple[ConnectorStateTrigger, timedelta]:
        """The trigger a task defers to and the backstop ``defer(timeout=...)``, for a wait of ``timeout_s``."""
        deadline, backstop = deadline_and_backstop(timeout_s, poll_interval)
        trigger = cls(
            targets={name: target.to_dict() for name, target in targets.items()},
            deadline=deadline,
            poll_interval=poll_interval,
            kafka_connect_conn_id=kafka_connect_conn_id,
        )
        return trigger, backstop

    async def run(self) -> AsyncIterator[TriggerEvent]:
        targets = {name: ConnectorTarget.from_dict(data) for name, data in self.targets.items()}
        hook = KafkaConnectHook(self.kafka_connect_conn_id)
        # No poll outlasts the wait: a slow worker's request is cut at the deadline like the worker-side wait's.
        hook.deadline = time.monotonic() + (self.deadline - time.time())
        watch = StatusWatch(targets)
        try:
            while True:
                for name in targets:
                    reading: dict[str, Any] | KafkaConnectError
                    try:
                        reading = await hook.aget_status(name)
                    except TRANSIENT_ERRORS as exc:
                        # The worker may be restarting or rebalancing: keep polling until the deadline.
                        reading = exc
                    except KafkaConnectError as exc:
                        yield TriggerEvent({"status": "error", "message": str(exc), "statuses": watch.statuses})
                        return
                    fatal = watch.record(name, reading)
                    if fatal:
                        yield TriggerEvent({"status": "error", "message": fatal, "statuses": watch.statuses})
                        return
                if not watch.pending:
                    yield TriggerEvent({"status": "success", "statuses": watch.statuses})
                    return
                remaining = self.deadline - time.time()
                if remaining <= 0:
                    yield TriggerEvent({"status": "timeout", "pending": watch.pending, "statuses": watch.statuses})
                    return
                self.log.info("Waiting for %s", watch.describe_pending())
                await asyncio.sleep(min(self.poll_interval, remaining))
        finally:
            await hook.aclose()
