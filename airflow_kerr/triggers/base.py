"""What our triggers share: serializing to a classpath plus kwargs, and one poll/deadline/sleep loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any, ClassVar, NoReturn

from airflow.sdk import BaseOperator, BaseSensorOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kerr.errors.masking import mask_secrets


class KwargsTrigger(BaseTrigger):
    """A trigger rebuilt by the triggerer from ``serialize()``: classpath + ``{field: value}``.

    Subclasses list their constructor arguments in ``fields`` and keep each as an
    attribute of the same name, so serialization cannot drift from the constructor.
    """

    fields: ClassVar[tuple[str, ...]] = ()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {name: getattr(self, name) for name in self.fields},
        )


class PollingTrigger(KwargsTrigger):
    """Poll every ``poll_interval`` seconds until a poll has an answer, a poll fails, or ``deadline`` passes.

    The loop is written once here: a subclass says how to read (:meth:`poll`),
    where it stands (:meth:`progress`), and the events for an error and a
    timeout. It fires exactly one event: the poll's, ``error_event`` when a poll
    raises (confluent-kafka raises ``KafkaException`` with no stable subclass, so
    any exception ends the wait with its message rather than killing the trigger
    without one), or ``timeout_event`` once the deadline (Unix time, so a trigger
    moved to another triggerer keeps it) has passed.
    """

    poll_interval: float
    deadline: float | None

    async def open(self) -> None:
        """Make the clients the polls use (in a thread if they block); runs once before the first poll."""

    async def close(self) -> None:
        """Release what :meth:`open` made; runs however the wait ends."""

    async def poll(self) -> dict[str, Any] | None:
        """Read once: the event's payload when the wait is over, else None."""
        raise NotImplementedError

    def progress(self) -> str:
        """Where the wait stands (what it still waits for), for the log line between polls."""
        raise NotImplementedError

    def error_event(self, error: Exception) -> dict[str, Any]:
        return {"status": "error", "message": str(error)}

    @staticmethod
    def event(payload: dict[str, Any]) -> TriggerEvent:
        """The event for ``payload``, credentials masked: the payload leaves the process (the task's resume
        arguments, the metadata database, the UI), and it quotes exception text a dead letter or client carried.
        Its keys are data (exception classes, partitions), so only the text rule applies."""
        return TriggerEvent(mask_secrets(payload, by_key=False))

    def timeout_event(self) -> dict[str, Any]:
        raise NotImplementedError

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await self.open()
        try:
            while True:
                try:
                    answer = await self.poll()
                except Exception as exc:
                    yield self.event(self.error_event(exc))
                    return
                if answer is not None:
                    yield self.event(answer)
                    return
                remaining = None if self.deadline is None else self.deadline - time.time()
                if remaining is not None and remaining <= 0:
                    yield self.event(self.timeout_event())
                    return
                self.log.info("%s", self.progress())
                await asyncio.sleep(self.poll_interval if remaining is None else min(self.poll_interval, remaining))
        finally:
            await self.close()


def deadline_and_backstop(timeout_s: float, poll_interval: float) -> tuple[float, timedelta]:
    """A trigger's own deadline (Unix time) and the later ``defer(timeout=...)`` that only backs it up.

    The trigger's deadline fires first, with an event saying what was still awaited, so the task
    fails with that explanation; Airflow's defer timeout fails it with a bare "trigger timeout"
    and is kept only for a trigger that hangs. The deadline is absolute so a trigger moved to
    another triggerer keeps the original timeout.
    """
    return time.time() + timeout_s, timedelta(seconds=timeout_s + max(60.0, 2 * poll_interval))


def defer_until_deadline(
    task: BaseOperator,
    trigger: Callable[[float | None], BaseTrigger],
    *,
    timeout_s: float | None,
    poll_interval: float,
) -> NoReturn:
    """Defer ``task`` to ``trigger(deadline)``, resuming in its ``execute_complete``; the one deferral of our tasks.

    With a timeout the trigger gets its own deadline and Airflow's ``defer(timeout=...)``
    only backs it up (see :func:`deadline_and_backstop`); without one it waits on.
    """
    deadline: float | None = None
    backstop: timedelta | None = None
    if timeout_s:
        deadline, backstop = deadline_and_backstop(float(timeout_s), float(poll_interval))
    task.defer(trigger=trigger(deadline), method_name="execute_complete", timeout=backstop)


def defer_sensor(sensor: BaseSensorOperator, trigger_class: Callable[..., BaseTrigger], **arguments: Any) -> NoReturn:
    """Defer ``sensor`` to ``trigger_class(**arguments)`` polling at its ``poke_interval`` until its ``timeout``."""
    interval = float(sensor.poke_interval)
    defer_until_deadline(
        sensor,
        lambda deadline: trigger_class(**arguments, poll_interval=interval, deadline=deadline),
        timeout_s=sensor.timeout,
        poll_interval=interval,
    )
