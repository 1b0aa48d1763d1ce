"""The sink's encoder for a registry format: a Python value in, Confluent-framed bytes out.

The subject is TopicNameStrategy's ``<topic>-value`` (``-key``) unless
``subject.name.strategy`` asks for RecordNameStrategy (the record's full name). The
schema id is found once per process, as Confluent's serializers find it:
``auto.register.schemas`` (default true) registers the sink's schema;
``use.latest.version`` with ``auto.register.schemas=false`` writes with the subject's latest
schema; ``schema_id`` (Confluent's ``use.schema.id``) writes with that registered schema,
as a DLQ replay re-encodes a record with its own; otherwise the given schema is looked up
under the subject. A value that does not fit the schema raises :class:`ConverterDataError`
(``Failed to serialize Avro data from topic orders.avro: Error serializing Avro message:
...``); a registry outage :class:`ConverterRetriableError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.formats.exceptions import (
    ConverterDataError,
    ConverterRetriableError,
    RegistryUnavailable,
    SerializationError,
)
from airflow_kerr.formats.registry_client import RegistryClient
from airflow_kerr.formats.registry_settings import SCHEMA_TYPES, RegistrySettings
from airflow_kerr.formats.wire_format import WireFormat

if TYPE_CHECKING:  # jsonschema and protobuf load only where their format is used (see _codec / _compile)
    from airflow_kerr.formats.protobuf_codec import ProtobufCodec

#: AvroConverter.fromConnectData's texts (ProtobufConverter's and JsonSchemaConverter's are alike).
OUTER_TEXTS: Final = {
    "avro": "Failed to serialize Avro data from topic {topic}:",
    "protobuf": "Failed to serialize Protobuf data from topic {topic}:",
    "json_schema": "Converting Kafka Connect data to byte[] failed due to serialization error of topic {topic}:",
}
SERDE_NAMES: Final = {"avro": "Avro", "protobuf": "Protobuf", "json_schema": "JSON"}


class RegistrySerializer:
    """Encodes the values (or keys) a sink writes to ``topic``; the schema id is resolved on first use."""

    def __init__(
        self,
        fmt: str,
        client: RegistryClient,
        settings: RegistrySettings,
        *,
        topic: str,
        is_key: bool,
        schema: str | None = None,
        schema_id: int | None = None,
        message_indexes: list[int] | None = None,
    ) -> None:
        if fmt not in OUTER_TEXTS:
            raise ValueError(f"format={fmt!r}: expected one of {', '.join(OUTER_TEXTS)}")
        if (
            schema is None
            and schema_id is None
            and not (settings.use_latest_version and not settings.auto_register_schemas)
        ):
            raise ValueError(
                f"a {fmt} sink needs its schema, or schema_registry 'use.latest.version'=true with "
                "'auto.register.schemas'=false to write with the subject's latest schema"
            )
        self.fmt = fmt
        self.client = client
        self.settings = settings
        self.topic = topic
        self.is_key = is_key
        self.schema = schema
        #: Confluent's ``use.schema.id``: write with this registered schema, registering nothing.
        self.schema_id = schema_id
        #: The Protobuf message to write (its path in the file); default the file's first message.
        self.message_indexes = message_indexes
        self._resolved: tuple[int, Any, list[int] | None] | None = None
        #: Once the schema is resolved, an Avro value's framed bytes in one call (see :meth:`fast`).
        self._fast: Callable[[Any], bytes] | None = None

    @property
    def fast(self) -> Callable[[Any], bytes] | None:
        """:meth:`__call__` for an Avro value that fits, raising (without its text) for any other; None until resolved.

        The sink maps it over a batch and hands a value it raises for to ``__call__``, whose
        outcome (bytes, or the failure Connect's converter reports) counts.
        """
        return self._fast

    def __call__(self, value: Any) -> bytes | None:
        if value is None:
            return None
        schema_id, codec, indexes = self._resolved or self._resolve()
        try:
            if self.fmt == "avro":
                body = codec.encode(value)
            elif self.fmt == "protobuf":
                body = codec.encode(value, indexes)
            else:
                body = codec.encode(value)
        except SerializationError as error:
            raise self._data_error(f"Error serializing {SERDE_NAMES[self.fmt]} message: {error}", error)  # noqa: B904
        return WireFormat.build(schema_id, body, indexes)

    def subject(self, record_name: str | None) -> str:
        if self.settings.subject_name_strategy == "record":
            if not record_name:
                raise SerializationError(
                    "RecordNameStrategy needs a named schema (an Avro record, a Protobuf message, a JSON Schema title)"
                )
            return record_name
        return f"{self.topic}-{'key' if self.is_key else 'value'}"

    def _resolve(self) -> tuple[int, Any, list[int] | None]:
        schema_type = SCHEMA_TYPES[self.fmt]
        try:
            if self.schema_id is not None:  # use.schema.id: the registered schema, by its id
                answer = self.client.schema_by_id(self.schema_id, "serialized" if self.fmt == "protobuf" else None)
                schema_id, codec = self.schema_id, self._codec(answer["schema"])
            elif self.schema is None:  # use.latest.version: the subject's latest schema is the writer's
                subject = self.subject(None) if self.settings.subject_name_strategy == "topic" else None
                if subject is None:
                    raise SerializationError("use.latest.version with RecordNameStrategy needs the sink's schema")
                latest = self.client.version(subject, "latest", "serialized" if self.fmt == "protobuf" else None)
                schema_id, codec = int(latest["id"]), self._codec(latest["schema"])
            else:
                codec = self._codec(self.schema)
                subject = self.subject(
                    getattr(codec, "name", None) if self.fmt != "protobuf" else _first_message(codec)
                )
                if self.settings.auto_register_schemas:
                    schema_id = self.client.register(subject, self.schema, schema_type)
                elif self.settings.use_latest_version:
                    latest = self.client.version(subject, "latest", "serialized" if self.fmt == "protobuf" else None)
                    schema_id, codec = int(latest["id"]), self._codec(latest["schema"])
                else:
                    schema_id = int(self.client.lookup(subject, self.schema, schema_type)["id"])
        except RegistryUnavailable as error:
            outer = OUTER_TEXTS[self.fmt].format(topic=self.topic)
            raise ConverterRetriableError(
                f"{outer} Error retrieving {SERDE_NAMES[self.fmt]} schema: {error}"
            ) from error
        except Exception as error:
            raise self._data_error(f"Error registering or retrieving {SERDE_NAMES[self.fmt]} schema: {error}", error)  # noqa: B904
        indexes = None
        if self.fmt == "protobuf":
            indexes = self.message_indexes if self.message_indexes is not None else codec.message_indexes(None)
        self._resolved = (schema_id, codec, indexes)
        if isinstance(codec, AvroCodec):
            self._fast = codec.fast_encoder(WireFormat.build(schema_id, b""))
        return self._resolved

    def _codec(self, schema: str) -> Any:
        # Imported here: a Spark executor that never writes JSON Schema or Protobuf needs neither library.
        from airflow_kerr.formats.json_schema_codec import JsonSchemaCodec
        from airflow_kerr.formats.protobuf_codec import ProtobufCodec, file_descriptor

        if self.fmt == "avro":
            return AvroCodec(schema)
        if self.fmt == "json_schema":
            return JsonSchemaCodec(schema)
        return ProtobufCodec(file_descriptor(schema))

    def _data_error(self, what: str, cause: BaseException) -> ConverterDataError:
        inner = SerializationError(what)
        inner.__cause__ = cause
        error = ConverterDataError(f"{OUTER_TEXTS[self.fmt].format(topic=self.topic)} {inner}")
        error.__cause__ = inner
        return error


def _first_message(codec: ProtobufCodec) -> str | None:
    first = next(iter(codec.file.message_types_by_name.values()), None)
    return None if first is None else str(first.full_name)
