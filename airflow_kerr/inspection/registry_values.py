"""Schema Registry values in the DLQ view: a framed key or value decoded through the registry, shown as JSON.

A dead letter keeps the failed record's bytes, and a record in Avro, Protobuf or JSON Schema
is in Confluent's wire format (magic byte 0, the schema id, the body), which reads as base64
to a person. :class:`RegistryValues` decodes such a key or value with the registry the page
names, through the formats' own deserializer (:class:`~airflow_kerr.formats.RegistryDeserializer`,
the one the job's converters use), and says which schema it used: its id, format, and a
subject and version holding it. The decoded value is masked by field name as a JSON value is.

A record whose schema cannot be fetched keeps its base64 and says why on that record
("schema 42 not found in the registry at http://registry:8081"); the other records still
decode. Only the records a sample shows are decoded, each schema is fetched once per process
(the client's cache), and an outage is met once per request: the records after it say so
without asking again, so a registry that times out costs one timeout, not one per record.
The counts never come here: they read headers only, so a registry outage never blanks them.
The URL a message names never carries credentials.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from airflow_kerr.errors.masking import mask_secrets, mask_text
from airflow_kerr.formats import (
    ConverterDataError,
    ConverterRetriableError,
    RegistryClient,
    RegistryDeserializer,
    RegistryRequestError,
    RegistrySettings,
    RegistryUnavailable,
    WireFormat,
    registry_client_for,
)
from airflow_kerr.inspection.payloads import MAX_SHOWN_CHARS, Payload, SchemaRef, describe_payload

#: The registry's ``schemaType`` (absent for Avro) to the deserializer's format.
FORMAT_OF_TYPE: Final = {"AVRO": "avro", "PROTOBUF": "protobuf", "JSON": "json_schema"}
#: How many causes of a converter error a record's message names (the serde's text, the decoder's, ...).
MAX_CAUSES: Final = 4
#: Confluent's header: magic byte 0 and a 4-byte schema id.
FRAME_SIZE: Final = 5


def is_framed(raw: bytes | None) -> bool:
    """Whether ``raw`` starts as Confluent's wire format does: magic byte 0, then at least a schema id.

    No text or JSON value starts with a NUL byte, so a value that does is tried through the
    registry; the registry, not a guess, then says whether its schema exists.
    """
    return raw is not None and len(raw) >= FRAME_SIZE and raw[0] == 0


def shown_url(url: str) -> str:
    """A registry URL as a message may name it: scheme, host, port and path; never ``user:password@``."""
    parts = urllib.parse.urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def json_ready(value: Any, fmt: str) -> Any:
    """A decoded value as JSON can hold it: bytes as the format's JSON mapping writes them, map keys as text.

    Avro's JSON encoding writes ``bytes`` and ``fixed`` as a string of code points 0-255
    (what ``kafka-avro-console-consumer`` prints); Protobuf's JSON mapping writes ``bytes``
    as base64. A Protobuf map's integer or boolean keys become text, as in its JSON mapping.
    """
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii") if fmt == "protobuf" else bytes(value).decode("latin-1")
    if isinstance(value, Mapping):
        return {_json_key(key): json_ready(item, fmt) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(item, fmt) for item in value]
    return value


def _json_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return key if isinstance(key, str) else str(key)


@dataclass(frozen=True)
class _Schema:
    """What the registry said about one schema id: its format, or why it cannot be used."""

    format: str | None
    problem: str | None = None


class RegistryValues:
    """Decodes the framed keys and values of one request through one registry (a new one per request).

    ``where`` is the registry's URL(s) without credentials, as messages name it. Without a
    client (``absent`` says why: no connection named, or none of that name), a framed
    value keeps its base64 and says why it was not decoded.
    """

    def __init__(self, client: RegistryClient | None, *, absent: str | None = None) -> None:
        if client is None and not absent:
            raise ValueError("RegistryValues needs a client, or the reason there is none (absent=...)")
        self.client = client
        self.absent = absent
        self.where = ", ".join(shown_url(url) for url in client.base_urls) if client is not None else ""
        self._schemas: dict[int, _Schema] = {}
        self._subjects: dict[int, list[tuple[str, int]]] = {}
        self._deserializers: dict[tuple[str, bool, str], RegistryDeserializer] = {}
        #: What the first outage met in this request said: later records say it without asking again.
        self._outage: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> RegistryValues:
        """A decoder for a registry's client settings (a ``schema_registry`` connection's, confluent-kafka's names).

        The process's client for those settings is reused, so each schema is fetched once per
        api-server process, whatever request needs it.
        """
        return cls(registry_client_for(RegistrySettings.from_mapping(config)))

    def describe(self, raw: bytes | None, *, is_key: bool, source_topic: str | None) -> Payload:
        """A key (``is_key``) or value as the view shows it: decoded when framed, else as :func:`describe_payload`.

        ``source_topic`` is the failed record's topic: the subject it names by TopicNameStrategy
        (``<topic>-value``) is the one shown when the schema is registered under several.
        """
        if raw is None or not is_framed(raw):
            return describe_payload(raw)
        schema_id = WireFormat.schema_id(raw)
        if self.client is None:
            return replace(describe_payload(raw), error=f"schema {schema_id} not decoded: {self.absent}")
        schema = self._schema(schema_id)
        if schema.format is None:
            return replace(describe_payload(raw), error=schema.problem)
        ref = self._ref(schema_id, schema.format, is_key, source_topic)
        try:
            value = self._deserializer(schema.format, is_key, source_topic or "")(raw)
        except ConverterRetriableError as error:
            self._outage = self._outage or self._scrub(_causes(error))
            return replace(describe_payload(raw), schema=ref, error=self._unreachable(schema_id))
        except ConverterDataError as error:
            cause = self._scrub(_causes(error))
            problem = f"schema {schema_id} ({_named(ref)}) does not decode this {_part(is_key)}: {cause}"
            return replace(describe_payload(raw), schema=ref, error=problem)
        return _decoded(value, ref, len(raw))

    def _schema(self, schema_id: int) -> _Schema:
        """The schema's format from ``GET /schemas/ids/{id}``, or why it cannot be had; remembered for the request."""
        known = self._schemas.get(schema_id)
        if known is not None:
            return known
        if self._outage is not None:
            return _Schema(None, self._unreachable(schema_id))
        assert self.client is not None
        try:
            answer = self.client.schema_by_id(schema_id)
        except RegistryRequestError as error:
            if error.status == 404:
                schema = _Schema(None, f"schema {schema_id} not found in the registry at {self.where}")
            else:
                schema = _Schema(
                    None,
                    f"schema {schema_id} could not be fetched from the registry at {self.where}: "
                    f"HTTP {error.status}: {self._scrub(str(error))}",
                )
        except RegistryUnavailable as error:
            self._outage = self._scrub(str(error))
            return _Schema(None, self._unreachable(schema_id))
        else:
            schema_type = str(answer.get("schemaType") or "AVRO")
            fmt = FORMAT_OF_TYPE.get(schema_type)
            schema = _Schema(fmt)
            if fmt is None:
                schema = _Schema(
                    None,
                    f"schema {schema_id} in the registry at {self.where} is of type {schema_type!r}, which the view "
                    f"does not decode (it decodes {', '.join(FORMAT_OF_TYPE)})",
                )
        self._schemas[schema_id] = schema
        return schema

    def _ref(self, schema_id: int, fmt: str, is_key: bool, source_topic: str | None) -> SchemaRef:
        """The schema's id and format, and the subject and version it is best known by.

        The source topic's own subject (``<topic>-key``/``-value``) first, then any subject
        of that part, then the first listed; none when the registry does not list them.
        """
        listed = self._subjects.get(schema_id)
        if listed is None:
            listed = self._subjects[schema_id] = self._versions(schema_id)
        suffix = "-key" if is_key else "-value"
        preferred = f"{source_topic}{suffix}" if source_topic else None
        chosen = next(
            (entry for entry in listed if entry[0] == preferred),
            next((entry for entry in listed if entry[0].endswith(suffix)), listed[0] if listed else None),
        )
        if chosen is None:
            return SchemaRef(id=schema_id, format=fmt, subject=None, version=None)
        return SchemaRef(id=schema_id, format=fmt, subject=chosen[0], version=chosen[1])

    def _versions(self, schema_id: int) -> list[tuple[str, int]]:
        """``GET /schemas/ids/{id}/versions``: the subjects and versions holding the schema (none if not answered)."""
        assert self.client is not None
        if self._outage is not None:
            return []
        try:
            answer = self.client.request("GET", f"/schemas/ids/{schema_id}/versions")
        except RegistryUnavailable as error:
            self._outage = self._scrub(str(error))
            return []
        except RegistryRequestError:  # a registry without the endpoint: the value still decodes, unnamed
            return []
        if not isinstance(answer, list):
            return []
        return [
            (str(entry["subject"]), int(entry["version"]))
            for entry in answer
            if isinstance(entry, Mapping) and "subject" in entry and "version" in entry
        ]

    def _deserializer(self, fmt: str, is_key: bool, topic: str) -> RegistryDeserializer:
        key = (fmt, is_key, topic)
        found = self._deserializers.get(key)
        if found is None:
            assert self.client is not None
            found = self._deserializers[key] = RegistryDeserializer(fmt, self.client, is_key=is_key)
            found.topic = topic
        return found

    def _unreachable(self, schema_id: int) -> str:
        return f"schema {schema_id} could not be fetched: the registry at {self.where} did not answer ({self._outage})"

    def _scrub(self, text: str) -> str:
        """A registry error's text with each URL as :func:`shown_url` shows it, then masked."""
        if self.client is not None:
            for url in self.client.base_urls:
                text = text.replace(mask_text(url), shown_url(url)).replace(url, shown_url(url))
        return mask_text(text)


