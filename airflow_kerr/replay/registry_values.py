"""Schema Registry values around a replay's fix: decoded before it, re-encoded after it.

With ``key_format`` or ``value_format`` set (``avro``, ``protobuf``, ``json_schema``) and a
fix, the fix receives the decoded key and value (Python dicts and values, as the job's
converters give them), and what it returns is encoded again in Confluent's wire format:

- ``reencode_with="record"`` (default): with the schema the record was written with, by its
  id (Confluent's ``use.schema.id``), so the repaired record is read as before;
- ``reencode_with="latest"``: with the latest schema of the target's subject
  (``use.latest.version``), to move repaired records onto a schema that now accepts them.

A key or value the fix returns as ``bytes`` is written as it is (the fix serialized it
itself). A record whose bytes do not decode is parked ``undecodable``, a fixed value that
does not fit the schema ``does_not_fit``, each with the serde's own text. A registry out
of reach ends the run (:class:`StopReplay`) before its batch is written: nothing of it is
committed, and the next run reads it again.

Without a fix nothing here runs: the bytes are copied as they are and the registry is
never called.

A dead letter of Schema Registry's DLQ rule (``__rule.*``) goes the same way. One written
on READ holds the wire bytes as consumed, decoded as above. One written on WRITE holds the
value before it was ever serialized, as JSON (confluent-kafka's
``schema_registry/rules/dlq/dlq_action.py``, ``_convert_to_json_bytes``): the fix receives
that JSON parsed, and the result is encoded with the latest schema of the target's subject,
since no schema id was ever written.

Uses the public serde of :mod:`airflow_kerr.formats` only: :class:`RegistryDeserializer`
and :class:`RegistrySerializer`. No Airflow: the operator reads the ``schema_registry``
connection and hands the settings in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from airflow_kerr.errors import HeaderSet
from airflow_kerr.formats import (
    FORMATS,
    ConverterRetriableError,
    RegistryDeserializer,
    RegistrySerializer,
    RegistrySettings,
    SerializationError,
    WireFormat,
    registry_client_for,
)
from airflow_kerr.formats.wire_format import HEADER_SIZE
from airflow_kerr.replay.policy import FixFn, ParkReason, ParkRecord, ReplayRecord, StopReplay

#: ``reencode_with``: the record's own schema (by id), or the latest of the target's subject.
REENCODE_CHOICES: Final = ("record", "latest")
#: Where confluent-kafka's ``header_schema_id_serializer`` puts the schema id instead of the value's first bytes.
SCHEMA_ID_HEADERS: Final = {False: "__value_schema_id", True: "__key_schema_id"}

_PARTS: Final = ((False, "value"), (True, "key"))


class RegistryValues:
    """Wraps a fix so that it works on decoded keys and values; one per run (its serdes are cached).

    ``formats`` maps ``"key"`` and ``"value"`` to a registry format, or leaves a part out
    to hand it to the fix as bytes.
    """

    def __init__(self, settings: RegistrySettings, formats: Mapping[str, str], reencode_with: str = "record") -> None:
        for part, fmt in formats.items():
            if part not in ("key", "value") or fmt not in FORMATS:
                raise ValueError(f"{part}_format={fmt!r}: expected one of {', '.join(FORMATS)}")
        if reencode_with not in REENCODE_CHOICES:
            raise ValueError(f"reencode_with={reencode_with!r}: expected one of {', '.join(REENCODE_CHOICES)}")
        self.settings = settings
        self.formats = dict(formats)
        self.reencode_with = reencode_with
        self.client = registry_client_for(settings)
        self._deserializers: dict[bool, RegistryDeserializer] = {}
        self._serializers: dict[tuple[str, bool, int | None, tuple[int, ...] | None], RegistrySerializer] = {}
        #: The serializer settings for the subject's latest schema: read it, never register.
        self._latest = replace(settings, use_latest_version=True, auto_register_schemas=False)

    def wrap(self, fix: FixFn) -> FixFn:
        """``fix`` with the record decoded before it and encoded after it."""

        def fix_decoded(record: ReplayRecord) -> ReplayRecord | None:
            return self._around(record, fix)

        fix_decoded.__name__ = getattr(fix, "__name__", "fix")
        return fix_decoded

    def _around(self, record: ReplayRecord, fix: FixFn) -> ReplayRecord | None:
        unserialized = _written_on_write(record)
        writers: dict[bool, tuple[int | None, list[int] | None]] = {}
        for is_key, part in _PARTS:
            fmt = self.formats.get(part)
            raw = getattr(record, part)
            if fmt is None or raw is None:
                continue
            if unserialized:
                setattr(record, part, _json(raw, part))
                writers[is_key] = (None, None)
                continue
            self._refuse_header_ids(record, is_key, part)
            writers[is_key] = self._writer_of(raw, fmt, part)
            setattr(record, part, self._decode(raw, fmt, is_key, record.topic, part))
        fixed = fix(record)
        if fixed is None or not isinstance(fixed, ReplayRecord):
            return fixed  # a drop, or something apply_fix reports as unusable
        for is_key, part in _PARTS:
            if is_key not in writers:
                continue
            value = getattr(fixed, part)
            if value is None or isinstance(value, bytes):
                continue  # a tombstone, or bytes the fix serialized itself
            schema_id, indexes = writers[is_key]
            if self.reencode_with == "latest":
                schema_id, indexes = None, None
            setattr(fixed, part, self._encode(value, self.formats[part], is_key, fixed.topic, schema_id, indexes, part))
        return fixed

    @staticmethod
    def _refuse_header_ids(record: ReplayRecord, is_key: bool, part: str) -> None:
        """Park a record whose schema id travels in a header: its bytes are not in Confluent's framed format."""
        name = SCHEMA_ID_HEADERS[is_key]
        if any(header[0] == name for header in record.headers):
            raise ParkRecord(
                ParkReason.UNDECODABLE,
                f"the {part}'s schema id is in the {name} header (confluent-kafka's header_schema_id_serializer); "
                "the replay decodes framed values only (magic byte 0 and the id in the first 5 bytes)",
            )

    @staticmethod
    def _writer_of(raw: bytes, fmt: str, part: str) -> tuple[int, list[int] | None]:
        """The schema id the bytes were written with, and a Protobuf value's message indexes."""
        try:
            schema_id = WireFormat.schema_id(raw)
            indexes = WireFormat.read_message_indexes(raw, HEADER_SIZE)[0] if fmt == "protobuf" else None
        except SerializationError as error:
            raise ParkRecord(ParkReason.UNDECODABLE, f"the {part} is not in {fmt} wire format: {error}") from error
        return schema_id, indexes

    def _decode(self, raw: bytes, fmt: str, is_key: bool, topic: str, part: str) -> Any:
        deserializer = self._deserializers.get(is_key)
        if deserializer is None:
            deserializer = self._deserializers[is_key] = RegistryDeserializer(
                fmt, self.client, is_key=is_key, validate_json=self.settings.json_fail_invalid_schema
            )
        deserializer.topic = topic
        try:
            return deserializer(raw)
        except ConverterRetriableError as error:
            raise StopReplay(_outage(error, part, "decoded")) from error
        except ValueError as error:  # ConverterDataError: the deserializer's text, as Connect words it
            raise ParkRecord(ParkReason.UNDECODABLE, str(error)) from error

    def _encode(
        self,
        value: Any,
        fmt: str,
        is_key: bool,
        topic: str,
        schema_id: int | None,
        indexes: list[int] | None,
        part: str,
    ) -> bytes | None:
        key = (topic, is_key, schema_id, None if indexes is None else tuple(indexes))
        serializer = self._serializers.get(key)
        if serializer is None:
            settings = self.settings if schema_id is not None else self._latest
            serializer = self._serializers[key] = RegistrySerializer(
                fmt,
                self.client,
                settings,
                topic=topic,
                is_key=is_key,
                schema_id=schema_id,
                message_indexes=indexes,
            )
        try:
            return serializer(value)
        except ConverterRetriableError as error:
            raise StopReplay(_outage(error, part, "encoded")) from error
        except ValueError as error:  # ConverterDataError: the serializer's text
            raise ParkRecord(ParkReason.DOES_NOT_FIT, str(error)) from error


def _written_on_write(record: ReplayRecord) -> bool:
    """Whether the dead letter is Schema Registry's rule on WRITE: its value is JSON, never serialized."""
    letter = record.dead_letter
    return letter.header_set is HeaderSet.SCHEMA_REGISTRY and (letter.rule_mode or "").upper() == "WRITE"


def _json(raw: bytes, part: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise ParkRecord(
            ParkReason.UNDECODABLE,
            f"the rule failed on WRITE, so the DLQ holds the {part} as JSON, but it does not parse: {error}",
        ) from error


def _outage(error: Exception, part: str, done: str) -> str:
    return (
        f"the Schema Registry is out of reach, so no {part} can be {done}: {error}. The replay stopped before "
        "writing this batch; what was committed stays, and the next run continues from the committed offsets"
    )
