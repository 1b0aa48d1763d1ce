"""A registry that answers 503 or stalls, in front of the development registry: retried, then tolerated.

The error-aware job runs on real local Spark against the session's broker and development
Schema Registry, reached through :class:`RegistryFaultProxy`, a loopback HTTP proxy that
forwards every request unchanged, counts them by path, and answers ``GET /schemas/ids/...``
with 503 (Confluent's body, ``error_code`` 50003) or holds it unanswered when told to: what a
real registry does while its leader is away or it is overloaded, which it cannot be made to
do on demand. Connect's converters turn both into a ``RetriableException``
(schema-serializer/.../AbstractKafkaSchemaSerDe.java ``toKafkaException``, v7.9.9), which the
worker retries within ``errors.retry.timeout`` and then hands to the tolerance.
"""

from __future__ import annotations

import http.client
import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from confluent_kafka import Producer

from airflow_kerr.formats import RegistryClient, RegistrySettings, WireFormat
from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.spark.driver import run_job
from airflow_kerr.spark.spec import PipelineSpec
from tests.registry_orders import dead_letters, failures

pytestmark = pytest.mark.spark

SCHEMA_PATH = "/schemas/ids/"


class RegistryFaultProxy:
    """Forwards to a registry; ``fail_next`` schema fetches get 503, and while ``stall`` is set they get no answer."""

    def __init__(self, upstream: str) -> None:
        split = urlsplit(upstream)
        self.upstream = (split.hostname or "127.0.0.1", split.port or 80)
        self.fail_next = 0
        self.failed = 0
        self.stall = threading.Event()
        self.released = threading.Event()
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        path = urlsplit(handler.path).path
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        with self._lock:
            self.requests[f"{handler.command} {path}"] += 1
            fault = path.startswith(SCHEMA_PATH) and (self.stall.is_set() or self.fail_next > 0)
            if fault and not self.stall.is_set():
                self.fail_next -= 1
                self.failed += 1
        if fault and self.stall.is_set():
            self.released.wait()  # the client gives up first (its timeout); the test releases at the end
            return
        if fault:
            answer = json.dumps({"error_code": 50003, "message": "Error while forwarding the request to the leader"})
            self._reply(handler, 503, answer.encode())
            return
        connection = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            headers = {"Content-Type": handler.headers.get("Content-Type", "application/json")}
            connection.request(handler.command, handler.path, body=body or None, headers=headers)
            response = connection.getresponse()
            self._reply(handler, response.status, response.read())
        finally:
            connection.close()

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def schema_fetches(self, schema_id: int) -> int:
        with self._lock:
            return sum(n for request, n in self.requests.items() if request == f"GET {SCHEMA_PATH}{schema_id}")


@pytest.fixture
def proxy(schema_registry: Any) -> Iterator[RegistryFaultProxy]:
    served = RegistryFaultProxy(schema_registry.url)
    try:
        yield served
    finally:
        served.close()


