"""``SchemaRegistryHook``: a Confluent-compatible Schema Registry over the ``schema_registry`` connection.

The connection holds the registry's URL in ``host`` (``https://registry.example.com``,
or a host name with ``schema`` and ``port``; several URLs separated by commas), an
optional basic-auth ``login``/``password`` (or ``user:password@`` in the URL, as
Confluent's client takes it), and in its extra the TLS files and client
settings that confluent-kafka's ``SchemaRegistryClient`` accepts under the same names.
:func:`registry_client_config` turns those fields into that client's settings; it is
free of Airflow so a driver can hand its result to executors as it hands the Kafka
settings. The password and ``basic.auth.user.info`` are registered with Airflow's
secrets masker and never appear in this hook's messages.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook

from airflow_kerr.formats.registry_settings import url_credential_problems, url_credentials, without_credentials
from airflow_kerr.get_provider_info import SCHEMA_REGISTRY_CONN_FIELDS, SCHEMA_REGISTRY_UI_FIELD_BEHAVIOUR
from airflow_kerr.hooks.connection_form import form_widgets, ui_field_behaviour

#: Extra keys passed to ``SchemaRegistryClient`` as they are: TLS files (paths on the workers) and the key's password.
TLS_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password")
#: Numeric client settings accepted in the extra (confluent-kafka's names).
NUMERIC_KEYS = ("timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms", "cache.capacity")
ACCEPTED_EXTRA_KEYS = (*TLS_KEYS, *NUMERIC_KEYS)
SCHEMES = ("http", "https")


class SchemaRegistryConnectionError(ValueError):
    """A ``schema_registry`` connection field or extra key that cannot be used; the message names it."""


def registry_url(host: str | None, port: int | None, scheme: str | None) -> str:
    """The registry URL(s) from the connection's host (a URL, or a host with ``schema`` and ``port``)."""
    host = (host or "").strip()
    if not host:
        raise SchemaRegistryConnectionError(
            "the schema_registry connection has no host: set it to the registry's URL, e.g. http://127.0.0.1:8081"
        )
    if "://" in host:
        urls = [url.strip().rstrip("/") for url in host.split(",") if url.strip()]
        for url in urls:
            if url.split("://", 1)[0].lower() not in SCHEMES:
                raise SchemaRegistryConnectionError(
                    f"host {without_credentials(url)!r} is not an http or https URL; accepted: {SCHEMES}"
                )
        return ",".join(urls)
    protocol = (scheme or "http").strip().lower()
    if protocol not in SCHEMES:
        raise SchemaRegistryConnectionError(f"schema (protocol) {scheme!r} is not accepted; accepted: {SCHEMES}")
    return f"{protocol}://{host.rstrip('/')}" + (f":{port}" if port else "")


