"""The DLQ view's reads on one DLQ that several writers share: dialects counted, selected and shown (issue #25, 2).

One topic on the real broker holds the dead letters of five writers, each built byte for
byte as its own source writes it:

- Kafka Connect's ``DeadLetterQueueReporter``
  (``connect/runtime/src/main/java/org/apache/kafka/connect/runtime/errors/DeadLetterQueueReporter.java``,
  ``populateContextHeaders``), by :func:`_connect` below: ``__connect.errors.*``, decimal text;
- Spring Kafka's ``DeadLetterPublishingRecoverer``
  (``spring-kafka/src/main/java/org/springframework/kafka/listener/DeadLetterRecordManager.java``),
  by :func:`tests.dead_letter_writers.spring_dlt`: partition, offset and timestamp as 4/8-byte big-endian ints;
- Confluent Schema Registry's DLQ rule action (``confluent_kafka/schema_registry/rules/dlq/dlq_action.py``),
  by :func:`tests.dead_letter_writers.schema_registry_rule`;
- a KIP-1191 share-group pointer (no key, no value), by :func:`tests.dead_letter_writers.kip_1191`;
- Airflow's ``KafkaSharedStreamTrigger`` (``airflow/providers/apache/kafka/triggers/shared_stream.py``,
  ``_send_to_dlq``), header-less, by :func:`tests.dead_letter_writers.header_less`.

Every figure the view shows for them is checked against what was written.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.inspection.samples import sample_dead_letters
from airflow_kerr.inspection.selection import NONE_KEY, InvalidSelection, Selection
from airflow_kerr.inspection.summary import DeadLetterSummaryChunk, summarize
from tests.clock import RECENT_MS
from tests.dead_letter_writers import (
    SPRING_LISTENER_FAILED,
    Original,
    header_less,
    kip_1191,
    schema_registry_rule,
    spring_dlt,
)

SOURCE = "orders"
#: Past 2**32, so a number read from the wrong bytes (or as text) cannot pass for it.
SPRING_BASE_OFFSET = 123_456_789_012
SPRING_PARTITION = 1
CONNECT_EXCEPTION = "org.apache.kafka.connect.errors.DataException"
SPRING_CAUSE = "java.lang.IllegalStateException"
SPRING_DESERIALIZATION = "org.springframework.kafka.support.serializer.DeserializationException"
RULE = "checkSsnLen"
#: How many records each dialect wrote, by the name the view counts it under.
WRITTEN = Counter({"connect": 4, "spring": 5, "schema_registry": 2, "dlq": 2, "none": 1})


def _connect(original: Original, *, dlq_topic: str, connector: str = "orders-sink") -> dict[str, Any]:
    """Kafka Connect's ``DeadLetterQueueReporter`` with ``errors.deadletterqueue.context.headers.enable=true``.

    Follows ``populateContextHeaders``: the original headers, then ``__connect.errors.``
    topic, partition and offset (decimal text), connector name, task id, stage, executing
    class, exception class name, message and stack trace; the DLQ record keeps the original
    key, value and timestamp and leaves the partition to the producer.
    """
    headers = [
        *original.headers,
        ("__connect.errors.topic", original.topic.encode()),
        ("__connect.errors.partition", str(original.partition).encode()),
        ("__connect.errors.offset", str(original.offset).encode()),
        ("__connect.errors.connector.name", connector.encode()),
        ("__connect.errors.task.id", b"0"),
        ("__connect.errors.stage", b"VALUE_CONVERTER"),
        ("__connect.errors.class.name", b"org.apache.kafka.connect.json.JsonConverter"),
        ("__connect.errors.exception.class.name", CONNECT_EXCEPTION.encode()),
        ("__connect.errors.exception.message", b"Converting byte[] to Kafka Connect data failed"),
        ("__connect.errors.exception.stacktrace", f"{CONNECT_EXCEPTION}: failed\n\tat JsonConverter\n".encode()),
    ]
    return {
        "topic": dlq_topic,
        "timestamp": original.timestamp,
        "key": original.key,
        "value": original.value,
        "headers": headers,
    }


def _original(i: int, *, partition: int = 0, offset: int | None = None) -> Original:
    return Original(
        topic=SOURCE,
        partition=partition,
        offset=1000 + i if offset is None else offset,
        timestamp=RECENT_MS + i * 1000,
        key=f"o-{i}".encode(),
        value=json.dumps({"id": f"o-{i}", "ssn": "12345"}).encode(),
        headers=[("trace-id", f"{i:08d}".encode())],
    )


@dataclass(frozen=True)
class Dlq:
    topic: str
    config: dict[str, Any]
    #: The Spring records' originals, by source offset.
    spring: dict[int, Original]


@pytest.fixture(scope="module")
def dlq(kafka_bootstrap: str) -> Iterator[Dlq]:
    config: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap}
    topic = f"t-dialects-{uuid.uuid4().hex[:8]}.dlq"
    admin = AdminClient(config)  # kept: a collected client cancels its futures
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    records: list[dict[str, Any]] = []
    records += [_connect(_original(i), dlq_topic=topic) for i in range(4)]
    spring: dict[int, Original] = {}
    for i in range(5):
        original = _original(10 + i, partition=SPRING_PARTITION, offset=SPRING_BASE_OFFSET + i)
        spring[original.offset] = original
        if i < 3:  # the listener threw: Spring's handler wraps it, the cause is the listener's exception
            records.append(spring_dlt(original, dlt_topic=topic))
        else:  # a deserializer failed: no cause, no group
            records.append(spring_dlt(original, dlt_topic=topic, exception=SPRING_DESERIALIZATION, cause=None))
    records += [schema_registry_rule(_original(20 + i), dlq_topic=topic, rule=RULE) for i in range(2)]
    records += [kip_1191(_original(30 + i), dlq_topic=topic) for i in range(2)]
    records.append(header_less(_original(40), dlq_topic=topic))
    assert len(records) == sum(WRITTEN.values())
    producer = Producer(config)
    for record in records:
        producer.produce(**record)
    assert producer.flush(30) == 0
    yield Dlq(topic, config, spring)


def _counted(dlq: Dlq, selection: Selection | None = None) -> tuple[dict[str, Counter[str]], int]:
    """The summary's counts and matched figure, added over its chunks as the page adds them."""
    selection = selection or Selection()
    chunks: list[DeadLetterSummaryChunk] = [summarize(dlq.config, dlq.topic, selection=selection, max_seconds=10.0)]
    while not chunks[-1].complete:
        assert len(chunks) < 20
        chunks.append(summarize(dlq.config, dlq.topic, selection=selection, cursor=chunks[-1].cursor, max_seconds=10.0))
    counts: dict[str, Counter[str]] = {}
    for chunk in chunks:
        for name, values in chunk.counts.items():
            counts.setdefault(name, Counter()).update(values)
    return counts, sum(chunk.matched for chunk in chunks)


