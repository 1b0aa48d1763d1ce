"""The error context of one failed record: what failed, where, on which attempt, and why.

It has two renderings, both from Connect: the one-line log form of ``LogReporter`` and
KIP-298's JSON form. It is built only when a record fails, never on the success path.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from airflow_kerr.errors.config import mask_credentials
from airflow_kerr.errors.record import SourceRecord, TimestampType
from airflow_kerr.errors.stacktrace import format_stacktrace
from airflow_kerr.errors.stage import PipelineStage, Stage


class _NotConverted(Enum):
    NOT_CONVERTED = "NOT_CONVERTED"


#: Marks a key or value no converter has produced yet: it is rendered as its raw bytes.
NOT_CONVERTED: Final = _NotConverted.NOT_CONVERTED


@dataclass(frozen=True)
class TaskId:
    """The task a failure belongs to: Connect's connector name and task number.

    ``str()`` gives Connect's ``ConnectorTaskId`` form, ``<pipeline>-<task>``.
    """

    pipeline: str
    task: int

    def __str__(self) -> str:
        return f"{self.pipeline}-{self.task}"


@dataclass(slots=True)
class ErrorContext:
    """Everything known about one failed record when the error handler gives up on it.

    ``stages`` lists the pipeline's stages and ``index`` points at the failing one (KIP-298).
    ``converted_key``/``converted_value`` hold what the converters produced before the
    failure, so the JSON shows a converted key as ``STRING`` and an unconverted value as
    ``BYTES``. ``time_of_error`` is epoch milliseconds.
    """

    task: TaskId
    stage: Stage
    executing_class: str
    error: BaseException
    record: SourceRecord | None = None
    attempt: int = 1
    time_of_error: int = 0
    stages: Sequence[PipelineStage] = ()
    index: int = -1
    converted_key: object = NOT_CONVERTED
    converted_value: object = NOT_CONVERTED
    delivery_count: int | None = None

    @property
    def stage_config(self) -> Mapping[str, object]:
        """The failing stage's configuration, or an empty mapping when it is not known."""
        if 0 <= self.index < len(self.stages):
            return self.stages[self.index].config
        return {}

    def to_dict(self) -> dict[str, Any]:
        """KIP-298's JSON error context, with binary data as base64 and credentials masked."""
        return {
            "record": None if self.record is None else self._record_dict(self.record),
            "index": self.index,
            "exception": format_stacktrace(self.error),
            "attempt": self.attempt,
            "task_id": str(self.task),
            "time_of_error": self.time_of_error,
            "stages": [
                {
                    "type": stage.type.value,
                    "class": stage.class_name,
                    "config": _jsonable(mask_credentials(stage.config)),
                }
                for stage in self.stages
            ],
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict())

    def log_message(
        self,
        *,
        include_messages: bool = False,
        include_configs: bool = False,
        job_config: Mapping[str, object] | None = None,
    ) -> str:
        """Connect's ``LogReporter`` line, extended as our contract says.

        The record's topic, partition and offset always appear; ``include_messages`` adds
        its timestamp, key, value and headers; ``include_configs`` adds the failing stage's
        and the job's configuration with credentials masked.
        """
        text = (
            f"Error encountered in task {self.task}. "
            f"Executing stage '{self.stage.value}' with class '{self.executing_class}'"
        )
        record = self.record
        if record is not None:
            fields = f"topic='{record.topic}', partition={record.partition}, offset={record.offset}"
            if include_messages:
                if record.timestamp is not None and record.timestamp_type is not TimestampType.NO_TIMESTAMP_TYPE:
                    fields += f", timestamp={record.timestamp}, timestampType={record.timestamp_type.java_name}"
                fields += (
                    f", key={json.dumps(_part(record.key, self.converted_key))}"
                    f", value={json.dumps(_part(record.value, self.converted_value))}"
                    f", headers={json.dumps(_headers(record))}"
                )
            text += f", where consumed record is {{{fields}}}"
        text += "."
        if include_configs:
            stage_config = json.dumps(_jsonable(mask_credentials(self.stage_config)), sort_keys=True)
            job = json.dumps(_jsonable(mask_credentials(job_config or {})), sort_keys=True)
            text += f" Stage config: {stage_config}. Job config: {job}."
        return text

    def _record_dict(self, record: SourceRecord) -> dict[str, Any]:
        rendered: dict[str, Any] = {
            "topic": record.topic,
            "timestamp": record.timestamp,
            "timestamp_type": record.timestamp_type.value,
            "partition": record.partition,
            "offset": record.offset,
            "key": _part(record.key, self.converted_key),
            "value": _part(record.value, self.converted_value),
        }
        if record.headers:
            rendered["headers"] = _headers(record)
        return rendered


def _b64(data: bytes | bytearray | memoryview) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _part(raw: bytes | None, converted: object) -> dict[str, Any]:
    if converted is NOT_CONVERTED:
        if raw is None:
            return {"schema": None, "object": None}
        return {"schema": "BYTES", "object": _b64(raw)}
    return _schema_and_object(converted)


def _headers(record: SourceRecord) -> list[dict[str, Any]]:
    return [{"key": name, "value": _part(value, NOT_CONVERTED)} for name, value in record.headers]


def _schema_and_object(value: object) -> dict[str, Any]:
    if value is None:
        return {"schema": None, "object": None}
    if isinstance(value, bool):
        return {"schema": "BOOLEAN", "object": value}
    if isinstance(value, int):
        return {"schema": "INT64", "object": value}
    if isinstance(value, float):
        return {"schema": "FLOAT64", "object": value}
    if isinstance(value, str):
        return {"schema": "STRING", "object": value}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"schema": "BYTES", "object": _b64(value)}
    if isinstance(value, Mapping):
        return {"schema": "MAP", "object": _jsonable(value)}
    if isinstance(value, list | tuple):
        return {"schema": "ARRAY", "object": _jsonable(value)}
    return {"schema": "STRING", "object": repr(value)}


def _jsonable(value: object) -> Any:
    """Make a value JSON-safe: bytes as base64, mappings and sequences recursively, others as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return _b64(value)
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(item) for item in value]
    return str(value)
