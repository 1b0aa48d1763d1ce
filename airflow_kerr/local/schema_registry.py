"""A development Schema Registry for the embedded stack: Confluent's REST API, the part clients use.

No Schema Registry server ships in a package registry this project can use, so, as with
the embedded broker, the local stack brings a stand-in. It serves what Confluent's
serializers and converters call (confluent-kafka-python's ``SchemaRegistryClient`` in
``confluent_kafka/schema_registry/_sync/schema_registry_client.py``, and the Java client of
Confluent's ``AvroConverter``/``ProtobufConverter``), with Confluent's answers and error
codes (``core/src/main/java/io/confluent/kafka/schemaregistry/rest/exceptions/Errors.java``
and ``RestInvalidVersionException``/``RestInvalidCompatibilityException`` beside it, in
``confluentinc/schema-registry``):

=========================================================  ======================================
``GET /subjects`` (``?deleted=true``)                       subject names
``GET|POST /subjects/{s}/versions``                         versions; register (``{"id": n}``)
``GET /subjects/{s}/versions/{v|latest}`` (+ ``/schema``)   one version; its bare schema
``POST /subjects/{s}``                                      lookup of a schema under a subject
``DELETE /subjects/{s}`` (+ ``/versions/{v}``)              soft delete; ``?permanent=true`` after it
``GET /schemas/ids/{id}`` (+ ``/schema|/versions|/subjects``)  a schema by its global id
``GET /schemas/types``                                      ``AVRO``, ``PROTOBUF``, ``JSON``
``GET|PUT|DELETE /config`` and ``/config/{s}``              compatibility levels
``POST /compatibility/subjects/{s}/versions/{v|latest}``    ``{"is_compatible": bool}``
=========================================================  ======================================

Ids are global: one schema (same type, text and references) has one id under every
subject, as in Confluent's registry. Schemas are checked on register: Avro by this module's
parser (names, types, fields, defaults' presence, enum symbols, fixed sizes, references),
JSON Schema by ``jsonschema``'s meta-schema check, Protobuf by a syntax check (balanced
braces, declarations, every import named by a reference), not a full compile. A Protobuf
schema sent as a base64 ``FileDescriptorProto`` (confluent-kafka's serializer does) is
decoded and kept as sent; every schema is served as it was registered, so
``format=serialized`` returns base64 only for a schema registered that way. A ``.proto`` text and
the base64 descriptor of the same declarations are one schema (one id; a lookup finds either).
Compatibility levels are stored and reported; BACKWARD, FORWARD, FULL and their
``_TRANSITIVE`` forms are enforced for Avro (Avro's schema-resolution rules); for JSON
Schema and Protobuf they are stored only, as with NONE.

Everything is stored in a compacted ``_schemas`` topic on the broker, keyed and valued
as Confluent's ``SchemaKey``/``SchemaValue`` and ``ConfigKey``/``ConfigValue`` (in
``core/src/main/java/io/confluent/kafka/schemaregistry/storage/``), and read back on
start, so the registry survives its own restart. One instance writes at a time: there
is no leader election. It is for development and tests; production points at the
user's registry.

Run as ``python -m airflow_kerr.local.schema_registry --bootstrap-servers ... --port ...``;
:class:`LocalSchemaRegistry` starts it as the other local servers are started.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from airflow_kerr.local.broker import free_port
from airflow_kerr.local.process import Launcher, tail

#: Confluent's default name for the registry's store topic (``kafkastore.topic``).
DEFAULT_TOPIC = "_schemas"
#: The store topic on a cluster named by ``KAFKA_BOOTSTRAP_SERVERS``: never a real registry's ``_schemas``.
EXTERNAL_CLUSTER_TOPIC = "_kerr_dev_schemas"
#: An existing registry to use instead of starting this one (``http://host:8081``).
REGISTRY_URL_ENV = "SCHEMA_REGISTRY_URL"
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
#: Confluent's default ``schema.compatibility.level``.
DEFAULT_COMPATIBILITY = "BACKWARD"
#: What the store's readers wait for the topic's end, and its writers for an acknowledgement.
_STORE_TIMEOUT_S = 30.0
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(Exception):
    """An error answer: HTTP ``status`` with Confluent's ``{"error_code": code, "message": message}`` body."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


# The answers of Errors.java (and the exceptions beside it), by the same names.
def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryError:
    return RegistryError(404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found")


def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently")


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted")


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404, 40406, f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete permanently"
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404, 40407, f"Subject '{subject}' Version {version} was not deleted first before being permanently deleted"
    )


def subject_compatibility_not_configured(subject: str) -> RegistryError:
    return RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")


