"""``KafkaConnectHook``: the Kafka Connect REST API over the ``kafka_connect`` connection.

The connection holds host, port, protocol (``schema``: http or https) and
optional basic-auth login/password; its extra holds ``verify`` (true, false or a
CA bundle path), ``timeout`` in seconds and ``headers``. The hook has a
synchronous client for operators and sensors and an asynchronous one for
triggers, which must never block the triggerer's event loop.

Errors become typed exceptions (:mod:`airflow_kerr.hooks.connect_errors`). A 409
means the worker is rebalancing: the hook retries it with backoff for up to
``rebalance_retry_budget_s`` before raising ``RebalanceInProgress``. The
``forward`` query parameter is internal to Connect's worker-to-worker
forwarding, so the hook never sends it.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

from airflow_kerr.get_provider_info import KAFKA_CONNECT_CONN_FIELDS, KAFKA_CONNECT_UI_FIELD_BEHAVIOUR
from airflow_kerr.hooks.connect_errors import (
    ConnectInvalidResponse,
    ConnectUnreachable,
    KafkaConnectError,
    error_class_for,
)

DEFAULT_PORT = 8083
#: Longer than Connect's own 90 s request timeout, so the worker's "Request timed out" answer arrives.
DEFAULT_TIMEOUT_S = 100.0
DEFAULT_REBALANCE_RETRY_BUDGET_S = 60.0
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


def connector_path(connector: str, *rest: str | int) -> str:
    """``/connectors/<name>/...`` with the name percent-encoded, so names with '/' or spaces survive."""
    return "/connectors/" + "/".join(quote(str(part), safe="") for part in (connector, *rest))


class _Backoff:
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


def _raise_for_status(response: httpx.Response) -> None:
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
    raise error_class_for(response.status_code)(
        request.method,
        str(request.url),
        message or response.reason_phrase,
        http_status=response.status_code,
        error_code=error_code if isinstance(error_code, int) else response.status_code,
    )


def _body(response: httpx.Response) -> Any:
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


def _expand_params(expand: str | Sequence[str] | None) -> list[tuple[str, str]]:
    if expand is None:
        return []
    kinds = [expand] if isinstance(expand, str) else list(expand)
    unknown = [kind for kind in kinds if kind not in ("status", "info")]
    if unknown:
        raise ValueError(f"expand accepts 'status' and 'info', not {unknown}")
    return [("expand", kind) for kind in kinds]


def _restart_params(include_tasks: bool, only_failed: bool) -> dict[str, str]:
    if not include_tasks and not only_failed:
        return {}
    return {"includeTasks": str(include_tasks).lower(), "onlyFailed": str(only_failed).lower()}


class KafkaConnectHook(BaseHook):
    """Talk to a Kafka Connect worker's REST API.

    :param kafka_connect_conn_id: the ``kafka_connect`` connection to use.
    :param rebalance_retry_budget_s: how long to keep retrying a 409 (rebalance or
        concurrent config change) before raising ``RebalanceInProgress``.
    """

    conn_name_attr = "kafka_connect_conn_id"
    default_conn_name = "kafka_connect_default"
    conn_type = "kafka_connect"
    hook_name = "Kafka Connect"

    def __init__(
        self,
        kafka_connect_conn_id: str = default_conn_name,
        rebalance_retry_budget_s: float = DEFAULT_REBALANCE_RETRY_BUDGET_S,
    ) -> None:
        super().__init__()
        self.kafka_connect_conn_id = kafka_connect_conn_id
        self.rebalance_retry_budget_s = rebalance_retry_budget_s
        #: A ``time.monotonic()`` instant no request may outlast (timeouts and 409 retries are cut to it), or None.
        self.deadline: float | None = None
        self._settings: ClientSettings | None = None
        self._client: httpx.Client | None = None
        self._async_client: httpx.AsyncClient | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hidden and relabelled fields and placeholders of the connection form (same as the provider info)."""
        behaviour = KAFKA_CONNECT_UI_FIELD_BEHAVIOUR
        return {
            "hidden_fields": list(behaviour["hidden-fields"]),
            "relabeling": dict(behaviour["relabeling"]),
            "placeholders": dict(behaviour["placeholders"]),
        }

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Form fields for Airflow UIs that predate the declarative ``conn-fields`` of the provider info."""
        from wtforms import StringField

        return {
            name: StringField(spec["label"], description=spec["description"])
            for name, spec in KAFKA_CONNECT_CONN_FIELDS.items()
        }

    # clients --------------------------------------------------------------------------------------

    def _settings_from(self, conn: Any, extra: dict[str, Any]) -> ClientSettings:
        return ClientSettings.from_connection(
            self.kafka_connect_conn_id, conn.host, conn.port, conn.schema, conn.login, conn.password, extra
        )

    @property
    def settings(self) -> ClientSettings:
        """The connection's settings, read once."""
        if self._settings is None:
            conn = self.get_connection(self.kafka_connect_conn_id)
            self._settings = self._settings_from(conn, conn.extra_dejson)
        return self._settings

    async def asettings(self) -> ClientSettings:
        """The connection's settings, read without blocking the event loop."""
        if self._settings is None:
            try:
                from airflow.providers.common.compat.connection import get_async_connection, get_async_extra_dejson
            except ImportError:
                conn = await self.aget_connection(self.kafka_connect_conn_id)
                extra = conn.extra_dejson
            else:
                conn = await get_async_connection(self.kafka_connect_conn_id, self)
                extra = await get_async_extra_dejson(conn)
            self._settings = self._settings_from(conn, extra)
        return self._settings

    @property
    def base_url(self) -> str:
        return self.settings.base_url

    def get_conn(self) -> httpx.Client:
        """The synchronous client, created on first use; ``close()`` releases it."""
        if self._client is None:
            self._client = httpx.Client(**self.settings.client_kwargs())
        return self._client

    async def aget_conn(self) -> httpx.AsyncClient:
        """The asynchronous client, created on first use; ``aclose()`` releases it."""
        if self._async_client is None:
            self._async_client = httpx.AsyncClient(**(await self.asettings()).client_kwargs())
        return self._async_client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        if self._async_client is not None:
            await self._async_client.aclose()
            self._async_client = None

    def __enter__(self) -> KafkaConnectHook:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # requests -------------------------------------------------------------------------------------

    @staticmethod
    def _unreachable(
        client: httpx.Client | httpx.AsyncClient, method: str, path: str, exc: Exception
    ) -> KafkaConnectError:
        url = f"{str(client.base_url).rstrip('/')}/{path.lstrip('/')}"
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "could not connect"
        return ConnectUnreachable(method, url, f"{kind}: {str(exc) or type(exc).__name__}")

    def _retry_delay(self, response: httpx.Response, backoff: _Backoff, method: str, path: str) -> float | None:
        """How long to wait before retrying a 409 within the budget; None for an answer to return.

        The decision ``request`` and ``arequest`` share, so they only differ in how they send and sleep.
        Raises the typed error for any other failed answer, and for a 409 past the budget.
        """
        delay = backoff.next_delay() if response.status_code == 409 else None
        if delay is None:
            _raise_for_status(response)
            return None
        self.log.warning("%s %s: 409 %s; retrying in %.2f s", method, path, response.text[:200], delay)
        return delay

    def _bounded(self, retry_conflicts: bool, kwargs: dict[str, Any]) -> tuple[_Backoff, dict[str, Any]]:
        """The 409 retry budget and request options, both cut to what is left before ``deadline``.

        A caller that waits ``wait_timeout`` sets ``deadline`` so that neither a
        rebalance (409s retried for up to the budget) nor a slow worker (the
        connection's timeout) makes one request outlast the wait.
        """
        budget = self.rebalance_retry_budget_s if retry_conflicts else 0.0
        if self.deadline is None:
            return _Backoff(budget), kwargs
        left = max(self.deadline - time.monotonic(), 0.0)
        timeout = self._settings.timeout if self._settings is not None else DEFAULT_TIMEOUT_S
        return _Backoff(min(budget, left)), {**kwargs, "timeout": max(min(timeout, left), 0.01)}

    def request(self, method: str, path: str, *, retry_conflicts: bool = True, **kwargs: Any) -> httpx.Response:
        """Send one request, retrying a 409 within the rebalance budget; raise the typed error otherwise.

        ``retry_conflicts=False`` for a request whose 409 is not a rebalance, e.g. ``POST /connectors``
        answering that the connector already exists.
        """
        client = self.get_conn()
        backoff, kwargs = self._bounded(retry_conflicts, kwargs)
        while True:
            try:
                response = client.request(method, path, **kwargs)
            except (httpx.TransportError, httpx.InvalidURL) as exc:
                raise self._unreachable(client, method, path, exc) from exc
            delay = self._retry_delay(response, backoff, method, path)
            if delay is None:
                return response
            time.sleep(delay)

    async def arequest(self, method: str, path: str, *, retry_conflicts: bool = True, **kwargs: Any) -> httpx.Response:
        """The asynchronous twin of :meth:`request`."""
        client = await self.aget_conn()
        backoff, kwargs = self._bounded(retry_conflicts, kwargs)
        while True:
            try:
                response = await client.request(method, path, **kwargs)
            except (httpx.TransportError, httpx.InvalidURL) as exc:
                raise self._unreachable(client, method, path, exc) from exc
            delay = self._retry_delay(response, backoff, method, path)
            if delay is None:
                return response
            await asyncio.sleep(delay)

    # the API --------------------------------------------------------------------------------------

    def server_info(self) -> dict[str, Any]:
        """``GET /``: the worker's version, commit and Kafka cluster id."""
        result: dict[str, Any] = _body(self.request("GET", "/"))
        return result

    def test_connection(self) -> tuple[bool, str]:
        """Called by the UI's Test button: ``GET /`` must answer."""
        try:
            info = self.server_info()
        except Exception as exc:
            return False, str(exc)
        return True, (
            f"Connected to Kafka Connect {info.get('version')} (commit {info.get('commit')}, "
            f"Kafka cluster {info.get('kafka_cluster_id')})"
        )

    def list_connectors(self, expand: str | Sequence[str] | None = None) -> Any:
        """``GET /connectors``: a list of names, or ``{name: {"status": ..., "info": ...}}`` with ``expand``.

        A connector whose status the worker does not have yet is left out of an expanded answer.
        """
        return _body(self.request("GET", "/connectors", params=_expand_params(expand)))

    def get_connector(self, connector: str) -> dict[str, Any]:
        """``GET /connectors/{c}``: name, config, task ids and type."""
        result: dict[str, Any] = _body(self.request("GET", connector_path(connector)))
        return result

    def get_config(self, connector: str) -> dict[str, str]:
        result: dict[str, str] = _body(self.request("GET", connector_path(connector, "config")))
        return result

    def put_config(self, connector: str, config: dict[str, str]) -> dict[str, Any]:
        """``PUT /connectors/{c}/config``: create the connector or replace its config; returns its info."""
        result: dict[str, Any] = _body(self.request("PUT", connector_path(connector, "config"), json=config))
        return result

    def delete_connector(self, connector: str) -> None:
        self.request("DELETE", connector_path(connector))

    def get_status(self, connector: str) -> dict[str, Any]:
        """``GET /connectors/{c}/status``: connector and task states, with traces of failed ones."""
        result: dict[str, Any] = _body(self.request("GET", connector_path(connector, "status")))
        return result

    async def aget_status(self, connector: str) -> dict[str, Any]:
        result: dict[str, Any] = _body(await self.arequest("GET", connector_path(connector, "status")))
        return result

    async def alist_connectors(self, expand: str | Sequence[str] | None = None) -> Any:
        return _body(await self.arequest("GET", "/connectors", params=_expand_params(expand)))

    def get_tasks(self, connector: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = _body(self.request("GET", connector_path(connector, "tasks")))
        return result

    def pause(self, connector: str) -> None:
        """``PUT /connectors/{c}/pause`` (202): asynchronous and idempotent; poll the status to see it."""
        self.request("PUT", connector_path(connector, "pause"))

    def resume(self, connector: str) -> None:
        """``PUT /connectors/{c}/resume`` (202): asynchronous and idempotent; also starts a STOPPED connector."""
        self.request("PUT", connector_path(connector, "resume"))

    def stop(self, connector: str) -> None:
        """``PUT /connectors/{c}/stop`` (204): returns before the status reads STOPPED."""
        self.request("PUT", connector_path(connector, "stop"))

    def restart(self, connector: str, include_tasks: bool = False, only_failed: bool = False) -> dict[str, Any] | None:
        """``POST /connectors/{c}/restart`` (KIP-745).

        Both flags false restarts the connector instance only, synchronously (204,
        returns None). Otherwise the worker answers 202 with a status body in which
        the instances it will restart read RESTARTING; that body is returned.
        """
        response = self.request(
            "POST", connector_path(connector, "restart"), params=_restart_params(include_tasks, only_failed)
        )
        if response.status_code == 202 and response.content:
            result: dict[str, Any] = _body(response)
            return result
        return None

    def restart_task(self, connector: str, task_id: int) -> None:
        """``POST /connectors/{c}/tasks/{t}/restart`` (204)."""
        self.request("POST", connector_path(connector, "tasks", task_id, "restart"))

    def get_offsets(self, connector: str) -> dict[str, Any]:
        """``GET /connectors/{c}/offsets`` (KIP-875): ``{"offsets": [{"partition": ..., "offset": ...}]}``."""
        result: dict[str, Any] = _body(self.request("GET", connector_path(connector, "offsets")))
        return result
