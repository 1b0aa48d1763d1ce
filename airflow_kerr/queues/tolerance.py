"""``MessageQueueTrigger(scheme="kerr+tolerance", event=..., pipeline=..., ...)``: tolerance breach and recovery.

The keyword arguments are :class:`~airflow_kerr.sensors.tolerance.ToleranceSensor`'s
watch settings plus ``event`` (``breach``, the default, or ``recovery``), as
:func:`~airflow_kerr.assets.watched.tolerance_asset` takes them; bad ones fail when the
DAG file is parsed, one line per problem. A breach watcher and a recovery watcher with
the same settings share one poll loop and one state on the triggerer, also with watchers
made by ``tolerance_asset``.
"""

from __future__ import annotations

from airflow.providers.common.messaging.providers.base_provider import BaseMessageQueueProvider
from airflow.triggers.base import BaseEventTrigger

from airflow_kerr.triggers.tolerance_settings import ToleranceSettingsTrigger


class ToleranceMessageQueueProvider(BaseMessageQueueProvider):
    """Serves ``scheme="kerr+tolerance"`` with :class:`ToleranceSettingsTrigger` (scheme-based dispatch only)."""

    scheme = "kerr+tolerance"

    def trigger_class(self) -> type[BaseEventTrigger]:
        return ToleranceSettingsTrigger
