"""``PipelineSpec``: everything the error-aware Spark job needs, as one JSON-serializable value.

The operator builds it on the Airflow side (validating it at DAG parse time) and
hands it to the job as a file or a base64 argument; the job rebuilds it here. No
Airflow imports: this module runs under spark-submit.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from airflow_kerr.errors import ErrorHandlingConfig, InvalidErrorsConfig
from airflow_kerr.errors.config import (
    INT_MAX,
    LONG_MAX,
    LONG_MIN,
    MASK,
    is_sensitive_key,
    show_value,
    topic_name_problem,
)
from airflow_kerr.formats.registry_settings import FORMATS, RegistrySettings

BUILTIN_CONVERTERS = ("bytes", "string", "json", *FORMATS)
SINK_KINDS = ("kafka", "parquet", "jsonl", "callable", *FORMATS)
SOURCE_FORMATS = ("kerr_kafka", "kafka")
STARTING_OFFSETS = ("group", "earliest", "latest")
DEFAULT_METRICS_TOPIC = "kerr.metrics"
#: How often a running task publishes an interim metrics record, in ms (``metrics_interval_ms``), and the bounds:
#: under 100 ms the records cost more than they tell, over an hour a task is as good as unwatched.
DEFAULT_METRICS_INTERVAL_MS = 1000
METRICS_INTERVAL_MS_RANGE = (100, 3_600_000)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


#: Stands for a required field the data did not give; validation reports it as required.
_MISSING: Final[Any] = _Missing()


class InvalidPipelineSpec(ValueError):
    """A pipeline spec field is missing or outside what is accepted; the message lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid pipeline spec:\n  - " + "\n  - ".join(problems))


@dataclass
class SourceSpec:
    """Where records come from: topics read as one bounded batch per run."""

    topics: list[str]
    group_id: str
    starting_offsets: str = "group"
    starting_timestamp_ms: int | None = None
    format: str = "kerr_kafka"
    max_records_per_partition: int = 2_000_000


@dataclass
class SinkSpec:
    """Where good records go (the TASK_PUT stage): a Kafka topic, a Parquet or JSON-lines path, or a callable.

    The kinds ``avro``, ``protobuf`` and ``json_schema`` write to ``topic`` through the Schema
    Registry; ``schema`` is the values' schema (Avro or JSON Schema text, a Protobuf schema as a
    base64 ``FileDescriptorProto``), or omitted to write with the subject's latest one
    (``use.latest.version``).
    """

    kind: str
    topic: str | None = None
    path: str | None = None
    callable: str | None = None
    schema: str | None = None


