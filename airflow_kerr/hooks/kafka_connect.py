"""``KafkaConnectHook``: the Kafka Connect REST API over the ``kafka_connect`` connection.

The connection holds host, port, protocol (``schema``: http or https) and
optional basic-auth login/password; its extra holds ``verify`` (true, false or a
CA bundle path), ``timeout`` in seconds and ``headers``. The hook has a
synchronous client for operators and sensors and an asynchronous one for
triggers, which must never block the triggerer's event loop.

Errors become typed exceptions (:mod:`airflow_kerr.connect.errors`). A 409
means the worker is rebalancing: the hook retries it with backoff for up to
``rebalance_retry_budget_s`` before raising ``RebalanceInProgress``. The
``forward`` query parameter is internal to Connect's worker-to-worker
forwarding, so the hook never sends it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import httpx
from airflow.sdk import BaseHook

from airflow_kerr.connect.client import (
    DEFAULT_TIMEOUT_S,
    ClientSettings,
    ConflictBackoff,
    connector_path,
    expand_params,
    json_body,
    raise_for_status,
    restart_params,
)
from airflow_kerr.connect.errors import ConnectUnreachable, KafkaConnectError
from airflow_kerr.get_provider_info import KAFKA_CONNECT_CONN_FIELDS, KAFKA_CONNECT_UI_FIELD_BEHAVIOUR
from airflow_kerr.hooks.connection_form import form_widgets, ui_field_behaviour

DEFAULT_REBALANCE_RETRY_BUDGET_S = 60.0


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
        return ui_field_behaviour(KAFKA_CONNECT_UI_FIELD_BEHAVIOUR)

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Form fields for Airflow UIs that predate the declarative ``conn-fields`` of the provider info."""
        return form_widgets(KAFKA_CONNECT_CONN_FIELDS)

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

    def _retry_delay(self, response: httpx.Response, backoff: ConflictBackoff, method: str, path: str) -> float | None:
        """How long to wait before retrying a 409 within the budget; None for an answer to return.

        The decision ``request`` and ``arequest`` share, so they only differ in how they send and sleep.
        Raises the typed error for any other failed answer, and for a 409 past the budget.
        """
        delay = backoff.next_delay() if response.status_code == 409 else None
        if delay is None:
            raise_for_status(response)
            return None
        self.log.warning("%s %s: 409 %s; retrying in %.2f s", method, path, response.text[:200], delay)
        return delay

    def _bounded(self, retry_conflicts: bool, kwargs: dict[str, Any]) -> tuple[ConflictBackoff, dict[str, Any]]:
        """The 409 retry budget and request options, both cut to what is left before ``deadline``.

        A caller that waits ``wait_timeout`` sets ``deadline`` so that neither a
        rebalance (409s retried for up to the budget) nor a slow worker (the
        connection's timeout) makes one request outlast the wait.
        """
        budget = self.rebalance_retry_budget_s if retry_conflicts else 0.0
        if self.deadline is None:
            return ConflictBackoff(budget), kwargs
        left = max(self.deadline - time.monotonic(), 0.0)
        timeout = self._settings.timeout if self._settings is not None else DEFAULT_TIMEOUT_S
        return ConflictBackoff(min(budget, left)), {**kwargs, "timeout": max(min(timeout, left), 0.01)}

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
        result: dict[str, Any] = json_body(self.request("GET", "/"))
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
        return json_body(self.request("GET", "/connectors", params=expand_params(expand)))

    def get_connector(self, connector: str) -> dict[str, Any]:
        """``GET /connectors/{c}``: name, config, task ids and type."""
        result: dict[str, Any] = json_body(self.request("GET", connector_path(connector)))
        return result

    def get_config(self, connector: str) -> dict[str, str]:
        result: dict[str, str] = json_body(self.request("GET", connector_path(connector, "config")))
        return result

    def put_config(self, connector: str, config: dict[str, str]) -> dict[str, Any]:
        """``PUT /connectors/{c}/config``: create the connector or replace its config; returns its info."""
        result: dict[str, Any] = json_body(self.request("PUT", connector_path(connector, "config"), json=config))
        return result

    def delete_connector(self, connector: str) -> None:
        self.request("DELETE", connector_path(connector))

    def get_status(self, connector: str) -> dict[str, Any]:
        """``GET /connectors/{c}/status``: connector and task states, with traces of failed ones."""
        result: dict[str, Any] = json_body(self.request("GET", connector_path(connector, "status")))
        return result

    async def aget_status(self, connector: str) -> dict[str, Any]:
        result: dict[str, Any] = json_body(await self.arequest("GET", connector_path(connector, "status")))
        return result

    async def alist_connectors(self, expand: str | Sequence[str] | None = None) -> Any:
        return json_body(await self.arequest("GET", "/connectors", params=expand_params(expand)))

    def get_tasks(self, connector: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = json_body(self.request("GET", connector_path(connector, "tasks")))
        return result

    def get_task_ids(self, connector: str) -> list[int]:
        """The ids of the connector's task configs: every task it runs (none while STOPPED)."""
        return [int(task["id"]["task"]) for task in self.get_tasks(connector)]

    async def aget_task_ids(self, connector: str) -> list[int]:
        tasks: list[dict[str, Any]] = json_body(await self.arequest("GET", connector_path(connector, "tasks")))
        return [int(task["id"]["task"]) for task in tasks]

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
            "POST", connector_path(connector, "restart"), params=restart_params(include_tasks, only_failed)
        )
        if response.status_code == 202 and response.content:
            result: dict[str, Any] = json_body(response)
            return result
        return None

    def restart_task(self, connector: str, task_id: int) -> None:
        """``POST /connectors/{c}/tasks/{t}/restart`` (204)."""
        self.request("POST", connector_path(connector, "tasks", task_id, "restart"))

    def get_offsets(self, connector: str) -> dict[str, Any]:
        """``GET /connectors/{c}/offsets`` (KIP-875): ``{"offsets": [{"partition": ..., "offset": ...}]}``."""
        result: dict[str, Any] = json_body(self.request("GET", connector_path(connector, "offsets")))
        return result