def invalid_schema(reason: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {reason}")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(
        422,
        42202,
        f"The specified version '{version}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility() -> RegistryError:
    return RegistryError(
        422,
        42203,
        "Invalid compatibility level. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive",
    )


def incompatible_schema(subject: str, details: list[str]) -> RegistryError:
    return RegistryError(
        409,
        40901,
        f'Schema being registered is incompatible with an earlier schema for subject "{subject}", details: {details}',
    )


# --- Schemas: parsing, canonical text, compatibility ------------------------------------------------

_AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Writer type to the reader types it is promoted to (Avro specification, "Schema Resolution").
_AVRO_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class AvroSchemaError(ValueError):
    """An Avro schema the specification does not allow; the message says where."""


def parse_avro(schema: Any, named: dict[str, Any], namespace: str | None = None) -> Any:
    """Check one Avro schema (decoded JSON) and return it with named types replaced by their full names.

    ``named`` maps full names of types already defined (by references or earlier in
    this schema) to their definitions, and receives the ones defined here.
    """
    if isinstance(schema, str):
        return _parse_avro_name(schema, named, namespace)
    if isinstance(schema, list):
        branches = [parse_avro(branch, named, namespace) for branch in schema]
        kinds = [_avro_kind(branch) for branch in branches]
        for kind in set(kinds):
            if kind in ("array", "map", "union", *_AVRO_PRIMITIVES) and kinds.count(kind) > 1:
                raise AvroSchemaError(f"a union has two branches of type {kind!r}")
        return branches
    if not isinstance(schema, dict) or "type" not in schema:
        raise AvroSchemaError(f"a schema is a type name, a union (list) or an object with 'type'; got {schema!r}")
    kind = schema["type"]
    if kind in ("record", "error", "enum", "fixed"):
        return _parse_avro_named(schema, named, namespace)
    if kind == "array":
        return {**schema, "items": parse_avro(_required(schema, "items"), named, namespace)}
    if kind == "map":
        return {**schema, "values": parse_avro(_required(schema, "values"), named, namespace)}
    if isinstance(kind, str | list | dict):
        return parse_avro(kind, named, namespace)
    raise AvroSchemaError(f"unknown type {kind!r}")


def _parse_avro_name(name: str, named: dict[str, Any], namespace: str | None) -> str:
    if name in _AVRO_PRIMITIVES:
        return name
    for candidate in (_full_name(name, namespace), name):
        if candidate in named:
            return candidate
    raise AvroSchemaError(f"unknown type {name!r} (not a primitive, not a named type defined before it)")


def _parse_avro_named(schema: dict[str, Any], named: dict[str, Any], namespace: str | None) -> str:
    """A record, enum or fixed: checked, added to ``named`` under its full name, which is returned."""
    kind, name = schema["type"], schema.get("name")
    if not isinstance(name, str) or not all(_AVRO_NAME.fullmatch(part) for part in name.split(".")):
        raise AvroSchemaError(f"a {kind} needs a valid 'name'; got {name!r}")
    full = _full_name(name, schema.get("namespace", namespace))
    if full in named:
        raise AvroSchemaError(f"the name {full!r} is defined twice")
    named[full] = {**schema, "name": full}
    if kind == "enum":
        symbols = schema.get("symbols")
        if not isinstance(symbols, list) or len(set(symbols)) != len(symbols):
            raise AvroSchemaError(f"enum {full!r} needs a list of distinct 'symbols'")
        bad = [symbol for symbol in symbols if not isinstance(symbol, str) or not _AVRO_NAME.fullmatch(symbol)]
        if bad:
            raise AvroSchemaError(f"enum {full!r} has invalid symbols {bad!r}")
    elif kind == "fixed":
        if not isinstance(schema.get("size"), int) or schema["size"] < 0:
            raise AvroSchemaError(f"fixed {full!r} needs a non-negative integer 'size'")
    else:
        named[full]["fields"] = _parse_avro_fields(full, schema.get("fields"), named)
    return full


def _parse_avro_fields(record: str, fields: Any, named: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(fields, list):
        raise AvroSchemaError(f"record {record!r} needs a list of 'fields'")
    seen: set[str] = set()
    resolved = []
    space = record.rpartition(".")[0] or None
    for item in fields:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or "type" not in item:
            raise AvroSchemaError(f"record {record!r}: each field needs a 'name' and a 'type'; got {item!r}")
        if item["name"] in seen:
            raise AvroSchemaError(f"record {record!r} has two fields named {item['name']!r}")
        seen.add(item["name"])
        resolved.append({**item, "type": parse_avro(item["type"], named, space)})
    return resolved


def _required(schema: dict[str, Any], key: str) -> Any:
    if key not in schema:
        raise AvroSchemaError(f"a {schema['type']} needs {key!r}")
    return schema[key]


def _is_primitive(schema: Any) -> bool:
    return isinstance(schema, str) and schema in _AVRO_PRIMITIVES


def _avro_kind(schema: Any) -> str:
    """The type of a resolved schema: a primitive, ``array``/``map``/``union``, or a named type's full name."""
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema["type"])
    return str(schema)


def _avro_compatible(
    reader: Any, writer: Any, named_r: dict[str, Any], named_w: dict[str, Any], path: str
) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty when it can): Avro schema resolution."""
    if isinstance(writer, list):
        return [p for branch in writer for p in _avro_compatible(reader, branch, named_r, named_w, path)]
    if isinstance(reader, list):
        if any(not _avro_compatible(branch, writer, named_r, named_w, path) for branch in reader):
            return []
        return [f"{path}: reader union has no branch for writer type {_avro_kind(writer)!r}"]
    if _is_primitive(reader) or _is_primitive(writer):
        if reader == writer or reader in _AVRO_PROMOTIONS.get(str(writer), set()):
            return []
        return [f"{path}: writer type {_avro_kind(writer)!r} cannot be read as {_avro_kind(reader)!r}"]
    reader_def = named_r[reader] if isinstance(reader, str) else reader
    writer_def = named_w[writer] if isinstance(writer, str) else writer
    kind = reader_def["type"]
    if kind != writer_def["type"] and not {kind, writer_def["type"]} <= {"record", "error"}:
        return [f"{path}: writer type {writer_def['type']!r} cannot be read as {kind!r}"]
    if kind in ("array", "map"):
        part = "items" if kind == "array" else "values"
        return _avro_compatible(reader_def[part], writer_def[part], named_r, named_w, f"{path}/{part}")
    if reader_def["name"].rpartition(".")[2] != writer_def["name"].rpartition(".")[2]:
        return [f"{path}: writer's {writer_def['name']!r} does not match reader's {reader_def['name']!r}"]
    if kind == "fixed":
        return [] if reader_def["size"] == writer_def["size"] else [f"{path}: fixed size changed"]
    if kind == "enum":
        missing = set(writer_def["symbols"]) - set(reader_def["symbols"])
        if missing and "default" not in reader_def:
            return [f"{path}: reader enum lacks writer symbols {sorted(missing)}"]
        return []
    return _avro_fields_compatible(reader_def, writer_def, named_r, named_w, path)


def _avro_fields_compatible(
    reader: dict[str, Any], writer: dict[str, Any], named_r: dict[str, Any], named_w: dict[str, Any], path: str
) -> list[str]:
    """A record's fields: each reader field comes from the writer's (by name or alias) or has a default."""
    problems: list[str] = []
    written = {item["name"]: item for item in writer["fields"]}
    for item in reader["fields"]:
        names = [item["name"], *item.get("aliases", [])]
        source = next((written[name] for name in names if name in written), None)
        if source is None:
            if "default" not in item:
                problems.append(f"{path}/{item['name']}: reader field has no default and the writer lacks it")
            continue
        problems += _avro_compatible(item["type"], source["type"], named_r, named_w, f"{path}/{item['name']}")
    return problems


_PROTO_DECLARATION = re.compile(r"^\s*(syntax|edition|package|import|option|message|enum|service|extend)\b", re.M)
_PROTO_IMPORT = re.compile(r'^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;', re.M)
_PROTO_WELL_KNOWN = ("google/protobuf/", "confluent/")


def serialized_descriptor(text: str) -> Any | None:
    """The ``FileDescriptorProto`` that ``text`` holds base64-encoded, or None when it is not one.

    confluent-kafka's ``ProtobufSerializer`` registers its schema that way
    (``confluent_kafka/schema_registry/common/protobuf.py``, ``_schema_to_str``).
    """
    import base64
    import binascii

    if not text or any(char.isspace() or char in "{};" for char in text.strip()):
        return None
    try:
        from google.protobuf import descriptor_pb2  # type: ignore[import-untyped]
        from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        descriptor = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text.strip(), validate=True))
    except (binascii.Error, DecodeError, ValueError):
        return None
    if not descriptor.name or not (descriptor.message_type or descriptor.enum_type or descriptor.service):
        return None
    return descriptor


def check_protobuf(text: str, reference_names: set[str]) -> None:
    """Reject text that is no ``.proto`` file: a syntax check, not a compile (see the module docstring).

    A base64 ``FileDescriptorProto`` (what confluent-kafka's serializer sends) is accepted when
    it decodes to a file with declarations whose imports are among the references.
    """
    descriptor = serialized_descriptor(text)
    if descriptor is not None:
        _check_imports(list(descriptor.dependency), reference_names)
        return
    stripped = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    stripped = re.sub(r'"(?:\\.|[^"\\])*"', '""', stripped)
    if not re.search(r"^\s*(message|enum|service)\s+[A-Za-z_]\w*\s*\{", stripped, re.M):
        raise ValueError("a Protobuf schema needs at least one message, enum or service declaration")
    depth = 0
    for char in stripped:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            raise ValueError("a Protobuf schema has a '}' with no '{' before it")
    if depth:
        raise ValueError("a Protobuf schema has an unclosed '{'")
    top_level = re.sub(r"\{[^{}]*\}", "", stripped)
    while "{" in top_level:
        top_level = re.sub(r"\{[^{}]*\}", "", top_level)
    for statement in filter(str.strip, top_level.split(";")):
        if not _PROTO_DECLARATION.match(statement) and not re.match(r"^\s*(message|enum|service)\b", statement):
            raise ValueError(f"a Protobuf schema has an unknown top-level statement {statement.strip()[:60]!r}")
    _check_imports(_PROTO_IMPORT.findall(text), reference_names)


def _check_imports(imports: list[str], reference_names: set[str]) -> None:
    """Every import is a reference's name, or one of the well-known types clients carry themselves."""
    for imported in imports:
        if imported not in reference_names and not imported.startswith(_PROTO_WELL_KNOWN):
            raise ValueError(f"import {imported!r} is not among the schema's references {sorted(reference_names)}")


@dataclass(frozen=True)
class Reference:
    """A ``references`` entry: ``name`` (an import path or Avro full name) to one version of a subject."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass
class Version:
    """One ``SchemaValue`` of the store: a version of a subject."""

    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False

    def to_value(self) -> dict[str, Any]:
        """The record value, as Confluent's ``SchemaValue`` serializes (``schemaType`` left out for Avro)."""
        value: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.schema_id}
        if self.schema_type != "AVRO":
            value["schemaType"] = self.schema_type
        if self.references:
            value["references"] = [ref.to_json() for ref in self.references]
        return {**value, "schema": self.schema, "deleted": self.deleted}

    def to_answer(self) -> dict[str, Any]:
        answer = self.to_value()
        answer.pop("deleted")
        return answer


