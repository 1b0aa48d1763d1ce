"""Samples: the newest dead letters matching a selection, read backwards from the end and decoded for display.

Only the records returned are decoded and masked (:mod:`airflow_kerr.inspection.payloads`;
keys and values in a Schema Registry format through the registry the caller names,
:mod:`airflow_kerr.inspection.registry_values`); matching reads headers the way the summary
does (:mod:`airflow_kerr.inspection.fields`), so a sample and a count agree on what a
selection takes.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.errors.dead_letter import parse_dead_letter
from airflow_kerr.errors.dialects import HEADER_LESS, header_set_name
from airflow_kerr.errors.header_reader import display
from airflow_kerr.errors.masking import mask_named
from airflow_kerr.inspection.consumers import SCAN_BATCH, offset_ranges, scratch_consumer, timestamp_of
from airflow_kerr.inspection.fields import dead_letter_fields
from airflow_kerr.inspection.payloads import Payload, cut_text, describe_payload, shown_text
from airflow_kerr.inspection.registry_values import RegistryValues
from airflow_kerr.inspection.selection import EVERYTHING, Selection


@dataclass(frozen=True)
class SampledDeadLetter:
    """One dead letter as the view shows it, parsed by :func:`parse_dead_letter`, secrets masked."""

    partition: int
    offset: int
    timestamp_ms: int | None
    key: Payload
    value: Payload
    headers: tuple[tuple[str, str | None], ...]
    source_topic: str | None
    source_partition: int | None
    source_offset: int | None
    stage: str | None
    exception_class: str | None
    exception_message: str | None
    stacktrace: str | None
    pipeline: str | None
    task_id: int | None
    format: str | None
    #: The dialect's name, ``"none"`` for a header-less record (``format`` is ``None`` then).
    header_set: str = HEADER_LESS
    #: The class Spring's error handler received; the consumer group (Spring, KIP-1191); the Schema Registry rule.
    wrapper_class: str | None = None
    group: str | None = None
    rule: str | None = None
    #: The original record's timestamp, when the dialect carries it (Spring).
    source_timestamp_ms: int | None = None

    @classmethod
    def from_message(cls, message: Any, registry: RegistryValues | None = None) -> SampledDeadLetter:
        """The record as shown; a framed key or value is decoded through ``registry`` when one is given."""
        headers = message.headers() or []
        letter = parse_dead_letter(
            headers,
            message.key(),
            message.value(),
            topic=message.topic(),
            partition=message.partition(),
            offset=message.offset(),
            timestamp=timestamp_of(message),
        )
        # display(): Spring's big-endian numbers are shown as numbers, any other header as text.
        shown_headers = tuple((name, cut_text(mask_named(name, display(name, value)))) for name, value in headers)
        if registry is None:
            key, value = describe_payload(message.key()), describe_payload(message.value())
        else:
            key = registry.describe(message.key(), is_key=True, source_topic=letter.source_topic)
            value = registry.describe(message.value(), is_key=False, source_topic=letter.source_topic)
        return cls(
            partition=message.partition(),
            offset=message.offset(),
            timestamp_ms=timestamp_of(message),
            key=key,
            value=value,
            headers=shown_headers,
            source_topic=letter.source_topic,
            source_partition=letter.source_partition,
            source_offset=letter.source_offset,
            stage=None if letter.stage is None else letter.stage.value,
            exception_class=letter.exception_class,
            exception_message=shown_text(letter.exception_message),
            stacktrace=shown_text(letter.exception_stacktrace),
            pipeline=letter.connector_name,
            task_id=letter.task_id,
            format=None if letter.header_set is None else letter.header_set.value,
            header_set=header_set_name(letter.header_set),
            wrapper_class=letter.wrapper_class,
            group=letter.group,
            rule=None if letter.rule_name is None else f"{letter.rule_name} ({letter.rule_mode or 'mode unknown'})",
            source_timestamp_ms=letter.source_timestamp,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
            "key": self.key.to_dict(),
            "value": self.value.to_dict(),
            "headers": [{"name": name, "value": value} for name, value in self.headers],
            "source": {"topic": self.source_topic, "partition": self.source_partition, "offset": self.source_offset},
            "stage": self.stage,
            "exception_class": self.exception_class,
            "exception_message": self.exception_message,
            "stacktrace": self.stacktrace,
            "pipeline": self.pipeline,
            "task_id": self.task_id,
            "format": self.format,
            "header_set": self.header_set,
            "wrapper_class": self.wrapper_class,
            "group": self.group,
            "rule": self.rule,
            "source_timestamp_ms": self.source_timestamp_ms,
        }


#: The replay's key and value format when the samples do not settle one: the fix gets the bytes.
BYTES = "bytes"


def replay_format(parts: Iterable[Payload]) -> str:
    """The replay form's format for one part (key or value) of a selection, judged from its sampled records.

    A registry format only when every non-null part was decoded with a schema of that one
    format (and at least one was): a null part says nothing, since the replay passes it as
    it is. Anything else (a plain value, a schema that could not be fetched or did not
    decode, two formats, no sample) is ``bytes``: a fix would otherwise park every record
    of another kind as undecodable.
    """
    formats = {
        None if part.schema is None or part.error is not None else part.schema.format
        for part in parts
        if part.text is not None or part.base64 is not None
    }
    if len(formats) == 1:
        (only,) = formats
        return only or BYTES
    return BYTES


@dataclass(frozen=True)
class DeadLetterSample:
    """The newest matching dead letters, newest first; ``complete`` when every record of the topic was examined."""

    records: tuple[SampledDeadLetter, ...]
    scanned: int
    complete: bool

    def replay_formats(self) -> dict[str, str]:
        """The replay form's ``key_format`` and ``value_format`` for this selection (:func:`replay_format`)."""
        return {
            "key_format": replay_format(record.key for record in self.records),
            "value_format": replay_format(record.value for record in self.records),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": [r.to_dict() for r in self.records],
            "scanned": self.scanned,
            "complete": self.complete,
            "replay_formats": self.replay_formats(),
        }


