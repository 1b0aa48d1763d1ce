"""A ``schema_registry`` connection whose URL carries credentials reaches a registry that demands basic auth.

The development registry (``airflow_kerr.local.schema_registry``) has no authentication, so
a secured registry is stood in for by a small loopback HTTP server in this test: it answers
the two requests used here (``GET /subjects``, ``GET /schemas/ids/{id}``) as Confluent's
registry does, answers 401 to a request without the expected ``Authorization`` header, and
records every request's path, ``Host`` and ``Authorization``. Through it, the connection's
URL credentials must be sent as basic auth by our client, by confluent-kafka's
``SchemaRegistryClient`` (``SchemaRegistryHook.get_conn``) and by the connection test, to the
bare host; and no message, including an error's, may show them.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from airflow_kerr.formats import RegistrySettings, RegistryUnavailable
from airflow_kerr.formats.registry_client import RegistryClient
from airflow_kerr.hooks.schema_registry import SchemaRegistryHook

USER, PASSWORD = "svc", "p@ss-Zq91"  # an "@" in the password: percent-encoded in the URL
SCHEMA = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]})
SCHEMA_ID, FAILING_ID = 7, 503


@dataclass
class SecuredRegistry:
    """The loopback stand-in's address and what it was sent."""

    port: int
    seen: list[dict[str, str | None]] = field(default_factory=list)

    @property
    def bare_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url_with_credentials(self) -> str:
        return f"http://{USER}:{PASSWORD.replace('@', '%40')}@127.0.0.1:{self.port}"


@pytest.fixture
def registry() -> Iterator[SecuredRegistry]:
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    secured = SecuredRegistry(port=0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            secured.seen.append(
                {"path": self.path, "host": self.headers.get("Host"), "auth": self.headers.get("Authorization")}
            )
            if self.headers.get("Authorization") != expected:
                self._answer(401, {"error_code": 401, "message": "Unauthorized"})
            elif self.path == "/subjects":
                self._answer(200, ["orders-value"])
            elif self.path.startswith(f"/schemas/ids/{SCHEMA_ID}"):
                self._answer(200, {"schema": SCHEMA})
            else:
                self._answer(503, {"error_code": 50301, "message": "backend unavailable"})

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    secured.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield secured
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def conn_id(monkeypatch: pytest.MonkeyPatch, registry: SecuredRegistry) -> str:
    connection = {"conn_type": "schema_registry", "host": registry.url_with_credentials}
    monkeypatch.setenv("AIRFLOW_CONN_SR_URL_CREDENTIALS", json.dumps(connection))
    return "sr_url_credentials"


def test_our_client_sends_the_urls_credentials_as_basic_auth_to_the_bare_host(
    registry: SecuredRegistry, conn_id: str
) -> None:
    config = SchemaRegistryHook(conn_id).client_config()
    assert config["url"] == registry.bare_url
    client = RegistryClient(RegistrySettings.from_mapping(config))
    assert client.schema_by_id(SCHEMA_ID)["schema"] == SCHEMA
    assert registry.seen[-1]["host"] == f"127.0.0.1:{registry.port}"
    assert registry.seen[-1]["auth"] == "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    with pytest.raises(RegistryUnavailable) as raised:
        client.schema_by_id(FAILING_ID)
    assert str(raised.value).startswith(f"GET {registry.bare_url}/schemas/ids/{FAILING_ID}: HTTP 503")
    assert PASSWORD not in str(raised.value) and USER not in str(raised.value)


def test_confluents_client_from_the_hook_sends_them_too(registry: SecuredRegistry, conn_id: str) -> None:
    client = SchemaRegistryHook(conn_id).get_conn()
    assert client.get_schema(SCHEMA_ID).schema_str == SCHEMA
    assert registry.seen[-1]["auth"] == "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def test_the_connection_test_passes_and_names_the_url_without_them(registry: SecuredRegistry, conn_id: str) -> None:
    ok, message = SchemaRegistryHook(conn_id).test_connection()
    assert ok, message
    assert message == f"Connected to the Schema Registry at {registry.bare_url} (1 subjects)"


def test_without_the_credentials_the_stand_in_refuses(registry: SecuredRegistry) -> None:
    """The check above can fail: a client that sends no credentials gets the registry's 401."""
    from airflow_kerr.formats import RegistryRequestError

    client = RegistryClient(RegistrySettings.from_mapping({"url": registry.bare_url}))
    with pytest.raises(RegistryRequestError) as raised:
        client.schema_by_id(SCHEMA_ID)
    assert raised.value.status == 401 and registry.seen[-1]["auth"] is None
