"""Assets with the apache-kafka provider's ``kafka://<bootstrap server>/<topic>`` URIs, watched by our event triggers.

A DAG scheduled on one of these starts when its watcher fires, with nobody triggering it:
``schedule=[dead_letter_queue_asset("orders.dlq")]``. The URI names the server a client
bootstraps from and the topic that is read, as the provider's own assets do; tolerance
assets add ``event`` (``breach`` or ``recovery``) and what is watched as query parameters,
so the breach and the recovery of one pipeline are two assets on one metrics topic. Both
assets of a pipeline share one poll loop on the triggerer (see
:class:`~airflow_kerr.triggers.tolerance.ToleranceEventTrigger`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from airflow.sdk import Asset, AssetWatcher
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterQueueEventTrigger
from airflow_kerr.triggers.tolerance_events import FIRE_ON, ToleranceEventTrigger


def bootstrap_server(kafka_config_id: str = "kafka_default") -> str:
    """The first ``bootstrap.servers`` entry of a ``kafka`` connection: the URI's host part."""
    try:
        config = KafkaClusterHook(kafka_config_id=kafka_config_id).client_config()
    except AirflowNotFoundException as missing:
        raise ValueError(
            f"kafka connection {kafka_config_id!r} is not defined: a kafka:// asset URI names the connection's "
            "first bootstrap server, read when the DAG file is parsed; define the connection (e.g. "
            f"AIRFLOW_CONN_{kafka_config_id.upper()}) or pass server='host:port'"
        ) from missing
    return server_of(config, f"kafka connection {kafka_config_id!r}")


def server_of(kafka_config: Mapping[str, Any], where: str = "the Kafka config") -> str:
    """The first ``bootstrap.servers`` entry of a librdkafka config."""
    first = str(kafka_config.get("bootstrap.servers") or "").split(",")[0].strip()
    if not first:
        raise ValueError(
            f"{where} has no bootstrap.servers; a kafka:// asset URI needs a server (or pass server='host:port')"
        )
    return first


def kafka_uri(server: str, topic: str, query: Mapping[str, str] | None = None) -> str:
    """``kafka://server/topic``, with sorted query parameters when given."""
    suffix = f"?{urlencode(sorted(query.items()))}" if query else ""
    return f"kafka://{server}/{topic}{suffix}"


def topic_asset(
    topic: str,
    *,
    kafka_config_id: str = "kafka_default",
    server: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Asset:
    """A Kafka topic as an asset (no watcher): what a task writes, for its ``outlets``."""
    return Asset(name=f"kafka.{topic}", uri=kafka_uri(server or bootstrap_server(kafka_config_id), topic), extra=extra)


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
    DLQ and the DAGs waiting on it meet on one asset.
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
        uri=kafka_uri(server or bootstrap_server(kafka_config_id), topic),
        watchers=[AssetWatcher(name=f"kerr.dlq_growth.{topic}", trigger=trigger)],
    )


def tolerance_asset(
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
) -> Asset:
    """A pipeline's tolerance ``event`` (``breach`` or ``recovery``) as an asset, watched by ``ToleranceEventTrigger``.

    The watch settings are :class:`~airflow_kerr.sensors.tolerance.ToleranceSensor`'s
    (``consumer_group`` is its ``group_id``); give the breach and the recovery asset the
    same ones, so they share one watch and one state. Bad settings fail here, when the DAG
    file is parsed, with one line per problem.
    """
    if event not in FIRE_ON:
        raise ValueError(f"event={event!r}: expected {' or '.join(FIRE_ON)}")
    window_s = window.total_seconds() if isinstance(window, timedelta) else float(window)
    watch = {
        "window_ms": int(window_s * 1000),
        "max_error_rate": max_error_rate,
        "max_errors": max_errors,
        "min_records": min_records,
        "source": source,
        "pipeline": pipeline,
        "metrics_topic": metrics_topic,
        "dlq_topic": dlq_topic,
        "source_topics": list(source_topics or []),
        "group_id": consumer_group,
    }
    trigger = ToleranceEventTrigger(
        watch=watch,
        kafka_config_id=kafka_config_id,
        poll_interval=poll_interval,
        cursor_group=cursor_group,
        fire_on=event,
    )
    watched = (
        {"pipeline": str(pipeline)} if source == "metrics" else {"dlq": str(dlq_topic), "group": str(consumer_group)}
    )
    topic = metrics_topic if source == "metrics" else str(dlq_topic)
    subject = pipeline if source == "metrics" else dlq_topic
    return Asset(
        name=f"kerr.tolerance_{event}.{subject}",
        uri=kafka_uri(server or bootstrap_server(kafka_config_id), topic, {"event": event, **watched}),
        watchers=[AssetWatcher(name=f"kerr.tolerance_{event}.{subject}", trigger=trigger)],
    )
