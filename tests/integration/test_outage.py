"""Outage or poison: ``errors.outage.*`` against a real lookup service, the real broker and real local Spark.

The lookup service is a small HTTP server this test runs on loopback (the real thing, not a
fake): it is stopped mid-run and started again, or it stops answering. A Schema Registry is
not in the project yet, so "a registry that stops answering" is played by the same service
hanging: connections are accepted and never answered, which is how a hung registry looks to
the client. Executors get the service's URL through ``SparkContext.environment``, as
``spark.executorEnv.*`` would give it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.examples.lookup import LOOKUP_TIMEOUT_ENV, LOOKUP_URL_ENV
from airflow_kerr.kafka.metrics_topic import read_metrics_records
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.kafka.tolerance import ToleranceSpec, ToleranceWatch, reading_with_limits
from airflow_kerr.notifiers.breach_message import BreachMessage
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier
from airflow_kerr.spark.driver import OutageDetected, run_job
from airflow_kerr.spark.spec import PipelineSpec

pytestmark = pytest.mark.spark

RECORDS = 1000
BATCH = 100
POISON_EVERY = 37  # offsets 36, 73, ... are not JSON: VALUE_CONVERTER poison, before the lookup


class LookupService:
    """A customer lookup on loopback that answers ``stop_after`` lookups, then goes down or stops answering."""

    def __init__(self, stop_after: int | None, *, hang: bool = False, port: int = 0) -> None:
        self.answered = 0
        self.stop_after = stop_after
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                service.answered += 1
                if not hang and service.answered == service.stop_after:
                    # Down before the answer leaves: the client's next connect is refused, never queued.
                    service.server.socket.close()
                body = json.dumps({"customer": self.path.strip("/"), "tier": "gold"}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        HTTPServer.request_queue_size = 4096  # a hung service still accepts every connection: each read times out
        self.server = HTTPServer(("127.0.0.1", port), Handler)
        self.server.timeout = 0.1  # handle_request returns this often without a request, so close() is heard
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.stop_after is None or self.answered < self.stop_after:
            self.server.handle_request()
        # Stopped (the socket is closed) or hung (the socket stays open, nothing reads it) until close().

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.stop_after is None or self.answered < self.stop_after:
            self.stop_after = self.answered  # the serving loop ends at its next look
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the lookup service did not stop"
        self.server.server_close()


@pytest.fixture
def lookup_env(spark: Any) -> Iterator[Callable[[str, float], None]]:
    """Point the executors at a lookup service; the session's environment is restored afterwards."""
    environment = spark.sparkContext.environment

    def point(url: str, timeout_s: float) -> None:
        environment[LOOKUP_URL_ENV] = url
        environment[LOOKUP_TIMEOUT_ENV] = str(timeout_s)

    yield point
    environment.pop(LOOKUP_URL_ENV, None)
    environment.pop(LOOKUP_TIMEOUT_ENV, None)


def produce_orders(kafka_config: dict[str, Any], topic: str) -> None:
    producer = Producer(kafka_config)
    for offset in range(RECORDS):
        value = b"{not json" if offset % POISON_EVERY == POISON_EVERY - 1 else json.dumps({"customer": f"c{offset}"})
        producer.produce(topic, key=str(offset).encode(), value=value)
    assert producer.flush(30) == 0


def make_spec(kafka_config: dict[str, Any], topic: str, **outage: str) -> PipelineSpec:
    return PipelineSpec.from_dict(
        {
            "name": "lookup_pipeline",
            "source": {"topics": [topic], "group_id": f"{topic}-group"},
            "key_converter": "string",
            "value_converter": "json",
            "transformations": ["airflow_kerr.examples.lookup.lookup_customer"],
            "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
            "kafka": kafka_config,
            "metrics_topic": f"{topic}.metrics",
            "batch_size": BATCH,
            "errors": {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{topic}.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
                "errors.outage.enable": "true",
                "errors.outage.consecutive.failures": "5",
                **outage,
            },
        }
    )


def committed(kafka_config: dict[str, Any], group: str, topic: str) -> int:
    consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


def outputs(kafka_config: dict[str, Any], topic: str) -> tuple[list[int], list[int]]:
    """Source offsets found in the sink and in the DLQ, read_committed, one entry per record written."""
    config = {**kafka_config, "isolation.level": "read_committed"}
    clean = [int(m.key()) for m in read_to_end(config, f"{topic}.clean")]
    dead = []
    for message in read_to_end(config, f"{topic}.dlq"):
        letter = parse_dead_letter(message.headers(), message.key(), message.value())
        assert letter.source_topic == topic
        assert letter.source_offset is not None
        dead.append(letter.source_offset)
    return clean, dead


def poison_below(end: int) -> list[int]:
    return [offset for offset in range(end) if offset % POISON_EVERY == POISON_EVERY - 1]


@pytest.fixture
def orders_topic(kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str) -> str:
    topic = create_topic(unique_topic)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    produce_orders(kafka_config, topic)
    return topic