@dataclass
class PipelineSpec:
    """A pipeline: source, converters, transformations, sink and the ``errors.*`` policy.

    ``kafka`` holds the librdkafka settings of the cluster (bootstrap servers and
    security) used for the source, a Kafka sink, the DLQ and the metrics topic.
    ``metrics_interval_ms`` is how often a running task publishes an interim metrics record
    (its counters so far), so the tolerance watches see a breach before the task ends.
    ``schema_registry`` holds the Schema Registry's (:class:`RegistrySettings`' keys), needed
    by the ``avro``, ``protobuf`` and ``json_schema`` converters and sinks; it reaches the
    executors inside the spec, as ``kafka`` does.
    """

    name: str
    source: SourceSpec
    sink: SinkSpec
    kafka: dict[str, Any] = field(default_factory=dict)
    schema_registry: dict[str, Any] = field(default_factory=dict)
    key_converter: str = "bytes"
    value_converter: str = "json"
    transformations: list[str] = field(default_factory=list)
    errors: dict[str, Any] = field(default_factory=dict)
    task_id: int = 0
    metrics_topic: str = DEFAULT_METRICS_TOPIC
    batch_size: int = 2048
    metrics_interval_ms: int = DEFAULT_METRICS_INTERVAL_MS

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelineSpec:
        """Build and validate from plain data (JSON, a DAG's dict); every problem is reported at once.

        A missing or malformed ``source`` or ``sink`` is one problem among the others: the
        ``errors.*`` settings and every other field are still checked. Only
        :class:`InvalidPipelineSpec` is raised, whatever the data holds. The spec owns a deep
        copy: changing it never changes the caller's dicts.
        """
        if not isinstance(data, Mapping):
            raise InvalidPipelineSpec([_bad("spec", data, "a mapping of pipeline fields (name, source, sink, ...)")])
        try:
            data = copy.deepcopy(dict(data))
        except Exception as exc:
            raise InvalidPipelineSpec([f"spec: expected plain data (JSON types) that can be copied: {exc}"]) from None
        problems: list[str] = []
        known = [f.name for f in fields(cls)]
        problems += _unknown_field_problems("", data, known)
        source = _section(data, "source", SourceSpec, ("topics", "group_id"), problems)
        sink = _section(data, "sink", SinkSpec, ("kind",), problems)
        rest = {k: v for k, v in data.items() if k in known and k not in ("name", "source", "sink")}
        spec = cls(
            name=data.get("name", _MISSING),
            source=source or SourceSpec(topics=_MISSING, group_id=_MISSING),
            sink=sink or SinkSpec(kind=_MISSING),
            **rest,
        )
        spec._check(problems, source_given=source is not None, sink_given=sink is not None)
        return spec

    def validate(self, problems: list[str] | None = None) -> ErrorHandlingConfig:
        """Check every field and return the parsed ``errors.*`` policy; raise once with all problems."""
        return self._check([] if problems is None else problems, source_given=True, sink_given=True)

    def _check(self, problems: list[str], *, source_given: bool, sink_given: bool) -> ErrorHandlingConfig:
        if not _is_text(self.name):
            problems.append(_bad("name", self.name, "a non-empty string (used in error contexts)"))
        source_given = source_given and _is_section(self.source, SourceSpec, "source", problems)
        sink_given = sink_given and _is_section(self.sink, SinkSpec, "sink", problems)
        topics = self._check_source(problems) if source_given else []
        if sink_given:
            self._check_sink(problems, topics)
        problems += _kafka_problems(self.kafka)
        for name, value in (("key_converter", self.key_converter), ("value_converter", self.value_converter)):
            if not (isinstance(value, str) and (value in BUILTIN_CONVERTERS or _is_dotted_path(value))):
                problems.append(_bad(name, value, f"one of {', '.join(BUILTIN_CONVERTERS)} or a dotted-path callable"))
        problems += self._registry_problems()
        problems += _transformation_problems(self.transformations)
        problems += _int_problems("batch_size", self.batch_size, 1, INT_MAX)
        problems += _int_problems("task_id", self.task_id, 0, INT_MAX)
        problems += _int_problems("metrics_interval_ms", self.metrics_interval_ms, *METRICS_INTERVAL_MS_RANGE)
        problem = _topic_problem(self.metrics_topic)
        if problem:
            problems.append(_bad("metrics_topic", self.metrics_topic, problem))
        config = self._check_errors(problems, topics)
        if problems or config is None:
            raise InvalidPipelineSpec(problems)
        return config

    def registry_users(self) -> list[str]:
        """The fields that name a Schema Registry format (``value_converter='avro'``, ``sink.kind='avro'``)."""
        named = [("key_converter", self.key_converter), ("value_converter", self.value_converter)]
        if isinstance(self.sink, SinkSpec):
            named.append(("sink.kind", self.sink.kind))
        return [f"{name}={value!r}" for name, value in named if isinstance(value, str) and value in FORMATS]

    def registry_settings(self) -> RegistrySettings:
        """The parsed ``schema_registry`` settings (checked by :meth:`validate`)."""
        return RegistrySettings.from_mapping(self.schema_registry)

    def _registry_problems(self) -> list[str]:
        users = self.registry_users()
        if not self.schema_registry and not users:
            return []
        if not self.schema_registry:
            return [
                f"schema_registry: required by {', '.join(users)}: the Schema Registry's settings, at least "
                "{'url': 'http://host:8081'} (the operator fills them from schema_registry_conn_id)"
            ]
        problems = RegistrySettings.problems(self.schema_registry)
        sink = self.sink
        if not problems and isinstance(sink, SinkSpec) and sink.kind in FORMATS and sink.schema is None:
            settings = self.registry_settings()
            if settings.auto_register_schemas or not settings.use_latest_version:
                problems.append(
                    f"sink.schema: required when sink.kind={sink.kind!r}, the values' schema, unless schema_registry "
                    "sets 'use.latest.version': true and 'auto.register.schemas': false"
                )
        return problems

    def _check_source(self, problems: list[str]) -> list[str]:
        """Check ``source.*``; return its topics when they are valid (the DLQ and sink checks need them)."""
        source = self.source
        topics = _topics_problems(source.topics, problems)
        if not _is_text(source.group_id):
            problems.append(
                _bad("source.group_id", source.group_id, "a non-empty string, the consumer group that commits")
            )
        for key, value, accepted in (
            ("source.starting_offsets", source.starting_offsets, STARTING_OFFSETS),
            ("source.format", source.format, SOURCE_FORMATS),
        ):
            if not (isinstance(value, str) and value in accepted):
                problems.append(_bad(key, value, f"one of {', '.join(accepted)}"))
        if source.starting_timestamp_ms is not None:
            problems += _int_problems("source.starting_timestamp_ms", source.starting_timestamp_ms, 0, LONG_MAX)
        problems += _int_problems("source.max_records_per_partition", source.max_records_per_partition, 1, LONG_MAX)
        return topics

    def _check_sink(self, problems: list[str], source_topics: list[str]) -> None:
        sink = self.sink
        if not (isinstance(sink.kind, str) and sink.kind in SINK_KINDS):
            problems.append(_bad("sink.kind", sink.kind, f"one of {', '.join(SINK_KINDS)}"))
        needed = {"kafka": "topic", "parquet": "path", "jsonl": "path", "callable": "callable"} | dict.fromkeys(
            FORMATS, "topic"
        )
        needed_field = needed.get(sink.kind if isinstance(sink.kind, str) else "")
        if sink.schema is not None and not _is_text(sink.schema):
            problems.append(_bad("sink.schema", sink.schema, "the values' schema as a non-empty string"))
        for name, value in (("topic", sink.topic), ("path", sink.path), ("callable", sink.callable)):
            if value is None:
                if name == needed_field:
                    problems.append(f"sink.{name}: required when sink.kind={sink.kind!r}, {_SINK_FIELDS[name]}")
                continue
            problem = _sink_field_problem(name, value)
            if problem:
                problems.append(_bad(f"sink.{name}", value, problem))
        if isinstance(sink.topic, str) and sink.topic in source_topics:
            problems.append(f"sink.topic={sink.topic!r}: must not be one of the source topics (it would loop)")

    def _check_errors(self, problems: list[str], source_topics: list[str]) -> ErrorHandlingConfig | None:
        """The ``errors.*`` policy; ``errors`` holds only ``errors.*`` keys (a missing prefix is not ignored)."""
        if not isinstance(self.errors, Mapping):
            problems.append(_bad("errors", self.errors, "a mapping of errors.* keys to values"))
            return None
        strays = [key for key in self.errors if isinstance(key, str) and not key.startswith("errors.")]
        for key in strays:
            problems.append(_bad(f"errors[{key!r}]", self.errors[key], "keys starting with 'errors.'"))
        try:
            config = ErrorHandlingConfig.from_properties(self.errors, source_topics=source_topics)
        except InvalidErrorsConfig as exc:
            problems.extend(str(p) for p in exc.problems)
            return None
        return None if strays else config

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_base64(self) -> str:
        return base64.urlsafe_b64encode(self.to_json().encode()).decode()

    @classmethod
    def from_json(cls, text: str) -> PipelineSpec:
        """Parse and validate; text that is not JSON is an :class:`InvalidPipelineSpec` too."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidPipelineSpec([f"spec: expected a JSON object: {exc}"]) from None
        return cls.from_dict(data)

    @classmethod
    def from_base64(cls, text: str) -> PipelineSpec:
        """Decode URL-safe base64 JSON (``--spec-b64``) and validate it."""
        try:
            decoded = base64.urlsafe_b64decode(text.encode()).decode()
        except (AttributeError, binascii.Error, ValueError) as exc:
            raise InvalidPipelineSpec([f"spec: expected URL-safe base64 of UTF-8 JSON: {exc}"]) from None
        return cls.from_json(decoded)


_SINK_FIELDS = {
    "topic": "a Kafka topic name",
    "path": "a non-empty path string",
    "callable": "a dotted-path callable 'package.module.function'",
}


def _bad(key: str, value: object, accepted: str) -> str:
    """One problem: the key, the value given and what is accepted (``key=value: expected ...``)."""
    if value is _MISSING:
        return f"{key}: required, {accepted}"
    return f"{key}={show_value(value)}: expected {accepted}"


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _is_dotted_path(value: str) -> bool:
    """``package.module.name`` (or ``package.module:name``): at least two Python identifiers."""
    parts = value.replace(":", ".").split(".")
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def _topic_problem(value: object, *, internal_allowed: bool = False) -> str | None:
    if not isinstance(value, str):
        return "a Kafka topic name (a string)"
    problem = topic_name_problem(value, internal_allowed=internal_allowed)
    return problem.removeprefix("expected ") if problem else None


def _sink_field_problem(name: str, value: object) -> str | None:
    if name == "topic":
        return _topic_problem(value)
    if name == "path":
        return None if _is_text(value) else _SINK_FIELDS["path"]
    return None if isinstance(value, str) and _is_dotted_path(value) else _SINK_FIELDS["callable"]


def _int_problems(key: str, value: object, low: int, high: int) -> list[str]:
    """An integer in ``[low, high]``; ``bool`` is refused although Python counts it as an ``int``."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return []
    return [_bad(key, value, f"an integer in {low}..{high}")]


