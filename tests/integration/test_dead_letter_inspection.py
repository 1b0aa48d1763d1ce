"""The DLQ view's reads against a real broker: counts that add up, the newest examples, masked secrets, no side effects.

One DLQ is written once for the module, as the error-aware job writes it
(``local/dead_letters.write_dead_letters``: Connect's headers, the original key, value,
headers and timestamp), plus one record that is not a dead letter. Every figure the view
shows is checked against what was written.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.errors import MASK, SourceRecord, Stage
from airflow_kerr.inspection.backlog import unread_for_group
from airflow_kerr.inspection.consumers import SCRATCH_GROUP, TopicNotFound, scratch_consumer
from airflow_kerr.inspection.discovery import list_dead_letter_queues
from airflow_kerr.inspection.samples import sample_dead_letters
from airflow_kerr.inspection.selection import NONE_KEY, InvalidSelection, Selection
from airflow_kerr.inspection.summary import DeadLetterSummaryChunk, summarize
from airflow_kerr.kafka.offsets import group_offsets
from airflow_kerr.local.dead_letters import Failure, write_dead_letters

#: An hour ago: the records keep a real event time, well inside the broker's retention (7 days), which
#: deletes a record whose timestamp is older (noida-db within a second of the write; Apache Kafka within 5 min).
T0 = int(time.time() * 1000) - 3_600_000
CLASSES = (ValueError, KeyError, TypeError)
STAGES = (Stage.TRANSFORMATION, Stage.VALUE_CONVERTER)
COUNT = 240
SECRET = "hunter2-Zq"


@dataclass(frozen=True)
class Written:
    """One dead letter as written: what the view must show for it."""

    exception_class: str
    stage: str
    source_topic: str
    timestamp_ms: int
    value: dict[str, Any]


@dataclass(frozen=True)
class Dlq:
    topic: str
    config: dict[str, Any]
    letters: tuple[Written, ...]
    #: Records that are not dead letters (no error headers), with their timestamps.
    plain: tuple[int, ...]

    @property
    def total(self) -> int:
        return len(self.letters) + len(self.plain)


def _failure(i: int) -> tuple[Failure, Written]:
    cls = CLASSES[i % 3]
    stage = STAGES[i % 2]
    source = "payments" if i % 5 == 0 else "orders"
    value = {"id": f"o-{i:05d}", "amount": -i, "client": {"sasl.password": SECRET}}
    record = SourceRecord(
        source,
        i % 4,
        1000 + i,
        T0 + i * 1000,
        key=f"o-{i:05d}".encode(),
        value=json.dumps(value).encode(),
        headers=[("trace-id", b"%08d" % i), ("sasl.password", SECRET.encode())],
    )
    error = cls(f"order {i} failed with ssl.key.password={SECRET}")
    masked = {**value, "client": {"sasl.password": MASK}}
    return Failure(record, stage, error), Written(cls.__name__, stage.value, source, T0 + i * 1000, masked)


@pytest.fixture(scope="module")
def dlq(kafka_bootstrap: str) -> Iterator[Dlq]:
    config: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap}
    topic = f"t-inspection-{uuid.uuid4().hex[:8]}.dlq"
    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(30)
    producer = Producer(config)  # first, so the oldest record is a partition's first
    producer.produce(topic, key=b"plain", value=b"not a dead letter", timestamp=T0 - 5000, partition=0)
    assert producer.flush(30) == 0
    pairs = [_failure(i) for i in range(COUNT)]
    write_dead_letters(config, topic, [failure for failure, _ in pairs])
    yield Dlq(topic, config, tuple(written for _, written in pairs), (T0 - 5000,))


def _chunks(dlq: Dlq, selection: Selection | None = None, max_records: int = 70) -> list[DeadLetterSummaryChunk]:
    selection = selection or Selection()
    chunks = [summarize(dlq.config, dlq.topic, selection=selection, max_records=max_records, max_seconds=10.0)]
    while not chunks[-1].complete:
        assert len(chunks) < 50
        chunks.append(
            summarize(
                dlq.config,
                dlq.topic,
                selection=selection,
                cursor=chunks[-1].cursor,
                max_records=max_records,
                max_seconds=10.0,
            )
        )
    return chunks


def _added(chunks: list[DeadLetterSummaryChunk]) -> tuple[dict[str, Counter[str]], Counter[str], int, int]:
    counts: dict[str, Counter[str]] = {}
    timeline: Counter[str] = Counter()
    for chunk in chunks:
        for name, values in chunk.counts.items():
            counts.setdefault(name, Counter()).update(values)
        timeline.update(chunk.timeline)
    return counts, timeline, sum(c.matched for c in chunks), sum(c.malformed for c in chunks)


def test_chunked_summary_adds_up_to_what_was_written(dlq: Dlq) -> None:
    """The page's figures, added over several bounded chunks, are exactly the DLQ's content, and it says when done."""
    chunks = _chunks(dlq)
    assert len(chunks) >= 3
    assert all(c.cursor is not None and not c.complete for c in chunks[:-1])
    assert chunks[-1].complete and chunks[-1].cursor is None
    assert all(c.read <= 70 for c in chunks) and sum(c.read for c in chunks) == dlq.total
    assert [c.position for c in chunks] == [sum(c.read for c in chunks[: i + 1]) for i in range(len(chunks))]
    assert {c.total for c in chunks} == {dlq.total}
    assert {(c.bucket_ms, c.oldest_ms, c.newest_ms) for c in chunks} == {(10_000, T0 - 5000, T0 + (COUNT - 1) * 1000)}
    counts, timeline, matched, malformed = _added(chunks)
    assert matched == dlq.total and malformed == len(dlq.plain)
    assert counts["exception_class"] == Counter(
        {**Counter(w.exception_class for w in dlq.letters), NONE_KEY: len(dlq.plain)}
    )
    assert counts["stage"] == Counter({**Counter(w.stage for w in dlq.letters), NONE_KEY: len(dlq.plain)})
    assert counts["source_topic"] == Counter({**Counter(w.source_topic for w in dlq.letters), NONE_KEY: 1})
    assert counts["pipeline"] == Counter({"orders": COUNT, NONE_KEY: 1})
    expected_timeline = Counter(str(ts - ts % 10_000) for ts in [w.timestamp_ms for w in dlq.letters] + list(dlq.plain))
    assert timeline == expected_timeline


def test_a_selection_filters_counts_and_samples(dlq: Dlq) -> None:
    """Choosing one class, stage and time window shows only those failures, in counts and in examples alike."""
    start, end = T0 + 30_000, T0 + 150_000
    selection = Selection.from_query(
        {"exception_class": "KeyError", "stage": "value_converter", "start": str(start), "end": str(end)}
    )
    expected = [
        w
        for w in dlq.letters
        if w.exception_class == "KeyError" and w.stage == "VALUE_CONVERTER" and start <= w.timestamp_ms < end
    ]
    counts, timeline, matched, malformed = _added(_chunks(dlq, selection, max_records=100))
    assert matched == len(expected) > 5
    assert counts["exception_class"] == {"KeyError": len(expected)}
    assert counts["stage"] == {"VALUE_CONVERTER": len(expected)}
    assert sum(timeline.values()) == len(expected)
    assert malformed == len(dlq.plain)  # malformed counts every record read, selected or not
    sample = sample_dead_letters(dlq.config, dlq.topic, selection=selection, limit=4)
    newest = sorted(expected, key=lambda w: w.timestamp_ms, reverse=True)[:4]
    assert [r.timestamp_ms for r in sample.records] == [w.timestamp_ms for w in newest]
    assert all(r.exception_class == "KeyError" and r.stage == "VALUE_CONVERTER" for r in sample.records)


def test_offsets_and_a_pattern_select_as_in_a_replay(dlq: Dlq) -> None:
    """The replay's criteria work on the page's reads too: the same offsets and pattern pick the same dead letters."""
    selection = Selection(start_offset=2, end_offset=9, exception_pattern=re.compile("^Key"))
    consumer = scratch_consumer(dlq.config)  # never commits, so the page-reads test below stays true
    try:
        expected = []
        for p in range(3):
            low, high = consumer.get_watermark_offsets(TopicPartition(dlq.topic, p), timeout=10)
            consumer.assign([TopicPartition(dlq.topic, p, max(low, 2))])
            for _ in range(max(0, min(high, 9) - max(low, 2))):
                message = consumer.poll(10)
                assert message is not None and message.error() is None
                found = dict(message.headers() or []).get("__connect.errors.exception.class.name")
                if isinstance(found, bytes) and found.startswith(b"Key"):
                    expected.append((p, message.offset()))
    finally:
        consumer.close()
    _, _, matched, malformed = _added(_chunks(dlq, selection, max_records=5))
    assert matched == len(expected) > 0
    assert malformed == 0  # the plain record at offset 0 is outside the range: not even read
    sample = sample_dead_letters(dlq.config, dlq.topic, selection=selection, limit=100)
    assert sorted((r.partition, r.offset) for r in sample.records) == sorted(expected)
    with pytest.raises(InvalidSelection, match=r"^headers=.*the DLQ count reads only the error headers"):
        summarize(dlq.config, dlq.topic, selection=Selection(headers={"trace-id": "00000001"}))


def test_samples_are_the_newest_decoded_with_their_origin(dlq: Dlq) -> None:
    """The examples are the latest failures, newest first, with the value as written and where it came from."""
    sample = sample_dead_letters(dlq.config, dlq.topic, limit=5)
    newest = sorted(dlq.letters, key=lambda w: w.timestamp_ms, reverse=True)[:5]
    assert [r.timestamp_ms for r in sample.records] == [w.timestamp_ms for w in newest]
    for record, written in zip(sample.records, newest, strict=True):
        shown = record.to_dict()
        assert shown["value"]["json"] and json.loads(shown["value"]["text"]) == written.value
        assert shown["key"]["text"] == written.value["id"]
        assert shown["source"]["topic"] == written.source_topic
        assert shown["source"]["offset"] == 1000 + int(written.value["id"][2:])
        assert (shown["exception_class"], shown["stage"], shown["pipeline"]) == (
            written.exception_class,
            written.stage,
            "orders",
        )
        assert shown["format"] == "connect" and shown["task_id"] == 0
    everything = sample_dead_letters(dlq.config, dlq.topic, limit=1000)
    assert everything.complete and everything.scanned == dlq.total and len(everything.records) == dlq.total


def test_secrets_are_masked_everywhere_a_record_shows_them(dlq: Dlq) -> None:
    """A password in a header, in the JSON value or quoted in the error message never reaches the page."""
    sample = sample_dead_letters(dlq.config, dlq.topic, limit=3)
    page = json.dumps(sample.to_dict())
    assert SECRET not in page
    record = sample.records[0].to_dict()
    headers = {h["name"]: h["value"] for h in record["headers"]}
    assert headers["sasl.password"] == MASK
    assert headers["trace-id"] is not None and headers["trace-id"] != MASK
    assert f"ssl.key.password={MASK}" in record["exception_message"]
    assert f"ssl.key.password={MASK}" in headers["__connect.errors.exception.message"]
    assert f"ssl.key.password={MASK}" in record["stacktrace"]
    assert json.loads(record["value"]["text"])["client"]["sasl.password"] == MASK


def test_unread_for_group_counts_from_committed_offsets(dlq: Dlq) -> None:
    """The page says how much a replay group has left: from its committed offsets, or all of it when it has none."""
    group = f"replay-{uuid.uuid4().hex[:8]}"
    before = unread_for_group(dlq.config, dlq.topic, group)
    assert before.unread == before.total == dlq.total
    assert before.committed == {0: None, 1: None, 2: None}
    _commit(dlq, group, {0: 5, 1: 3})
    after = unread_for_group(dlq.config, dlq.topic, group)
    assert after.committed == {0: 5, 1: 3, 2: None}
    assert after.unread == dlq.total - 8
    assert after.to_dict()["committed"] == {"0": 5, "1": 3, "2": None}


def _commit(dlq: Dlq, group: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({**dlq.config, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(dlq.topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def test_discovery_finds_dead_letter_queues_not_plain_topics(dlq: Dlq, create_topic: Any, unique_topic: str) -> None:
    """The topic list offers DLQs found by their error headers, plus configured ones even when missing."""
    plain = create_topic(unique_topic, 2)
    producer = Producer(dlq.config)
    producer.produce(plain, key=b"k", value=b"v", headers=[("trace-id", b"1")])
    assert producer.flush(30) == 0
    missing = f"missing-{uuid.uuid4().hex[:8]}.dlq"
    found = {t.name: t for t in list_dead_letter_queues(dlq.config, [missing, plain])}
    assert found[missing].to_dict() == {
        "name": missing,
        "partitions": 0,
        "records": 0,
        "configured": True,
        "discovered": False,
        "exists": False,
    }
    assert (found[plain].configured, found[plain].discovered, found[plain].exists) == (True, False, True)
    assert found[plain].records == 1 and found[plain].partitions == 2
    assert found[dlq.topic].to_dict() == {
        "name": dlq.topic,
        "partitions": 3,
        "records": dlq.total,
        "configured": False,
        "discovered": True,
        "exists": True,
    }
    unconfigured = {t.name for t in list_dead_letter_queues(dlq.config)}
    assert dlq.topic in unconfigured and plain not in unconfigured and missing not in unconfigured


def test_a_spring_dlt_is_looked_at_before_plain_topics(dlq: Dlq) -> None:
    """Spring's ``<topic>.DLT`` names count as DLQ-like: with room to look at one topic, that is the one."""
    from airflow_kerr.local.sample_dlq import seed_dead_letters

    # "000-" sorts first among the session broker's DLQ-like names; plain names would come after all of them.
    dlt = f"000-kerr-{uuid.uuid4().hex[:8]}.DLT"
    seed_dead_letters(dlq.config["bootstrap.servers"], dlt, count=2)

    found = {t.name: t for t in list_dead_letter_queues(dlq.config, max_topics=1)}

    assert set(found) == {dlt} and found[dlt].discovered and found[dlt].records == 2


