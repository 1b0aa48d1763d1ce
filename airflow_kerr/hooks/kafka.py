"""Kafka helpers on top of the apache-kafka provider's ``kafka`` connection (extra JSON = librdkafka config)."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

from airflow_kerr.kafka.offsets import Partition, end_offsets


class KafkaClusterHook(KafkaBaseHook):
    """Reads a ``kafka`` connection into a plain librdkafka config for our own clients and the Spark job."""

    def client_config(self) -> dict[str, Any]:
        """The connection's librdkafka settings, with the provider's callback and OAuth handling applied."""
        config: dict[str, Any] = self._build_config()
        return config

    def bootstrap_servers(self) -> str:
        return str(self.client_config()["bootstrap.servers"])

    def end_offsets(self, partitions: list[Partition], timeout_s: float = 10.0) -> dict[Partition, int]:
        """Fetch-verified end offsets (see :mod:`airflow_kerr.kafka.offsets` for why not ListOffsets)."""
        return end_offsets(self.client_config(), partitions, timeout_s)
