"""How large a record is to Kafka, and the errors that refuse one for its size.

Two limits refuse a record for its size. librdkafka checks ``message.max.bytes`` (the
producer's setting, 1,000,000 by default) when ``produce()`` is called and raises
``MSG_SIZE_TOO_LARGE``; the broker checks the topic's ``max.message.bytes`` (1,048,588 on
Apache Kafka and noida-db) against the record batch and answers ``MESSAGE_TOO_LARGE`` (also
``MSG_SIZE_TOO_LARGE`` in librdkafka, ``RecordTooLargeException`` in Java) in the delivery
report. The sizes here are those two checks to the byte, so a record can be judged before
it is produced. Used by the replay (:mod:`airflow_kerr.replay.size`) and the job's DLQ writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError

from airflow_kerr.errors import Header
from airflow_kerr.errors.exceptions import kafka_error_of

#: librdkafka's default ``message.max.bytes``.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: What librdkafka adds to key, value and headers for its ``message.max.bytes`` check (a v2 record's
#: length, attributes, timestamp and offset deltas, key and value lengths, header count, as varints).
RECORD_OVERHEAD = 36
#: A record batch's header: the broker checks ``max.message.bytes`` against the whole batch.
BATCH_OVERHEAD = 61

#: librdkafka's codes for a record (or record batch) too large: the client's own check and the
#: broker's MESSAGE_TOO_LARGE share MSG_SIZE_TOO_LARGE; RECORD_LIST_TOO_LARGE is the broker's for a batch.
SIZE_ERROR_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})


def is_size_error(error: object) -> bool:
    """Whether ``error`` (a ``KafkaError`` or an exception carrying one) refuses a record for its size."""
    code = getattr(kafka_error_of(error), "code", None)
    return code is not None and code() in SIZE_ERROR_CODES


def _varint_size(n: int) -> int:
    """Bytes of ``n`` as a Kafka (zigzag) varint."""
    zigzag = (n << 1) ^ (n >> 63)
    return max(1, (zigzag.bit_length() + 6) // 7)


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> int:
    """The record's size as librdkafka counts it for ``message.max.bytes``, to the byte.

    librdkafka's check: the v2 record's largest overhead (36 bytes), key, value, and each
    header as written (name and value lengths as varints, a null value as length -1).
    """
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, raw in headers or ():
        length = len(name.encode("utf-8", errors="surrogatepass"))
        size += _varint_size(length) + length + (_varint_size(-1) if raw is None else _varint_size(len(raw)) + len(raw))
    return size


def message_max_bytes(kafka_config: Mapping[str, Any]) -> int:
    """The producer's ``message.max.bytes`` from a librdkafka config (its default when unset or unreadable)."""
    try:
        return int(kafka_config.get("message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES))
    except (TypeError, ValueError):
        return DEFAULT_MESSAGE_MAX_BYTES


def batch_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> int:
    """The size of a record batch holding only this record, uncompressed: what the broker checks.

    A record too large for the topic is alone in its batch (librdkafka closes a batch before a
    record that would take it past ``batch.size``), with timestamp and offset deltas of 0.
    """
    body = 3  # attributes, timestamp delta and offset delta
    body += _varint_size(-1) if key is None else _varint_size(len(key)) + len(key)
    body += _varint_size(-1) if value is None else _varint_size(len(value)) + len(value)
    body += _varint_size(len(headers or ()))
    for name, raw in headers or ():
        length = len(name.encode("utf-8", errors="surrogatepass"))
        body += _varint_size(length) + length + (_varint_size(-1) if raw is None else _varint_size(len(raw)) + len(raw))
    return BATCH_OVERHEAD + _varint_size(body) + body
