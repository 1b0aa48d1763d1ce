"""KafkaConnectHook against real Kafka Connect, through the fault proxy: endpoints, error paths, sync and async."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_kerr.connect.errors import (
    ConnectBadRequest,
    ConnectInvalidResponse,
    ConnectorNotFound,
    ConnectServerError,
    ConnectUnreachable,
    RebalanceInProgress,
)
from airflow_kerr.get_provider_info import get_provider_info
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.local.connect_worker import connector_config

# A stall shows up as a failure with every thread's stack, not as a slow run.
# func_only: the module's worker starts in the first test's setup, bounded by its own start timeout.
pytestmark = pytest.mark.timeout(90, func_only=True)


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka_connect", **fields}))
    return conn_id


@pytest.fixture
def hook(connect_conn: str) -> Iterator[KafkaConnectHook]:
    with KafkaConnectHook(connect_conn, rebalance_retry_budget_s=5) as connect_hook:
        yield connect_hook


def states(status: dict[str, Any]) -> tuple[str, list[str]]:
    return status["connector"]["state"], [t["state"] for t in status["tasks"]]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_ui_field_behaviour_matches_the_provider_info() -> None:
    from airflow.providers_manager import (
        _create_customized_form_field_behaviours_schema_validator,
        _create_provider_info_schema_validator,
    )

    info = get_provider_info()
    _create_provider_info_schema_validator().validate(info)
    _create_customized_form_field_behaviours_schema_validator().validate(KafkaConnectHook.get_ui_field_behaviour())
    connection_type = next(c for c in info["connection-types"] if c["connection-type"] == "kafka_connect")
    assert connection_type["hook-class-name"] == "airflow_kerr.hooks.kafka_connect.KafkaConnectHook"
    behaviour = KafkaConnectHook.get_ui_field_behaviour()
    assert behaviour["relabeling"] == connection_type["ui-field-behaviour"]["relabeling"]
    assert behaviour["placeholders"]["schema"] == "http or https"
    assert set(connection_type["conn-fields"]) == {"verify", "timeout", "headers"}
    for section in ("hooks", "operators", "sensors", "triggers"):
        for module in info[section][0]["python-modules"]:
            __import__(module)


# requests ----------------------------------------------------------------------------------------


def test_connection_test_calls_root(hook: KafkaConnectHook, connect: Any) -> None:
    ok, message = hook.test_connection()
    assert ok, message
    assert message.startswith(f"Connected to Kafka Connect {connect.worker.version} (commit ")
    assert connect.requests[-1].method == "GET" and connect.requests[-1].path == "/"


def test_connection_test_reports_a_refused_connection_with_its_url(monkeypatch: pytest.MonkeyPatch) -> None:
    port = closed_port()
    conn_id = set_connection(monkeypatch, "kc_refused", host="127.0.0.1", port=port)
    ok, message = KafkaConnectHook(conn_id).test_connection()
    assert not ok
    assert f"http://127.0.0.1:{port}/" in message


def test_every_endpoint(
    hook: KafkaConnectHook,
    connect: Any,
    sink: Callable[..., tuple[str, str]],
    produce: Callable[..., None],
    wait_until: Callable[..., Any],
) -> None:
    name, topic = sink(tasks=2, partitions=2)
    assert hook.server_info()["version"]
    assert hook.list_connectors() == [name]
    assert set(hook.list_connectors(expand="status")[name]) == {"status"}
    assert set(hook.list_connectors(expand=["status", "info"])[name]) == {"status", "info"}
    assert hook.get_connector(name)["name"] == name
    assert hook.get_config(name)["topics"] == topic
    assert len(hook.get_tasks(name)) == 2
    assert hook.get_status(name)["connector"]["state"] == "RUNNING"

    assert hook.pause(name) is None  # type: ignore[func-returns-value]  # the hook returns nothing: hold it to that
    wait_until(lambda: states(connect.status(name)) == ("PAUSED", ["PAUSED", "PAUSED"]))
    hook.pause(name)
    assert hook.resume(name) is None  # type: ignore[func-returns-value]  # the hook returns nothing: hold it to that
    wait_until(lambda: states(connect.status(name)) == ("RUNNING", ["RUNNING", "RUNNING"]))

    assert hook.restart(name) is None
    plan = hook.restart(name, include_tasks=True)
    assert plan is not None and [t["state"] for t in plan["tasks"]] == ["RESTARTING", "RESTARTING"]
    wait_until(lambda: states(connect.status(name)) == ("RUNNING", ["RUNNING", "RUNNING"]))
    connect.fail_task(name, 1)
    connect.set_tolerance(name, "all")  # the fix, so the restarted task reads past the malformed record
    # Task 0 takes the fix first: while task 1 restarts, its consumer leaves the group and task 0 reads
    # partition 1 (the malformed record too) until task 1 rejoins, as real Connect does.
    assert hook.restart_task(name, 0) is None  # type: ignore[func-returns-value]  # the hook returns nothing: hold it to that
    assert states(connect.status(name)) == ("RUNNING", ["RUNNING", "FAILED"]), "a task restart is synchronous"
    plan = hook.restart(name, include_tasks=True, only_failed=True)
    # Connect 4.x lists a restart plan's tasks in no fixed order (3.9 sorted them): read them by id.
    assert plan is not None and [t["state"] for t in sorted(plan["tasks"], key=lambda t: t["id"])] == [
        "RUNNING",
        "RESTARTING",
    ]
    wait_until(lambda: states(connect.status(name)) == ("RUNNING", ["RUNNING", "RUNNING"]))

    produce(topic, ["good-0"], partition=0)
    produce(topic, ["good-1"], partition=1)
    wait_until(lambda: sorted(connect.output_lines(name)) == ["good-0", "good-1"])

    def committed() -> list[tuple[int, int]]:
        offsets = hook.get_offsets(name)["offsets"]
        return sorted((o["partition"]["kafka_partition"], o["offset"]["kafka_offset"]) for o in offsets)

    wait_until(lambda: committed() == [(0, 1), (1, 2)])  # the worker commits sink offsets every second
    assert hook.stop(name) is None  # type: ignore[func-returns-value]  # the hook returns nothing: hold it to that
    wait_until(lambda: states(connect.status(name)) == ("STOPPED", []))
    assert committed() == [(0, 1), (1, 2)], "each partition committed past its malformed and good records"
    assert {o["partition"]["kafka_topic"] for o in hook.get_offsets(name)["offsets"]} == {topic}
    hook.put_config(name, {**hook.get_config(name), "tasks.max": "1"})
    hook.delete_connector(name)
    assert hook.list_connectors() == []

    queries = [(r.method, r.path, r.query) for r in connect.requests]
    assert not [q for q in queries if "forward" in q[2]], "the forward parameter is never sent"
    assert ("POST", f"/connectors/{name}/restart", "") in queries, "both flags false: no query"
    assert ("POST", f"/connectors/{name}/restart", "includeTasks=true&onlyFailed=true") in queries


def test_names_are_percent_encoded(hook: KafkaConnectHook, connect: Any, sink: Callable[..., tuple[str, str]]) -> None:
    """A '/' goes out as %2F: Connect 3.x decodes it; 4.x (Jetty 12) refuses it, and the error says why."""
    _, topic = sink()
    if not connect.worker.version.startswith("3."):
        with pytest.raises(ConnectBadRequest, match=r"refuses a '/' \(sent as %2F\) in a connector name"):
            hook.put_config("orders sink/v2", connector_config(topic, "o.txt"))
        assert connect.requests[-1].path == "/connectors/orders%20sink%2Fv2/config"
        assert "orders sink/v2" not in hook.list_connectors()
        return
    connect.created.append("orders sink/v2")
    hook.put_config("orders sink/v2", connector_config(topic, "o.txt"))
    assert "orders sink/v2" in hook.list_connectors()
    assert connect.requests[-2].path == "/connectors/orders%20sink%2Fv2/config"


def test_not_found_carries_error_code_and_message(hook: KafkaConnectHook) -> None:
    with pytest.raises(ConnectorNotFound) as raised:
        hook.pause("ghost")
    assert raised.value.error_code == 404
    assert raised.value.message == "Unknown connector ghost"
    assert raised.value.url.endswith("/connectors/ghost/pause")
    with pytest.raises(ConnectorNotFound, match="No status found for connector ghost"):
        hook.get_status("ghost")
    with pytest.raises(ConnectorNotFound, match="Unknown connector: ghost"):
        hook.restart("ghost", include_tasks=True)


def test_bad_request(hook: KafkaConnectHook, sink: Callable[..., tuple[str, str]]) -> None:
    name, _ = sink()
    with pytest.raises(ConnectBadRequest) as raised:
        hook.request("DELETE", f"/connectors/{name}/offsets")
    assert raised.value.error_code == 400
    assert raised.value.message.startswith("Connectors must be in the STOPPED state")


def test_a_short_rebalance_is_retried_with_backoff(
    hook: KafkaConnectHook, connect: Any, sink: Callable[..., tuple[str, str]]
) -> None:
    name, _ = sink()
    connect.inject_rebalance(0.6)
    hook.restart(name)  # answered: the 409s of the 0.6 s window were retried until it had passed
    tries = [r for r in connect.requests if r.path == f"/connectors/{name}/restart"]
    # The hook sends a request again only after a 409 (backoff 0.25 s, 0.5 s...): at least one 409, then the answer.
    assert len(tries) >= 2, "the 409 was not retried"


def test_a_rebalance_longer_than_the_budget_raises(
    connect_conn: str, connect: Any, sink: Callable[..., tuple[str, str]]
) -> None:
    name, _ = sink()
    connect.inject_rebalance(30)
    hook = KafkaConnectHook(connect_conn, rebalance_retry_budget_s=0.5)
    with pytest.raises(RebalanceInProgress) as raised:
        hook.stop(name)
    assert raised.value.error_code == 409
    assert raised.value.message.startswith("Cannot complete request momentarily")


def test_a_conflict_that_is_no_rebalance_is_not_retried(
    hook: KafkaConnectHook, connect: Any, sink: Callable[..., tuple[str, str]]
) -> None:
    name, topic = sink()
    body = {"name": name, "config": connector_config(topic, "f.txt")}
    with pytest.raises(RebalanceInProgress, match=f"Connector {name} already exists"):
        hook.request("POST", "/connectors", json=body, retry_conflicts=False)
    assert [r.method for r in connect.requests if r.path == "/connectors"] == ["POST"], "sent once, not retried"


def test_request_timed_out_is_a_server_error(
    hook: KafkaConnectHook, connect: Any, sink: Callable[..., tuple[str, str]]
) -> None:
    name, _ = sink()
    connect.inject_request_timeout(10)
    with pytest.raises(ConnectServerError) as raised:
        hook.stop(name)
    assert raised.value.error_code == 500
    assert raised.value.message.startswith("Request timed out")


def test_a_client_side_timeout_names_the_url(
    monkeypatch: pytest.MonkeyPatch, connect: Any, sink: Callable[..., tuple[str, str]]
) -> None:
    name, _ = sink()
    conn_id = set_connection(monkeypatch, "kc_impatient", host="127.0.0.1", port=connect.port, extra={"timeout": 0.3})
    connect.inject_request_timeout(10, delay_s=1.0)
    with pytest.raises(ConnectUnreachable, match=rf"timed out.*|.*{connect.port}/connectors/{name}/stop") as raised:
        KafkaConnectHook(conn_id).stop(name)
    assert raised.value.url == f"{connect.url}/connectors/{name}/stop"


def test_refused_connection_names_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    port = closed_port()
    conn_id = set_connection(monkeypatch, "kc_down", host="127.0.0.1", port=port)
    with pytest.raises(ConnectUnreachable) as raised:
        KafkaConnectHook(conn_id).get_status("orders")
    assert raised.value.url == f"http://127.0.0.1:{port}/connectors/orders/status"
    assert str(raised.value).startswith(f"GET http://127.0.0.1:{port}/connectors/orders/status failed")


def test_basic_auth_and_headers_are_sent(monkeypatch: pytest.MonkeyPatch, connect: Any) -> None:
    conn_id = set_connection(
        monkeypatch,
        "kc_auth",
        host="127.0.0.1",
        port=connect.port,
        login="ops",
        password="s3cret",
        extra={"headers": {"X-Team": "data"}},
    )
    KafkaConnectHook(conn_id).list_connectors()
    headers = {k.lower(): v for k, v in connect.requests[-1].headers.items()}
    assert headers["authorization"] == "Basic b3BzOnMzY3JldA=="
    assert headers["x-team"] == "data"


# TLS ---------------------------------------------------------------------------------------------


@pytest.fixture
def tls_connect(connect: Any, tls: Any) -> Iterator[Any]:
    """HTTPS in front of the real worker: the fault proxy terminates TLS with a throwaway CA's certificate."""
    proxy = type(connect.proxy)(connect.worker.url, ssl_context=tls.server_context)
    yield proxy
    proxy.close()


