"""Differential: one topic read by real Kafka Connect's converter and by the error-aware job, Avro then Protobuf.

Real parts only: the session's noida-db broker, the development Schema Registry, the stack's
Kafka Connect 4.3 worker with Confluent's converters 7.0.16 from its plugin path, and local Spark.

A FileStreamSink with ``AvroConverter`` (then ``ProtobufConverter``), ``errors.tolerance=all``
and a DLQ with context headers reads ten good orders, a JSON value, an unknown schema id, a
truncated body and a tombstone; the job reads the same topic with the ``avro`` (``protobuf``)
converter into a sink of that format. The same records fail at the same stage; their DLQ records
agree header by header (topic, partition, offset, connector, task, stage, executing class and
message exactly; the exception class through the mapping table of
``docs/guides/schema-registry.md``; the causes in the stack trace, Java's ``Caused by:`` against
Python's chain, where the decoders' own exceptions may differ in text); the good records' values
are equal. Then a second Connect sink reads the job's output: wire compatibility both ways. The
Protobuf schema is registered as confluent-kafka's serializer registers it (a base64 descriptor).

Upstream behaviour checked (confluentinc/schema-registry v7.0.16, the converter the worker runs):
``avro-converter/src/main/java/io/confluent/connect/avro/AvroConverter.java`` (``toConnectData``
wraps a ``SerializationException`` in ``DataException("Failed to deserialize data for topic %s to
Avro: ", e)``), ``avro-serializer/src/main/java/io/confluent/kafka/serializers/AbstractKafkaAvroDeserializer.java``
("Error retrieving Avro value schema for id ", "Error deserializing Avro message for id "),
``schema-serializer/src/main/java/io/confluent/kafka/serializers/AbstractKafkaSchemaSerDe.java``
("Unknown magic byte!"),
``protobuf-converter/src/main/java/io/confluent/connect/protobuf/ProtobufConverter.java`` and
``protobuf-serializer/src/main/java/io/confluent/kafka/serializers/protobuf/AbstractKafkaProtobufDeserializer.java``
(the header is read inside the ``try``: an unframed value is "Error deserializing Protobuf message
for id -1", caused by "Unknown magic byte!"); and apache/kafka 4.3
``connect/runtime/src/main/java/org/apache/kafka/connect/runtime/errors/DeadLetterQueueReporter.java``
(``populateContextHeaders``: the message header is the exception's ``getMessage()``, the cause is
only in the stack trace header).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import airflow_kerr.formats
from airflow_kerr.formats import RegistryClient, RegistryDeserializer, RegistrySettings, WireFormat
from airflow_kerr.kafka.offsets import end_offsets, group_offsets, read_to_end
from airflow_kerr.local.connect_worker import ConnectWorker, connector_config
from airflow_kerr.spark.driver import run_job
from tests.registry_orders import (
    ERRORS,
    GOOD,
    ORDER,
    PROTO_ORDER,
    ConverterFailure,
    by_id,
    dead_letters,
    exception_chain,
    expected_avro_failures,
    expected_protobuf_failures,
    good_order,
    pipeline_spec,
    produce_avro_orders,
    produce_protobuf_orders,
    wait_until,
)

pytestmark = [pytest.mark.spark, pytest.mark.connect]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "schema-registry.md"
#: Headers whose values must be equal byte for byte.
EQUAL_HEADERS = (
    "__connect.errors.topic",
    "__connect.errors.partition",
    "__connect.errors.offset",
    "__connect.errors.connector.name",
    "__connect.errors.task.id",
    "__connect.errors.stage",
    "__connect.errors.class.name",
    "__connect.errors.exception.message",
)
#: A class name at the head of a decoder's text, as the Avro codec names Java's (``EOFException: ...``).
NAMED_EXCEPTION = re.compile(r"^(\w+Exception): ")


@dataclass(frozen=True)
class Format:
    """One registry format on both sides: Connect's converter class, the job's converter and sink kind."""

    kind: str
    converter: str
    sink_schema: str
    produce: Callable[[dict[str, Any], str, str], int]
    expected: Callable[[str, int], dict[int, ConverterFailure]]


AVRO = Format("avro", "io.confluent.connect.avro.AvroConverter", ORDER, produce_avro_orders, expected_avro_failures)
PROTOBUF = Format(
    "protobuf",
    "io.confluent.connect.protobuf.ProtobufConverter",
    PROTO_ORDER,
    produce_protobuf_orders,
    expected_protobuf_failures,
)


def documented_exception_classes() -> dict[str, str]:
    """The guide's table: the job's exception class (as its DLQ header names it) -> the Java class Connect names."""
    rows = re.findall(r"^\| `(\w+)`[^|]*\| `([\w.]+\.\w+)` \|$", GUIDE.read_text(), re.MULTILINE)
    mapping = {}
    for python_name, java_name in rows:
        cls = getattr(airflow_kerr.formats, python_name)
        mapping[f"{cls.__module__}.{cls.__qualname__}"] = java_name
    assert mapping, f"no exception table in {GUIDE}"
    return mapping


def struct_text(value: dict[str, Any] | None) -> str:
    """What FileStreamSink writes for a converted value: Connect's ``Struct.toString()``, or ``null``."""
    if value is None:
        return "null"
    return "Struct{" + ",".join(f"{name}={item}" for name, item in value.items() if item is not None) + "}"


