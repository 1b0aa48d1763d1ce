"""A registry URL with credentials in it (``http://user:pw@host:8081``) works as in Confluent's client.

confluent-kafka's ``SchemaRegistryClient`` reads ``user:password@`` of the URL as basic auth
(``urlparse``, then ``unquote``) and refuses it together with ``basic.auth.user.info``
(``_BaseRestClient.__init__`` in ``src/confluent_kafka/schema_registry/_sync/schema_registry_client.py``).
Here the connection's fields map to settings without credentials in the URL, so both that
client and ours get the bare URL and the Authorization header, and no message shows them.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kerr.formats import RegistrySettings
from airflow_kerr.formats.registry_client import RegistryClient
from airflow_kerr.formats.registry_settings import InvalidRegistrySettings, split_user_info, without_credentials
from airflow_kerr.hooks.schema_registry import SchemaRegistryConnectionError, registry_client_config

PASSWORD = "Zq-url-pw-77"


def mapped(host: str, **fields: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"port": None, "scheme": None, "login": None, "password": None, "extra": {}}
    return registry_client_config(host, **{**arguments, **fields})


@pytest.mark.parametrize(
    ("host", "fields", "url", "user_info"),
    [
        (f"http://svc:{PASSWORD}@sr.example.com:8081", {}, "http://sr.example.com:8081", f"svc:{PASSWORD}"),
        ("https://svc:p%40ss%3Aw@sr:8081/", {}, "https://sr:8081", "svc:p@ss:w"),  # percent-decoded, as Confluent's
        ("svc:pw@sr.example.com", {"port": 8081, "scheme": "https"}, "https://sr.example.com:8081", "svc:pw"),
        ("http://svc:pw@a:1, http://b:2", {}, "http://a:1,http://b:2", "svc:pw"),  # one set, sent to every URL
        ("http://svc:pw@a:1,http://svc:pw@b:2", {}, "http://a:1,http://b:2", "svc:pw"),
        ("http://sr:8081", {"login": "svc", "password": "pw"}, "http://sr:8081", "svc:pw"),  # as before
    ],
)
def test_credentials_in_the_url_become_basic_auth_and_leave_the_url(
    host: str, fields: dict[str, Any], url: str, user_info: str
) -> None:
    config = mapped(host, **fields)
    assert config == {"url": url, "basic.auth.user.info": user_info}
    RegistrySettings.from_mapping(config)  # what the job, the replay and the view then check: accepted


@pytest.mark.parametrize(
    ("host", "fields", "says"),
    [
        (
            f"http://svc:{PASSWORD}@sr:8081",
            {"login": "other", "password": "pw2"},
            "the registry URL 'http://sr:8081' carries credentials (user:password@) and the connection's "
            "login/password is set too: keep one (confluent-kafka's SchemaRegistryClient refuses both)",
        ),
        (f"http://svc:{PASSWORD}@sr:8081", {"login": "svc"}, "and the connection's login/password is set too"),
        (
            f"http://a:{PASSWORD}@sr:1,http://b:x@sr2:2",
            {},
            "the registry URLs 'http://sr:1,http://sr2:2' carry different credentials; a client sends one set to all",
        ),
        (f"ftp://svc:{PASSWORD}@sr", {}, "host 'ftp://sr' is not an http or https URL"),
        (f"http://a%3Ab:{PASSWORD}@sr:1", {}, "the user name in the registry URL 'http://sr:1' contains ':'"),
    ],
)
def test_credentials_that_cannot_be_used_are_refused_without_showing_them(
    host: str, fields: dict[str, Any], says: str
) -> None:
    with pytest.raises(SchemaRegistryConnectionError) as raised:
        mapped(host, **fields)
    assert says in str(raised.value)
    assert PASSWORD not in str(raised.value)


def test_settings_with_both_are_refused_as_confluent_refuses_them_unless_the_source_is_named() -> None:
    both = {"url": f"http://svc:{PASSWORD}@sr:8081", "basic.auth.user.info": "other:pw2"}
    with pytest.raises(InvalidRegistrySettings) as raised:
        RegistrySettings.from_mapping(both)
    assert "schema_registry['url']: the registry URL 'http://sr:8081' carries credentials" in str(raised.value)
    assert "schema_registry['basic.auth.user.info'] is set too" in str(raised.value)
    assert PASSWORD not in str(raised.value)
    # The Java client's basic.auth.credentials.source picks one: USER_INFO the setting's, URL the URL's.
    for source, sent in (("USER_INFO", "other:pw2"), ("URL", f"svc:{PASSWORD}")):
        client = RegistryClient(RegistrySettings.from_mapping({**both, "basic.auth.credentials.source": source}))
        assert client.base_urls == ["http://sr:8081"]
        assert _basic(client) == sent, source


def test_our_client_sends_url_credentials_as_basic_auth_to_the_bare_host() -> None:
    client = RegistryClient(RegistrySettings.from_mapping({"url": f"http://svc:{PASSWORD}@sr:8081,http://sr2:8082"}))
    assert client.base_urls == ["http://sr:8081", "http://sr2:8082"]
    assert _basic(client) == f"svc:{PASSWORD}"


def test_the_url_a_message_shows_has_no_credentials() -> None:
    assert split_user_info("http://svc:pw@sr:8081/prefix") == ("http://sr:8081/prefix", "svc:pw")
    assert split_user_info("http://sr:8081") == ("http://sr:8081", None)
    assert split_user_info("http://svc@sr:8081") == ("http://sr:8081", "svc:")
    assert without_credentials("http://a:b@x:1, https://c:d@[::1]:2") == "http://x:1,https://[::1]:2"


def _basic(client: RegistryClient) -> str:
    import base64

    header = client._headers["Authorization"]
    assert header.startswith("Basic ")
    return base64.b64decode(header.removeprefix("Basic ")).decode()
