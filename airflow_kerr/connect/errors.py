"""Typed errors of the Kafka Connect REST API.

Connect answers every error with ``{"error_code": <int>, "message": "<text>"}``;
these classes keep both, so callers branch on the type and show the message,
never parse it (its text differs by endpoint and by Connect version).
"""

from __future__ import annotations

from airflow_kerr.compat import AirflowException


class KafkaConnectError(AirflowException):
    """A Kafka Connect REST request failed; ``error_code`` and ``message`` are Connect's own."""

    def __init__(
        self,
        method: str,
        url: str,
        message: str,
        http_status: int | None = None,
        error_code: int | None = None,
    ) -> None:
        self.method = method
        self.url = url
        self.message = message
        self.http_status = http_status
        self.error_code = error_code if error_code is not None else http_status
        if http_status is None:
            text = f"{method} {url} failed: {message}"
        else:
            text = f"{method} {url} answered HTTP {http_status} (error_code {self.error_code}): {message}"
        super().__init__(text)


class ConnectorNotFound(KafkaConnectError):
    """404: the worker knows no such connector or task (or, on an old worker, no such endpoint)."""


class ConnectBadRequest(KafkaConnectError):
    """400: the request is invalid, e.g. altering offsets of a connector that is not STOPPED."""


class RebalanceInProgress(KafkaConnectError):
    """409: the worker cannot serve the request during a rebalance or a concurrent config change.

    The hook retries these with backoff within its rebalance budget and raises
    this only when the conflict outlasts the budget.
    """


class ConnectServerError(KafkaConnectError):
    """5xx: the worker failed, including a request that waited its 90 s and answered ``Request timed out``."""


class ConnectUnreachable(KafkaConnectError):
    """No HTTP answer at all: connection refused, TLS failure, DNS or client-side timeout; names the URL tried."""


class ConnectInvalidResponse(KafkaConnectError):
    """A successful HTTP answer whose body is not Connect's JSON (e.g. a gateway's HTML page); names the URL."""


#: Errors a wait may outlast: the worker restarting, rebalancing or overloaded. Others will not fix themselves.
TRANSIENT_ERRORS = (ConnectServerError, ConnectUnreachable, RebalanceInProgress)


class ConnectorStateTimeout(AirflowException):
    """A connector did not reach the awaited state within the wait's timeout."""


def error_class_for(http_status: int) -> type[KafkaConnectError]:
    """The exception type for an HTTP error status."""
    if http_status == 404:
        return ConnectorNotFound
    if http_status == 409:
        return RebalanceInProgress
    if http_status == 400:
        return ConnectBadRequest
    if http_status >= 500:
        return ConnectServerError
    return KafkaConnectError
