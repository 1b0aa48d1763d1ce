"""``ToleranceSettingsTrigger``: a :class:`ToleranceEventTrigger` made from the settings as a DAG author writes them.

Two doors lead to the tolerance watch: :func:`~airflow_kerr.assets.watched.tolerance_asset`
and common.messaging's ``MessageQueueTrigger(scheme="kerr+tolerance", ...)``. Both take
the sensor's flat keyword arguments (``pipeline``, ``max_error_rate``, ``window`` ...);
this class (the queue's door; the asset helper builds its spec itself) turns them into the
trigger's one :class:`~airflow_kerr.kafka.tolerance.ToleranceSpec`, checked here, when the
DAG file is parsed. It serializes as the :class:`ToleranceEventTrigger` it is, so the
triggerer runs that class and two watchers with the same settings share one poll loop and
one state, whichever door each came through.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, TypedDict

from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.tolerance import ToleranceSpec
from airflow_kerr.triggers.tolerance_events import FIRE_ON, ToleranceEventTrigger, checked_spec

#: What the triggerer instantiates: the watch itself, not this door to it.
CLASSPATH = f"{ToleranceEventTrigger.__module__}.{ToleranceEventTrigger.__qualname__}"


def check_event(event: str) -> None:
    """Refuse an ``event`` other than ``breach`` or ``recovery``, naming it (checked first: it picks the asset)."""
    if event not in FIRE_ON:
        raise ValueError(f"event={event!r}: expected {' or '.join(FIRE_ON)}")


class ToleranceSettings(TypedDict, total=False):
    """The keyword arguments of :class:`ToleranceSettingsTrigger`, for a function that passes them on.

    :func:`~airflow_kerr.assets.watched.tolerance_asset` takes ``**settings`` of this type, so
    type checkers and editors know its keywords while their defaults and checks stay in the
    trigger's signature, once.
    """

    event: str
    pipeline: str | None
    source: str
    metrics_topic: str
    dlq_topic: str | None
    source_topics: Sequence[str] | None
    consumer_group: str | None
    max_error_rate: float | None
    max_errors: int | None
    min_records: int
    window: timedelta | float
    kafka_config_id: str
    poll_interval: float
    cursor_group: str | None
    pause_on_breach: Sequence[str]
    kafka_connect_conn_id: str


class ToleranceSettingsTrigger(ToleranceEventTrigger):
    """Fires on a pipeline's tolerance ``event``: ``breach`` or ``recovery`` (``ToleranceSensor``'s settings).

    ``consumer_group`` is the sensor's ``group_id`` (the group whose backlog counts when
    ``source="dlq"``); ``window`` is a ``timedelta`` or seconds.
    """

    def __init__(  # noqa: PLR0913 - the keyword arguments a DAG author gives MessageQueueTrigger(scheme='kerr+tolerance')
        self,
        *,
        event: str = "breach",
        pipeline: str | None = None,
        source: str = "metrics",
        metrics_topic: str = "kerr.metrics",
        dlq_topic: str | None = None,
        source_topics: Sequence[str] | None = None,
        consumer_group: str | None = None,
        max_error_rate: float | None = None,
        max_errors: int | None = None,
        min_records: int = 100,
        window: timedelta | float = timedelta(minutes=5),
        kafka_config_id: str = "kafka_default",
        poll_interval: float = 5.0,
        cursor_group: str | None = None,
        pause_on_breach: Sequence[str] = (),
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
    ) -> None:
        settings = locals()
        check_event(event)
        spec = checked_spec(
            lambda: ToleranceSpec.from_settings(settings),
            pause_on_breach,
        )
        super().__init__(
            spec=spec,
            kafka_config_id=kafka_config_id,
            poll_interval=poll_interval,
            cursor_group=cursor_group,
            fire_on=event,
            pause_on_breach=pause_on_breach,
            kafka_connect_conn_id=kafka_connect_conn_id,
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, super().serialize()[1]