def context_headers(kafka_config: dict[str, Any], dlq: str) -> dict[int, list[tuple[str, bytes | None]]]:
    """Each DLQ record's ``__connect.errors.*`` headers as written, in order, by its source offset."""
    found = {}
    for message in read_to_end(kafka_config, dlq):
        headers = [(name, raw) for name, raw in message.headers() or [] if name.startswith("__connect.errors.")]
        found[int(dict(headers)["__connect.errors.offset"] or b"-1")] = headers
    return found


def run_sink_until_read(
    worker: ConnectWorker,
    kafka_config: dict[str, Any],
    name: str,
    topic: str,
    config: dict[str, str],
    dlq: str | None = None,
    dead: int = 0,
) -> list[str]:
    """Run a FileStreamSink on ``topic`` until it has committed every record and ``dead`` are in ``dlq``; its lines.

    Evidence, not time: the sink's group has no lag (Connect flushes the file before it commits)
    and the DLQ holds the records Connect reported. A failed task ends the wait with its trace.
    """
    worker.add_connector(name, {**connector_config(topic, f"{name}.txt"), **config}, timeout_s=240)
    end = end_offsets(kafka_config, [(topic, 0)])[(topic, 0)]
    output = worker.output_file(f"{name}.txt")

    def read_everything() -> bool:
        failed = [t.get("trace", "") for t in worker.status(name)["tasks"] if t["state"] == "FAILED"]
        if failed:
            pytest.fail(f"the sink {name} failed:\n{failed[0][:3000]}")
        if group_offsets(kafka_config, f"connect-{name}", [(topic, 0)]).get((topic, 0), 0) < end:
            return False
        return dlq is None or len(read_to_end(kafka_config, dlq)) >= dead

    wait_until(read_everything, f"the sink {name} did not read {topic}'s {end} records")
    return output.read_text().splitlines()


