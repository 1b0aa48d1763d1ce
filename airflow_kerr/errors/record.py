"""The consumed record as the error handler sees it: raw bytes plus its Kafka coordinates.

The DLQ copies these bytes unchanged, so the record is kept exactly as it was read,
before any converter touched it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

#: A Kafka header: name and raw value (a header value may be null).
Header = tuple[str, bytes | None]


class TimestampType(StrEnum):
    """Kafka's record timestamp types, spelled as KIP-298's error context writes them."""

    NO_TIMESTAMP_TYPE = "NO_TIMESTAMP_TYPE"
    CREATE_TIME = "CREATE_TIME"
    LOG_APPEND_TIME = "LOG_APPEND_TIME"

    @property
    def java_name(self) -> str:
        """The name Java's ``TimestampType.toString()`` prints, used in Connect's log line."""
        return _JAVA_NAMES[self]

    @classmethod
    def from_code(cls, code: int) -> TimestampType:
        """Map the client's numeric type (confluent-kafka: 0 none, 1 create, 2 log append)."""
        return {1: cls.CREATE_TIME, 2: cls.LOG_APPEND_TIME}.get(code, cls.NO_TIMESTAMP_TYPE)


_JAVA_NAMES = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


@dataclass(slots=True)
class SourceRecord:
    """A record read from Kafka, with its key, value and headers as raw bytes.

    ``timestamp`` is epoch milliseconds, or ``None`` when the record has none.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int | None = None
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    key: bytes | None = None
    value: bytes | None = None
    headers: list[Header] = field(default_factory=list)

    @classmethod
    def from_message(cls, message: Any) -> SourceRecord:
        """Build from a confluent-kafka ``Message`` (duck-typed, so this module needs no client)."""
        ts_type, ts = message.timestamp()
        kind = TimestampType.from_code(ts_type)
        raw_headers = message.headers() or []
        return cls(
            topic=message.topic(),
            partition=message.partition(),
            offset=message.offset(),
            timestamp=None if kind is TimestampType.NO_TIMESTAMP_TYPE or ts < 0 else ts,
            timestamp_type=kind,
            key=message.key(),
            value=message.value(),
            headers=[(name, _header_bytes(value)) for name, value in raw_headers],
        )


def _header_bytes(value: bytes | str | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return value.encode("utf-8")
