"""The Kafka Connect REST client pieces the hook is made of: settings, paths, answers, 409 backoff.

:class:`ClientSettings` validates a ``kafka_connect`` connection's fields into what an
``httpx`` client needs; the rest turns Connect's answers into bodies or typed errors
(:mod:`airflow_kerr.connect.errors`) and paces the retries of a 409 (a rebalance). The
Airflow hook (:class:`airflow_kerr.hooks.kafka_connect.KafkaConnectHook`) reads the
connection and sends the requests.
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from airflow_kerr.compat import AirflowException
from airflow_kerr.connect.errors import ConnectInvalidResponse, error_class_for

DEFAULT_PORT = 8083
#: Longer than Connect's own 90 s request timeout, so the worker's "Request timed out" answer arrives.
DEFAULT_TIMEOUT_S = 100.0
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _extra_value(extra: dict[str, Any], key: str) -> Any:
    """A connection extra, stored plain (``verify``) or prefixed as older UIs store form fields."""
    if key in extra:
        return extra[key]
    return extra.get(f"extra__kafka_connect__{key}")


@dataclass(frozen=True)
class ClientSettings:
    """Everything an HTTP client for one ``kafka_connect`` connection needs, validated."""

    base_url: str
    auth: tuple[str, str] | None = None
    verify: bool | str = True
    timeout: float = DEFAULT_TIMEOUT_S
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_connection(
        cls,
        conn_id: str,
        host: str | None,
        port: int | None,
        schema: str | None,
        login: str | None,
        password: str | None,
        extra: dict[str, Any],
    ) -> ClientSettings:
        """Build and check the settings, naming the connection and the field when one is wrong."""
        if not host:
            raise AirflowException(f"Connection {conn_id!r} has no host: set the Kafka Connect worker's host or URL")
        return cls(
            base_url=_base_url(conn_id, host.strip(), port, schema),
            auth=(login, password or "") if login else None,
            verify=_verify(conn_id, _extra_value(extra, "verify")),
            timeout=_timeout(conn_id, _extra_value(extra, "timeout")),
            headers=_headers(conn_id, _extra_value(extra, "headers")),
        )

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments shared by ``httpx.Client`` and ``httpx.AsyncClient``."""
        verify: bool | ssl.SSLContext = self.verify if isinstance(self.verify, bool) else _ca_context(self.verify)
        return {
            "base_url": self.base_url,
            "auth": httpx.BasicAuth(*self.auth) if self.auth else None,
            "verify": verify,
            "timeout": self.timeout,
            "headers": self.headers,
        }


def _base_url(conn_id: str, host: str, port: int | None, schema: str | None) -> str:
    if "://" in host:
        parts = urlsplit(host)
        if parts.scheme not in ("http", "https"):
            raise AirflowException(f"Connection {conn_id!r}: host URL {host!r} must start with http:// or https://")
        netloc = parts.netloc if parts.port or not port else f"{parts.netloc}:{port}"
        return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
    scheme = (schema or "http").strip().lower()
    if scheme not in ("http", "https"):
        raise AirflowException(f"Connection {conn_id!r}: schema (protocol) must be http or https, not {schema!r}")
    return f"{scheme}://{host}:{port or DEFAULT_PORT}"


def _verify(conn_id: str, value: Any) -> bool | str:
    if value is None or value == "":
        return True
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    if not os.path.exists(text):
        raise AirflowException(
            f"Connection {conn_id!r}: extra 'verify' is {text!r}, which is neither true/false nor an existing "
            "CA bundle file or directory"
        )
    return text


def _timeout(conn_id: str, value: Any) -> float:
    if value is None or value == "":
        return DEFAULT_TIMEOUT_S
    try:
        timeout = float(value)
    except (TypeError, ValueError):
        timeout = -1.0
    if timeout <= 0:
        raise AirflowException(f"Connection {conn_id!r}: extra 'timeout' must be a positive number of seconds")
    return timeout


