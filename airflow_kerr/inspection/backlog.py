"""A consumer group's backlog on a DLQ (how much a replay has left), from its committed offsets only.

The group is never joined: its offsets are read with an OffsetFetch from a consumer that
never commits, so looking neither moves the group nor rebalances its members.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from airflow_kerr.inspection.consumers import offset_ranges, scratch_consumer
from airflow_kerr.kafka.offsets import offset_consumer


@dataclass(frozen=True)
class GroupBacklog:
    """How far a consumer group (a replay's) is behind on a DLQ, from its committed offsets only."""

    group: str
    committed: Mapping[int, int | None]
    unread: int
    total: int

    def to_dict(self) -> dict[str, Any]:
        """``committed`` is keyed by partition number as text (JSON object keys are text)."""
        return {
            "group": self.group,
            "committed": {str(p): offset for p, offset in sorted(self.committed.items())},
            "unread": self.unread,
            "total": self.total,
        }


def unread_for_group(
    kafka_config: Mapping[str, Any], topic: str, group_id: str, *, timeout_s: float = 10.0
) -> GroupBacklog:
    """Records of ``topic`` the group has not read: from its committed offset (or the first one, when it
    has none or one retention already deleted) to the end, summed over partitions.

    The group's offsets are read with an OffsetFetch from a consumer that never joins the
    group and never commits, so looking does not move the group nor rebalance its members.
    """
    scratch = scratch_consumer(kafka_config)
    try:
        ranges = offset_ranges(scratch, topic, timeout_s)
    finally:
        scratch.close()
    settings = {**kafka_config, "group.id": group_id, "enable.auto.offset.store": False}
    lookup = offset_consumer(settings)
    try:
        found = lookup.committed([TopicPartition(topic, p) for p in ranges], timeout=timeout_s)
    finally:
        lookup.close()
    committed: dict[int, int | None] = dict.fromkeys(ranges)
    for tp in found:
        if tp.offset >= 0:
            committed[tp.partition] = tp.offset
    unread = 0
    for partition, (low, high) in ranges.items():
        offset = committed[partition]
        start = low if offset is None else min(max(offset, low), high)
        unread += high - start
    return GroupBacklog(
        group=group_id,
        committed=committed,
        unread=unread,
        total=sum(high - low for low, high in ranges.values()),
    )
