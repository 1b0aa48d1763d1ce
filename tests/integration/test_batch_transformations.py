"""Batch transformations against the real broker: the same DLQ records, sink records and metrics as the per-record path.

The differential tests drive two partition processors, one with the per-record
``validate_order`` and one with the batch ``validate_orders``, over the same Arrow batch
made from a topic of generated orders (as the ``kerr_kafka`` source hands it over), each
writing to its own sink and DLQ topics; no Spark, so they run in seconds. One test runs
the batch example pipeline through real local Spark.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.examples.orders import GeneratedOrders, generate_orders
from airflow_kerr.kafka.offsets import end_offsets, read_to_end
from airflow_kerr.spark import driver, partition
from airflow_kerr.spark.kafka_source import messages_to_arrow
from airflow_kerr.spark.spec import PipelineSpec

PER_RECORD = ["airflow_kerr.examples.orders.validate_order"]
BATCH = ["airflow_kerr.examples.orders.validate_orders"]
#: The DLQ headers of a TRANSFORMATION failure that must differ between the two paths, and why.
MUST_DIFFER = {
    "__connect.errors.class.name": "the transformation's dotted path: validate_order vs validate_orders",
    "__connect.errors.exception.stacktrace": "the frames of two different functions and runners",
}


def make_spec(kafka_config: dict[str, Any], topic: str, out: str, transformations: list[str]) -> PipelineSpec:
    return PipelineSpec.from_dict(
        {
            "name": "orders_pipeline",
            "source": {"topics": [topic], "group_id": f"{topic}-group"},
            "key_converter": "string",
            "value_converter": "json",
            "transformations": transformations,
            "sink": {"kind": "kafka", "topic": f"{out}.clean"},
            "kafka": kafka_config,
            "metrics_topic": f"{out}.metrics",
            "batch_size": 128,
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{out}.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
            },
        }
    )


def run_processor(kafka_config: dict[str, Any], topic: str, out: str, transformations: list[str], batch: Any) -> Any:
    processor = partition.PartitionProcessor(make_spec(kafka_config, topic, out, transformations), "diff", "part-0")
    try:
        processor.process(batch)
        processor.finish()
    finally:
        processor.close()
    return processor


def source_offset(message: Any) -> int:
    offset = parse_dead_letter(message.headers() or [], message.key(), message.value()).source_offset
    assert offset is not None
    return offset


def by_source_offset(messages: list[Any]) -> dict[int, Any]:
    found = {source_offset(message): message for message in messages}
    assert len(found) == len(messages), "a source record reached the DLQ twice"
    return found


@pytest.fixture
def orders(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> tuple[str, GeneratedOrders]:
    topic = create_topic(unique_topic)
    for path in ("per-record", "batch"):
        for suffix in (".clean", ".dlq", ".metrics"):
            create_topic(f"{topic}.{path}{suffix}")
    return topic, generate_orders(kafka_config, topic, 500, malformed_every=50, invalid_every=70, flaky_every=0)


def test_batch_and_per_record_validation_write_the_same_dead_letters_sink_records_and_metrics(
    kafka_config: dict[str, Any], orders: tuple[str, GeneratedOrders]
) -> None:
    topic, generated = orders
    source = read_to_end(kafka_config, topic)
    kinds = {m.offset(): dict(m.headers())["kind"] for m in source}
    batch = messages_to_arrow(source)
    assert batch.num_rows == generated.total

    per_record = run_processor(kafka_config, topic, f"{topic}.per-record", PER_RECORD, batch)
    vectorized = run_processor(kafka_config, topic, f"{topic}.batch", BATCH, batch)
    assert vectorized.vector is not None and per_record.vector is None, "one path each"

    expected_dead = by_source_offset(read_to_end(kafka_config, f"{topic}.per-record.dlq"))
    dead = by_source_offset(read_to_end(kafka_config, f"{topic}.batch.dlq"))
    assert sorted(dead) == sorted(expected_dead)
    assert sorted(dead) == sorted(offset for offset, kind in kinds.items() if kind in (b"malformed", b"invalid"))
    assert len(dead) == generated.bad

    compared_stages = set()
    for offset, expected in expected_dead.items():
        message = dead[offset]
        assert (message.key(), message.value(), message.timestamp()) == (
            expected.key(),
            expected.value(),
            expected.timestamp(),
        )
        stage = dict(expected.headers())["__connect.errors.stage"]
        compared_stages.add(stage)
        if kinds[offset] == b"malformed":
            assert stage == b"VALUE_CONVERTER"
            assert message.headers() == expected.headers(), f"offset {offset}: not byte-identical"
        else:
            assert stage == b"TRANSFORMATION"
            names = [name for name, _ in message.headers()]
            assert names == [name for name, _ in expected.headers()], f"offset {offset}: other headers"
            differing = {
                name
                for (name, value), (_, expected_value) in zip(message.headers(), expected.headers(), strict=True)
                if value != expected_value
            }
            assert differing == set(MUST_DIFFER), f"offset {offset}: {differing}"
            headers = dict(message.headers())
            assert headers["__connect.errors.class.name"] == BATCH[0].encode()
            assert headers["__connect.errors.exception.stacktrace"].startswith(
                dict(expected.headers())["__connect.errors.exception.stacktrace"].split(b"\n")[0]
            ), "same exception class and message on the stack trace's first line"
    assert compared_stages == {b"VALUE_CONVERTER", b"TRANSFORMATION"}

    expected_clean = read_to_end(kafka_config, f"{topic}.per-record.clean")
    clean = read_to_end(kafka_config, f"{topic}.batch.clean")
    assert len(clean) == generated.good
    assert [m.key() for m in clean] == [m.key() for m in expected_clean]
    assert [json.loads(m.value()) for m in clean] == [json.loads(m.value()) for m in expected_clean]
    # An unchanged value is written with its original bytes.
    originals = {m.key(): m.value() for m in source}
    assert all(m.value() == originals[m.key()] for m in clean)

    def counters(processor: Any) -> dict[str, int]:
        found = processor.metrics.as_connect_metrics() | {"records_in": processor.metrics.records_in}
        assert found.pop("last-error-timestamp") > 0  # the wall clock of each run's last failure
        return found

    assert counters(vectorized) == counters(per_record)
    assert vectorized.metrics.records_in == generated.total
    assert vectorized.metrics.total_record_failures == generated.bad
    assert vectorized.metrics.deadletterqueue_produce_requests == generated.bad
    assert vectorized.records_out == per_record.records_out == generated.good


def produce(kafka_config: dict[str, Any], topic: str, values: list[bytes]) -> None:
    producer = Producer(kafka_config)
    for index, value in enumerate(values):
        producer.produce(topic, key=f"o-{index}".encode(), value=value)
    assert producer.flush(30) == 0


def test_a_batch_holding_only_an_invalid_order_sends_it_to_the_dlq(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    topic = create_topic(unique_topic)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    produce(kafka_config, topic, [b'{"id": "o-0", "customer": "c-0", "amount": -5.0}'])

    run_processor(kafka_config, topic, topic, BATCH, messages_to_arrow(read_to_end(kafka_config, topic)))

    assert [source_offset(m) for m in read_to_end(kafka_config, f"{topic}.dlq")] == [0]


def test_a_nan_order_beside_a_malformed_one_is_not_lost(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    topic = create_topic(unique_topic)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    values = [b'{"id": "o-0", "amount": 5.5}', b'{"id": "o-1", "amount": NaN}', b'{"id": "o-2", "amount": ']
    produce(kafka_config, topic, values)

    run_processor(kafka_config, topic, topic, BATCH, messages_to_arrow(read_to_end(kafka_config, topic)))

    in_sink = {int(m.key().decode().removeprefix("o-")) for m in read_to_end(kafka_config, f"{topic}.clean")}
    in_dlq = {source_offset(m) for m in read_to_end(kafka_config, f"{topic}.dlq")}
    assert 0 in in_sink and 2 in in_dlq
    assert in_sink | in_dlq == {0, 1, 2}, "the NaN order reached neither the sink nor the DLQ"


def committed(kafka_config: dict[str, Any], group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return [int(tp.offset) for tp in found]


@pytest.mark.spark
def test_the_batch_example_pipeline_runs_on_spark(
    spark: Any, kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    topic = create_topic(unique_topic, partitions=2)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    generated = generate_orders(kafka_config, topic, 600, malformed_every=50, invalid_every=70, flaky_every=0)
    spec = make_spec(
        kafka_config,
        topic,
        topic,
        ["airflow_kerr.examples.orders.validate_orders", "airflow_kerr.examples.orders.add_amount_cents"],
    )

    summary = driver.run_job(spark, spec, run_id="batch-run")

    source = {(m.partition(), m.offset()): m for m in read_to_end(kafka_config, topic)}
    dead = read_to_end(kafka_config, f"{topic}.dlq")
    stages = {}
    coordinates = set()
    for message in dead:
        letter = parse_dead_letter(message.headers(), message.key(), message.value())
        coordinates.add((letter.source_partition, letter.source_offset))
        original = source[(letter.source_partition, letter.source_offset)]
        assert (message.key(), message.value()) == (original.key(), original.value())
        stages[dict(original.headers())["kind"]] = str(letter.stage)
    assert len(dead) == len(coordinates) == generated.bad
    assert coordinates == {coordinate for coordinate, m in source.items() if dict(m.headers())["kind"] != b"good"}
    assert stages == {b"malformed": "VALUE_CONVERTER", b"invalid": "TRANSFORMATION"}

    clean = [json.loads(m.value()) for m in read_to_end(kafka_config, f"{topic}.clean")]
    good = {
        json.loads(m.value())["id"]: json.loads(m.value())
        for m in source.values()
        if dict(m.headers())["kind"] == b"good"
    }
    assert len(clean) == generated.good == len(good)
    assert {order["id"] for order in clean} == set(good)
    for order in clean:
        assert order == {**good[order["id"]], "amount_cents": round(good[order["id"]]["amount"] * 100)}

    metrics = summary["metrics"]
    assert metrics["records_in"] == generated.total
    assert metrics["total-records-skipped"] == generated.bad
    assert metrics["deadletterqueue-produce-requests"] == generated.bad
    assert metrics["total-retries"] == 0
    assert summary["records_out"] == generated.good
    assert committed(kafka_config, f"{topic}-group", topic, 2) == [
        end_offsets(kafka_config, [(topic, p)])[(topic, p)] for p in range(2)
    ]


def test_a_key_that_fails_to_convert_goes_to_the_dlq_and_the_batch_goes_on(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    """A key the string converter refuses (not UTF-8) left the value converter a column one value longer
    than its rows, and the task failed on "Arrays were not all the same length"."""
    topic = create_topic(unique_topic)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    producer = Producer(kafka_config)
    for index in range(4):
        key = b"\xff\xfe" if index == 1 else f"o-{index}".encode()
        producer.produce(topic, key=key, value=b'{"id": "o-%d", "customer": "c-0", "amount": 5.5}' % index)
    assert producer.flush(30) == 0

    processor = run_processor(kafka_config, topic, topic, BATCH, messages_to_arrow(read_to_end(kafka_config, topic)))

    (dead,) = read_to_end(kafka_config, f"{topic}.dlq")
    assert source_offset(dead) == 1
    assert dict(dead.headers() or [])["__connect.errors.stage"] == b"KEY_CONVERTER"
    sink = read_to_end(kafka_config, f"{topic}.clean")
    assert [(m.key(), json.loads(m.value())["id"]) for m in sink] == [(b"o-0", "o-0"), (b"o-2", "o-2"), (b"o-3", "o-3")]
    assert processor.records_out == 3
