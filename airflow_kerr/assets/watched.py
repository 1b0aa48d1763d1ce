"""Assets watched by our event triggers: a DLQ's growth and a pipeline's tolerance breach and recovery (Airflow 3.3).

A DAG scheduled on one of these starts when its watcher fires, with nobody triggering it:
``schedule=[dead_letter_queue_asset("orders.dlq")]``. Tolerance assets add ``event``
(``breach`` or ``recovery``) and what is watched as query parameters to the metrics
topic's URI, so the breach and the recovery of one pipeline are two assets; with the same
settings they share one poll loop and one state on the triggerer (see
:class:`~airflow_kerr.triggers.tolerance_events.ToleranceEventTrigger`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from airflow.sdk import Asset, AssetWatcher

from airflow_kerr.assets.kafka import cluster_of, kafka_uri
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.tolerance import ToleranceSpec
from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterQueueEventTrigger
from airflow_kerr.triggers.tolerance_events import ToleranceEventTrigger, checked_spec
from airflow_kerr.triggers.tolerance_settings import check_event


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


def tolerance_asset(  # noqa: PLR0913 - a DAG author's keyword arguments, kept flat at this edge (issue #28); the spec is built here
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
    server: str | None = None,
    poll_interval: float = 5.0,
    cursor_group: str | None = None,
    pause_on_breach: Sequence[str] = (),
    kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
) -> Asset:
    """A pipeline's tolerance ``event`` (``breach`` or ``recovery``) as an asset, watched by ``ToleranceEventTrigger``.

    The watch settings are :class:`~airflow_kerr.sensors.tolerance.ToleranceSensor`'s
    (``consumer_group`` is its ``group_id``); give the breach and the recovery asset the
    same ones, so they share one watch and one state. ``pause_on_breach`` names Kafka Connect
    connectors (on ``kafka_connect_conn_id``) the watch pauses the moment it sees a breach,
    before the DAG run exists; the DAG's pause task then follows up. Bad settings fail here,
    when the DAG file is parsed, with one line per problem.
    """
    settings = locals()
    check_event(event)
    spec = checked_spec(
        lambda: ToleranceSpec.from_settings(settings),
        pause_on_breach,
    )
    return _tolerance_asset(
        event,
        spec,
        uri_cluster=cluster_of(kafka_config_id, server),
        trigger=ToleranceEventTrigger(
            spec=spec,
            kafka_config_id=kafka_config_id,
            poll_interval=poll_interval,
            cursor_group=cursor_group,
            fire_on=event,
            pause_on_breach=pause_on_breach,
            kafka_connect_conn_id=kafka_connect_conn_id,
        ),
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