def _headers(conn_id: str, value: Any) -> dict[str, str]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, dict):
        raise AirflowException(f"Connection {conn_id!r}: extra 'headers' must be a JSON object of header names")
    return {str(k): str(v) for k, v in value.items()}


def _ca_context(path: str) -> ssl.SSLContext:
    if os.path.isdir(path):
        return ssl.create_default_context(capath=path)
    return ssl.create_default_context(cafile=path)


#: What Jetty 12 (Kafka Connect 4.0 and later) answers, in HTML, to a path holding an encoded '/' (``%2F``).
AMBIGUOUS_SEPARATOR = "Ambiguous URI path separator"


def connector_path(connector: str, *rest: str | int) -> str:
    """``/connectors/<name>/...`` with the name percent-encoded, so names with spaces survive.

    A '/' in a name is sent as ``%2F``: Kafka Connect 3.x decodes it, 4.x refuses it with 400
    (see :data:`AMBIGUOUS_SEPARATOR`), so there such a connector can be created (``POST /connectors``)
    but never read, changed or deleted through REST again.
    """
    return "/connectors/" + "/".join(quote(str(part), safe="") for part in (connector, *rest))


class ConflictBackoff:
    """Delays between retries of a 409, doubling from 0.25 s to 5 s, within a total budget."""

    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s
        self.delay = 0.25

    def next_delay(self) -> float | None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        delay = min(self.delay, remaining)
        self.delay = min(self.delay * 2, 5.0)
        return delay


def raise_for_status(response: httpx.Response) -> None:
    """Turn a Connect error answer into its typed exception, keeping ``error_code`` and ``message``."""
    if response.is_success:
        return
    error_code: int | None = None
    message = ""
    try:
        body = response.json()
        if isinstance(body, dict):
            error_code = body.get("error_code")
            message = str(body.get("message") or "")
    except ValueError:
        message = response.text.strip()[:500]
    request = response.request
    if response.status_code == 400 and AMBIGUOUS_SEPARATOR in response.text and "%2F" in request.url.raw_path.decode():
        message = (
            f"HTTP 400 {AMBIGUOUS_SEPARATOR}: this Kafka Connect (4.0 or later, Jetty 12) refuses a '/' "
            "(sent as %2F) in a connector name in the URL path, so the connector cannot be addressed "
            "through REST; use a name without '/'"
        )
    raise error_class_for(response.status_code)(
        request.method,
        str(request.url),
        message or response.reason_phrase,
        http_status=response.status_code,
        error_code=error_code if isinstance(error_code, int) else response.status_code,
    )


def json_body(response: httpx.Response) -> Any:
    """The JSON body of a successful answer, or ConnectInvalidResponse naming the URL and what came instead.

    A proxy or gateway in front of Connect may answer 200 with an HTML page; that
    is no Connect answer, and the error must say where it came from.
    """
    try:
        return response.json()
    except ValueError as exc:
        request = response.request
        kind = response.headers.get("content-type") or "no content type"
        raise ConnectInvalidResponse(
            request.method,
            str(request.url),
            f"the body is not JSON ({kind}): {response.text.strip()[:200]!r}",
            http_status=response.status_code,
        ) from exc


def expand_params(expand: str | Sequence[str] | None) -> list[tuple[str, str]]:
    """The ``expand`` query parameters of ``GET /connectors`` (``status``, ``info``), checked."""
    if expand is None:
        return []
    kinds = [expand] if isinstance(expand, str) else list(expand)
    unknown = [kind for kind in kinds if kind not in ("status", "info")]
    if unknown:
        raise ValueError(f"expand accepts 'status' and 'info', not {unknown}")
    return [("expand", kind) for kind in kinds]


def restart_params(include_tasks: bool, only_failed: bool) -> dict[str, str]:
    """The query of ``POST /connectors/{c}/restart`` (KIP-745); none at all for a plain connector restart."""
    if not include_tasks and not only_failed:
        return {}
    return {"includeTasks": str(include_tasks).lower(), "onlyFailed": str(only_failed).lower()}
