"""Differential: the same poison records through a real Kafka Connect sink and through the error-aware Spark job.

Both run with ``errors.tolerance=all``, a dead-letter queue and context headers.
Kafka Connect (the session's real worker: 4.3.0 by default, or the version
``KERR_CONNECT_VERSION`` names; FileStreamSink, JsonConverter) and the Spark job
(real local Spark, ``value_converter="json"``) read one topic of good and malformed
JSON values; their two DLQs must carry the same records with the same
``__connect.errors.*`` header names in the same order, and equal values except
where the two runtimes must differ (``MUST_DIFFER`` says why).
Then ``parse_dead_letter`` and the replay read the DLQ real Connect wrote.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.local.connect_worker import ConnectWorker, connector_config
from airflow_kerr.spark.driver import run_job
from airflow_kerr.spark.spec import PipelineSpec

pytestmark = pytest.mark.spark

GOOD = [json.dumps({"order": i, "amount": 10 + i}).encode() for i in range(6)]
POISON = [b"{not json", b"\xff\xfe binary", b'{"order": 7,', b"[1, 2"]
#: Header values that differ between the two runtimes by necessity.
MUST_DIFFER = {
    # The class running the failed stage: Connect's org.apache.kafka.connect.json.JsonConverter vs the job's
    # JSON converter, a Python callable.
    "__connect.errors.class.name": "the converter is Java in Connect and Python in the job",
    # The exception: org.apache.kafka.connect.errors.DataException vs the Python exception the converter raised.
    "__connect.errors.exception.class.name": "Java vs Python exception classes",
    # Their messages and stack traces are those of two different JSON parsers and languages.
    "__connect.errors.exception.message": "Jackson's message vs Python's json module's",
    "__connect.errors.exception.stacktrace": "a Java stack trace vs a Python traceback",
}


def dead_letters(kafka_config: dict[str, Any], topic: str) -> list[Any]:
    return sorted(read_to_end(kafka_config, topic), key=lambda m: m.offset())


def header_items(message: Any) -> list[tuple[str, bytes]]:
    return [(k, v) for k, v in message.headers() or [] if k.startswith("__connect.errors.")]


@pytest.fixture
def poisoned_topic(kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str) -> str:
    from confluent_kafka import Producer

    topic = create_topic(unique_topic, partitions=1)
    producer = Producer(kafka_config)
    for index, value in enumerate(GOOD + POISON):
        producer.produce(topic, key=f"k{index}".encode(), value=value)
    assert producer.flush(30) == 0, "the broker did not take the records within 30 s"
    return topic


def run_connect_sink(worker: ConnectWorker, name: str, topic: str, dlq: str) -> None:
    """A real FileStreamSink with errors.tolerance=all, a DLQ and context headers, until every record is read."""
    config = connector_config(
        topic,
        f"{name}.txt",
        **{
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.topic.replication.factor": "1",
            "errors.deadletterqueue.context.headers.enable": "true",
        },
    )
    worker.add_connector(name, config)


def test_connect_and_the_job_write_the_same_dead_letters(
    spark: Any,
    connect_worker: ConnectWorker,
    kafka_config: dict[str, Any],
    poisoned_topic: str,
    create_topic: Callable[..., str],
) -> None:
    topic = poisoned_topic
    name = f"diff-{topic[-8:]}"
    connect_dlq, job_dlq = create_topic(f"{topic}.connect-dlq"), create_topic(f"{topic}.job-dlq")
    try:
        run_connect_sink(connect_worker, name, topic, connect_dlq)
        spec = PipelineSpec.from_dict(
            {
                # The pipeline is named as the connector, so connector.name can be compared too.
                "name": name,
                "source": {"topics": [topic], "group_id": f"{topic}-job"},
                "key_converter": "string",
                "value_converter": "json",
                "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
                "kafka": kafka_config,
                "metrics_topic": f"{topic}.metrics",
                "errors": {
                    "errors.tolerance": "all",
                    "errors.deadletterqueue.topic.name": job_dlq,
                    "errors.deadletterqueue.context.headers.enable": "true",
                },
            }
        )
        run_job(spark, spec, run_id="differential")
        from_connect = _wait_for(lambda: len(dead_letters(kafka_config, connect_dlq)) >= len(POISON) and
                                 dead_letters(kafka_config, connect_dlq))  # fmt: skip
        from_job = dead_letters(kafka_config, job_dlq)
    finally:
        httpx.delete(f"{connect_worker.url}/connectors/{name}", timeout=30)

    assert [m.value() for m in from_connect] == POISON, "Connect dead-letters exactly the malformed records"
    assert [m.value() for m in from_job] == POISON, "so does the job, with the original bytes"
    assert [m.key() for m in from_job] == [m.key() for m in from_connect]
    for connect_record, job_record in zip(from_connect, from_job, strict=True):
        connect_headers, job_headers = header_items(connect_record), header_items(job_record)
        assert [k for k, _ in job_headers] == [k for k, _ in connect_headers], "same names, same order"
        assert len(connect_headers) == 10
        for (key, connect_value), (_, job_value) in zip(connect_headers, job_headers, strict=True):
            if key in MUST_DIFFER:
                assert job_value, f"{key} is empty in the job's dead letter"
            else:
                assert job_value == connect_value, f"{key}: job {job_value!r} != Connect {connect_value!r}"


@pytest.mark.airflow
def test_parse_dead_letter_and_the_replay_dag_read_what_connect_wrote(
    connect_worker: ConnectWorker,
    kafka_config: dict[str, Any],
    poisoned_topic: str,
    create_topic: Callable[..., str],
    load_dag: Callable[[str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = poisoned_topic
    name = f"parse-{topic[-8:]}"
    dlq = create_topic(f"{topic}.dlq")
    try:
        run_connect_sink(connect_worker, name, topic, dlq)
        letters = _wait_for(
            lambda: len(dead_letters(kafka_config, dlq)) >= len(POISON) and dead_letters(kafka_config, dlq)
        )
    finally:
        httpx.delete(f"{connect_worker.url}/connectors/{name}", timeout=30)

    parsed = [parse_dead_letter(m.headers() or [], m.key(), m.value()) for m in letters]
    first_poison = len(GOOD)
    assert [(p.source_topic, p.source_partition, p.source_offset) for p in parsed] == [
        (topic, 0, first_poison + i) for i in range(len(POISON))
    ]
    assert {(p.connector_name, p.task_id) for p in parsed} == {(name, 0)}
    assert {str(p.stage) for p in parsed} == {"VALUE_CONVERTER"}
    assert {p.exception_class for p in parsed} == {"org.apache.kafka.connect.errors.DataException"}
    assert {p.executing_class for p in parsed} == {"org.apache.kafka.connect.json.JsonConverter"}

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    states = run_dag(load_dag("dlq_replay"), dlq_topic=dlq, dry_run=False, stages=["VALUE_CONVERTER"],
                     max_records_per_second=None)  # fmt: skip
    # One replay task: the branch follows ``replay`` and skips the split and the mapped tasks.
    assert states == {
        "fan_out": "success",
        "replay": "success",
        "partition_groups": "skipped",
        "replay_partitions": "skipped",
    }
    source = [m.value() for m in dead_letters(kafka_config, topic)]
    assert source == GOOD + POISON + POISON, "each dead letter went back to its source topic once, as it was"


def _wait_for(predicate: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s} s (last value {value!r})")
        time.sleep(0.2)