def _topics_problems(topics: object, problems: list[str]) -> list[str]:
    """Check ``source.topics``; return them when every one is a topic name, else an empty list."""
    accepted = "a non-empty list of distinct Kafka topic names"
    if not isinstance(topics, list) or not topics:
        problems.append(_bad("source.topics", topics, accepted))
        return []
    found = [
        _bad(f"source.topics[{index}]", topic, problem)
        for index, topic in enumerate(topics)
        if (problem := _topic_problem(topic, internal_allowed=True))
    ]
    if not found and len(set(topics)) != len(topics):
        found.append(_bad("source.topics", topics, accepted + " (a topic listed twice would be read twice)"))
    problems += found
    return [] if found else list(topics)


def _transformation_problems(transformations: object) -> list[str]:
    accepted = "a dotted-path callable 'package.module.function'"
    if not isinstance(transformations, list):
        return [_bad("transformations", transformations, f"a list, each {accepted}")]
    return [
        _bad(f"transformations[{index}]", path, accepted)
        for index, path in enumerate(transformations)
        if not (isinstance(path, str) and _is_dotted_path(path))
    ]


def _kafka_problems(kafka: object) -> list[str]:
    """librdkafka settings: property names to strings, numbers or booleans; a credential is never echoed."""
    if not isinstance(kafka, Mapping):
        return [_bad("kafka", kafka, "a mapping of librdkafka properties, such as {'bootstrap.servers': 'host:9092'}")]
    problems: list[str] = []
    for key, value in kafka.items():
        if not _is_text(key):
            problems.append(_bad("kafka key", key, "a librdkafka property name (a non-empty string)"))
        elif not _is_kafka_value(value):
            shown = MASK if is_sensitive_key(key) else value
            problems.append(_bad(f"kafka[{key!r}]", shown, "a string, a finite number or a boolean"))
    return problems


