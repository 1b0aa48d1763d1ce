"""Issue #25: the replay puts every dialect's dead letters back on their source topic, exactly once.

Each DLQ is written byte for byte as its real writer writes it (``tests/dead_letter_writers.py``
names the upstream file each builder follows): Spring Kafka's ``DeadLetterPublishingRecoverer``,
Confluent Schema Registry's DLQ rule action, Airflow's header-less ``KafkaSharedStreamTrigger``
DLQ, KIP-1191 pointers without a copy of the record, and Kafka Streams with bakdata's headers.
The records go through the real replay engine on the embedded broker; what lands is read back
``read_committed``, and a second run must find nothing left to do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record
from airflow_kerr.kafka.offsets import end_offsets, read_to_end
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.policy import HEADER_PARKED_REASON, HEADER_REPLAY_COUNT, HEADER_REPLAY_SOURCE, ReplayRecord
from tests.clock import RECENT_MS
from tests.dead_letter_writers import (
    Original,
    avro_wire,
    header_less,
    kip_1191,
    schema_registry_rule,
    spring_dlt,
    streams_bakdata,
)

RUN = "run-dialects"


def produce(kafka_config: dict[str, Any], records: list[dict[str, Any]]) -> None:
    producer = Producer({**kafka_config, "linger.ms": 5})
    for record in records:
        producer.produce(**record)
    assert producer.flush(30) == 0


def replay(kafka_config: dict[str, Any], dlq: str, **options: Any) -> Any:
    built = ReplayOptions.build(dlq_topic=dlq, batch_size=50, **options)
    return DlqReplay(kafka_config, built, run_id=RUN, idle_timeout_s=10).run()


def headers_of(message: Any) -> dict[str, bytes | None]:
    return dict(message.headers() or [])


def originals(topic: str, count: int, partition: int = 0) -> list[Original]:
    return [
        Original(
            topic,
            partition,
            100 + i,
            RECENT_MS + i,
            f"k-{i}".encode(),
            f'{{"id": {i}}}'.encode(),
            [("trace-id", f"t-{i}".encode())],
        )
        for i in range(count)
    ]


def serialize(record: ReplayRecord) -> ReplayRecord:
    """A fix as a user writes one for a rule that failed on WRITE: serialize the JSON the DLQ holds."""
    record.value = avro_wire(42, b"\x04" + (record.value or b""))
    return record


def assert_nothing_left(kafka_config: dict[str, Any], dlq: str, **options: Any) -> None:
    again = replay(kafka_config, dlq, **options)
    assert (again.scanned, again.replayed, again.parked) == (0, 0, 0), "the group committed past every record"


def test_spring_dead_letters_go_back_to_their_original_topic_without_spring_headers(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Spring's DLT (``DeadLetterRecordManager.java``): original topic from the binary headers, error headers gone.

    One record went through Spring's non-blocking retries first (``retry_topic-attempts``,
    4 bytes): that bookkeeping is removed too, so the replayed record starts its retries afresh.
    """
    source = create_topic(unique_topic, 2)
    dlt = create_topic(f"{unique_topic}-dlt", 2)
    failed = originals(source, 4, partition=1)
    records = [spring_dlt(o) for o in failed]
    records[2]["headers"] = [*records[2]["headers"], ("retry_topic-attempts", (3).to_bytes(4, "big"))]
    produce(kafka_config, records)

    summary = replay(kafka_config, dlt)

    assert (summary.status, summary.replayed, summary.parked) == ("completed", 4, 0)
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert sorted(m.key() for m in landed) == [o.key for o in failed], "each replayed exactly once"
    for message in landed:
        original = next(o for o in failed if o.key == message.key())
        headers = headers_of(message)
        assert message.value() == original.value
        assert headers["trace-id"] == original.headers[0][1], "the original headers are kept"
        assert not [n for n in headers if n.startswith(("kafka_dlt-", "retry_topic-"))], headers
        assert headers[HEADER_REPLAY_COUNT] == b"1"
    assert_nothing_left(kafka_config, dlt)


