"""``DeadLetterQueueEventTrigger``: DLQ growth as asset events, for an ``AssetWatcher`` (Airflow 3.3's ack mode)."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_kerr.kafka.dead_letters import DeadLetterGrowth, dlq_end_offsets, dlq_growth, growth_summary
from airflow_kerr.kafka.offsets import offset_consumer
from airflow_kerr.kafka.shared_clients import SharedClients, SharedCursor, Subject
from airflow_kerr.kafka.watch_cursor import WatchCursor, WatchPosition
from airflow_kerr.triggers.dead_letter_queue import dead_letter_result
from airflow_kerr.triggers.watch import CursorStream, WatchTrigger, default_cursor_group


class DeadLetterGrowthStream(CursorStream):
    """Announces each time ``topic`` gained at least ``min_records`` since the last announced end offsets.

    The cursor is group ``cursor_group``'s committed offsets on the DLQ: the ends already
    announced and stored. A watch with no cursor starts at the topic's ends when it first
    runs (the backlog before is not news), and saves them at once.
    """

    def __init__(
        self,
        *,
        topic: str,
        cursor_group: str,
        min_records: int,
        sample_size: int,
        count_limit: int,
        kafka_config_id: str,
        poll_interval: float,
    ) -> None:
        super().__init__(kafka_config_id=kafka_config_id, poll_interval=poll_interval)
        self.topic = topic
        self.cursor_group = cursor_group
        self.min_records = min_records
        self.sample_size = sample_size
        self.count_limit = count_limit
        self._consumer: Any = None

    def share(self, clients: SharedClients) -> Subject | None:
        clients.watch_dlq(self.topic, self.poll_interval)
        return (self.topic, None)

    def unshare(self, clients: SharedClients) -> None:
        clients.unwatch_dlq(self.topic, self.poll_interval)

    def cursor(self) -> WatchCursor | SharedCursor:
        if self._consumer is None and self.shared is None:
            self._consumer = offset_consumer(self.kafka_config)
        return self.cursor_on(self.cursor_group, self.topic)

    def first_position(self) -> WatchPosition:
        if self.shared is not None:
            return WatchPosition(self.shared.dlq_ends(self.topic))  # read when the watch came (see open_stream)
        return WatchPosition(dlq_end_offsets(self.kafka_config, self.topic, consumer=self._consumer))

    def observe(self) -> list[tuple[dict[str, Any], WatchPosition]]:
        if self.shared is not None:  # the ends the shared clients read for every watched DLQ at once
            baseline = self.position.offsets
            ends = self.shared.dlq_ends(self.topic)
            count = sum(max(0, end - baseline.get(partition, 0)) for partition, end in ends.items())
            growth = DeadLetterGrowth(count, ends, dict(baseline))
        else:
            growth = dlq_growth(self.kafka_config, self.topic, self.position.offsets, self._consumer)
        if growth.count < self.min_records:
            return []
        summary = growth_summary(self.kafka_config, self.topic, growth, self.sample_size, self.count_limit)
        event = {"status": "grew", **dead_letter_result(self.topic, growth, summary.pop("sample")), **summary}
        return [(event, WatchPosition(growth.ends))]

    async def aclose(self) -> None:
        await super().aclose()
        if self._consumer is not None:
            await asyncio.to_thread(self._consumer.close)


class DeadLetterQueueEventTrigger(WatchTrigger):
    """For an ``AssetWatcher``: fires when a DLQ topic gained at least ``min_records`` records.

    The event's payload (also the asset event's extra): ``topic``, ``count`` (records since the
    last event), ``baseline`` and ``ends`` (end offsets per partition before and after: the
    key to tell a repeated event), a ``sample`` of the newest dead letters (stage, exception
    class and message, source coordinates), ``counts_by_class`` over the newest
    ``count_limit`` of them (each writer's as ``parse_dead_letter`` names it; ``unknown`` for
    KIP-1191 and header-less dead letters, which name no class) and ``counts_cover`` (how
    many that is). Delivery is at least once (see :mod:`airflow_kerr.triggers.watch`);
    ``cursor_group`` (default ``kerr-watch.dlq.<topic>.<hash of the settings>``) is the
    consumer group that keeps the position.
    """

    fields = ("topic", "kafka_config_id", "poll_interval", "min_records", "sample_size", "count_limit", "cursor_group")
    stream_fields = fields

    def __init__(
        self,
        topic: str,
        kafka_config_id: str = "kafka_default",
        poll_interval: float = 5.0,
        min_records: int = 1,
        sample_size: int = 5,
        count_limit: int = 1000,
        cursor_group: str | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.kafka_config_id = kafka_config_id
        self.poll_interval = poll_interval
        self.min_records = min_records
        self.sample_size = sample_size
        self.count_limit = count_limit
        watch = {"topic": topic, "min_records": min_records, "sample_size": sample_size, "count_limit": count_limit}
        self.cursor_group = cursor_group or default_cursor_group("dlq", topic, watch)

    @classmethod
    def stream(cls, settings: dict[str, Any]) -> CursorStream:
        return DeadLetterGrowthStream(**settings)