@pytest.mark.parametrize("fmt", [AVRO, PROTOBUF], ids=lambda fmt: fmt.kind)
def test_connect_and_the_job_fail_the_same_records_alike_and_read_each_others_output(
    spark: Any,
    connect_worker: ConnectWorker,
    schema_registry: Any,
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    fmt: Format,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic = create_topic(f"diff-{fmt.kind}-{suffix}")
    connect_dlq, job_dlq, job_output = (create_topic(f"{topic}.{part}") for part in ("connect-dlq", "job-dlq", "out"))
    create_topic(f"{topic}.metrics")
    schema_id = fmt.produce(kafka_config, schema_registry.url, topic)
    expected = fmt.expected(topic, schema_id)
    # The pipeline is named as the connector, so the connector.name header can be compared too.
    name, reader = f"diff-{fmt.kind}-{suffix}", f"diff-{fmt.kind}-reader-{suffix}"
    registry = {"value.converter": fmt.converter, "value.converter.schema.registry.url": schema_registry.url}
    try:
        connect_lines = run_sink_until_read(
            connect_worker,
            kafka_config,
            name,
            topic,
            {
                **registry,
                **ERRORS,
                "errors.deadletterqueue.topic.name": connect_dlq,
                "errors.deadletterqueue.topic.replication.factor": "1",
            },
            dlq=connect_dlq,
            dead=len(expected),
        )
        spec = pipeline_spec(
            kafka_config,
            schema_registry.url,
            topic,
            name=name,
            value_converter=fmt.kind,
            sink={"kind": fmt.kind, "topic": job_output, "schema": fmt.sink_schema},
            errors={**ERRORS, "errors.deadletterqueue.topic.name": job_dlq},
        )
        run_job(spark, spec, run_id=f"differential-{fmt.kind}")
        # Wire compatibility the other way: Connect's converter reads what the job's sink wrote.
        reader_lines = run_sink_until_read(connect_worker, kafka_config, reader, job_output, registry)
    finally:
        for connector in (name, reader):
            with contextlib.suppress(OSError):  # 404: it was never created
                connect_worker.rest("DELETE", f"/connectors/{connector}")

    from_connect, from_job = dead_letters(kafka_config, connect_dlq), dead_letters(kafka_config, job_dlq)
    assert sorted(from_connect) == sorted(from_job) == sorted(expected), "the same records fail"
    sources = {m.offset(): m for m in read_to_end(kafka_config, topic)}
    headers_of_connect, headers_of_job = (
        context_headers(kafka_config, connect_dlq),
        context_headers(kafka_config, job_dlq),
    )
    mapping = documented_exception_classes()
    for offset, failure in sorted(expected.items()):
        connect, job = from_connect[offset], from_job[offset]
        assert job.value == connect.value == sources[offset].value(), "the original bytes"
        assert job.key == connect.key == sources[offset].key()
        assert len(headers_of_connect[offset]) == 10, "Connect's ten context headers"
        assert [n for n, _ in headers_of_job[offset]] == [n for n, _ in headers_of_connect[offset]], "names, order"
        connect_headers, job_headers = dict(headers_of_connect[offset]), dict(headers_of_job[offset])
        for header in EQUAL_HEADERS:
            assert job_headers[header] == connect_headers[header], f"offset {offset}, {header}"
        assert (str(connect.stage), connect.exception_message) == (failure.stage, failure.message)
        assert mapping[job.exception_class or ""] == connect.exception_class
        # The causes: Java's "Caused by:" lines against the job's chained exceptions, class and text.
        connect_chain, job_chain = exception_chain(connect), exception_chain(job)
        assert [text for _, text in job_chain[1 : len(failure.causes) + 1]] == list(failure.causes)
        assert len(job_chain) == len(connect_chain), (job_chain, connect_chain)
        for (job_class, job_text), (java_class, java_text) in zip(job_chain, connect_chain, strict=True):
            if java_class in mapping.values():
                assert (mapping.get(job_class), job_text) == (java_class, java_text), f"offset {offset}"
            else:  # the decoder's own exception: two decoders' texts; where the job's names a class, Java's
                named = NAMED_EXCEPTION.match(job_text)
                assert job_text and (named is None or named.group(1) == java_class.rsplit(".", 1)[-1]), java_class

    good_and_tombstone = [*(struct_text(good_order(i)) for i in range(GOOD)), struct_text(None)]
    assert connect_lines == good_and_tombstone, "Connect wrote the good orders, then the tombstone"
    written = read_to_end(kafka_config, job_output)
    decode = RegistryDeserializer(
        fmt.kind, RegistryClient(RegistrySettings.from_mapping({"url": schema_registry.url})), is_key=False
    )
    job_values = [decode(m.value()) for m in written]
    assert sorted(job_values, key=by_id) == [*(good_order(i) for i in range(GOOD)), None], "equal values"
    assert {WireFormat.schema_id(m.value()) for m in written if m.value() is not None} == {schema_id}
    assert sorted(reader_lines) == sorted(good_and_tombstone), "Connect reads the job's output"