_PROTO_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|[A-Za-z_][\w.]*|\d[\w.]*|\S')


def canonical(schema_type: str, text: str) -> str:
    """The form two texts of one schema share, so they get one id and a lookup finds either.

    Avro and JSON Schema: the JSON with its object keys sorted (Avro's ``Schema.toString()``,
    which Java clients send, orders attributes its own way). Protobuf: the tokens without
    comments and layout, since Confluent's clients send the schema as their parser re-prints it;
    a base64 ``FileDescriptorProto`` is first written out as the ``.proto`` text it describes,
    which is what Java's client sends back for it (Wire's re-print of the descriptor).
    """
    if schema_type == "PROTOBUF":
        descriptor = serialized_descriptor(text)
        if descriptor is not None:
            text = proto_text(descriptor)
        stripped = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
        return " ".join(_PROTO_TOKEN.findall(stripped))
    return json.dumps(json.loads(text), separators=(",", ":"), sort_keys=True)


#: ``FieldDescriptorProto.Type`` numbers to their ``.proto`` names (11 and 14, message and enum, use the type name).
_PROTO_SCALARS = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32", 8: "bool",
    9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64",
}  # fmt: skip


def proto_text(descriptor: Any) -> str:
    """The ``.proto`` declarations a ``FileDescriptorProto`` holds: syntax, package, imports, messages, enums.

    Enough for :func:`canonical` to match the text a Java client re-prints from the same
    descriptor, in Wire's order (seen for scalar fields from Confluent's 7.0.16 converter;
    nested types, maps and enums follow Wire's printer). Options, services and extensions are
    not written: a schema that uses them may be found only in the form it was registered in.
    """
    syntax = descriptor.syntax or "proto2"
    lines = [f'syntax = "{syntax}";']
    if descriptor.package:
        lines.append(f"package {descriptor.package};")
    lines += [f'import "{name}";' for name in descriptor.dependency]
    lines += [_proto_message(message, syntax) for message in descriptor.message_type]
    lines += [_proto_enum(enum) for enum in descriptor.enum_type]
    return "\n".join(lines)


