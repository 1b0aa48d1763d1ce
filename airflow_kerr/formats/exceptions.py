"""The exceptions of a registry format, each named after the Java class Connect's converters raise in its place.

| Python                          | Java (Confluent 7.x, Kafka Connect)                                   |
| ------------------------------- | --------------------------------------------------------------------- |
| :class:`SerializationError`     | ``org.apache.kafka.common.errors.SerializationException``             |
| :class:`RegistryRequestError`   | ``io.confluent...rest.exceptions.RestClientException``                |
| :class:`RegistryUnavailable`    | ``org.apache.kafka.common.errors.TimeoutException`` (408/5xx, timeout) |
| :class:`ConverterDataError`     | ``org.apache.kafka.connect.errors.DataException``                     |
| :class:`ConverterRetriableError`| ``org.apache.kafka.connect.errors.RetriableException``                |

A converter raises one of the last two with the text Connect's converter writes, and nothing
more, as Connect's DLQ ``exception.message`` header holds only that; the serde's exception is
chained under it (``__cause__``), so the ``exception.stacktrace`` header names the cause, as Java's does.
"""

from __future__ import annotations

from airflow_kerr.errors import RetriableError


class SerializationError(ValueError):
    """A value that is not what its format says (Kafka's ``SerializationException``)."""


class RegistryRequestError(Exception):
    """The registry answered with an error (Confluent's ``RestClientException``).

    The message ends as the Java client's does: ``Schema 42 not found; error code: 40403``.
    """

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(f"{message}; error code: {error_code}")
        self.status = status
        self.error_code = error_code


class RegistryUnavailable(RetriableError):
    """The registry could not be reached, timed out or answered 408, 429 or 5xx: worth retrying."""


class ConverterDataError(ValueError):
    """A record its converter cannot convert (Connect's ``DataException``): fails at KEY/VALUE_CONVERTER."""


class ConverterRetriableError(RetriableError):
    """The converter could not reach the registry (Connect's ``RetriableException``): retried, then tolerated."""
