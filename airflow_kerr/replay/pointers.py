"""Resolve dead letters that point at their original instead of copying it.

A KIP-1191 dead letter written with ``errors.deadletterqueue.copy.record.enable=false`` (its
default), and our job's dead letter of a record too large to copy, carry no key and no
value: only the original's topic, partition and offset. The replay reads the original
there, ``read_committed``, and replays that.

The original can be gone: retention or DeleteRecords moved the log start past it, compaction
removed it, it was written by a transaction that aborted, the offset lies past the end of
the partition, or the topic no longer exists. Each case gives a :class:`Gone` saying which,
and the replay parks the dead letter with reason ``source_gone`` and the coordinates.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from airflow_kerr.kafka.offsets import offset_consumer

#: A record's coordinates: topic, partition, offset.
Coordinates = tuple[str, int, int]
#: An offset further than this past the last one read is reached by seeking rather than reading through.
SEEK_GAP = 1_000
#: Records asked of librdkafka per ``consume`` call.
READ_BATCH = 500


@dataclass(frozen=True)
class Gone:
    """Why the original record cannot be read at its coordinates."""

    detail: str


class PointerReader:
    """Reads original records by their coordinates, with one assign-only ``read_committed`` consumer.

    Never joins a group and never commits. Offsets of one partition are read in order, reading
    through short gaps and seeking across long ones; a partition whose records do not arrive
    within ``timeout_s`` (an open transaction holds them back) gives :class:`Gone` for the rest.
    """

    def __init__(self, kafka_config: Mapping[str, Any], timeout_s: float = 10.0) -> None:
        self._consumer: Consumer = offset_consumer(
            {**kafka_config, "isolation.level": "read_committed", "enable.partition.eof": True}
        )
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._consumer.close()

    def read(self, wanted: Iterable[Coordinates]) -> dict[Coordinates, Any]:
        """Each coordinate's record (a confluent-kafka ``Message``) or a :class:`Gone`."""
        by_partition: dict[tuple[str, int], set[int]] = {}
        for topic, partition, offset in wanted:
            by_partition.setdefault((topic, partition), set()).add(offset)
        found: dict[Coordinates, Any] = {}
        for (topic, partition), offsets in by_partition.items():
            found.update(self._read_partition(topic, partition, sorted(offsets)))
        return found

    def _read_partition(self, topic: str, partition: int, offsets: list[int]) -> dict[Coordinates, Any]:
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=self._timeout_s, cached=False
            )
        except KafkaException as error:
            why = Gone(f"{topic}/{partition} cannot be read: {error.args[0].str() if error.args else error}")
            return {(topic, partition, o): why for o in offsets}
        found: dict[Coordinates, Any] = {}
        pending: list[int] = []
        for offset in offsets:
            if offset < low:
                found[(topic, partition, offset)] = Gone(
                    f"{topic}/{partition}/{offset} is before the log start offset {low} "
                    "(deleted by retention or DeleteRecords)"
                )
            elif offset >= high:
                found[(topic, partition, offset)] = Gone(
                    f"{topic}/{partition}/{offset} is past the end of the partition (offset {high})"
                )
            else:
                pending.append(offset)
        if pending:
            found.update(self._read_offsets(topic, partition, pending))
        return found

    def _read_offsets(self, topic: str, partition: int, pending: list[int]) -> dict[Coordinates, Any]:
        """Read ``pending`` (sorted, all inside the partition) in one pass, seeking across long gaps."""
        found: dict[Coordinates, Any] = {}
        consumer = self._consumer
        consumer.assign([TopicPartition(topic, partition, pending[0])])
        deadline = time.monotonic() + self._timeout_s
        index = 0
        try:
            while index < len(pending) and time.monotonic() < deadline:
                for message in consumer.consume(READ_BATCH, 0.2):
                    error = message.error()
                    if error is not None:
                        # The end of what read_committed lets us read now: below it a wanted offset is
                        # missing for good; from it on, an open transaction holds the record back.
                        if error.code() == KafkaError._PARTITION_EOF:
                            stable = message.offset() or 0
                            for offset in pending[index:]:
                                found[(topic, partition, offset)] = (
                                    _missing(topic, partition, offset)
                                    if offset < stable
                                    else _held(topic, partition, offset, stable)
                                )
                            index = len(pending)
                        break
                    at = message.offset() or 0
                    while index < len(pending) and pending[index] < at:
                        found[(topic, partition, pending[index])] = _missing(topic, partition, pending[index])
                        index += 1
                    if index < len(pending) and pending[index] == at:
                        found[(topic, partition, at)] = message
                        index += 1
                    if index < len(pending) and pending[index] - at > SEEK_GAP:
                        consumer.assign([TopicPartition(topic, partition, pending[index])])
                        break
                    if index >= len(pending):
                        break
        finally:
            consumer.unassign()
        for offset in pending[index:]:
            found.setdefault(
                (topic, partition, offset),
                Gone(
                    f"{topic}/{partition}/{offset} could not be read within {self._timeout_s:g} s "
                    "(held back by an open transaction?)"
                ),
            )
        return found


def _held(topic: str, partition: int, offset: int, stable: int) -> Gone:
    return Gone(
        f"{topic}/{partition}/{offset} is at or past the last stable offset {stable}: "
        "an open transaction holds it back; replay the dead letter again once it has ended"
    )


def _missing(topic: str, partition: int, offset: int) -> Gone:
    return Gone(
        f"{topic}/{partition}/{offset} is not in the log (removed by compaction, or written by an aborted transaction)"
    )
