"""ClientSettings: a ``kafka_connect`` connection's fields checked into what an HTTP client needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.connect.client import ClientSettings
from airflow_kerr.connect.errors import KafkaConnectError


def settings(extra: dict[str, Any] | None = None, **fields: Any) -> ClientSettings:
    values = {"host": "connect.local", "port": None, "schema": None, "login": None, "password": None, **fields}
    return ClientSettings.from_connection("c", extra=extra or {}, **values)


def test_settings_defaults_and_fields() -> None:
    assert settings().base_url == "http://connect.local:8083"
    assert settings().verify is True and settings().timeout == 100 and settings().auth is None
    assert settings(port=9443, schema="HTTPS").base_url == "https://connect.local:9443"
    assert settings(login="u", password="p").auth == ("u", "p")
    assert settings(host="https://gw.example.com/connect/").base_url == "https://gw.example.com/connect"
    assert settings(host="https://gw.example.com", port=8443).base_url == "https://gw.example.com:8443"


def test_settings_extras(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    assert settings({"verify": False}).verify is False
    assert settings({"verify": "false"}).verify is False
    assert settings({"verify": str(ca)}).verify == str(ca)
    assert settings({"extra__kafka_connect__verify": "no"}).verify is False
    assert settings({"timeout": "2.5"}).timeout == 2.5
    assert settings({"headers": {"X-Team": "data"}}).headers == {"X-Team": "data"}
    assert settings({"headers": '{"X-Team": "data"}'}).headers == {"X-Team": "data"}


@pytest.mark.parametrize(
    ("fields", "extra", "message"),
    [
        ({"host": ""}, {}, "has no host"),
        ({"schema": "ftp"}, {}, "must be http or https"),
        ({"host": "ftp://x"}, {}, "must start with http:// or https://"),
        ({}, {"verify": "/no/such/ca.pem"}, "neither true/false nor an existing CA bundle"),
        ({}, {"timeout": "soon"}, "'timeout' must be a positive number"),
        ({}, {"headers": "[1]"}, "'headers' must be a JSON object"),
    ],
)
def test_settings_name_what_is_wrong(fields: dict[str, Any], extra: dict[str, Any], message: str) -> None:
    with pytest.raises(KafkaConnectError.__mro__[1], match=message):
        settings(extra, **fields)