@dataclass
class _Window:
    """One partition's part of a backward read: ``[low, high)`` is read next; ``first`` bounds what is left."""

    first: int
    low: int
    high: int
    #: The next offset expected in this window (records before it were read).
    next: int = 0
    oldest_seen_ms: int | None = None
    done: bool = field(default=False)


def sample_dead_letters(
    kafka_config: Mapping[str, Any],
    topic: str,
    *,
    selection: Selection = EVERYTHING,
    limit: int = 20,
    max_scan: int = 20_000,
    max_seconds: float = 2.0,
    registry: RegistryValues | None = None,
) -> DeadLetterSample:
    """The newest ``limit`` dead letters matching ``selection``, newest (by timestamp) first.

    Reads backwards from the end of each partition in windows that grow fourfold, until
    ``limit`` are found and no unread record can be newer than them (each partition's
    unread records are older than those read from it, as timestamps grow with offsets), or
    ``max_scan`` records were examined, or ``max_seconds`` passed. Only the records returned
    are decoded (:class:`SampledDeadLetter`), framed keys and values through ``registry``
    when given; matching reads headers the way the summary does.
    """
    selection.refuse_headers("the DLQ sample")
    started = time.monotonic()
    deadline = started + max_seconds
    consumer = scratch_consumer(kafka_config)
    windows: dict[int, _Window] = {}
    found: list[tuple[tuple[int, int, int], Any]] = []
    scanned = 0
    try:
        for partition, (first, end) in offset_ranges(consumer, topic).items():
            low, high = selection.offset_window(first, end, partition)
            windows[partition] = _Window(first=low, low=high, high=high, done=high <= low)
        size = max(2 * limit, 100)
        while limit > 0 and scanned < max_scan and time.monotonic() < deadline:
            open_windows = [p for p, w in windows.items() if not w.done]
            if not open_windows:
                break
            if len(found) >= limit:
                kth = found[limit - 1][0][0]
                if all((windows[p].oldest_seen_ms or -1) <= kth for p in open_windows):
                    break
            share = max(1, min(size, (max_scan - scanned) // len(open_windows)))
            for p in open_windows:
                window = windows[p]
                window.high = window.low
                window.low = max(window.first, window.high - share)
            scanned += _read_windows(consumer, topic, windows, open_windows, selection, found, deadline)
            found.sort(key=lambda item: item[0], reverse=True)
            del found[limit:]
            size *= 4
    finally:
        consumer.close()
    complete = all(w.done for w in windows.values())
    records = tuple(SampledDeadLetter.from_message(message, registry) for _, message in found[: max(0, limit)])
    return DeadLetterSample(records=records, scanned=scanned, complete=complete)


def _read_windows(
    consumer: Consumer,
    topic: str,
    windows: Mapping[int, _Window],
    partitions: list[int],
    selection: Selection,
    found: list[tuple[tuple[int, int, int], Any]],
    deadline: float,
) -> int:
    """Read each partition's current window, adding matches to ``found``; the records examined.

    A window read whole marks its partition done when it reached the partition's first
    offset; one cut short by the deadline leaves the partition unfinished.
    """
    todo = _open_windows(consumer, topic, windows, partitions)
    if not todo:
        return 0
    examined = 0
    try:
        while todo and time.monotonic() < deadline:
            left = sum(todo[p] - max(windows[p].low, windows[p].next) for p in todo)
            wait = min(0.1, max(0.0, deadline - time.monotonic()))
            messages: list[Any] = consumer.consume(max(1, min(SCAN_BATCH, left)), wait)
            examined += _take_batch(consumer, topic, messages, windows, todo, selection, found)
            if not messages and todo:
                for position in consumer.position([TopicPartition(topic, p) for p in todo]):
                    if position.offset >= todo[position.partition]:
                        todo.pop(position.partition)
    finally:
        consumer.unassign()
    for p in partitions:
        window = windows[p]
        if p not in todo and window.low <= window.first:
            window.done = True
    return examined


def _open_windows(
    consumer: Consumer, topic: str, windows: Mapping[int, _Window], partitions: list[int]
) -> dict[int, int]:
    """Assign the partitions whose window holds records, at its low end; each one's high end, to read up to.

    A partition with an empty window has nothing left to read, so it is marked done here
    and never assigned.
    """
    todo = {p: windows[p].high for p in partitions if windows[p].low < windows[p].high}
    for p in partitions:
        if p not in todo:
            windows[p].done = True
    if not todo:
        return todo
    for p in todo:
        windows[p].next = windows[p].low
    consumer.assign([TopicPartition(topic, p, windows[p].low) for p in todo])
    return todo


def _take_batch(
    consumer: Consumer,
    topic: str,
    messages: list[Any],
    windows: Mapping[int, _Window],
    todo: dict[int, int],
    selection: Selection,
    found: list[tuple[tuple[int, int, int], Any]],
) -> int:
    """Examine one batch: note how far each window got and its oldest timestamp, and keep the matches.

    A record outside its window (before it, or at or after the end still to read) is
    skipped; a window read to its end stops being fetched. Returns the records examined.
    """
    examined = 0
    for message in messages:
        if message.error() is not None:
            continue
        p, offset = message.partition(), message.offset()
        if p not in todo or offset >= todo[p] or offset < windows[p].low:
            continue
        examined += 1
        stamp = timestamp_of(message)
        window = windows[p]
        window.next = offset + 1
        if stamp is not None and (window.oldest_seen_ms is None or stamp < window.oldest_seen_ms):
            window.oldest_seen_ms = stamp
        if offset + 1 >= todo[p]:
            todo.pop(p)
            if todo:  # its later records were read in an earlier window: stop fetching them
                consumer.incremental_unassign([TopicPartition(topic, p)])
        if selection.dlq_offsets is not None and not selection.matches_offset(offset, p):
            continue  # another writer's record between the selected run's
        fields = dead_letter_fields(message.headers())
        if selection.matches_time(stamp) and selection.matches_values(
            fields.exception_class, fields.stage, fields.source_topic, fields.pipeline, fields.header_set
        ):
            found.append(((-1 if stamp is None else stamp, offset, -p), message))
    return examined