def check_tripped_run(kafka_config: dict[str, Any], topic: str, resume: int) -> None:
    """After the trip: everything below ``resume`` exactly once in sink or DLQ, nothing at or past it."""
    clean, dead = outputs(kafka_config, topic)
    assert committed(kafka_config, f"{topic}-group", topic) == resume
    assert sorted(dead) == poison_below(resume)
    assert sorted(clean + dead) == list(range(resume))


def check_rerun(kafka_config: dict[str, Any], topic: str) -> None:
    """After the rerun: every source record exactly once in sink or DLQ, and only the poison in the DLQ."""
    clean, dead = outputs(kafka_config, topic)
    assert sorted(dead) == poison_below(RECORDS), "an outage's record was dead-lettered, or one twice"
    assert sorted(clean + dead) == list(range(RECORDS)), "a record was lost or written twice"
    assert committed(kafka_config, f"{topic}-group", topic) == RECORDS


def check_the_guard_sees_an_outage(kafka_config: dict[str, Any], topic: str) -> None:
    """The guard's watch (its sensors' and triggers') breaches on the outage record, not on the error rate,
    and the alert says outage, not poison."""
    spec = ToleranceSpec(max_error_rate=0.5, pipeline="lookup_pipeline", metrics_topic=f"{topic}.metrics")
    breached, reading = ToleranceWatch(kafka_config=kafka_config, wait_for="breach", spec=spec).check()

    assert breached and reading is not None and reading.error_rate < 0.5
    assert reading.outage is not None and reading.outage["first_offset"] == 462
    details = ToleranceBreachNotifier(reading=reading_with_limits(reading.as_dict(), spec, "breach")).details({})
    message = BreachMessage.of(details)
    assert message.summary.startswith(
        "Outage in pipeline lookup_pipeline: urllib.error.URLError at stage TRANSFORMATION"
    )
    assert f"first at {topic}-0@462" in message.summary and "Tolerance breached" not in message.text
    assert message.subject == "[kerr] outage in lookup_pipeline"
    assert message.webhook_payload()["kerr"]["event"] == "outage"


def test_a_lookup_service_stopped_mid_run_fails_the_task_and_a_rerun_loses_nothing(
    spark: Any, kafka_config: dict[str, Any], orders_topic: str, lookup_env: Callable[[str, float], None]
) -> None:
    """450 lookups answered, then the service is down: offsets 0-399 hold 10 poison records, so the 450th
    lookup is offset 461 and 462 is the first refused one, in the batch of offsets 400-499."""
    topic = orders_topic
    service = LookupService(stop_after=450)
    lookup_env(service.url, 2.0)
    spec = make_spec(kafka_config, topic)

    with pytest.raises(OutageDetected) as tripped:
        run_job(spark, spec, run_id="run-outage")

    message = str(tripped.value)
    assert "urllib.error.URLError at stage TRANSFORMATION" in message
    assert f"first at {topic}-0@462" in message
    assert "of 100 records" in message and "committed up to 400" in message
    service.close()
    check_tripped_run(kafka_config, topic, resume=400)
    records = read_metrics_records(kafka_config, f"{topic}.metrics", 0)
    outage = [r for r in records if r.get("scope") == "outage"]
    assert len(outage) == 1 and outage[0]["outage"]["exception_class"] == "urllib.error.URLError"
    task = [r for r in records if r.get("scope") == "task"]
    assert [r["state"] for r in task] == ["outage"]
    assert task[0]["records_in"] == 400 and task[0]["total-records-skipped"] == len(poison_below(400))
    check_the_guard_sees_an_outage(kafka_config, topic)

    restarted = LookupService(stop_after=None, port=service.port)
    try:
        summary = run_job(spark, spec, run_id="run-after-outage")
    finally:
        restarted.close()
    assert summary["metrics"]["records_in"] == RECORDS - 400
    check_rerun(kafka_config, topic)


def test_a_service_that_stops_answering_trips_on_timeouts_and_a_rerun_loses_nothing(
    spark: Any, kafka_config: dict[str, Any], orders_topic: str, lookup_env: Callable[[str, float], None]
) -> None:
    """The registry pattern: after 150 answers the service accepts connections and never replies."""
    topic = orders_topic
    service = LookupService(stop_after=150, hang=True)
    lookup_env(service.url, 0.2)
    spec = make_spec(kafka_config, topic)

    with pytest.raises(OutageDetected) as tripped:
        run_job(spark, spec, run_id="run-hung")

    assert "TimeoutError at stage TRANSFORMATION" in str(tripped.value)
    service.close()
    check_tripped_run(kafka_config, topic, resume=100)

    restarted = LookupService(stop_after=None, port=service.port)
    lookup_env(restarted.url, 2.0)
    try:
        run_job(spark, spec, run_id="run-answering-again")
    finally:
        restarted.close()
    check_rerun(kafka_config, topic)


def test_poison_alone_never_trips(
    spark: Any, kafka_config: dict[str, Any], orders_topic: str, lookup_env: Callable[[str, float], None]
) -> None:
    """With the service up, the poison (one record in 37) goes to the DLQ as Connect sends it: the default path."""
    service = LookupService(stop_after=None)
    lookup_env(service.url, 2.0)
    try:
        run_job(spark, make_spec(kafka_config, orders_topic), run_id="run-poison")
    finally:
        service.close()
    check_rerun(kafka_config, orders_topic)