def test_schema_registry_rule_dead_letters_go_back_without_the_rule_headers(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Schema Registry's DLQ rule action (``dlq_action.py``): on READ the wire bytes go back to ``__rule.topic``.

    The ``__rule.*`` headers are removed: kept, they would make the consumer's deserializer skip
    the very rule that failed (``_is_dlq_replay`` in ``_async/serde.py``), so a record replayed
    unrepaired would pass unchecked. Removed, the rule runs again: a repaired record passes, an
    unrepaired one comes back to the DLQ and is parked after ``max_replays``.
    A rule that failed on WRITE left the value before serialization (JSON): without a fix it is
    parked (``unserialized``), with one it is replayed as the fix serialized it.
    """
    source = create_topic(unique_topic)
    dlq = create_topic(f"{unique_topic}.dlq")
    read_side = [
        Original(source, 0, 7 + i, RECENT_MS, b"k", avro_wire(42, bytes([2, 10 + i])), [("trace-id", b"t")])
        for i in range(3)
    ]
    written = Original(source, 0, 0, RECENT_MS, b"w", b'{"ssn": "12"}')
    produce(
        kafka_config,
        [schema_registry_rule(o, dlq_topic=dlq) for o in read_side]
        + [schema_registry_rule(written, dlq_topic=dlq, mode="WRITE")],
    )

    summary = replay(kafka_config, dlq)

    assert (summary.replayed, summary.parked) == (3, 1)
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert [m.value() for m in landed] == [o.value for o in read_side], "the wire bytes, once each, in order"
    assert all(not [n for n in headers_of(m) if n.startswith("__rule.")] for m in landed)
    assert all(headers_of(m)["trace-id"] == b"t" for m in landed)
    (parked,) = read_to_end(kafka_config, f"{dlq}.parked", isolation_level="read_committed")
    reason = headers_of(parked)[HEADER_PARKED_REASON] or b""
    assert reason.startswith(b"unserialized: Schema Registry rule 'checkSsnLen' failed on WRITE"), reason
    assert headers_of(parked)["__rule.mode"] == b"WRITE", "parked as read, for diagnosis"

    fixed = replay(kafka_config, f"{dlq}.parked", fix=f"{__name__}.serialize")
    assert fixed.replayed == 1
    last = read_to_end(kafka_config, source, isolation_level="read_committed")[-1]
    assert last.value() == avro_wire(42, b'\x04{"ssn": "12"}')


def test_a_header_less_dlq_needs_a_target_topic_and_then_replays_to_it(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Airflow's ``KafkaSharedStreamTrigger(dlq_topic=...)`` (``shared_stream.py``) writes key and value only.

    The replay never guesses where such records go: without ``target_topic`` the run fails
    before writing anything, naming the setting; with it, every record goes there once.
    """
    target = create_topic(unique_topic)
    dlq = create_topic(f"{unique_topic}.dlq")
    failed = originals("orders-stream", 3)
    produce(kafka_config, [header_less(o, dlq_topic=dlq) for o in failed])

    with pytest.raises(InvalidReplayOptions, match=r"target_topic: not set, and the first dead letter read, "):
        replay(kafka_config, dlq)
    assert read_to_end(kafka_config, target, isolation_level="read_uncommitted") == [], "nothing was written"

    summary = replay(kafka_config, dlq, target_topic=target)

    assert (summary.replayed, summary.parked) == (3, 0)
    landed = read_to_end(kafka_config, target, isolation_level="read_committed")
    assert [(m.key(), m.value()) for m in landed] == [(o.key, o.value) for o in failed]
    assert_nothing_left(kafka_config, dlq, target_topic=target)


def test_kip_1191_pointers_replay_the_original_and_park_the_ones_that_are_gone(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """KIP-1191 without ``copy.record.enable``: the replay reads each original at its coordinates.

    Four originals are written; DeleteRecords then removes the first (as retention would).
    Pointers to the three left are replayed with the original's key, value and headers; the
    pointer to the deleted one and one past the end of the partition are parked
    ``source_gone`` with their coordinates and why.
    """
    source = create_topic(unique_topic)
    dlq = create_topic(f"{unique_topic}.dlq")
    written = originals(source, 4)
    produce(
        kafka_config,
        [{"topic": source, "key": o.key, "value": o.value, "headers": o.headers} for o in written],
    )
    located = read_to_end(kafka_config, source, isolation_level="read_committed")
    at = [Original(source, 0, m.offset(), RECENT_MS, m.key(), m.value()) for m in located]
    admin = AdminClient(kafka_config)
    deleted = admin.delete_records([TopicPartition(source, 0, at[1].offset)])
    for future in deleted.values():
        future.result(timeout=30)
    past_end = Original(source, 0, at[-1].offset + 10, RECENT_MS, None, None)
    produce(kafka_config, [kip_1191(o, dlq_topic=dlq) for o in [*at, past_end]])
    end_before = end_offsets(kafka_config, [(source, 0)])[(source, 0)]

    summary = replay(kafka_config, dlq)

    assert (summary.replayed, summary.parked) == (3, 2)
    replayed = [
        m for m in read_to_end(kafka_config, source, isolation_level="read_committed") if m.offset() >= end_before
    ]
    assert [(m.key(), m.value()) for m in replayed] == [(o.key, o.value) for o in written[1:]]
    assert all(headers_of(m)["trace-id"] == o.headers[0][1] for m, o in zip(replayed, written[1:], strict=True))
    assert all(not [n for n in headers_of(m) if n.startswith("__dlq.errors.")] for m in replayed)
    parked = read_to_end(kafka_config, f"{dlq}.parked", isolation_level="read_committed")
    reasons = sorted((headers_of(m)[HEADER_PARKED_REASON] or b"").decode() for m in parked)
    assert reasons == [
        f"source_gone: {source}/0/{at[0].offset} is before the log start offset {at[1].offset} "
        "(deleted by retention or DeleteRecords)",
        f"source_gone: {source}/0/{past_end.offset} is past the end of the partition (offset {end_before})",
    ]
    assert all(headers_of(m)[HEADER_REPLAY_SOURCE] for m in parked)
    assert_nothing_left(kafka_config, dlq)


def test_a_header_less_record_outside_the_selection_does_not_stop_the_run(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """The target_topic check applies to a header-less first record the run would take, not one it skips.

    The Connect record is built by the product's ``build_dead_letter_record``, which writes
    Connect's ``DeadLetterQueueReporter`` headers (checked against Connect in the unit tests).
    """
    source = create_topic(unique_topic)
    dlq = create_topic(f"{unique_topic}.dlq")
    stray = Original("elsewhere", 0, 0, RECENT_MS, b"stray", b"?")
    failed = SourceRecord(source, 0, 5, RECENT_MS, key=b"k-5", value=b"v-5")
    context = ErrorContext(TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "mypkg.v", ValueError("bad"), failed)
    produce(
        kafka_config, [header_less(stray, dlq_topic=dlq), build_dead_letter_record(context, topic=dlq).produce_kwargs()]
    )

    summary = replay(kafka_config, dlq, source_topics=[source])

    assert (summary.scanned, summary.selected, summary.replayed) == (2, 1, 1)
    (landed,) = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert (landed.key(), landed.value()) == (b"k-5", b"v-5")


@pytest.mark.transactions
def test_a_pointer_to_an_aborted_record_is_parked_as_not_in_the_log(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """A pointer whose offset is inside the partition but whose record read_committed never shows.

    The original was written by a transaction that aborted (compaction gives the same gap):
    the pointer is parked ``source_gone``, and the pointer to the committed record after it
    is replayed.
    """
    source = create_topic(unique_topic)
    dlq = create_topic(f"{unique_topic}.dlq")
    aborted = Producer({**kafka_config, "transactional.id": f"{unique_topic}.tx"})
    aborted.init_transactions(30)
    aborted.begin_transaction()
    aborted.produce(source, key=b"gone", value=b"aborted")
    aborted.flush(30)
    aborted.abort_transaction(30)
    produce(kafka_config, [{"topic": source, "key": b"kept", "value": b"committed"}])
    (kept,) = read_to_end(kafka_config, source, isolation_level="read_committed")
    end_before = end_offsets(kafka_config, [(source, 0)])[(source, 0)]
    pointers = [
        Original(source, 0, 0, RECENT_MS, None, None),
        Original(source, 0, kept.offset(), RECENT_MS, None, None),
    ]
    produce(kafka_config, [kip_1191(o, dlq_topic=dlq) for o in pointers])

    summary = replay(kafka_config, dlq)

    assert (summary.replayed, summary.parked) == (1, 1)
    replayed = [
        m for m in read_to_end(kafka_config, source, isolation_level="read_committed") if m.offset() >= end_before
    ]
    assert [(m.key(), m.value()) for m in replayed] == [(b"kept", b"committed")]
    (parked,) = read_to_end(kafka_config, f"{dlq}.parked", isolation_level="read_committed")
    assert (
        headers_of(parked)[HEADER_PARKED_REASON]
        == (
            f"source_gone: {source}/0/0 is not in the log (removed by compaction, or written by an aborted transaction)"
        ).encode()
    )


def test_streams_dead_letters_with_bakdata_headers_go_back_without_them(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Kafka Streams' KIP-1034 headers (``ExceptionHandlerUtils.java``) plus bakdata's node and task ids."""
    source = create_topic(unique_topic)
    dlq = create_topic(f"{unique_topic}.dlq")
    failed = originals(source, 2)
    produce(kafka_config, [streams_bakdata(o, dlq_topic=dlq) for o in failed])

    summary = replay(kafka_config, dlq)

    assert summary.replayed == 2
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert [m.value() for m in landed] == [o.value for o in failed]
    assert all(not [n for n in headers_of(m) if n.startswith("__streams.errors.")] for m in landed)