def test_https_with_a_ca_bundle(monkeypatch: pytest.MonkeyPatch, tls_connect: Any, tls: Any) -> None:
    conn_id = set_connection(
        monkeypatch,
        "kc_tls",
        host="127.0.0.1",
        port=tls_connect.port,
        schema="https",
        extra={"verify": str(tls.ca_file)},
    )
    assert isinstance(KafkaConnectHook(conn_id).list_connectors(), list)


def test_https_without_the_ca_fails_naming_the_url(monkeypatch: pytest.MonkeyPatch, tls_connect: Any) -> None:
    conn_id = set_connection(monkeypatch, "kc_tls_default", host="127.0.0.1", port=tls_connect.port, schema="https")
    with pytest.raises(ConnectUnreachable, match="CERTIFICATE_VERIFY_FAILED") as raised:
        KafkaConnectHook(conn_id).list_connectors()
    assert raised.value.url == f"https://127.0.0.1:{tls_connect.port}/connectors"
    conn_id = set_connection(
        monkeypatch, "kc_tls_off", host="127.0.0.1", port=tls_connect.port, schema="https", extra={"verify": False}
    )
    assert isinstance(KafkaConnectHook(conn_id).list_connectors(), list)


def test_https_to_a_plain_http_worker_names_the_url(monkeypatch: pytest.MonkeyPatch, connect: Any) -> None:
    conn_id = set_connection(monkeypatch, "kc_wrong_scheme", host="127.0.0.1", port=connect.port, schema="https")
    with pytest.raises(ConnectUnreachable) as raised:
        KafkaConnectHook(conn_id).list_connectors()
    assert raised.value.url == f"https://127.0.0.1:{connect.port}/connectors"


