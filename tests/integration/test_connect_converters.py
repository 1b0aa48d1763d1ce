"""Confluent's Avro and Protobuf converters run on the stack's real Kafka Connect worker from their plugin directories.

No Schema Registry runs here yet: the converters are given ``mock://<scope>`` as their
registry URL. A FileStreamSink configured with each converter runs, and a record that is not
in Confluent's wire format is dead-lettered by that converter (the DLQ's context headers name
it), which shows the worker loaded and ran the class from its plugin directory.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.local.connect_runtime import PLUGINS, plugin_path
from airflow_kerr.local.connect_worker import ConnectWorker, connector_config

pytestmark = pytest.mark.connect

#: Converter class -> the plugin directory it is installed in (as Confluent Hub names them).
CONVERTERS = {
    "io.confluent.connect.avro.AvroConverter": "kafka-connect-avro-converter",
    "io.confluent.connect.protobuf.ProtobufConverter": "kafka-connect-protobuf-converter",
}


def _wait_until(predicate: Callable[[], Any], what: str, timeout_s: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f} s (last value {value!r})")
        time.sleep(0.2)


def _plugins_of(worker: ConnectWorker) -> Path:
    properties = (worker.work_dir / "worker.properties").read_text()
    found = re.search(r"^plugin\.path=(.+)$", properties, re.MULTILINE)
    if found is None:
        pytest.fail(
            f"the worker (Kafka Connect {worker.version}) has no plugin.path: Confluent's converters are "
            "installed with Kafka Connect 4.3 only; run with KERR_CONNECT_VERSION unset"
        )
    return Path(found.group(1))


def _running(worker: ConnectWorker, name: str) -> bool:
    try:
        status = worker.status(name)
    except OSError:  # 404 until the worker has written the first status
        return False
    return status["connector"]["state"] == "RUNNING" and [t["state"] for t in status["tasks"]] == ["RUNNING"]


def test_the_worker_lists_confluent_converters_loaded_from_their_plugin_directories(
    connect_worker: ConnectWorker,
) -> None:
    plugins = _plugins_of(connect_worker)
    listed = connect_worker.rest("GET", "/connector-plugins?connectorsOnly=false")
    assert isinstance(listed, list)
    converters = {entry["class"]: entry for entry in listed if entry["type"] == "converter"}
    assert set(CONVERTERS) <= set(converters), f"converters listed: {sorted(converters)}"
    log = connect_worker.log_path.read_text()
    for converter, directory in CONVERTERS.items():
        location = plugins / directory
        assert plugin_path(location.parent.parent) == plugins and plugins.name == PLUGINS
        # The worker registers one isolated class loader per plugin directory, and the converter under it.
        assert f"Registered loader: PluginClassLoader{{pluginLocation=file:{location}/}}" in log, log[-3000:]
        assert re.search(rf"Added plugin '{re.escape(converter)}'", log), f"{converter} not added"
        # Connect's own API jars stay on the worker's class path, outside the plugin directory (isolation).
        assert not list(location.glob("connect-api-*.jar")) and not list(location.glob("kafka-clients-*.jar"))


@pytest.mark.parametrize("converter", list(CONVERTERS))
def test_a_sink_runs_with_a_confluent_converter_and_its_bad_records_are_dead_lettered_by_it(
    connect_worker: ConnectWorker,
    create_topic: Callable[..., str],
    kafka_config: dict[str, Any],
    converter: str,
) -> None:
    """A record not in Confluent's wire format (magic byte 0, schema id) fails in the converter itself.

    The converters 7.0.16 do not resolve ``mock://`` yet (their registry client then reports
    ``unknown protocol: mock`` at the first schema lookup), so no record can be converted
    through a schema until a registry runs; the magic-byte check comes before any lookup.
    """
    from confluent_kafka import Consumer, Producer

    _plugins_of(connect_worker)
    suffix = uuid.uuid4().hex[:8]
    topic = create_topic(f"converted-{suffix}")
    dlq = create_topic(f"converted-dlq-{suffix}")
    sink = f"sink-{suffix}"
    config = connector_config(
        topic,
        f"{sink}.txt",
        **{
            "value.converter": converter,
            "value.converter.schema.registry.url": f"mock://kerr-{suffix}",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.topic.replication.factor": "1",
            "errors.deadletterqueue.context.headers.enable": "true",
        },
    )
    try:
        connect_worker.rest("POST", "/connectors", {"name": sink, "config": config})
        _wait_until(lambda: _running(connect_worker, sink), f"{sink} was not RUNNING")
        value = json.dumps({"not": "in the wire format"}).encode()
        producer = Producer(kafka_config)
        producer.produce(topic, value=value)
        assert producer.flush(30) == 0, "the broker did not take the record within 30 s"

        consumer = Consumer({**kafka_config, "group.id": f"check-{suffix}", "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([dlq])
            dead: list[Any] = []

            def dead_lettered() -> bool:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    dead.append(message)
                return bool(dead)

            _wait_until(dead_lettered, "the record not in the wire format was not dead-lettered")
        finally:
            consumer.close()
        headers = {key: (raw or b"").decode() for key, raw in dead[0].headers() or []}
        assert dead[0].value() == value
        assert headers["__connect.errors.stage"] == "VALUE_CONVERTER"
        assert headers["__connect.errors.class.name"] == converter
        assert "Unknown magic byte" in headers["__connect.errors.exception.message"] + headers.get(
            "__connect.errors.exception.stacktrace", ""
        )
        assert _running(connect_worker, sink), "errors.tolerance=all: the sink keeps running"
        output = connect_worker.output_file(f"{sink}.txt")
        assert not output.exists() or output.read_text() == "", "the bad record reached the sink's file"
    finally:
        with contextlib.suppress(OSError):  # 404: it was never created
            connect_worker.rest("DELETE", f"/connectors/{sink}")
