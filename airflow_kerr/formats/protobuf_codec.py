"""Protobuf decode and encode driven by the registry's schema, not by a generated class.

The registry serves a schema as a serialized ``FileDescriptorProto`` when asked
``?format=serialized`` (as confluent-kafka's ``ProtobufDeserializer`` asks), so the codec
builds its message classes from descriptors, once per schema: no ``.proto`` parser and no
generated code on the executors. A message reads as a dict of every field (Connect's
``ProtobufConverter`` gives every field too): a nested message as a dict or None, an enum
as its name, a repeated field as a list, a map as a dict.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory  # type: ignore[import-untyped]
from google.protobuf.descriptor import Descriptor, FieldDescriptor  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError, Message  # type: ignore[import-untyped]

from airflow_kerr.formats.exceptions import SerializationError


def file_descriptor(schema: str) -> descriptor_pb2.FileDescriptorProto:
    """The ``FileDescriptorProto`` a registry serves base64-encoded; a ``.proto`` text is refused, saying why."""
    proto = descriptor_pb2.FileDescriptorProto()
    try:
        proto.ParseFromString(base64.b64decode(schema, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        raise SerializationError(
            "The registry returned the Protobuf schema as .proto text; the protobuf converter reads it as a "
            "serialized FileDescriptorProto (GET /schemas/ids/{id}?format=serialized, as Confluent's registry "
            "answers): register schemas with confluent-kafka's ProtobufSerializer or use a registry that serves it"
        ) from None
    return proto


class ProtobufCodec:
    """The message types of one schema file (dependencies given first): decode by message indexes, encode by name."""

    def __init__(self, schema: descriptor_pb2.FileDescriptorProto, dependencies: Sequence[Any] = ()) -> None:
        pool = descriptor_pool.DescriptorPool()
        default = descriptor_pool.Default()
        added: set[str] = set()
        for proto in [*dependencies, schema]:
            for name in proto.dependency:
                if name not in added and name.startswith("google/protobuf/"):
                    well_known = descriptor_pb2.FileDescriptorProto()
                    default.FindFileByName(name).CopyToProto(well_known)
                    pool.Add(well_known)
                    added.add(name)
            if proto.name not in added:
                pool.Add(proto)
                added.add(proto.name)
        try:
            self.file = pool.FindFileByName(schema.name)
        except (KeyError, TypeError) as error:
            raise SerializationError(f"Invalid Protobuf schema {schema.name!r}: {error}") from None
        self._classes: dict[tuple[int, ...], type[Message]] = {}

    def descriptor(self, indexes: Sequence[int]) -> Descriptor:
        """The message type at ``indexes`` (Confluent's message indexes: top-level, then nested positions)."""
        types = list(self.file.message_types_by_name.values())
        found: Descriptor | None = None
        for index in indexes:
            if not 0 <= index < len(types):
                raise SerializationError(f"Invalid message indexes {list(indexes)} for schema {self.file.name!r}")
            found = types[index]
            types = list(found.nested_types)
        if found is None:
            raise SerializationError(f"Invalid message indexes {list(indexes)}")
        return found

    def message_class(self, indexes: Sequence[int]) -> type[Message]:
        key = tuple(indexes)
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = message_factory.GetMessageClass(self.descriptor(indexes))
        return cls

    def decode(self, body: bytes, indexes: Sequence[int]) -> dict[str, Any]:
        message = self.message_class(indexes)()
        try:
            message.ParseFromString(body)
        except (DecodeError, RuntimeError, ValueError) as error:
            raise SerializationError(f"{type(error).__name__}: {error}") from None
        return message_to_dict(message)

    def message_indexes(self, full_name: str | None) -> list[int]:
        """The indexes of the message named ``full_name`` (the file's first message when None)."""
        if full_name is None:
            return [0]
        for top, descriptor in enumerate(self.file.message_types_by_name.values()):
            path = _find(descriptor, full_name, [top])
            if path is not None:
                return path
        raise SerializationError(f"No message {full_name!r} in schema {self.file.name!r}")

    def encode(self, value: Mapping[str, Any], indexes: Sequence[int]) -> bytes:
        if not isinstance(value, Mapping):
            raise SerializationError(
                f"The value does not fit the Protobuf schema: expected a mapping, got {type(value).__name__}"
            )
        message = self.message_class(indexes)()
        try:
            json_format.ParseDict(dict(value), message, ignore_unknown_fields=False)
        except json_format.ParseError as error:
            raise SerializationError(f"The value does not fit the Protobuf schema: {error}") from None
        return message.SerializeToString()


def _find(descriptor: Descriptor, full_name: str, path: list[int]) -> list[int] | None:
    if descriptor.full_name == full_name:
        return path
    for position, nested in enumerate(descriptor.nested_types):
        found = _find(nested, full_name, [*path, position])
        if found is not None:
            return found
    return None


def message_to_dict(message: Message) -> dict[str, Any]:
    """Every field of ``message`` by its proto name: defaults included, int64 as int, enums by name."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        out[field.name] = _field_value(message, field, value)
    return out


def _field_value(message: Message, field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {key: _single(value_field, item) for key, item in value.items()}
    if _is_repeated(field):
        return [_single(field, item) for item in value]
    if field.message_type is not None and not message.HasField(field.name):
        return None
    return _single(field, value)


def _is_repeated(field: FieldDescriptor) -> bool:
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _single(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None:
        return message_to_dict(value)
    if field.enum_type is not None:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else value
    return value
