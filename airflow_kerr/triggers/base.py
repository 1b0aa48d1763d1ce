"""The one way our triggers serialize: their classpath plus the plain constructor arguments named in ``fields``."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger


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


def deadline_and_backstop(timeout_s: float, poll_interval: float) -> tuple[float, timedelta]:
    """A trigger's own deadline (Unix time) and the later ``defer(timeout=...)`` that only backs it up.

    The trigger's deadline fires first, with an event saying what was still awaited, so the task
    fails with that explanation; Airflow's defer timeout fails it with a bare "trigger timeout"
    and is kept only for a trigger that hangs. The deadline is absolute so a trigger moved to
    another triggerer keeps the original timeout.
    """
    return time.time() + timeout_s, timedelta(seconds=timeout_s + max(60.0, 2 * poll_interval))
