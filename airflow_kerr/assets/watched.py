"""Assets watched by our event triggers: a DLQ's growth and a pipeline's tolerance breach and recovery (Airflow 3.3).

A DAG scheduled on one of these starts when its watcher fires, with nobody triggering it:
``schedule=[dead_letter_queue_asset("orders.dlq")]``. Tolerance assets add ``event``
(``breach`` or ``recovery``) and what is watched as query parameters to the metrics
topic's URI, so the breach and the recovery of one pipeline are two assets; with the same
settings they share one poll loop and one state on the triggerer (see
:class:`~airflow_kerr.triggers.tolerance_events.ToleranceEventTrigger`).
"""

from __future__ import annotations

from typing import Unpack

from airflow.sdk import Asset, AssetWatcher

from airflow_kerr.assets.kafka import cluster_of, kafka_uri
from airflow_kerr.kafka.tolerance import ToleranceSpec
from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterQueueEventTrigger
from airflow_kerr.triggers.tolerance_events import ToleranceEventTrigger
from airflow_kerr.triggers.tolerance_settings import ToleranceSettings, ToleranceSettingsTrigger


def dead_letter_queue_asset(
    topic: str,
    *,
    kafka_config_id: str = "kafka_default",
    server: str | None = None,
    min_records: int = 1,
    poll_interval: float = 5.0,
    sample_size: int = 5,
    count_limit: int = 1000,
    cursor_group: str | None = None,
) -> Asset:
    """A DLQ topic whose growth is an asset event, watched by :class:`DeadLetterQueueEventTrigger`.

    The asset is the topic's (same URI as :func:`topic_asset`), so the job that writes the
    DLQ and the DAGs waiting on it meet on one asset. Nothing is read from the connection
    here: the trigger reads it on the triggerer, when it runs.
    """
    trigger = DeadLetterQueueEventTrigger(
        topic=topic,
        kafka_config_id=kafka_config_id,
        poll_interval=poll_interval,
        min_records=min_records,
        sample_size=sample_size,
        count_limit=count_limit,
        cursor_group=cursor_group,
    )
    return Asset(
        name=f"kafka.{topic}",
        uri=kafka_uri(cluster_of(kafka_config_id, server), topic),
        watchers=[AssetWatcher(name=f"kerr.dlq_growth.{topic}", trigger=trigger)],
    )


def tolerance_asset(*, server: str | None = None, **settings: Unpack[ToleranceSettings]) -> Asset:
    """A pipeline's tolerance ``event`` (``breach`` or ``recovery``) as an asset, watched by ``ToleranceEventTrigger``.

    ``settings`` are the keyword arguments of
    :class:`~airflow_kerr.triggers.tolerance_settings.ToleranceSettingsTrigger` (the
    ``kerr+tolerance`` queue's door, so both doors read them in one place): ``event``, then
    :class:`~airflow_kerr.sensors.tolerance.ToleranceSensor`'s watch settings
    (``consumer_group`` is its ``group_id``). Give the breach and the recovery asset the same
    ones, so they share one watch and one state. ``pause_on_breach`` names Kafka Connect
    connectors (on ``kafka_connect_conn_id``) the watch pauses the moment it sees a breach,
    before the DAG run exists; the DAG's pause task then follows up. ``server`` names the
    cluster in the asset's URI when the connection is not read at parse time. Bad settings fail
    here, when the DAG file is parsed, with one line per problem.
    """
    trigger = ToleranceSettingsTrigger(**settings)
    (event,) = trigger.fire_on  # the door fires on exactly the one event it was given
    return _tolerance_asset(
        event, trigger.spec, uri_cluster=cluster_of(trigger.kafka_config_id, server), trigger=trigger
    )


def _tolerance_asset(event: str, spec: ToleranceSpec, *, uri_cluster: str, trigger: ToleranceEventTrigger) -> Asset:
    """The asset of ``spec``'s ``event``: named after what is watched, its URI the watched topic's plus the query."""
    if spec.source == "metrics":
        watched, subject = {"pipeline": str(spec.pipeline)}, spec.pipeline
    else:
        watched, subject = {"dlq": str(spec.dlq_topic), "group": str(spec.group_id)}, spec.dlq_topic
    return Asset(
        name=f"kerr.tolerance_{event}.{subject}",
        uri=kafka_uri(uri_cluster, spec.watched_topic, {"event": event, **watched}),
        watchers=[AssetWatcher(name=f"kerr.tolerance_{event}.{subject}", trigger=trigger)],
    )
