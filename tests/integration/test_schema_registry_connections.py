"""The executors' registry client keeps its connection alive, and finds a restarted registry again.

Confluent's Java client (``HttpURLConnection``) and confluent-kafka's (``httpx``) keep their
connections to the registry alive; a new TCP connection per request cost more than the request
(an unknown schema id asked once per bad record). These run the real development registry.
"""

from __future__ import annotations

import socket

import pytest

from airflow_kerr.formats.exceptions import RegistryRequestError
from airflow_kerr.formats.registry_client import RegistryClient
from airflow_kerr.formats.registry_settings import RegistrySettings
from airflow_kerr.local.schema_registry import LocalSchemaRegistry

ORDER = '{"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}'


def local_port(client: RegistryClient, url: str) -> int:
    """The client's own port of its one idle connection to ``url`` (the connection it will reuse)."""
    idle = client._idle[url]
    assert len(idle) == 1, f"expected one idle connection to {url}, found {len(idle)}"
    sock = idle[0].sock
    assert isinstance(sock, socket.socket), "the idle connection has no socket"
    return int(sock.getsockname()[1])


def test_requests_and_error_answers_share_one_connection(
    schema_registry: LocalSchemaRegistry, unique_topic: str
) -> None:
    client = RegistryClient(RegistrySettings(url=schema_registry.url))
    schema_id = client.register(f"{unique_topic}-value", ORDER, "AVRO")
    port = local_port(client, schema_registry.url)

    assert client.schema_by_id(schema_id)["schema"]
    with pytest.raises(RegistryRequestError) as unknown:
        client.schema_by_id(999_999_999)
    assert unknown.value.error_code == 40403
    assert client.version(f"{unique_topic}-value")["id"] == schema_id

    assert client.requests == 4
    assert local_port(client, schema_registry.url) == port


def test_a_registry_restarted_on_its_port_is_reached_on_a_new_connection(
    kafka_bootstrap: str, unique_topic: str
) -> None:
    store = f"_schemas-{unique_topic}"
    with LocalSchemaRegistry(kafka_bootstrap, topic=store) as first:
        client = RegistryClient(RegistrySettings(url=first.url))
        schema_id = client.register(f"{unique_topic}-value", ORDER, "AVRO")
        port = local_port(client, first.url)
        registry_port = first.port

    with LocalSchemaRegistry(kafka_bootstrap, topic=store, port=registry_port) as second:
        assert second.url == first.url
        # The kept connection was closed by the stopped registry: the request goes out again on a new one.
        assert client.version(f"{unique_topic}-value")["id"] == schema_id
        assert local_port(client, second.url) != port