def orders_topic(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], topic: str, registry_url: str, count: int
) -> tuple[int, str]:
    """``count`` Avro orders, then a tombstone, on a new one-partition topic; the schema's id (new: its own name)."""
    create_topic(topic)
    for suffix in (".out", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    name = f"Order{uuid.uuid4().hex[:8]}"
    schema = json.dumps(
        {
            "type": "record",
            "name": name,
            "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
        }
    )
    schema_id = RegistryClient(RegistrySettings.from_mapping({"url": registry_url})).register(
        f"{topic}-value", schema, "AVRO"
    )
    codec = AvroCodec(schema)
    producer = Producer(kafka_config)
    for index in range(count):
        producer.produce(
            topic,
            key=f"k{index}".encode(),
            value=WireFormat.build(schema_id, codec.encode({"id": index, "amount": 1.5})),
        )
    producer.produce(topic, key=b"tombstone", value=None)
    assert producer.flush(30) == 0
    return schema_id, schema


def spec_for(
    kafka_config: dict[str, Any], topic: str, registry: dict[str, Any], errors: dict[str, Any]
) -> PipelineSpec:
    return PipelineSpec.from_dict(
        {
            "name": "registry_faults",
            "source": {"topics": [topic], "group_id": f"{topic}-job"},
            "key_converter": "string",
            "value_converter": "avro",
            "kafka": kafka_config,
            "schema_registry": registry,
            "metrics_topic": f"{topic}.metrics",
            "sink": {"kind": "kafka", "topic": f"{topic}.out"},
            "errors": {
                "errors.deadletterqueue.topic.name": f"{topic}.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
                "errors.retry.delay.max.ms": "200",
                **errors,
            },
        }
    )


def test_503s_are_retried_to_success_and_each_process_fetches_the_schema_once(
    spark: Any,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    schema_registry: Any,
    proxy: RegistryFaultProxy,
) -> None:
    """Three 503s, then answers: every order converts, each 503 is one retry, and the schema is fetched
    once per Python worker, not once per record (local[2] splits the partition into two tasks)."""
    schema_id, _ = orders_topic(kafka_config, create_topic, unique_topic, schema_registry.url, 300)
    proxy.fail_next = 3
    spec = spec_for(kafka_config, unique_topic, {"url": proxy.url}, {"errors.retry.timeout": "600000"})

    summary = run_job(spark, spec, run_id="registry-503")

    metrics = summary["metrics"]
    assert metrics["records_in"] == 301 and metrics["total-records-skipped"] == 0
    assert proxy.failed == 3 and metrics["total-retries"] == 3
    assert 1 <= proxy.schema_fetches(schema_id) - 3 <= 2, proxy.requests
    written = [m.value() for m in read_to_end(kafka_config, f"{unique_topic}.out")]
    assert len(written) == 301 and written.count(None) == 1  # the tombstone needs no schema: null, as Connect's
    assert read_to_end(kafka_config, f"{unique_topic}.dlq") == []


@pytest.mark.parametrize("fault", ["503", "stall"])
def test_a_registry_still_failing_after_the_retry_timeout_is_handled_by_the_tolerance(
    spark: Any,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    schema_registry: Any,
    proxy: RegistryFaultProxy,
    fault: str,
) -> None:
    """503 on every fetch, or no answer within the client's ``timeout``: each record is retried until
    ``errors.retry.timeout`` runs out, then, under ``errors.tolerance=all``, dead-lettered with the reason."""
    schema_id, _ = orders_topic(kafka_config, create_topic, unique_topic, schema_registry.url, 3)
    if fault == "503":
        proxy.fail_next = 1_000_000
    else:
        proxy.stall.set()
    registry = {"url": proxy.url, "timeout": 0.5}
    spec = spec_for(kafka_config, unique_topic, registry, {"errors.retry.timeout": "6000", "errors.tolerance": "all"})

    summary = run_job(spark, spec, run_id=f"registry-{fault}")

    metrics = summary["metrics"]
    assert metrics["records_in"] == 4 and metrics["total-records-skipped"] == 3
    assert metrics["total-retries"] >= 3, "each record was retried before it was given up"
    assert proxy.schema_fetches(schema_id) >= 6, "each record asked again on each retry"
    cause = (
        "HTTP 503: Error while forwarding the request to the leader; error code: 50003"
        if fault == "503"
        else "timed out"
    )
    for failure in failures(dead_letters(kafka_config, f"{unique_topic}.dlq")).values():
        assert failure.stage == "VALUE_CONVERTER"
        assert failure.message == f"Failed to deserialize data for topic {unique_topic} to Avro: ", failure
        assert failure.causes[0] == f"Error retrieving Avro value schema for id {schema_id}", failure
        assert failure.causes[1].startswith(f"GET {proxy.url}{SCHEMA_PATH}{schema_id}: "), failure
        assert cause in failure.causes[1], failure
    assert len(read_to_end(kafka_config, f"{unique_topic}.dlq")) == 3
    assert [m.value() for m in read_to_end(kafka_config, f"{unique_topic}.out")] == [None]  # the tombstone only