def registry_client_config(
    host: str | None,
    port: int | None,
    scheme: str | None,
    login: str | None,
    password: str | None,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """``SchemaRegistryClient``'s settings for these connection fields; a bad field raises naming it.

    ``login``/``password`` become ``basic.auth.user.info`` (``login:password``); a password
    without a login is refused, since the client would send no credentials at all. So do
    credentials in the URL (``http://user:pw@host:8081``), as in Confluent's client, and the
    URL loses them: every client, message and page gets the bare URL. Credentials in the URL
    and a login or password together are refused, as Confluent's client refuses them.
    """
    url = registry_url(host, port, scheme)
    also = "the connection's login/password" if login or password else None
    problems = url_credential_problems(url, also=also)
    if problems:
        raise SchemaRegistryConnectionError("; ".join(problems))
    from_url = url_credentials(url)
    config: dict[str, Any] = {"url": without_credentials(url)}
    if from_url:
        config["basic.auth.user.info"] = from_url[0]
    if password and not login:
        raise SchemaRegistryConnectionError(
            "the schema_registry connection has a password but no login: basic auth needs both"
        )
    if login:
        if ":" in login:
            raise SchemaRegistryConnectionError(f"login {login!r} contains ':', which basic auth cannot carry")
        config["basic.auth.user.info"] = f"{login}:{password or ''}"
    for key, value in extra.items():
        if key in TLS_KEYS:
            if not isinstance(value, str) or not value.strip():
                shown = "***" if key == "ssl.key.password" else repr(value)
                raise SchemaRegistryConnectionError(f"extra {key!r} = {shown} must be a non-empty string (a path)")
            config[key] = value
        elif key in NUMERIC_KEYS:
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise SchemaRegistryConnectionError(f"extra {key!r} = {value!r} must be a non-negative number")
            config[key] = value
        else:
            raise SchemaRegistryConnectionError(
                f"extra key {key!r} (value {value!r}) is not a Schema Registry setting; "
                f"accepted: {', '.join(ACCEPTED_EXTRA_KEYS)}"
            )
    return config


class SchemaRegistryHook(BaseHook):
    """Read a ``schema_registry`` connection into ``SchemaRegistryClient`` settings, or a client.

    :param schema_registry_conn_id: the ``schema_registry`` connection to use.
    """

    conn_name_attr = "schema_registry_conn_id"
    default_conn_name = "schema_registry_default"
    conn_type = "schema_registry"
    hook_name = "Schema Registry"

    def __init__(self, schema_registry_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.schema_registry_conn_id = schema_registry_conn_id

    def __repr__(self) -> str:
        return f"SchemaRegistryHook(schema_registry_conn_id={self.schema_registry_conn_id!r})"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hidden and relabelled fields and placeholders of the connection form (same as the provider info)."""
        return ui_field_behaviour(SCHEMA_REGISTRY_UI_FIELD_BEHAVIOUR)

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Form fields for Airflow UIs that predate the declarative ``conn-fields`` of the provider info."""
        return form_widgets(SCHEMA_REGISTRY_CONN_FIELDS)

    def client_config(self) -> dict[str, Any]:
        """The connection as ``SchemaRegistryClient`` settings, its secrets registered with the masker."""
        from airflow.sdk.log import mask_secret

        conn = self.get_connection(self.schema_registry_conn_id)
        if conn.password:
            mask_secret(conn.password)
        try:
            config = registry_client_config(
                conn.host, conn.port, conn.schema, conn.login, conn.password, conn.extra_dejson
            )
        except SchemaRegistryConnectionError as exc:
            raise SchemaRegistryConnectionError(f"connection {self.schema_registry_conn_id!r}: {exc}") from None
        for key in ("basic.auth.user.info", "ssl.key.password"):
            if key in config:
                mask_secret(config[key])
        url_password = config.get("basic.auth.user.info", ":").split(":", 1)[1] if not conn.login else ""
        if url_password:  # from the URL: the password alone may appear in a log line
            mask_secret(url_password)
        return config

    def get_conn(self) -> Any:
        """A confluent-kafka ``SchemaRegistryClient`` for the connection."""
        from confluent_kafka.schema_registry import SchemaRegistryClient

        return SchemaRegistryClient(self.client_config())

    def test_connection(self) -> tuple[bool, str]:
        """Ask the registry for its subjects (``GET /subjects``), as the connection form's Test button does."""
        import httpx

        try:
            config = self.client_config()
        except SchemaRegistryConnectionError as exc:
            return False, str(exc)
        url = config["url"].split(",")[0]
        auth = tuple(config["basic.auth.user.info"].split(":", 1)) if "basic.auth.user.info" in config else None
        try:
            answer = httpx.get(f"{url}/subjects", auth=auth, verify=_tls_context(config), timeout=30)
        except (httpx.HTTPError, OSError) as exc:
            return False, f"GET {url}/subjects failed: {type(exc).__name__}: {exc}"
        if answer.status_code != 200:
            return False, f"GET {url}/subjects answered {answer.status_code}: {answer.text[:300]}"
        return True, f"Connected to the Schema Registry at {url} ({len(answer.json())} subjects)"


def _tls_context(config: Mapping[str, Any]) -> ssl.SSLContext | bool:
    """The TLS settings of ``config`` as httpx takes them: the default checks, or a context with the given files."""
    if not any(key in config for key in TLS_KEYS):
        return True
    context = ssl.create_default_context(cafile=config.get("ssl.ca.location"))
    if "ssl.certificate.location" in config:
        context.load_cert_chain(
            config["ssl.certificate.location"], config.get("ssl.key.location"), config.get("ssl.key.password")
        )
    return context