def test_counts_by_dialect_and_by_each_dialects_exception_class(dlq: Dlq) -> None:
    """One count covers every dialect: Spring under its root cause, Schema Registry under ``rule:<name>``."""
    counts, matched = _counted(dlq)
    assert matched == sum(WRITTEN.values())
    assert counts["header_set"] == WRITTEN
    assert counts["exception_class"] == {
        CONNECT_EXCEPTION: 4,
        SPRING_CAUSE: 3,
        SPRING_DESERIALIZATION: 2,
        f"rule:{RULE}": 2,
        NONE_KEY: 3,  # the KIP-1191 pointers carry no exception, the header-less record nothing at all
    }
    assert counts["source_topic"] == {SOURCE: sum(WRITTEN.values()) - 1, NONE_KEY: 1}


@pytest.mark.parametrize("dialect", sorted(WRITTEN))
def test_the_dialect_filter_narrows_the_counts(dlq: Dlq, dialect: str) -> None:
    """Selecting a dialect (as the page's query sends it, any case) counts that dialect's records only."""
    counts, matched = _counted(dlq, Selection.from_query({"header_set": dialect.upper()}))
    assert matched == WRITTEN[dialect]
    assert counts["header_set"] == {dialect: WRITTEN[dialect]}


def test_the_spring_filter_keeps_springs_exception_classes(dlq: Dlq) -> None:
    counts, _ = _counted(dlq, Selection(header_sets=frozenset({"spring"})))
    assert counts["exception_class"] == {SPRING_CAUSE: 3, SPRING_DESERIALIZATION: 2}
    assert SPRING_LISTENER_FAILED not in counts["exception_class"]