def _proto_message(message: Any, syntax: str) -> str:
    # Wire's order: the fields, then the nested messages (map entries are written as map fields), then enums.
    maps = {nested.name: nested for nested in message.nested_type if nested.options.map_entry}
    body = []
    for item in message.field:
        entry = maps.get(item.type_name.rpartition(".")[2]) if item.type == 11 else None
        if entry is not None:  # map<K, V>: a repeated field of a nested map-entry type
            key, value = (_proto_type(part) for part in entry.field)
            body.append(f"map<{key}, {value}> {item.name} = {item.number};")
            continue
        label = {3: "repeated ", 2: "required "}.get(item.label, "")
        if item.label == 1 and (syntax == "proto2" or item.proto3_optional):
            label = "optional "
        body.append(f"{label}{_proto_type(item)} {item.name} = {item.number};")
    body += [_proto_message(nested, syntax) for nested in message.nested_type if nested.name not in maps]
    body += [_proto_enum(enum) for enum in message.enum_type]
    return f"message {message.name} {{ {' '.join(body)} }}"


def _proto_type(item: Any) -> str:
    if item.type in (11, 14):  # a message or an enum: its name, without the leading dot of a full name
        return str(item.type_name).lstrip(".")
    return _PROTO_SCALARS.get(item.type, str(item.type))


def _proto_enum(enum: Any) -> str:
    values = " ".join(f"{value.name} = {value.number};" for value in enum.value)
    return f"enum {enum.name} {{ {values} }}"


# --- The store ---------------------------------------------------------------------------------------


