"""Kafka topics as assets, with ``kafka://<cluster>/<topic>`` URIs that a DAG file fixes on its own.

The URI names the cluster and the topic, as the apache-kafka provider's assets do, so a
task's outlet event on a topic and a watcher on the same topic meet on one asset. The
cluster part is ``server`` when the DAG file gives one (``host:port``, the provider's own
form), and otherwise the ``kafka`` connection's id: ``kafka://kafka_default/orders.dlq``.
It is never read from the connection, because an asset's identity is fixed when the DAG
file is parsed, and Airflow asks DAG files not to look up connections then: the
dag-processor would depend on the secrets backend for every parse, a file would fail to
import where the connection is not defined, and the asset would change identity (and
lose its history) whenever the connection's servers were edited. The watched assets (with
event triggers, Airflow 3.3) are in :mod:`airflow_kerr.assets.watched`; this module works
on any Airflow 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from airflow.sdk import Asset


def cluster_of(kafka_config_id: str, server: str | None) -> str:
    """The URI's cluster part: ``server`` when the DAG file names one, else the connection id."""
    if server is not None:
        if not server.strip() or "/" in server:
            raise ValueError(f"server={server!r}: expected one bootstrap server as host:port, e.g. 'broker-1:9092'")
        return server.strip()
    if not kafka_config_id or "/" in kafka_config_id:
        raise ValueError(f"kafka_config_id={kafka_config_id!r}: expected a connection id such as 'kafka_default'")
    return kafka_config_id


def server_of(kafka_config: Mapping[str, Any], where: str = "the Kafka config") -> str:
    """The first ``bootstrap.servers`` entry of a librdkafka config."""
    first = str(kafka_config.get("bootstrap.servers") or "").split(",")[0].strip()
    if not first:
        raise ValueError(f"{where} has no bootstrap.servers")
    return first


def kafka_uri(cluster: str, topic: str, query: Mapping[str, str] | None = None) -> str:
    """``kafka://cluster/topic``, with sorted query parameters when given."""
    suffix = f"?{urlencode(sorted(query.items()))}" if query else ""
    return f"kafka://{cluster}/{topic}{suffix}"


def topic_asset(
    topic: str,
    *,
    kafka_config_id: str = "kafka_default",
    server: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Asset:
    """A Kafka topic as an asset (no watcher): what a task writes, for its ``outlets``.

    Give ``server`` where the job that writes the topic is told the same one
    (``ErrorAwareSparkSubmitOperator(asset_server=...)``), or neither: the connection id then
    names the cluster on both sides.
    """
    return Asset(name=f"kafka.{topic}", uri=kafka_uri(cluster_of(kafka_config_id, server), topic), extra=extra)
