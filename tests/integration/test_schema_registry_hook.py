"""The ``schema_registry`` connection: its fields become ``SchemaRegistryClient`` settings, checked and masked.

The connection test and the client run against the development registry (a real
process on the session broker); the mapping is checked field by field.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from airflow_kerr.get_provider_info import get_provider_info
from airflow_kerr.hooks.schema_registry import (
    ACCEPTED_EXTRA_KEYS,
    SchemaRegistryConnectionError,
    SchemaRegistryHook,
    registry_client_config,
)
from airflow_kerr.local.schema_registry import LocalSchemaRegistry


def set_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "schema_registry", **fields}))
    return conn_id


def test_fields_map_to_the_clients_settings() -> None:
    extra = {
        "ssl.ca.location": "/etc/ssl/ca.pem",
        "ssl.certificate.location": "/etc/ssl/client.pem",
        "ssl.key.location": "/etc/ssl/client.key",
        "timeout": 10,
    }
    config = registry_client_config("https://sr.example.com:8081/", None, None, "svc", "s3cret", extra)
    assert config == {"url": "https://sr.example.com:8081", "basic.auth.user.info": "svc:s3cret", **extra}
    assert registry_client_config("sr.example.com", 8081, "https", None, None, {}) == {
        "url": "https://sr.example.com:8081"
    }
    assert (
        registry_client_config("http://a:1, http://b:2", None, None, None, None, {})["url"] == "http://a:1,http://b:2"
    )


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"host": ""}, "has no host"),
        ({"host": "ftp://sr.example.com"}, "'ftp://sr.example.com' is not an http or https URL"),
        ({"host": "sr.example.com", "scheme": "tcp"}, "schema (protocol) 'tcp' is not accepted"),
        ({"host": "http://sr", "password": "p"}, "a password but no login"),
        ({"host": "http://sr", "extra": {"schema.registry.url": "http://x"}}, "extra key 'schema.registry.url'"),
        ({"host": "http://sr", "extra": {"timeout": "ten"}}, "extra 'timeout' = 'ten' must be a non-negative number"),
        ({"host": "http://sr", "extra": {"ssl.ca.location": 3}}, "extra 'ssl.ca.location' = 3 must be"),
    ],
)
def test_a_bad_field_is_refused_naming_it(fields: dict[str, Any], named: str) -> None:
    arguments = {"host": None, "port": None, "scheme": None, "login": None, "password": None, "extra": {}, **fields}
    with pytest.raises(SchemaRegistryConnectionError) as raised:
        registry_client_config(**arguments)
    assert named in str(raised.value)
    if "extra key" in named:
        assert "http://x" in str(raised.value) and ", ".join(ACCEPTED_EXTRA_KEYS) in str(raised.value)


def test_the_password_is_masked_and_never_in_the_hooks_repr_or_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    conn_id = set_connection(
        monkeypatch, "sr_secret", host="http://sr.example.com", login="svc", password="ZqRegistryPw1",
        extra={"bogus": "1"},
    )  # fmt: skip
    hook = SchemaRegistryHook(conn_id)
    with pytest.raises(SchemaRegistryConnectionError) as raised:
        hook.client_config()
    assert "'sr_secret'" in str(raised.value) and "bogus" in str(raised.value)
    assert "ZqRegistryPw1" not in str(raised.value) and "ZqRegistryPw1" not in repr(hook)

    set_connection(monkeypatch, "sr_secret", host="http://sr.example.com", login="svc", password="ZqRegistryPw1")
    config = hook.client_config()
    assert config["basic.auth.user.info"] == "svc:ZqRegistryPw1"
    logged = redact(f"registry settings: {config}")
    assert "ZqRegistryPw1" not in logged and "http://sr.example.com" in logged


def test_the_connection_type_is_registered_with_its_form(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers_manager import (
        _create_customized_form_field_behaviours_schema_validator,
        _create_provider_info_schema_validator,
    )

    info = get_provider_info()
    _create_provider_info_schema_validator().validate(info)
    behaviour = SchemaRegistryHook.get_ui_field_behaviour()
    _create_customized_form_field_behaviours_schema_validator().validate(behaviour)
    entry = next(c for c in info["connection-types"] if c["connection-type"] == "schema_registry")
    assert entry["hook-class-name"] == "airflow_kerr.hooks.schema_registry.SchemaRegistryHook"
    assert set(entry["conn-fields"]) == {"ssl.ca.location", "ssl.certificate.location", "ssl.key.location"}
    assert behaviour["relabeling"]["host"] == "Registry URL"
    assert SchemaRegistryHook.default_conn_name == "schema_registry_default"


def test_connection_test_and_client_reach_the_development_registry(
    monkeypatch: pytest.MonkeyPatch, schema_registry: LocalSchemaRegistry, unique_topic: str
) -> None:
    conn_id = set_connection(monkeypatch, "sr_local", host=schema_registry.url)
    ok, message = SchemaRegistryHook(conn_id).test_connection()
    assert ok, message
    assert message.startswith(f"Connected to the Schema Registry at {schema_registry.url} (")

    schema = json.dumps({"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "int"}]})
    schema_id = httpx.post(f"{schema_registry.url}/subjects/{unique_topic}/versions", json={"schema": schema}).json()
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as exc:
        pytest.fail(f"confluent-kafka's Schema Registry client cannot be imported ({exc}): install its extra")
    client = SchemaRegistryHook(conn_id).get_conn()
    assert isinstance(client, SchemaRegistryClient)
    assert client.get_schema(schema_id["id"]).schema_str == schema


def test_connection_test_names_the_url_it_could_not_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kerr.local.broker import free_port

    url = f"http://127.0.0.1:{free_port()}"
    ok, message = SchemaRegistryHook(set_connection(monkeypatch, "sr_refused", host=url)).test_connection()
    assert not ok and message.startswith(f"GET {url}/subjects failed: ConnectError")
