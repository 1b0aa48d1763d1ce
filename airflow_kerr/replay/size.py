"""Records too large for Kafka: what the replay does instead of writing them.

Their sizes, to the byte as librdkafka and the broker count them, are in
:mod:`airflow_kerr.kafka.record_size`.

A record over librdkafka's ``message.max.bytes`` is refused at ``produce()``; one over the
topic's ``max.message.bytes`` is refused by the broker in the delivery report, which fails
the transaction. A dead letter that was written just under a limit can
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

from collections.abc import Callable, Sequence
from typing import NamedTuple

from airflow_kerr.errors import Header
from airflow_kerr.kafka.record_size import (
    BATCH_OVERHEAD,
    DEFAULT_MESSAGE_MAX_BYTES,
    SIZE_ERROR_CODES,
    batch_size,
    is_size_error,
    message_max_bytes,
    record_size,
)

__all__ = [
    "DEFAULT_MESSAGE_MAX_BYTES",
    "NOT_WRITTEN",
    "SIZE_ERROR_CODES",
    "WITHOUT_VALUE",
    "SizeLimits",
    "SizeRefusal",
    "batch_size",
    "dlq_coordinates",
    "is_size_error",
    "message_max_bytes",
    "record_size",
]

#: How far under a limit key and value may be before their headers are counted too: the headers the
#: replay writes are small, so counting them for every record would cost the hot loop for nothing.
HEADROOM = 64 * 1024

#: Levels of a refused record: written without its value next time; then not written at all.
WITHOUT_VALUE = 1
NOT_WRITTEN = 2


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
