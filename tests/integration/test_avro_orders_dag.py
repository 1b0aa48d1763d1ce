"""The ``avro_orders`` example DAG runs for real: the broker, local Spark, the development Schema Registry.

``dag.test()`` runs ``dags/avro_orders.py`` as it is, with ``kafka_default`` and
``schema_registry_default`` pointing at the session's broker and registry (as ``make ui`` and
``kerr local up`` point them). Its ``generate`` task writes orders through confluent-kafka's
``AvroSerializer``; the error-aware job reads them with ``value_converter="avro"``. Each
undecodable record must reach the DLQ at ``VALUE_CONVERTER`` with the text Connect's ``AvroConverter``
writes (confluentinc/schema-registry v7.9.9, avro-converter/.../AvroConverter.java,
schema-serializer/.../AbstractKafkaSchemaSerDe.java, avro-serializer/.../AbstractKafkaAvroDeserializer.java);
an order with a negative amount must reach it at ``TRANSFORMATION``, raised by
``add_amount_cents``, with its original Avro bytes (they decode to the negative order); the
good orders and the tombstones must reach the Avro sink, read back by confluent-kafka's
``AvroDeserializer``, an independent client of the registry.

The registry connection carries basic-auth credentials (the development registry ignores
them): the spec file that hands them to the job must be readable by its owner only, and no
output of the run (the task's log, spark-submit's and the job's) may show the password.
"""

from __future__ import annotations

import json
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.examples.avro_orders import (
    ENRICHED_ORDER_SCHEMA,
    UNKNOWN_SCHEMA_ID,
    negative_order,
    order,
    order_kind,
)
from airflow_kerr.kafka.offsets import end_offsets, read_to_end
from airflow_kerr.local.broker import ensure_topics
from airflow_kerr.local.orders_example import TOPICS
from tests.registry_orders import failures

pytestmark = pytest.mark.spark

ORDERS = 240
BAD_EVERY = 10  # 24 special records: 4 of each kind
SOURCE, SINK, DLQ = "orders.avro", "orders.avro.clean", "orders.avro.dlq"
PASSWORD = "ZqAvroRegistryPw7"


def expected_causes(kind: str, order_schema_id: int) -> tuple[str, ...]:
    """The causes chained under a bad record of ``kind``'s DLQ message (``truncated``: then the decoder's text)."""
    return {
        "not_framed": ("Unknown magic byte!",),
        "too_short": ("Invalid value: 3 bytes, shorter than the 5-byte header (magic byte and schema id)",),
        "unknown_schema_id": (
            f"Error retrieving Avro value schema for id {UNKNOWN_SCHEMA_ID}",
            f"Schema {UNKNOWN_SCHEMA_ID} not found; error code: 40403",
        ),
        "truncated": (f"Error deserializing Avro message for id {order_schema_id}",),
    }[kind]


def records_after(kafka_config: dict[str, Any], topic: str, start: int) -> list[Any]:
    """The records of one-partition ``topic`` from offset ``start`` (what this run wrote)."""
    return [message for message in read_to_end(kafka_config, topic) if message.offset() >= start]


@contextmanager
def spec_files_seen() -> Iterator[dict[str, tuple[int, str]]]:
    """Watch the temporary directory for the operator's spec files while the block runs: path -> (mode, text)."""
    seen: dict[str, tuple[int, str]] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.02):
            for path in Path(tempfile.gettempdir()).glob("kerr-job-*/pipeline.json"):
                if str(path) not in seen:
                    try:
                        seen[str(path)] = (stat.S_IMODE(path.stat().st_mode), path.read_text())
                    except OSError:  # gone between the listing and the read: the next one is looked at
                        continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join()