@dataclass
class State:
    """What the ``_schemas`` topic holds, folded: versions by subject, subject configs, the global config."""

    versions: dict[str, dict[int, Version]] = field(default_factory=dict)
    config: str = DEFAULT_COMPATIBILITY
    subject_config: dict[str, str] = field(default_factory=dict)

    def apply(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        """Fold one record of the topic into the state (a null value is a tombstone: a permanent delete)."""
        kind = key.get("keytype")
        if kind == "SCHEMA":
            subject, number = str(key["subject"]), int(key["version"])
            if value is None:
                self.versions.get(subject, {}).pop(number, None)
                return
            refs = tuple(Reference(r["name"], r["subject"], int(r["version"])) for r in value.get("references") or [])
            self.versions.setdefault(subject, {})[number] = Version(
                subject, number, int(value["id"]), value.get("schemaType") or "AVRO", value["schema"], refs,
                bool(value.get("deleted", False)),
            )  # fmt: skip
        elif kind == "CONFIG":
            scope = key.get("subject")
            level = None if value is None else value.get("compatibilityLevel")
            if scope is None:
                self.config = str(level or DEFAULT_COMPATIBILITY)
            elif level is None:
                self.subject_config.pop(str(scope), None)
            else:
                self.subject_config[str(scope)] = str(level)

    @property
    def max_id(self) -> int:
        return max((v.schema_id for versions in self.versions.values() for v in versions.values()), default=0)


class KafkaLog:
    """The ``_schemas`` topic: one compacted partition, read whole at start, written with acks=all."""

    def __init__(self, bootstrap_servers: str, topic: str = DEFAULT_TOPIC) -> None:
        from confluent_kafka import Producer

        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self._ensure_topic()
        self._producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": "all", "linger.ms": 0})

    def _ensure_topic(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        if self.topic in admin.list_topics(timeout=_STORE_TIMEOUT_S).topics:
            return
        new = NewTopic(self.topic, 1, 1, config={"cleanup.policy": "compact"})
        for future in admin.create_topics([new]).values():
            try:
                future.result(timeout=_STORE_TIMEOUT_S)
            except Exception as exc:  # another starter made it first: TOPIC_ALREADY_EXISTS
                if "already exists" not in str(exc).lower():
                    raise

    def read_all(self) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
        """Every record of the topic from its start to its end now, decoded."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": "kerr-schema-registry",
                "enable.auto.commit": False,
            }
        )
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=_STORE_TIMEOUT_S)
            records: list[tuple[dict[str, Any], dict[str, Any] | None]] = []
            if high <= low:
                return records
            consumer.assign([TopicPartition(self.topic, 0, low)])
            position = low
            while position < high:
                message = consumer.poll(_STORE_TIMEOUT_S)
                if message is None:
                    raise RuntimeError(f"{self.topic} gave no record at offset {position} (its end is {high})")
                if message.error():
                    raise RuntimeError(f"reading {self.topic}: {message.error()}")
                position = int(message.offset() or 0) + 1
                key, value = message.key(), message.value()
                if key is None:
                    continue
                records.append((json.loads(key), None if value is None else json.loads(value)))
            return records
        finally:
            consumer.close()

    def write(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        """Append one record and wait for the broker's acknowledgement (an answer never runs ahead of the store)."""
        errors: list[Any] = []
        self._producer.produce(
            self.topic,
            key=json.dumps(key, separators=(",", ":")).encode(),
            value=None if value is None else json.dumps(value, separators=(",", ":")).encode(),
            on_delivery=lambda error, _message: errors.append(error) if error else None,
        )
        if self._producer.flush(_STORE_TIMEOUT_S) or errors:
            raise RegistryError(500, 50001, f"Error while storing in {self.topic}: {errors or 'no acknowledgement'}")


def schema_key(subject: str, version: int) -> dict[str, Any]:
    return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}


def config_key(subject: str | None) -> dict[str, Any]:
    return {"keytype": "CONFIG", "subject": subject, "magic": 0}


class Registry:
    """The registry's rules over a :class:`State`, each change written to the log before it is applied."""

    def __init__(self, log: KafkaLog | None) -> None:
        self.log = log
        self.state = State()
        self.lock = threading.Lock()
        if log is not None:
            for key, value in log.read_all():
                self.state.apply(key, value)

    def _write(self, key: dict[str, Any], value: dict[str, Any] | None) -> None:
        if self.log is not None:
            self.log.write(key, value)
        self.state.apply(key, value)

    # -- reading
    def subjects(self, deleted: bool = False) -> list[str]:
        return sorted(s for s, vs in self.state.versions.items() if any(deleted or not v.deleted for v in vs.values()))

    def live_versions(self, subject: str, deleted: bool = False) -> list[Version]:
        versions = self.state.versions.get(subject, {})
        found = [versions[n] for n in sorted(versions) if deleted or not versions[n].deleted]
        if not found:
            raise subject_not_found(subject)
        return found

    def version(self, subject: str, version: str, deleted: bool = False) -> Version:
        versions = self.live_versions(subject, deleted)
        if version == "latest" or version == "-1":
            return versions[-1]
        number = parse_version(version)
        for candidate in versions:
            if candidate.version == number:
                return candidate
        raise version_not_found(number)

    def by_id(self, schema_id: int, subject: str | None = None, serialized: bool = False) -> Version:
        """The version of ``subject`` with this id, else the first; ``serialized``: one registered as a descriptor.

        A Protobuf schema registered as ``.proto`` text and as a base64 descriptor has one id
        (see :func:`canonical`); a client asking ``format=serialized`` gets the descriptor form.
        """
        matches = [v for vs in self.state.versions.values() for v in vs.values() if v.schema_id == schema_id]
        if not matches:
            raise schema_not_found(schema_id)
        if serialized:
            matches = [v for v in matches if serialized_descriptor(v.schema) is not None] or matches
        return next((v for v in matches if v.subject == subject), matches[0])

    def uses(self, schema_id: int, deleted: bool = False) -> list[Version]:
        self.by_id(schema_id)
        return [
            v for s in sorted(self.state.versions) for v in self.state.versions[s].values()
            if v.schema_id == schema_id and (deleted or not v.deleted)
        ]  # fmt: skip

    def compatibility(self, subject: str | None) -> str:
        return self.state.subject_config.get(subject or "", self.state.config) if subject else self.state.config

    # -- checking
    def parse(self, body: dict[str, Any]) -> tuple[str, str, tuple[Reference, ...]]:
        """The body's (schema type, schema text, references), checked; 42201 when the schema is not valid."""
        schema_type = str(body.get("schemaType") or "AVRO").upper()
        text = body.get("schema")
        if schema_type not in SCHEMA_TYPES:
            raise invalid_schema(f"unknown schemaType {schema_type!r}; accepted: {', '.join(SCHEMA_TYPES)}")
        if not isinstance(text, str) or not text.strip():
            raise RegistryError(422, 42201, "Empty schema")
        references = []
        for ref in body.get("references") or []:
            try:
                reference = Reference(str(ref["name"]), str(ref["subject"]), int(ref["version"]))
            except (KeyError, TypeError, ValueError):
                raise invalid_schema(f"a reference needs name, subject and version; got {ref!r}") from None
            self.version(reference.subject, str(reference.version))  # 40401/40402 when it is not there
            references.append(reference)
        self.check(schema_type, text, tuple(references))
        return schema_type, text, tuple(references)

    def _avro_named(self, references: tuple[Reference, ...]) -> dict[str, Any]:
        named: dict[str, Any] = {}
        for ref in references:
            target = self.version(ref.subject, str(ref.version), deleted=True)
            parse_avro(json.loads(target.schema), named)
        return named

    def check(self, schema_type: str, text: str, references: tuple[Reference, ...]) -> None:
        try:
            if schema_type == "PROTOBUF":
                check_protobuf(text, {ref.name for ref in references})
                return
            decoded = json.loads(text)
            if schema_type == "AVRO":
                parse_avro(decoded, self._avro_named(references))
            else:
                import jsonschema  # type: ignore[import-untyped]

                if not isinstance(decoded, dict | bool):
                    raise ValueError("a JSON Schema is an object or a boolean")
                jsonschema.validators.validator_for(decoded).check_schema(decoded)
        except (ValueError, AvroSchemaError) as exc:
            raise invalid_schema(f"{schema_type} schema {text[:200]!r}: {exc}") from None
        except Exception as exc:  # jsonschema's SchemaError
            raise invalid_schema(f"{schema_type} schema {text[:200]!r}: {getattr(exc, 'message', exc)}") from None

    def incompatibilities(self, subject: str, schema_type: str, text: str, refs: tuple[Reference, ...],
                          against: list[Version]) -> list[str]:  # fmt: skip
        """Why ``text`` breaks ``subject``'s compatibility level against ``against`` (Avro only; else none)."""
        level = self.compatibility(subject)
        if level == "NONE" or schema_type != "AVRO" or not against:
            return []
        if not level.endswith("_TRANSITIVE"):
            against = against[-1:]
        named_new = self._avro_named(refs)
        new = parse_avro(json.loads(text), named_new)
        problems: list[str] = []
        for old_version in (v for v in against if v.schema_type == "AVRO"):
            named_old = self._avro_named(old_version.references)
            old = parse_avro(json.loads(old_version.schema), named_old)
            if level.startswith(("BACKWARD", "FULL")):
                problems += _avro_compatible(new, old, named_new, named_old, f"version {old_version.version}")
            if level.startswith(("FORWARD", "FULL")):
                problems += _avro_compatible(old, new, named_old, named_new, f"version {old_version.version}")
        return problems

    def _find(self, subject: str, schema_type: str, text: str, refs: tuple[Reference, ...],
              deleted: bool) -> Version | None:  # fmt: skip
        wanted = canonical(schema_type, text)
        for version in self.state.versions.get(subject, {}).values():
            same_kind = version.schema_type == schema_type and version.references == refs
            if same_kind and (deleted or not version.deleted) and canonical(schema_type, version.schema) == wanted:
                return version
        return None

    # -- writing
    def register(self, subject: str, body: dict[str, Any]) -> int:
        """``POST /subjects/{s}/versions``: the schema's id; a new version when the subject lacks the schema."""
        schema_type, text, refs = self.parse(body)
        existing = self._find(subject, schema_type, text, refs, deleted=False)
        if existing is not None:
            return existing.schema_id
        live = [v for _, v in sorted(self.state.versions.get(subject, {}).items()) if not v.deleted]
        problems = self.incompatibilities(subject, schema_type, text, refs, live)
        if problems:
            raise incompatible_schema(subject, problems)
        wanted = canonical(schema_type, text)
        same = [
            v for vs in self.state.versions.values() for v in vs.values()
            if v.schema_type == schema_type and v.references == refs and canonical(v.schema_type, v.schema) == wanted
        ]  # fmt: skip
        schema_id = same[0].schema_id if same else self.state.max_id + 1
        number = max(self.state.versions.get(subject, {}), default=0) + 1
        new = Version(subject, number, schema_id, schema_type, text, refs)
        self._write(schema_key(subject, number), new.to_value())
        return schema_id

    def lookup(self, subject: str, body: dict[str, Any], deleted: bool) -> Version:
        """``POST /subjects/{s}``: the version of ``subject`` that holds this schema."""
        self.live_versions(subject, deleted)
        schema_type, text, refs = self.parse(body)
        found = self._find(subject, schema_type, text, refs, deleted)
        if found is None:
            raise schema_not_found()
        return found

    def delete_version(self, subject: str, version: str, permanent: bool) -> int:
        target = self.version(subject, version, deleted=permanent)
        if permanent:
            if not target.deleted:
                raise version_not_soft_deleted(subject, target.version)
            self._write(schema_key(subject, target.version), None)
        else:
            self._write(schema_key(subject, target.version), {**target.to_value(), "deleted": True})
        return target.version

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        versions = self.live_versions(subject, deleted=True)
        if permanent:
            if any(not v.deleted for v in versions):
                raise subject_not_soft_deleted(subject)
            for version in versions:
                self._write(schema_key(subject, version.version), None)
            if subject in self.state.subject_config:
                self._write(config_key(subject), None)
            return [v.version for v in versions]
        if all(v.deleted for v in versions):
            raise subject_soft_deleted(subject)
        live = [v for v in versions if not v.deleted]
        for version in live:
            self._write(schema_key(subject, version.version), {**version.to_value(), "deleted": True})
        return [v.version for v in live]

    def set_config(self, subject: str | None, body: dict[str, Any]) -> str:
        level = str(body.get("compatibility") or body.get("compatibilityLevel") or "").upper()
        if level not in COMPATIBILITY_LEVELS:
            raise invalid_compatibility()
        self._write(config_key(subject), {"compatibilityLevel": level})
        return level

    def delete_config(self, subject: str | None) -> str:
        previous = self.compatibility(subject)
        if subject is not None and subject not in self.state.subject_config:
            raise subject_not_found(subject)
        self._write(config_key(subject), None)
        return previous


def parse_version(text: str) -> int:
    """A version number in [1, 2^31-1], else Confluent's 42202."""
    try:
        number = int(text)
    except ValueError:
        raise invalid_version(text) from None
    if not 1 <= number <= 2**31 - 1:
        raise invalid_version(text)
    return number


def _flag(query: dict[str, list[str]], name: str) -> bool:
    return query.get(name, ["false"])[-1].lower() == "true"


# --- HTTP ----------------------------------------------------------------------------------------------

Query = dict[str, list[str]]


def route(registry: Registry, method: str, parts: list[str], query: Query, body: Any) -> Any:
    """Answer one request with a JSON-able value or raise :class:`RegistryError` (404 for an unknown path)."""
    head, rest = (parts[0], parts[1:]) if parts else ("", [])
    handler = {
        "subjects": _subjects,
        "schemas": _schemas,
        "config": _config,
        "compatibility": _compatibility,
    }.get(head)
    answer = handler(registry, method, rest, query, body) if handler else ({} if not parts else None)
    if answer is None:
        raise RegistryError(404, 404, "HTTP 404 Not Found")
    return answer


def _subjects(registry: Registry, method: str, parts: list[str], query: Query, body: Any) -> Any:
    deleted = _flag(query, "deleted")
    if not parts:
        return registry.subjects(deleted) if method == "GET" else None
    subject, rest = parts[0], parts[1:]
    if not rest:
        if method == "POST":
            return registry.lookup(subject, body, deleted).to_answer()
        return registry.delete_subject(subject, _flag(query, "permanent")) if method == "DELETE" else None
    if rest[0] != "versions" or len(rest) > 3:
        return None
    if len(rest) == 1:
        if method == "POST":
            return {"id": registry.register(subject, body)}
        return [v.version for v in registry.live_versions(subject, deleted)] if method == "GET" else None
    if method == "DELETE" and len(rest) == 2:
        return registry.delete_version(subject, rest[1], _flag(query, "permanent"))
    if method != "GET":
        return None
    version = registry.version(subject, rest[1], deleted)
    if len(rest) == 3:
        return RawSchema(version.schema) if rest[2] == "schema" else None
    return version.to_answer()


def _schemas(registry: Registry, method: str, parts: list[str], query: Query, body: Any) -> Any:
    if method != "GET":
        return None
    if parts == ["types"]:
        return list(SCHEMA_TYPES)
    if len(parts) not in (2, 3) or parts[0] != "ids":
        return None
    try:
        schema_id = int(parts[1])
    except ValueError:
        raise schema_not_found() from None
    serialized = query.get("format", [""])[-1] == "serialized"
    found = registry.by_id(schema_id, query.get("subject", [None])[-1], serialized)
    what = parts[2] if len(parts) == 3 else ""
    if what == "":
        answer = found.to_answer()
        answer = {key: answer[key] for key in ("schemaType", "references", "schema") if key in answer}
        if _flag(query, "fetchMaxId"):
            answer["maxId"] = registry.state.max_id
        return answer
    if what == "schema":
        return RawSchema(found.schema)
    uses = registry.uses(schema_id, _flag(query, "deleted"))
    if what == "subjects":
        return sorted({v.subject for v in uses})
    return [{"subject": v.subject, "version": v.version} for v in uses] if what == "versions" else None


def _config(registry: Registry, method: str, parts: list[str], query: Query, body: Any) -> Any:
    if len(parts) > 1:
        return None
    subject = parts[0] if parts else None
    if method == "GET":
        configured = subject is None or subject in registry.state.subject_config
        if not configured and not _flag(query, "defaultToGlobal"):
            raise subject_compatibility_not_configured(str(subject))
        return {"compatibilityLevel": registry.compatibility(subject)}
    if method == "PUT":
        return {"compatibility": registry.set_config(subject, body or {})}
    return {"compatibilityLevel": registry.delete_config(subject)} if method == "DELETE" else None


def _compatibility(registry: Registry, method: str, parts: list[str], query: Query, body: Any) -> Any:
    """``POST /compatibility/subjects/{s}/versions/{v}``: would this schema pass the subject's level against v."""
    if method != "POST" or len(parts) != 4 or parts[0] != "subjects" or parts[2] != "versions":
        return None
    subject = parts[1]
    schema_type, text, refs = registry.parse(body or {})
    against = [registry.version(subject, parts[3])]
    problems = registry.incompatibilities(subject, schema_type, text, refs, against)
    answer: dict[str, Any] = {"is_compatible": not problems}
    if _flag(query, "verbose"):
        answer["messages"] = problems
    return answer


@dataclass(frozen=True)
class RawSchema:
    """An answer that is the schema text itself (``.../schema`` endpoints), not JSON-encoded again."""

    text: str


class _Handler(BaseHTTPRequestHandler):
    registry: Registry
    server_version = "kerr-schema-registry"
    #: Connections are kept alive, as Confluent's registry (Jetty) keeps them, and answers leave at once.
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def _answer(self, method: str) -> None:
        split = urlsplit(self.path)
        parts = [unquote(part) for part in split.path.strip("/").split("/") if part]
        query = parse_qs(split.query)
        status, payload = 200, b""
        try:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError as exc:
                raise RegistryError(400, 50005, f"Unrecognized JSON: {exc}") from None
            if method in ("POST", "PUT") and not isinstance(body, dict):
                raise RegistryError(422, 422, "The request body must be a JSON object")
            with self.registry.lock:
                answer = route(self.registry, method, parts, query, body)
            payload = answer.text.encode() if isinstance(answer, RawSchema) else json.dumps(answer).encode()
        except RegistryError as exc:
            status, payload = exc.status, json.dumps({"error_code": exc.code, "message": exc.message}).encode()
        except Exception as exc:  # a defect here must still answer as Confluent's registry does, not hang
            status = 500
            payload = json.dumps({"error_code": 50001, "message": f"{type(exc).__name__}: {exc}"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", _CONTENT_TYPE)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def make_server(registry: Registry, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """An HTTP server for ``registry`` on ``host:port`` (not yet serving)."""
    handler = type("Handler", (_Handler,), {"registry": registry})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A development Confluent-compatible Schema Registry.")
    parser.add_argument("--bootstrap-servers", required=True, help="the broker that keeps the _schemas topic")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--topic", default=DEFAULT_TOPIC)
    args = parser.parse_args(argv)
    registry = Registry(KafkaLog(args.bootstrap_servers, args.topic))
    server = make_server(registry, args.port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    print(f"schema registry on http://127.0.0.1:{args.port} ({args.topic} on {args.bootstrap_servers})", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


class SchemaRegistryUnavailable(RuntimeError):
    """The development registry could not start or answer; the message says why."""


class LocalSchemaRegistry(Launcher):
    """The development registry in a child process on a free loopback port, its store on ``bootstrap_servers``.

    Started like the broker and the Connect worker (see
    :class:`~airflow_kerr.local.process.Launcher`); ready once ``GET /subjects`` answers,
    which is after it has read its topic back.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        port: int | None = None,
        log_path: Path | None = None,
        topic: str = DEFAULT_TOPIC,
        detach: bool = False,
        start_timeout_s: float = 60.0,
    ) -> None:
        super().__init__(detach=detach, start_timeout_s=start_timeout_s)
        self.bootstrap_servers = bootstrap_servers
        self.port = port or free_port()
        self.log_path = log_path
        self.topic = topic

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def process_marker(self) -> str:
        """Text of this registry's command line (guards a recorded pid against reuse)."""
        return f"airflow_kerr.local.schema_registry --port {self.port}"

    def describe(self) -> dict[str, Any]:
        """What ``kerr local up`` records to find this registry again."""
        return {"pid": self.pid, "marker": self.process_marker, "url": self.url, "log": str(self.log_path or "")}

    def _launch(self) -> None:
        self._spawn(
            [sys.executable, "-m", "airflow_kerr.local.schema_registry", "--port", str(self.port),
             "--bootstrap-servers", self.bootstrap_servers, "--topic", self.topic],
            log_path=self.log_path,
        )  # fmt: skip

    def _not_ready_because(self) -> str | None:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as answer:
                return None if answer.status == 200 else f"GET /subjects answered {answer.status}"
        except (OSError, urllib.error.URLError) as exc:
            return f"GET /subjects: {exc}"

    def _exited(self, process: Any) -> Exception:
        log = tail(self.log_path, 20) if self.log_path else "(no log)"
        return SchemaRegistryUnavailable(f"the schema registry exited with code {process.returncode}:\n{log}")

    def _timed_out(self, problem: str) -> Exception:
        return SchemaRegistryUnavailable(f"the schema registry at {self.url} did not answer in time ({problem})")


def start_registry(
    bootstrap_servers: str, *, external_cluster: bool, log_path: Path | None = None
) -> tuple[str, LocalSchemaRegistry | None]:
    """The registry ``make demo`` and ``make ui`` use: ``SCHEMA_REGISTRY_URL``, else a stand-in started now.

    Returns its URL and the stand-in to stop (None for an external registry). On a
    cluster named by ``KAFKA_BOOTSTRAP_SERVERS`` the stand-in keeps its schemas in
    ``_kerr_dev_schemas``, so it never writes into a real registry's ``_schemas``.
    """
    import os

    external = os.environ.get(REGISTRY_URL_ENV, "").strip()
    if external:
        return external, None
    topic = EXTERNAL_CLUSTER_TOPIC if external_cluster else DEFAULT_TOPIC
    registry = LocalSchemaRegistry(bootstrap_servers, log_path=log_path, topic=topic).start()
    return registry.url, registry


if __name__ == "__main__":
    sys.exit(main())
