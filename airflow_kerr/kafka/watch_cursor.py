"""A watcher's durable position: a Kafka consumer group that commits offsets and never joins.

An event trigger behind an ``AssetWatcher`` lives in the triggerer, which may restart at
any moment. What the watcher has already announced must survive that, or a restart either
loses growth that happened while it was down or announces the whole topic again. The
position is kept where a Kafka user looks for positions: the committed offsets of a
consumer group (``kafka-consumer-groups --describe --group kerr-watch...`` shows it, and
deleting the group resets the watcher). A watcher that also has a state (the tolerance
watcher: healthy or breached) keeps it as JSON in the commit's metadata, which Kafka
stores with the offset (``offset.metadata.max.bytes``, 4096 by default).

No Airflow imports: the triggers call this in a worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.kafka.offsets import offset_consumer, topic_partitions

#: Kafka's default ``offset.metadata.max.bytes``: a longer state would be refused by the broker.
MAX_STATE_BYTES = 4096


@dataclass(frozen=True)
class WatchPosition:
    """Offsets per partition of the watched topic, and the watcher's own state (None when it keeps none)."""

    offsets: dict[int, int] = field(default_factory=dict)
    state: dict[str, Any] | None = None


def position_commits(group: str, topic: str, position: WatchPosition) -> list[TopicPartition]:
    """The offsets to commit for ``position``: its state as JSON on partition 0's commit (partition 0 at offset 0
    when it has no offset of its own), so a consumer's commit and an admin client's alter read back alike.

    Raises ValueError naming the group when the state is longer than Kafka keeps (:data:`MAX_STATE_BYTES`).
    """
    metadata = None if position.state is None else json.dumps(position.state, sort_keys=True)
    if metadata is not None and len(metadata.encode()) > MAX_STATE_BYTES:
        raise ValueError(
            f"watch state for group {group!r} is {len(metadata.encode())} bytes; "
            f"Kafka keeps at most {MAX_STATE_BYTES} bytes of commit metadata"
        )
    offsets = {0: 0, **position.offsets}
    return [
        TopicPartition(topic, p, o, metadata=metadata) if p == 0 and metadata else TopicPartition(topic, p, o)
        for p, o in sorted(offsets.items())
    ]


def position_from_commits(found: Iterable[TopicPartition]) -> WatchPosition | None:
    """The position ``found`` (a group's committed offsets, as a consumer or an admin client lists them) holds,
    or None when the group never committed on the topic; the state is partition 0's commit metadata."""
    committed = [tp for tp in found if tp.offset >= 0]
    if not committed:
        return None
    state = next((json.loads(tp.metadata) for tp in committed if tp.partition == 0 and tp.metadata), None)
    return WatchPosition({int(tp.partition): int(tp.offset) for tp in committed}, state)


class WatchCursor:
    """Load and save a :class:`WatchPosition` as group ``group``'s committed offsets on ``topic``.

    The state rides on partition 0's commit; a watcher with a state but no offsets of its
    own commits partition 0 at offset 0.
    """

    def __init__(self, kafka_config: Mapping[str, Any], group: str, topic: str, timeout_s: float = 10.0) -> None:
        self.group = group
        self.topic = topic
        self.timeout_s = timeout_s
        self._consumer: Consumer = offset_consumer({**kafka_config, "group.id": group})

    def load(self) -> WatchPosition | None:
        """The saved position, or None when this group never committed on the topic."""
        partitions = topic_partitions(self._consumer, self.topic, self.timeout_s)
        found = self._consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=self.timeout_s)
        return position_from_commits(found)

    def save(self, position: WatchPosition) -> None:
        """Commit ``position`` synchronously; raises the broker's error when the commit fails."""
        self._consumer.commit(offsets=position_commits(self.group, self.topic, position), asynchronous=False)

    def close(self) -> None:
        self._consumer.close()
