"""Records too large for Kafka: their size against the limits that refuse them, and what the replay does instead.

Two limits refuse a record for its size. librdkafka checks ``message.max.bytes`` (the
producer's setting, 1,000,000 by default) when ``produce()`` is called and raises
``MSG_SIZE_TOO_LARGE``; the broker checks the topic's ``max.message.bytes`` (1,048,588 on
Apache Kafka and noida-db) against the record batch and answers ``MESSAGE_TOO_LARGE`` (also
``MSG_SIZE_TOO_LARGE`` in librdkafka, ``RecordTooLargeException`` in Java) in the delivery
report, which fails the transaction. A dead letter that was written just under a limit can
cross it once the replay adds its lineage headers, and a record the broker refuses aborts
the batch every time it is retried: it must never be written as it is again.

So the replay checks each record it is about to write against the lower of the two limits
before producing (:meth:`SizeLimits.oversize`: no abort at all), and remembers the DLQ
coordinates of any record the broker refused anyway (:meth:`SizeLimits.learn`), so the batch,
read again, parks that record without its value; if even that copy is refused, it is
dropped, counted and logged with its coordinates. The value is not lost: the DLQ record at
those coordinates still holds it, until the DLQ's retention.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

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
#: How far under a limit key and value may be before their headers are counted too: the headers the
#: replay writes are small, so counting them for every record would cost the hot loop for nothing.
HEADROOM = 64 * 1024

#: librdkafka's codes for a record (or record batch) too large: the client's own check and the
#: broker's MESSAGE_TOO_LARGE share MSG_SIZE_TOO_LARGE; RECORD_LIST_TOO_LARGE is the broker's for a batch.
SIZE_ERROR_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})

#: Levels of a refused record: written without its value next time; then not written at all.
WITHOUT_VALUE = 1
NOT_WRITTEN = 2


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


class SizeRefusal(NamedTuple):
    """A record the client or the broker refused for its size: the DLQ coordinates it was read at, and why."""

    partition: int
    offset: int
    topic: str
    detail: str


def dlq_coordinates(headers: Sequence[Header] | None, source_header: str) -> tuple[int, int] | None:
    """The DLQ partition and offset in a written record's lineage header ``<dlq>/<partition>/<offset>``."""
    for name, raw in headers or ():
        if name == source_header and raw:
            parts = raw.rsplit(b"/", 2)
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                return int(parts[1]), int(parts[2])
    return None


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


class SizeLimits:
    """The size each topic accepts, and the DLQ records refused for their size so far in this run.

    ``topic_limit`` answers a topic's ``max.message.bytes`` from the broker (None when it
    cannot be read); it is asked once per topic, and only once a record comes near the
    producer's limit or the broker refused one, so a replay of small records never asks.
    """

    def __init__(self, producer_limit: int, topic_limit: Callable[[str], int | None]) -> None:
        self.producer_limit = producer_limit
        self._topic_limit = topic_limit
        #: Each topic's ``max.message.bytes`` (None: not known) once asked.
        self._limits: dict[str, int | None] = {}
        #: The lowest limit known: a record whose key and value are HEADROOM under it needs no closer look.
        self.floor = producer_limit
        #: DLQ coordinates of refused records: the level reached (WITHOUT_VALUE or NOT_WRITTEN) and why.
        self.refused: dict[tuple[int, int], tuple[int, str]] = {}

    def topic_limit(self, topic: str) -> int | None:
        """The topic's ``max.message.bytes``, asked of the broker once; None when it cannot be read."""
        if topic not in self._limits:
            limit = self._limits[topic] = self._topic_limit(topic)
            if limit is not None:
                self.floor = min(self.floor, limit - BATCH_OVERHEAD)
        return self._limits[topic]

    def oversize(self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> str | None:
        """Why the record is too large for ``topic`` (``1,000,203 bytes > 1,000,000``), or None when it fits.

        Both limits are checked to the byte: librdkafka's ``message.max.bytes`` on the record
        as librdkafka counts it, and the topic's ``max.message.bytes`` on its batch.
        """
        if (len(value) if value else 0) + (len(key) if key else 0) + HEADROOM <= self.floor:
            return None
        size = record_size(key, value, headers)
        if size > self.producer_limit:
            return f"{size:,} bytes > {self.producer_limit:,}"
        limit = self.topic_limit(topic)
        if limit is not None:
            batch = batch_size(key, value, headers)
            if batch > limit:
                return f"{batch:,} bytes > {limit:,} (max.message.bytes of {topic})"
        return None

    def learn(self, refusals: Sequence[SizeRefusal]) -> bool:
        """Take the broker's (or client's) refusals: each refused record goes one level down; True if any did.

        The refused topic's limit is looked up too, so the pre-check catches the next such record.
        """
        moved = False
        for refusal in refusals:
            where = (refusal.partition, refusal.offset)
            level = self.refused.get(where, (0, ""))[0]
            if level < NOT_WRITTEN:
                self.refused[where] = (level + 1, refusal.detail)
                moved = True
            self.topic_limit(refusal.topic)
        return moved