def test_looking_moves_no_group_and_commits_nothing(dlq: Dlq) -> None:
    """Opening the page never changes a replay's position, and leaves no group behind that committed."""
    group = f"replay-{uuid.uuid4().hex[:8]}"
    _commit(dlq, group, {0: 7, 2: 1})
    partitions = [(dlq.topic, p) for p in range(3)]
    before = group_offsets(dlq.config, group, partitions)
    admin = AdminClient(dlq.config)
    groups_before = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    config = {**dlq.config, "group.id": group, "enable.auto.commit": True}  # a connection's extra may carry these
    list_dead_letter_queues(config, [dlq.topic])
    _chunks(Dlq(dlq.topic, config, dlq.letters, dlq.plain))
    sample_dead_letters(config, dlq.topic, limit=1000)
    unread_for_group(config, dlq.topic, group)
    assert group_offsets(dlq.config, group, partitions) == before == {partitions[0]: 7, partitions[2]: 1}
    assert group_offsets(dlq.config, SCRATCH_GROUP, partitions) == {}
    groups_after = {g.group_id for g in admin.list_consumer_groups().result(30).valid}
    assert groups_after - groups_before <= {group}
    assert not any(g.startswith("kerr-dlq-view-") for g in groups_after)


def test_records_written_during_a_count_do_not_change_it(dlq: Dlq) -> None:
    """A count under way covers the DLQ as it was when it began, so its figures add up to its total."""
    other = Dlq(f"{dlq.topic}.copy", dlq.config, dlq.letters[:30], ())
    admin = AdminClient(dlq.config)
    for future in admin.create_topics([NewTopic(other.topic, 2, 1)]).values():
        future.result(30)
    write_dead_letters(other.config, other.topic, [_failure(i)[0] for i in range(30)])
    first = summarize(other.config, other.topic, max_records=10)
    write_dead_letters(other.config, other.topic, [_failure(i)[0] for i in range(30, 40)])
    chunks = [first]
    while not chunks[-1].complete:
        chunks.append(summarize(other.config, other.topic, cursor=chunks[-1].cursor, max_records=10))
    assert {c.total for c in chunks} == {30}
    assert sum(c.read for c in chunks) == 30 == sum(c.matched for c in chunks)


def test_bad_cursor_and_missing_topic_are_told_apart(dlq: Dlq) -> None:
    """A mangled cursor is the caller's mistake (400); a topic that is not there is a missing page (404)."""
    first = summarize(dlq.config, dlq.topic, max_records=10)
    assert first.cursor is not None
    with pytest.raises(InvalidSelection, match=r"^cursor="):
        summarize(dlq.config, dlq.topic, cursor=first.cursor[:-6])
    with pytest.raises(InvalidSelection, match="another selection"):
        summarize(
            dlq.config, dlq.topic, cursor=first.cursor, selection=Selection(exception_classes=frozenset({"KeyError"}))
        )
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    for read in (summarize, sample_dead_letters):
        with pytest.raises(TopicNotFound, match=missing):
            read(dlq.config, missing)
    with pytest.raises(TopicNotFound):
        unread_for_group(dlq.config, missing, "g")