def test_an_unknown_dialect_is_refused_naming_the_key_the_value_and_the_choices() -> None:
    with pytest.raises(InvalidSelection) as refused:
        Selection.from_query({"header_set": "kafka-connect"})
    message = str(refused.value)
    assert message.startswith("header_set=")
    assert "kafka-connect" in message
    for name in ("connect", "dlq", "streams", "spring", "schema_registry", "none"):
        assert name in message


def test_spring_samples_show_binary_numbers_as_numbers_and_the_source(dlq: Dlq) -> None:
    """A Spring dead letter's partition, offset and timestamp headers are shown as the numbers Spring wrote."""
    sample = sample_dead_letters(dlq.config, dlq.topic, limit=100)
    assert sample.complete and len(sample.records) == sum(WRITTEN.values())
    assert Counter(r.header_set for r in sample.records) == WRITTEN
    spring = [r.to_dict() for r in sample.records if r.header_set == "spring"]
    assert {r["source"]["offset"] for r in spring} == set(dlq.spring)
    for record in spring:
        original = dlq.spring[record["source"]["offset"]]
        assert record["source"] == {"topic": SOURCE, "partition": SPRING_PARTITION, "offset": original.offset}
        assert record["source_timestamp_ms"] == original.timestamp == record["timestamp_ms"]
        assert record["partition"] == SPRING_PARTITION  # Spring's resolver keeps the original's partition
        headers = {h["name"]: h["value"] for h in record["headers"]}
        assert headers["kafka_dlt-original-partition"] == str(SPRING_PARTITION)
        assert headers["kafka_dlt-original-offset"] == str(original.offset)
        assert headers["kafka_dlt-original-timestamp"] == str(original.timestamp)
        assert headers["kafka_dlt-original-topic"] == SOURCE
        assert original.headers == [("trace-id", headers["trace-id"].encode())]
        assert json.loads(record["value"]["text"]) == json.loads(original.value or b"null")
    wrapped = [r for r in spring if r["wrapper_class"] == SPRING_LISTENER_FAILED]
    assert len(wrapped) == 3
    assert {(r["exception_class"], r["group"]) for r in wrapped} == {(SPRING_CAUSE, "orders-service")}
    unwrapped = [r for r in spring if r["wrapper_class"] != SPRING_LISTENER_FAILED]
    assert {(r["exception_class"], r["wrapper_class"], r["group"]) for r in unwrapped} == {
        (SPRING_DESERIALIZATION, SPRING_DESERIALIZATION, None)
    }


def test_samples_of_the_other_dialects_show_what_their_writers_carry(dlq: Dlq) -> None:
    records = [r.to_dict() for r in sample_dead_letters(dlq.config, dlq.topic, limit=100).records]
    by_dialect: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_dialect.setdefault(record["header_set"], []).append(record)
    for rule in by_dialect["schema_registry"]:
        assert (rule["exception_class"], rule["rule"]) == (f"rule:{RULE}", f"{RULE} (READ)")
        assert rule["source"] == {"topic": SOURCE, "partition": None, "offset": None}
    for pointer in by_dialect["dlq"]:
        assert pointer["group"] == "orders-share-group" and pointer["exception_class"] is None
        assert pointer["source"]["topic"] == SOURCE and pointer["source"]["offset"] in (1030, 1031)
        assert pointer["key"]["text"] is None and pointer["value"]["text"] is None
    for connect in by_dialect["connect"]:
        assert (connect["exception_class"], connect["stage"], connect["pipeline"]) == (
            CONNECT_EXCEPTION,
            "VALUE_CONVERTER",
            "orders-sink",
        )
        assert connect["wrapper_class"] is None and connect["source_timestamp_ms"] is None
    (plain,) = by_dialect["none"]
    assert plain["format"] is None and plain["exception_class"] is None
    assert plain["source"] == {"topic": None, "partition": None, "offset": None}
    assert json.loads(plain["value"]["text"])["id"] == "o-40"


@pytest.mark.parametrize("dialect", sorted(WRITTEN))
def test_the_dialect_filter_narrows_the_samples(dlq: Dlq, dialect: str) -> None:
    """The examples follow the dialect filter as the counts do."""
    sample = sample_dead_letters(
        dlq.config, dlq.topic, selection=Selection(header_sets=frozenset({dialect})), limit=100
    )
    assert [r.header_set for r in sample.records] == [dialect] * WRITTEN[dialect]