# async -------------------------------------------------------------------------------------------


async def test_async_client(connect_conn: str, connect: Any, sink: Callable[..., tuple[str, str]]) -> None:
    name, _ = sink()
    hook = KafkaConnectHook(connect_conn, rebalance_retry_budget_s=5)
    try:
        assert (await hook.aget_status(name))["connector"]["state"] == "RUNNING"
        assert await hook.alist_connectors() == [name]
        assert set((await hook.alist_connectors(expand="info"))[name]) == {"info"}
        with pytest.raises(ConnectorNotFound, match="No status found for connector ghost"):
            await hook.aget_status("ghost")
        connect.inject_rebalance(0.5)
        response = await hook.arequest("POST", f"/connectors/{name}/restart")
        assert response.status_code == 204
    finally:
        await hook.aclose()


async def test_async_refused_names_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    port = closed_port()
    hook = KafkaConnectHook(set_connection(monkeypatch, "kc_async_down", host="127.0.0.1", port=port))
    try:
        with pytest.raises(ConnectUnreachable) as raised:
            await hook.aget_status("orders")
        assert raised.value.url == f"http://127.0.0.1:{port}/connectors/orders/status"
    finally:
        await hook.aclose()


# answers that are not Connect's ---------------------------------------------------------------------


async def test_a_200_whose_body_is_not_json_is_a_typed_error_naming_the_url(
    hook: KafkaConnectHook, connect: Any, sink: Callable[..., tuple[str, str]]
) -> None:
    """A gateway in front of Connect answers 200 with HTML (injected by the fault proxy): no bare JSONDecodeError."""
    name, _ = sink()
    connect.proxy.inject_body(30, 200, b"<html>maintenance</html>", "text/html", "/status")
    url = f"{connect.url}/connectors/{name}/status"
    with pytest.raises(ConnectInvalidResponse, match=r"the body is not JSON \(text/html\)") as raised:
        hook.get_status(name)
    assert raised.value.url == url and raised.value.http_status == 200
    assert str(raised.value).startswith(f"GET {url} answered HTTP 200")
    with pytest.raises(ConnectInvalidResponse, match="maintenance") as async_raised:
        await hook.aget_status(name)
    assert async_raised.value.url == url
