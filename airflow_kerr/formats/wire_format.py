"""Confluent's wire format: magic byte 0, a 4-byte big-endian schema id, then the body.

A Protobuf body starts with the message indexes (the path of the message type in its
schema file): a zigzag varint count and as many zigzag varints, the list ``[0]`` written as
the single byte ``0``. As Confluent's serializers write it: ``AbstractKafkaSchemaSerDe``
(``MAGIC_BYTE``, ``idSize``) and ``MessageIndexes.toByteArray`` in confluentinc/schema-registry.
"""

from __future__ import annotations

from typing import Final

from airflow_kerr.formats.exceptions import SerializationError

MAGIC_BYTE: Final = 0
HEADER_SIZE: Final = 5


class WireFormat:
    """Parse and build a framed value; every method is a static one (the format has no state)."""

    @staticmethod
    def schema_id(value: bytes) -> int:
        """The schema id of a framed value; :class:`SerializationError` as Confluent words it when not framed.

        A wrong first byte is ``Unknown magic byte!`` (``AbstractKafkaSchemaSerDe.getByteBuffer``).
        A value shorter than the header is one too: Java's ``ByteBuffer`` then throws a
        ``BufferUnderflowException`` with no message, which a DLQ reader could not act on.
        """
        if len(value) < HEADER_SIZE:
            if value[:1] not in (b"", b"\x00"):
                raise SerializationError("Unknown magic byte!")
            raise SerializationError(
                f"Invalid value: {len(value)} bytes, shorter than the {HEADER_SIZE}-byte header "
                "(magic byte and schema id)"
            )
        if value[0] != MAGIC_BYTE:
            raise SerializationError("Unknown magic byte!")
        return int.from_bytes(value[1:HEADER_SIZE], "big")

    @staticmethod
    def build(schema_id: int, body: bytes, message_indexes: list[int] | None = None) -> bytes:
        """``0``, the id, the Protobuf message indexes when given, the body."""
        header = bytes((MAGIC_BYTE,)) + schema_id.to_bytes(4, "big")
        if message_indexes is None:
            return header + body
        return header + WireFormat.encode_message_indexes(message_indexes) + body

    @staticmethod
    def encode_message_indexes(indexes: list[int]) -> bytes:
        """The indexes as Confluent writes them: ``[0]`` as one byte ``0``, else a count then each, zigzag varints."""
        if indexes == [0]:
            return b"\x00"
        out = bytearray(_zigzag_varint(len(indexes)))
        for index in indexes:
            out += _zigzag_varint(index)
        return bytes(out)

    @staticmethod
    def read_message_indexes(value: bytes, position: int) -> tuple[list[int], int]:
        """The message indexes starting at ``position`` and the position after them (``[0]`` for a lone ``0``)."""
        count, position = _read_zigzag(value, position)
        if count == 0:
            return [0], position
        if count < 0 or count > len(value):
            raise SerializationError(f"Invalid message indexes count: {count}")
        indexes = []
        for _ in range(count):
            index, position = _read_zigzag(value, position)
            indexes.append(index)
        return indexes, position


def _zigzag_varint(value: int) -> bytes:
    number = (value << 1) ^ (value >> 63)
    out = bytearray()
    while number & ~0x7F:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _read_zigzag(value: bytes, position: int) -> tuple[int, int]:
    shift = number = 0
    while True:
        if position >= len(value):
            raise SerializationError("Invalid message indexes: the value ends inside a varint")
        byte = value[position]
        position += 1
        number |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (number >> 1) ^ -(number & 1), position
        shift += 7
        if shift > 63:
            raise SerializationError("Invalid message indexes: a varint longer than 10 bytes")
