"""``PipelineSpec``: everything the error-aware Spark job needs, as one JSON-serializable value.

The operator builds it on the Airflow side (validating it at DAG parse time) and
hands it to the job as a file or a base64 argument; the job rebuilds it here. No
Airflow imports: this module runs under spark-submit.
"""

from __future__ import annotations

import base64
import copy
import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_kerr.errors import ErrorHandlingConfig, InvalidErrorsConfig

BUILTIN_CONVERTERS = ("bytes", "string", "json")
SINK_KINDS = ("kafka", "parquet", "jsonl", "callable")
SOURCE_FORMATS = ("kerr_kafka", "kafka")
STARTING_OFFSETS = ("group", "earliest", "latest")
DEFAULT_METRICS_TOPIC = "kerr.metrics"


class InvalidPipelineSpec(ValueError):
    """A pipeline spec field is missing or outside what is accepted; the message lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid pipeline spec:\n  - " + "\n  - ".join(problems))


def import_callable(path: str) -> Callable[..., Any]:
    """Import ``package.module.name`` (or ``package.module:name``) and return the callable."""
    module_name, sep, attr = path.replace(":", ".").rpartition(".")
    if not sep or not module_name:
        raise ImportError(f"{path!r} is not a dotted path: expected 'package.module.function'")
    target = getattr(importlib.import_module(module_name), attr, None)
    if not callable(target):
        raise ImportError(f"{path!r}: {module_name} has no callable named {attr!r}")
    return target


@dataclass
class SourceSpec:
    """Where records come from: topics read as one bounded batch per run."""

    topics: list[str]
    group_id: str
    starting_offsets: str = "group"
    starting_timestamp_ms: int | None = None
    format: str = "kerr_kafka"
    max_records_per_partition: int = 200_000


@dataclass
class SinkSpec:
    """Where good records go (the TASK_PUT stage): a Kafka topic, a Parquet or JSON-lines path, or a callable."""

    kind: str
    topic: str | None = None
    path: str | None = None
    callable: str | None = None


@dataclass
class PipelineSpec:
    """A pipeline: source, converters, transformations, sink and the ``errors.*`` policy.

    ``kafka`` holds the librdkafka settings of the cluster (bootstrap servers and
    security) used for the source, a Kafka sink, the DLQ and the metrics topic.
    """

    name: str
    source: SourceSpec
    sink: SinkSpec
    kafka: dict[str, Any] = field(default_factory=dict)
    key_converter: str = "bytes"
    value_converter: str = "json"
    transformations: list[str] = field(default_factory=list)
    errors: dict[str, Any] = field(default_factory=dict)
    task_id: int = 0
    metrics_topic: str = DEFAULT_METRICS_TOPIC
    batch_size: int = 2048

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelineSpec:
        """Build and validate from plain data (JSON, a DAG's dict); every problem is reported at once.

        The spec owns a deep copy: changing it never changes the caller's dicts.
        """
        data = copy.deepcopy(dict(data))
        problems: list[str] = []
        source_data = data.get("source")
        sink_data = data.get("sink")
        if not isinstance(source_data, Mapping):
            problems.append("source: required, a mapping with 'topics' and 'group_id'")
        if not isinstance(sink_data, Mapping):
            problems.append(f"sink: required, a mapping with 'kind' (one of {', '.join(SINK_KINDS)})")
        if problems:
            raise InvalidPipelineSpec(problems)
        assert isinstance(source_data, Mapping) and isinstance(sink_data, Mapping)
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        problems += [f"{key}: unknown field; accepted fields are {', '.join(sorted(known))}" for key in unknown]
        try:
            source = SourceSpec(**dict(source_data))
            sink = SinkSpec(**dict(sink_data))
            rest = {k: v for k, v in data.items() if k in known and k not in ("source", "sink")}
            spec = cls(source=source, sink=sink, **rest)
        except TypeError as exc:
            raise InvalidPipelineSpec([*problems, f"{exc}"]) from None
        spec.validate(problems)
        return spec

    def validate(self, problems: list[str] | None = None) -> ErrorHandlingConfig:
        """Check every field and return the parsed ``errors.*`` policy; raise once with all problems."""
        problems = [] if problems is None else problems
        if not self.name or not isinstance(self.name, str):
            problems.append(f"name={self.name!r}: required, a non-empty string (used in error contexts)")
        if not isinstance(self.source.topics, list) or not self.source.topics:
            problems.append(f"source.topics={self.source.topics!r}: required, a non-empty list of topic names")
        if not self.source.group_id:
            problems.append(f"source.group_id={self.source.group_id!r}: required, the consumer group that commits")
        if self.source.starting_offsets not in STARTING_OFFSETS:
            accepted = ", ".join(STARTING_OFFSETS)
            problems.append(f"source.starting_offsets={self.source.starting_offsets!r}: expected one of {accepted}")
        if self.source.format not in SOURCE_FORMATS:
            problems.append(f"source.format={self.source.format!r}: expected one of {', '.join(SOURCE_FORMATS)}")
        if not isinstance(self.source.max_records_per_partition, int) or self.source.max_records_per_partition < 1:
            problems.append(
                f"source.max_records_per_partition={self.source.max_records_per_partition!r}: expected an integer >= 1"
            )
        self._validate_sink(problems)
        for name, value in (("key_converter", self.key_converter), ("value_converter", self.value_converter)):
            if not isinstance(value, str) or (value not in BUILTIN_CONVERTERS and "." not in value):
                problems.append(
                    f"{name}={value!r}: expected one of {', '.join(BUILTIN_CONVERTERS)} or a dotted-path callable"
                )
        if not isinstance(self.transformations, list) or not all(
            isinstance(t, str) and "." in t for t in self.transformations
        ):
            problems.append(f"transformations={self.transformations!r}: expected a list of dotted-path callables")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            problems.append(f"batch_size={self.batch_size!r}: expected an integer >= 1")
        if not isinstance(self.task_id, int) or self.task_id < 0:
            problems.append(f"task_id={self.task_id!r}: expected an integer >= 0")
        if not self.metrics_topic or self.metrics_topic.startswith("__"):
            problems.append(f"metrics_topic={self.metrics_topic!r}: expected a topic name not starting with '__'")
        config = None
        try:
            config = ErrorHandlingConfig.from_properties(self.errors, source_topics=list(self.source.topics or []))
        except InvalidErrorsConfig as exc:
            problems.extend(str(p) for p in exc.problems)
        if problems:
            raise InvalidPipelineSpec(problems)
        assert config is not None
        return config

    def _validate_sink(self, problems: list[str]) -> None:
        sink = self.sink
        if sink.kind not in SINK_KINDS:
            problems.append(f"sink.kind={sink.kind!r}: expected one of {', '.join(SINK_KINDS)}")
        elif sink.kind == "kafka" and not sink.topic:
            problems.append("sink.topic: required when sink.kind='kafka'")
        elif sink.kind in ("parquet", "jsonl") and not sink.path:
            problems.append(f"sink.path: required when sink.kind={sink.kind!r}")
        elif sink.kind == "callable" and (not sink.callable or "." not in sink.callable):
            problems.append(f"sink.callable={sink.callable!r}: required when sink.kind='callable', a dotted path")
        if sink.kind == "kafka" and sink.topic in (self.source.topics or []):
            problems.append(f"sink.topic={sink.topic!r}: must not be one of the source topics (it would loop)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def to_base64(self) -> str:
        return base64.urlsafe_b64encode(self.to_json().encode()).decode()

    @classmethod
    def from_json(cls, text: str) -> PipelineSpec:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_base64(cls, text: str) -> PipelineSpec:
        return cls.from_json(base64.urlsafe_b64decode(text.encode()).decode())
