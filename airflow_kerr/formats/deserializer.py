"""A key or value converter for a registry format: framed bytes in, a Python value out, failures as Connect's.

Each failure raises what Connect's converter raises, with its text, and chains the serde's
exception under it, as Java does (confluentinc/schema-registry 7.0.16, the converters the
stack's Connect worker runs: ``AvroConverter.toConnectData``, ``ProtobufConverter.toConnectData``,
``JsonSchemaConverter.toConnectData``, over ``AbstractKafkaSchemaSerDe``,
``AbstractKafkaAvroDeserializer``, ``AbstractKafkaProtobufDeserializer`` and
``AbstractKafkaJsonSchemaDeserializer``). Connect's DLQ ``exception.message`` header is the
outer exception's ``getMessage()`` only, so the job's is too; the cause is in the stack trace:

- not framed: ``Failed to deserialize data for topic orders to Avro: `` (Connect's text ends in a
  space), caused by ``Unknown magic byte!`` (Protobuf and JSON Schema: caused by ``Error
  deserializing Protobuf message for id -1``, caused by it: their deserializers read the header
  inside the ``try`` that wraps every failure);
- an id the registry does not know: the same, caused by ``Error retrieving Avro value schema for
  id 42``, caused by ``Schema 42 not found; error code: 40403``;
- a body that does not decode: the same, caused by ``Error deserializing Avro message for id 1``,
  caused by what the decoder found (``EOFException: ...``);
- a registry out of reach, timing out or answering 408/429/5xx: the same texts, raised as
  :class:`ConverterRetriableError`, so the job retries it within ``errors.retry.timeout``.

A null (a tombstone) converts to None, as Connect's converters return ``SchemaAndValue.NULL``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

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

#: The message of the DataException (and of the RetriableException) Connect's converter raises, exactly: in
#: 7.0.16 both end in a space, and the cause's text is not part of it.
OUTER_TEXTS: Final = {
    "avro": "Failed to deserialize data for topic {topic} to Avro: ",
    "protobuf": "Failed to deserialize data for topic {topic} to Protobuf: ",
    "json_schema": "Converting byte[] to Kafka Connect data failed due to serialization error of topic {topic}: ",
}
E = TypeVar("E", bound=BaseException)

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

    def loaded_codec(self, schema_id: int) -> Any | None:
        """The compiled codec of ``schema_id`` when this process has it already, else None: never a registry request.

        A column decoder (:mod:`airflow_kerr.spark.avro_columns`) reads a batch with it; a value
        whose schema is not loaded yet goes through :meth:`__call__`, which loads it.
        """
        codec = self._local.get(schema_id)
        return codec if codec is not None else self.client.codecs.get((self.fmt, schema_id))

    def __call__(self, value: bytes | None) -> Any:
        if value is None:
            return None
        try:
            schema_id = WireFormat.schema_id(value)
        except SerializationError as error:  # AbstractKafkaSchemaSerDe's "Unknown magic byte!"
            if self.fmt != "avro":  # read inside the Protobuf and JSON Schema deserializers' try, id still -1
                error = _caused(SerializationError(f"Error deserializing {self._name} message for id -1"), error)
            raise ConverterDataError(self.outer_text()) from error
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
            inner = _caused(SerializationError(f"Error deserializing {self._name} message for id {schema_id}"), error)
            raise ConverterDataError(self.outer_text()) from inner

    def _codec(self, schema_id: int) -> Any:
        what = f"Error retrieving {self._name} {'key' if self.is_key else 'value'} schema for id {schema_id}"
        if self.fmt != "avro":  # the Protobuf and JSON Schema deserializers say neither key nor value
            what = f"Error retrieving {self._name} schema for id {schema_id}"
        try:
            codec = self.client.codecs.get_or_load((self.fmt, schema_id), lambda: self._compile(schema_id))
        except RegistryUnavailable as error:
            # Java: RetriableException <- TimeoutException(what) <- RestClientException or the socket's exception.
            raise ConverterRetriableError(self.outer_text()) from _caused(RegistryUnavailable(what), error)
        except Exception as error:
            raise ConverterDataError(self.outer_text()) from _caused(SerializationError(what), error)
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

    def outer_text(self) -> str:
        """The converter's exception message for this task's topic: Connect's text alone, the cause chained under it."""
        return OUTER_TEXTS[self.fmt].format(topic=self.topic)


def _caused(error: E, cause: BaseException) -> E:
    """``error`` with ``cause`` chained under it, as a Java exception built with a cause."""
    error.__cause__ = cause
    return error