def test_the_avro_orders_example_dag_dead_letters_each_converter_and_transformation_failure(
    kafka_config: dict[str, Any],
    schema_registry: Any,
    load_dag: Callable[[str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    java_home: str,
) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    # The stack's topics (make ui and make demo create them the same way); earlier runs' records are skipped by offset.
    ensure_topics(kafka_config["bootstrap.servers"], TOPICS)
    starts = {topic: end_offsets(kafka_config, [(topic, 0)])[(topic, 0)] for topic in (SINK, DLQ)}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT",
        json.dumps(
            {"conn_type": "schema_registry", "host": schema_registry.url, "login": "orders", "password": PASSWORD}
        ),
    )

    with spec_files_seen() as spec_files:
        states = run_dag(load_dag("avro_orders"), orders=ORDERS, bad_every=BAD_EVERY)

    assert states == {"generate": "success", "avro_orders": "success", "report": "success"}
    ours = [(mode, text) for mode, text in spec_files.values() if '"name": "avro_orders"' in text]
    assert len(ours) == 1, f"the job's spec file was not seen: {sorted(spec_files)}"
    mode, text = ours[0]
    assert mode == 0o600 and f'"basic.auth.user.info": "orders:{PASSWORD}"' in text
    output = capfd.readouterr()
    assert "avro_orders run metrics:" in output.out + output.err, "the run's output was captured"
    assert PASSWORD not in output.out + output.err
    from airflow.models import DagRun

    (dag_run,) = DagRun.find(dag_id="avro_orders")
    ti = dag_run.get_task_instance("avro_orders")
    assert ti is not None
    generated, metrics = ti.xcom_pull(task_ids="generate"), ti.xcom_pull(task_ids="avro_orders")
    assert generated == {
        "good": 216,
        "not_framed": 4,
        "too_short": 4,
        "unknown_schema_id": 4,
        "truncated": 4,
        "tombstone": 4,
        "negative_amount": 4,
    }
    assert metrics["records_in"] == ORDERS and metrics["total-records-skipped"] == 20

    registry = SchemaRegistryClient({"url": schema_registry.url})
    order_schema_id = int(registry.get_latest_version(f"{SOURCE}-value").schema_id or -1)
    letters = [
        parse_dead_letter(m.headers(), m.key(), m.value()) for m in records_after(kafka_config, DLQ, starts[DLQ])
    ]
    source_context = SerializationContext(SOURCE, MessageField.VALUE)
    failed = {}
    for letter in letters:
        index = int((letter.key or b"").decode().removeprefix("o-"))
        kind = order_kind(index, BAD_EVERY)
        failed[index] = kind
        if kind == "negative_amount":
            # A transformation failure: the original Avro bytes, which decode to the order as it was written.
            assert (letter.source_topic, str(letter.stage)) == (SOURCE, "TRANSFORMATION"), letter
            assert letter.exception_class == "airflow_kerr.examples.avro_orders.NegativeAmount", letter
            amount = negative_order(index)["amount"]
            assert letter.exception_message == (
                f"order o-{index}: amount {amount} is negative; an order's amount must be 0 or more"
            ), letter
            assert AvroDeserializer(registry)(letter.value, source_context) == negative_order(index)
            continue
        assert (letter.source_topic, str(letter.stage)) == (SOURCE, "VALUE_CONVERTER"), (kind, letter)
        # Connect's message is the converter's text alone; the serde's exceptions are chained under it.
        failure = failures({0: letter})[0]
        assert failure.message == f"Failed to deserialize data for topic {SOURCE} to Avro: ", (kind, failure)
        expected = expected_causes(kind, order_schema_id)
        assert failure.causes[: len(expected)] == expected, (kind, failure)
    assert sorted(failed) == [i for i in range(ORDERS) if order_kind(i, BAD_EVERY) not in ("good", "tombstone")]

    written = records_after(kafka_config, SINK, starts[SINK])
    sink_subject = registry.get_latest_version(f"{SINK}-value")
    assert json.loads(str(sink_subject.schema.schema_str)) == json.loads(ENRICHED_ORDER_SCHEMA)
    sink_id = int(sink_subject.schema_id or -1).to_bytes(4, "big", signed=True)
    deserializer = AvroDeserializer(registry)
    context = SerializationContext(SINK, MessageField.VALUE)
    values = {int(m.key().decode().removeprefix("o-")): deserializer(m.value(), context) for m in written}
    assert {i: v for i, v in values.items() if v is None} == {
        i: None for i in range(ORDERS) if order_kind(i, BAD_EVERY) == "tombstone"
    }
    assert {i: v for i, v in values.items() if v is not None} == {
        i: {**order(i), "amount_cents": round(order(i)["amount"] * 100)}
        for i in range(ORDERS)
        if order_kind(i, BAD_EVERY) == "good"
    }
    assert all(m.value() is None or m.value()[1:5] == sink_id for m in written)
