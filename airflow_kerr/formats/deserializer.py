"""A key or value converter for a registry format: framed bytes in, a Python value out, failures as Connect's.

Each failure raises what Connect's converter raises, worded as it words it, followed by
the serde's text (confluentinc/schema-registry 7.9, ``AvroConverter.toConnectData``,
``ProtobufConverter.toConnectData``, ``JsonSchemaConverter.toConnectData``, over
``AbstractKafkaSchemaSerDe``, ``AbstractKafkaAvroDeserializer``,
``AbstractKafkaProtobufDeserializer`` and ``AbstractKafkaJsonSchemaDeserializer``):

- not framed: ``Failed to deserialize data for topic orders to Avro: Unknown magic byte!``;
- an id the registry does not know: ``... to Avro: Error retrieving Avro value schema for id 42:
  Schema 42 not found; error code: 40403``;
- a body that does not decode: ``... to Avro: Error deserializing Avro message for id 1: EOFException: ...``;
- a registry out of reach, timing out or answering 408/429/5xx: the same texts, raised as
  :class:`ConverterRetriableError`, so the job retries it within ``errors.retry.timeout``.

A null (a tombstone) converts to None, as Connect's converters return ``SchemaAndValue.NULL``.
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
from airflow_kerr.formats.wire_format import HEADER_SIZE, WireFormat

if TYPE_CHECKING:  # jsonschema and protobuf load only where their format is used (see _codec / _compile)
    pass

#: Connect's converter text before the cause, for a data error (DataException) and an outage (RetriableException).
OUTER_TEXTS: Final = {
    "avro": (
        "Failed to deserialize data for topic {topic} to Avro:",
        "Failed to deserialize data for topic {topic} to Avro: ",
    ),
    "protobuf": (
        "Failed to deserialize data for topic {topic} to Protobuf:",
        "Failed to deserialize data for topic {topic} to Protobuf: ",
    ),
    "json_schema": (
        "Converting byte[] to Kafka Connect data failed due to serialization error of topic {topic}: ",
        "Converting byte[] to Kafka Connect data failed due to serialization error of topic {topic}: ",
    ),
}
#: The serde's own names: "Error retrieving Avro value schema for id 42", "Error deserializing JSON message for id 42".
SERDE_NAMES: Final = {"avro": "Avro", "protobuf": "Protobuf", "json_schema": "JSON"}


class RegistryDeserializer:
    """Converts framed values of one format; call it with a value's bytes (or None).

    ``topic`` is the topic named in failure texts: a task reads one topic-partition, and
    the job sets it when the task's first batch arrives. Compiled codecs come from the
    client's process-wide cache, with a lock-free look-aside dict in front of it.
    """

    def __init__(self, fmt: str, client: RegistryClient, *, is_key: bool, validate_json: bool = False) -> None:
        if fmt not in OUTER_TEXTS:
            raise ValueError(f"format={fmt!r}: expected one of {', '.join(OUTER_TEXTS)}")
        self.fmt = fmt
        self.client = client
        self.is_key = is_key
        self.validate_json = validate_json
        self.topic = ""
        self._local: dict[int, Any] = {}
        #: An Avro schema's generated read by the 5-byte header that names it (see :meth:`fast`).
        self._fast_by_header: dict[bytes, Callable[[bytes], Any]] = {}
        self._name = SERDE_NAMES[fmt]

    def fast(self, value: bytes) -> Any:
        """:meth:`__call__`'s value for a framed Avro value of a schema already loaded, else an exception.

        One dict look-up by the header (magic byte and id) and the schema's generated reader:
        the per-record path maps it over a batch and hands whatever it raises for (a tombstone,
        an id not loaded yet, a body that does not decode) to ``__call__``, whose outcome and
        texts count (:class:`~airflow_kerr.spark.stages.Converter`).
        """
        return self._fast_by_header[value[:HEADER_SIZE]](value)

    def __call__(self, value: bytes | None) -> Any:
        if value is None:
            return None
        try:
            schema_id = WireFormat.schema_id(value)
        except SerializationError as error:
            raise self._data_error(str(error), None)  # noqa: B904 - its cause is set: Connect's chain
        codec = self._local.get(schema_id)
        if codec is None:
            codec = self._codec(schema_id)
        try:
            if self.fmt == "avro":
                return codec.decode(value, HEADER_SIZE)
            if self.fmt == "protobuf":
                indexes, position = WireFormat.read_message_indexes(value, HEADER_SIZE)
                return codec.decode(value[position:], indexes)
            return codec.decode(value[HEADER_SIZE:], self.validate_json)
        except SerializationError as error:
            raise self._data_error(f"Error deserializing {self._name} message for id {schema_id}", error)  # noqa: B904

    def _codec(self, schema_id: int) -> Any:
        what = f"Error retrieving {self._name} {'key' if self.is_key else 'value'} schema for id {schema_id}"
        if self.fmt != "avro":  # the Protobuf and JSON Schema deserializers say neither key nor value
            what = f"Error retrieving {self._name} schema for id {schema_id}"
        try:
            codec = self.client.codecs.get_or_load((self.fmt, schema_id), lambda: self._compile(schema_id))
        except RegistryUnavailable as error:
            inner = SerializationError(f"{what}: {error}")
            inner.__cause__ = error
            outer = OUTER_TEXTS[self.fmt][1].format(topic=self.topic)
            raise ConverterRetriableError(f"{outer.rstrip()} {inner}") from inner
        except Exception as error:
            raise self._data_error(what, error)  # noqa: B904 - its cause is set
        if len(self._local) >= self.client.codecs.capacity:
            self._local.clear()
            self._fast_by_header.clear()
        self._local[schema_id] = codec
        fast = codec.fast_decoder(HEADER_SIZE) if isinstance(codec, AvroCodec) else None
        if fast is not None:
            self._fast_by_header[WireFormat.build(schema_id, b"")] = fast
        return codec

    def _compile(self, schema_id: int) -> Any:
        # Imported here: a Spark executor that never reads JSON Schema or Protobuf needs neither library.
        from airflow_kerr.formats.json_schema_codec import JsonSchemaCodec
        from airflow_kerr.formats.protobuf_codec import ProtobufCodec, file_descriptor

        if self.fmt == "avro":
            return AvroCodec(self.client.schema_by_id(schema_id)["schema"])
        if self.fmt == "json_schema":
            return JsonSchemaCodec(self.client.schema_by_id(schema_id)["schema"])
        answer = self.client.schema_by_id(schema_id, "serialized")
        return ProtobufCodec(file_descriptor(answer["schema"]), self._dependencies(answer.get("references") or []))

    def _dependencies(self, references: list[dict[str, Any]]) -> list[Any]:
        """The referenced files, each after its own references (the order a descriptor pool needs)."""
        from airflow_kerr.formats.protobuf_codec import file_descriptor

        found: list[Any] = []
        for reference in references:
            version = self.client.version(reference["subject"], reference["version"], "serialized")
            found += self._dependencies(version.get("references") or [])
            found.append(file_descriptor(version["schema"]))
        return found

    def _data_error(self, what: str, cause: BaseException | None) -> ConverterDataError:
        """Connect's DataException text, then the serde's, then its cause's; the chain kept for the stack trace."""
        inner = SerializationError(what if cause is None else f"{what}: {cause}")
        inner.__cause__ = cause
        outer = OUTER_TEXTS[self.fmt][0].format(topic=self.topic)
        error = ConverterDataError(f"{outer.rstrip()} {inner}")
        error.__cause__ = inner
        return error
