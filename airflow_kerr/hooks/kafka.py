"""Kafka helpers on top of the apache-kafka provider's ``kafka`` connection (extra JSON = librdkafka config)."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook


class KafkaClusterHook(KafkaBaseHook):
    """Reads a ``kafka`` connection into a plain librdkafka config for our own clients and the Spark job."""

    def client_config(self) -> dict[str, Any]:
        """The connection's librdkafka settings, with the provider's callback and OAuth handling applied."""
        config: dict[str, Any] = self._build_config()
        return config
