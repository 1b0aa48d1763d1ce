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
from collections.abc import Mapping
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
        partitions = [p for _, p in topic_partitions(self._consumer, self.topic, self.timeout_s)]
        found = self._consumer.committed([TopicPartition(self.topic, p) for p in partitions], timeout=self.timeout_s)
        committed = [tp for tp in found if tp.offset >= 0]
        if not committed:
            return None
        state: dict[str, Any] | None = None
        for tp in committed:
            if tp.partition == 0 and tp.metadata:
                state = json.loads(tp.metadata)
        return WatchPosition({int(tp.partition): int(tp.offset) for tp in committed}, state)

    def save(self, position: WatchPosition) -> None:
        """Commit ``position`` synchronously; raises the broker's error when the commit fails."""
        metadata = None if position.state is None else json.dumps(position.state, sort_keys=True)
        if metadata is not None and len(metadata.encode()) > MAX_STATE_BYTES:
            raise ValueError(
                f"watch state for group {self.group!r} is {len(metadata.encode())} bytes; "
                f"Kafka keeps at most {MAX_STATE_BYTES} bytes of commit metadata"
            )
        offsets = dict(position.offsets) or {0: 0}
        offsets.setdefault(0, 0)
        partitions = []
        for partition, offset in sorted(offsets.items()):
            if partition == 0 and metadata is not None:
                partitions.append(TopicPartition(self.topic, partition, offset, metadata=metadata))
            else:
                partitions.append(TopicPartition(self.topic, partition, offset))
        self._consumer.commit(offsets=partitions, asynchronous=False)

    def close(self) -> None:
        self._consumer.close()