def _is_kafka_value(value: object) -> bool:
    if isinstance(value, str | bool):
        return True
    if isinstance(value, int):
        return LONG_MIN <= value <= LONG_MAX
    return isinstance(value, float) and math.isfinite(value)


def _unknown_field_problems(prefix: str, data: Mapping[Any, Any], known: list[str]) -> list[str]:
    problems: list[str] = []
    for key in data:
        if not isinstance(key, str):
            problems.append(f"{prefix}{show_value(key)}: field names must be strings; accepted: {', '.join(known)}")
        elif key not in known:
            problems.append(f"{prefix}{key}: unknown field; accepted fields are {', '.join(sorted(known))}")
    return problems


def _is_section(value: object, section: type[Any], name: str, problems: list[str]) -> bool:
    """A spec built in code (not by :meth:`PipelineSpec.from_dict`) may hold anything in ``source``/``sink``."""
    if isinstance(value, section):
        return True
    problems.append(_bad(name, value, f"a {section.__name__}"))
    return False


def _section(
    data: Mapping[str, Any], name: str, section: type[Any], required: tuple[str, ...], problems: list[str]
) -> Any:
    """``source`` or ``sink`` as its dataclass, required fields missing marked so; ``None`` when not a mapping."""
    known = [f.name for f in fields(section)]
    value = data.get(name, _MISSING)
    if not isinstance(value, Mapping):
        problems.append(_bad(name, value, f"a mapping with {', '.join(repr(r) for r in required)}"))
        return None
    problems += _unknown_field_problems(f"{name}.", value, known)
    given = {key: value[key] for key in known if key in value}
    return section(**{key: _MISSING for key in required} | given)
