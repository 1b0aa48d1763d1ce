"""Kafka helpers on top of the apache-kafka provider's ``kafka`` connection (extra JSON = librdkafka config)."""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.sdk import Connection
from airflow.sdk.log import mask_secret

from airflow_kerr.errors.masking import is_sensitive_key


class KafkaClusterHook(KafkaBaseHook):
    """Reads a ``kafka`` connection into a plain librdkafka config for our own clients and the Spark job.

    ``connection``, when given, is that connection already read (an event trigger reads it
    in the triggerer's event loop with ``aget_connection``: Airflow 3.1's trigger runner can
    mix up its replies when a worker thread looks a connection up while it syncs).
    """

    def __init__(self, *args: Any, connection: Connection | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._connection = connection

    def get_connection(self, conn_id: str) -> Connection:  # type: ignore[override]
        if self._connection is not None and conn_id == self._connection.conn_id:
            return self._connection
        return super().get_connection(conn_id)

    def client_config(self) -> dict[str, Any]:
        """The connection's librdkafka settings, with the provider's callback and OAuth handling applied.

        Every value under a secret-bearing key (our rule, :func:`is_sensitive_key`) is registered
        with Airflow's secrets masker, the Airflow-native way to keep a known value out of task
        logs. Airflow registers a connection's extras by its own list of names, which misses
        Kafka's (``ssl.key.pem``, ``sasl.jaas.config``, ``sasl.username``, ``ssl.keystore.key``,
        ``basic.auth.user.info``). Text we write ourselves is masked by pattern
        (:mod:`airflow_kerr.errors.masking`), which also covers secrets of no connection here.
        """
        config: dict[str, Any] = self._build_config()
        for key, value in config.items():
            if isinstance(value, str) and is_sensitive_key(key):
                mask_secret(value)
        return config