def _causes(error: BaseException) -> str:
    """What a converter error was caused by, outermost first: the serde's own text, then what the decoder found.

    The converter's message is the Connect-style outer line the page already says in its own
    words; its causes (``Error deserializing Avro message for id 1``, then ``EOFException: ...``)
    are the reason, joined as a Java stack trace's "Caused by" lines would read.
    """
    texts: list[str] = []
    cause = error.__cause__
    while cause is not None and len(texts) < MAX_CAUSES:
        texts.append(str(cause))
        cause = cause.__cause__
    return ": ".join(texts) if texts else str(error)


def _part(is_key: bool) -> str:
    return "key" if is_key else "value"


def _named(ref: SchemaRef) -> str:
    if ref.subject is None:
        return ref.format
    return f"{ref.format}, subject {ref.subject} version {ref.version}"


def _decoded(value: Any, ref: SchemaRef, size: int) -> Payload:
    """A decoded value as shown: JSON, masked by field name, indented, cut at :data:`MAX_SHOWN_CHARS`."""
    masked = mask_secrets(json_ready(value, ref.format))
    text = json.dumps(masked, indent=2, ensure_ascii=False)
    cut = len(text) > MAX_SHOWN_CHARS
    if cut:
        text = f"{text[:MAX_SHOWN_CHARS]}\u2026 [cut: {len(text):,} characters in all]"
    return Payload(text=text, base64=None, json=True, bytes=size, truncated=cut, schema=ref)
