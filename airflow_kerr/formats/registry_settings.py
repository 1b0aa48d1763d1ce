"""The Schema Registry settings a job carries: the client's (confluent-kafka's names) and the serializers' options.

Client keys are confluent-kafka's ``SchemaRegistryClient`` configuration; the serializer
options are named as Confluent's serializers name them (``auto.register.schemas``,
``use.latest.version``, ``subject.name.strategy``, ``json.fail.invalid.schema``).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from airflow_kerr.errors import MASK, is_sensitive_key, mask_text

#: The converter and sink kinds that go through a registry.
FORMATS: Final = ("avro", "protobuf", "json_schema")
#: The registry's schemaType of each format.
SCHEMA_TYPES: Final = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}

CLIENT_KEYS: Final = (
    "url",
    "basic.auth.credentials.source",
    "basic.auth.user.info",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "timeout",
    "cache.capacity",
    # Accepted for the connection's sake, unused: retries are errors.retry.timeout's, record by record.
    "max.retries",
    "retries.wait.ms",
    "retries.max.wait.ms",
)
#: subject.name.strategy: Confluent's class names, short or full, and this project's short names.
STRATEGIES: Final = {
    "TopicNameStrategy": "topic",
    "io.confluent.kafka.serializers.subject.TopicNameStrategy": "topic",
    "topic_name": "topic",
    "RecordNameStrategy": "record",
    "io.confluent.kafka.serializers.subject.RecordNameStrategy": "record",
    "record_name": "record",
}
SERDE_KEYS: Final = ("auto.register.schemas", "use.latest.version", "subject.name.strategy", "json.fail.invalid.schema")
DEFAULT_TIMEOUT_S: Final = 10.0
DEFAULT_CACHE_CAPACITY: Final = 1000


def split_user_info(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@``, and those credentials as basic auth's ``user:password`` (decoded).

    ``None`` when the URL carries none. Confluent's client reads credentials from the URL the
    same way (``urlparse``, then ``unquote`` of the user name and password), so a registry URL
    copied from a Confluent client configuration works here as it did there.
    """
    parts = urllib.parse.urlsplit(url.strip())
    user_info, at, host = parts.netloc.rpartition("@")
    if not at:
        return url.strip(), None
    user, _, password = user_info.partition(":")
    clean = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return clean, f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"


def without_credentials(url: str) -> str:
    """Each of the comma-separated URLs without its credentials: what a message, a log or a page may show."""
    return ",".join(split_user_info(one)[0] for one in url.split(",") if one.strip())


def url_credentials(url: str) -> list[str]:
    """The distinct ``user:password`` the comma-separated URLs carry, in order (empty when none does)."""
    found: list[str] = []
    for one in url.split(","):
        user_info = split_user_info(one)[1] if one.strip() else None
        if user_info is not None and user_info not in found:
            found.append(user_info)
    return found


def url_credential_problems(url: str, *, also: str | None) -> list[str]:
    """Why the credentials in ``url`` cannot be used: two different ones, a user name with ``:``, or ``also``.

    ``also`` names the other source of credentials when one is set (``basic.auth.user.info``,
    or the connection's login/password). Confluent's client refuses credentials in the URL
    together with ``basic.auth.user.info`` ("Remove userinfo credentials from the url or remove
    basic.auth.user.info from the configuration"), rather than choosing one: so does this.
    """
    found = url_credentials(url)
    shown = without_credentials(url)
    problems: list[str] = []
    if found and also:
        problems.append(
            f"the registry URL {shown!r} carries credentials (user:password@) and {also} is set too: keep one "
            "(confluent-kafka's SchemaRegistryClient refuses both)"
        )
    if len(found) > 1:
        problems.append(f"the registry URLs {shown!r} carry different credentials; a client sends one set to all")
    users = (urllib.parse.urlsplit(one.strip()).username for one in url.split(",") if "@" in one)
    if any(":" in urllib.parse.unquote(user or "") for user in users):
        problems.append(f"the user name in the registry URL {shown!r} contains ':', which basic auth cannot carry")
    return problems


