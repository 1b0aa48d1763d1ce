"""Kafka topics as assets, with the apache-kafka provider's ``kafka://<bootstrap server>/<topic>`` URIs.

The URI names the server a client bootstraps from and the topic, as the provider's own
assets do, so a task's outlet event on a topic and a watcher on the same topic meet on one
asset. The watched assets (with event triggers, Airflow 3.3) are in
:mod:`airflow_kerr.assets.watched`; this module works on any Airflow 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_kerr.hooks.kafka import KafkaClusterHook


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