class InvalidRegistrySettings(ValueError):
    """Schema Registry settings outside what is accepted; the message lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid schema_registry settings:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class RegistrySettings:
    """Where the registry is and how the serializers use it; built by :meth:`from_mapping`, which checks every key."""

    url: str
    client: dict[str, Any] = field(default_factory=dict)
    auto_register_schemas: bool = True
    use_latest_version: bool = False
    subject_name_strategy: str = "topic"
    json_fail_invalid_schema: bool = False

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> RegistrySettings:
        """Check and read the settings; :class:`InvalidRegistrySettings` names each key, its value and what fits."""
        problems = cls.problems(settings)
        if problems:
            raise InvalidRegistrySettings(problems)
        return cls(
            url=str(settings["url"]),
            client={key: settings[key] for key in CLIENT_KEYS if key in settings},
            auto_register_schemas=bool(settings.get("auto.register.schemas", True)),
            use_latest_version=bool(settings.get("use.latest.version", False)),
            subject_name_strategy=STRATEGIES[settings.get("subject.name.strategy", "TopicNameStrategy")],
            json_fail_invalid_schema=bool(settings.get("json.fail.invalid.schema", False)),
        )

    @staticmethod
    def problems(settings: object) -> list[str]:  # noqa: C901 - one check per key, in one place
        """Every problem of ``settings`` (empty when they are fine); a secret's value is never echoed."""
        if not isinstance(settings, Mapping):
            return [f"schema_registry={settings!r}: expected a mapping with at least 'url'"]
        problems: list[str] = []
        for key, value in settings.items():
            shown = MASK if isinstance(key, str) and is_sensitive_key(key) else mask_text(repr(value))
            if key not in CLIENT_KEYS and key not in SERDE_KEYS:
                problems.append(
                    f"schema_registry[{key!r}]: unknown setting; accepted: {', '.join((*CLIENT_KEYS, *SERDE_KEYS))}"
                )
            elif key in ("auto.register.schemas", "use.latest.version", "json.fail.invalid.schema"):
                if not isinstance(value, bool):
                    problems.append(f"schema_registry[{key!r}]={shown}: expected true or false")
            elif key == "subject.name.strategy":
                if value not in STRATEGIES:
                    problems.append(f"schema_registry[{key!r}]={shown}: expected one of {', '.join(STRATEGIES)}")
            elif key in ("timeout", "cache.capacity"):
                if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                    problems.append(f"schema_registry[{key!r}]={shown}: expected a positive number")
            elif key in ("max.retries", "retries.wait.ms", "retries.max.wait.ms"):
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    problems.append(f"schema_registry[{key!r}]={shown}: expected a non-negative number")
            elif not isinstance(value, str) or not value:
                problems.append(f"schema_registry[{key!r}]={shown}: expected a non-empty string")
        problems.extend(_url_problems(settings))
        return problems

    @property
    def timeout_s(self) -> float:
        return float(self.client.get("timeout", DEFAULT_TIMEOUT_S))

    @property
    def cache_capacity(self) -> int:
        return int(self.client.get("cache.capacity", DEFAULT_CACHE_CAPACITY))

    def cache_key(self) -> tuple[tuple[str, str], ...]:
        """What identifies a registry and its credentials within a process (one client each)."""
        return tuple(sorted((key, str(value)) for key, value in self.client.items()))


def _url_problems(settings: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``url``: missing, not http(s), or credentials in it that cannot be used."""
    url = settings.get("url")
    if url is None:
        return ["schema_registry['url']: required, the registry's http:// or https:// URL"]
    if not isinstance(url, str):
        return []  # said by the string check
    if not all(u.strip().startswith(("http://", "https://")) for u in url.split(",")):
        return [
            f"schema_registry['url']={without_credentials(url)!r}: expected an http:// or https:// URL "
            "(several: comma-separated)"
        ]
    # Confluent's rule, unless basic.auth.credentials.source (the Java client's key) says which one to use.
    both = "basic.auth.user.info" in settings and "basic.auth.credentials.source" not in settings
    also = "schema_registry['basic.auth.user.info']" if both else None
    return [f"schema_registry['url']: {problem}" for problem in url_credential_problems(url, also=also)]
