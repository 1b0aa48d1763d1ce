"""No credential leaves through any exit (issue #24, point 3): the same generated secrets as the rule's own test,
written into real dead letters' exception messages, must not appear in what people read.

Each example writes dead letters whose messages hold secrets in every syntax (PEM blocks
whole and cut short, ``Authorization``/``Bearer``/``Basic``, URL user-info, sensitive
``name=value``/``name: value``/JSON members, JAAS passwords) amid arbitrary text, then reads
them back through the real exits: ``DeadLetterQueueSensor``'s XCom and log, the
``DeadLetterQueueTrigger``'s event, the ``DeadLetterQueueEventTrigger`` watcher's event
payload, the DLQ view's JSON (the plugin's app), and the breach notifier's message. The
raw sample read with no masking must hold every secret, so the test proves something.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.kafka.dead_letters import DeadLetterGrowth, newest_dead_letters
from airflow_kerr.local.dead_letters import Failure, write_dead_letters
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier
from airflow_kerr.sensors.dead_letter_queue import DeadLetterQueueSensor
from airflow_kerr.triggers.dead_letter_queue import DeadLetterQueueTrigger
from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterQueueEventTrigger
from tests.clock import RECENT_MS

# The generators of the rule's own property test, so both test one list of syntaxes.
# (The test folders are not packages: imported by path.)
_spec = importlib.util.spec_from_file_location(
    "masking_rule_cases", Path(__file__).parent.parent / "unit" / "errors" / "test_masking_rule.py"
)
assert _spec is not None and _spec.loader is not None
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

LETTERS = 2


@pytest.fixture(scope="module")
def dlq(kafka_bootstrap: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """A one-partition DLQ, ``kafka_default`` pointing at the test broker, for the whole module."""
    from confluent_kafka.admin import AdminClient, NewTopic

    config: dict[str, Any] = {"bootstrap.servers": kafka_bootstrap}
    topic = f"masking-exits-{uuid.uuid4().hex[:8]}.dlq"
    admin = AdminClient(config)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    patch = pytest.MonkeyPatch()
    patch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": config}))
    try:
        yield topic, config
    finally:
        patch.undo()


@pytest.fixture(scope="module")
def client(dlq: tuple[str, dict[str, Any]]) -> Iterator[TestClient]:
    """The DLQ view's app as the api-server mounts it, a signed-in admin asking (Airflow's auth is tested upstream)."""
    from airflow.api_fastapi.app import init_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.core_api.security import get_user

    from airflow_kerr.plugins.dead_letter_view import app

    init_auth_manager()
    app.dependency_overrides[get_user] = lambda: SimpleAuthManagerUser(username="on-call", role="admin")
    try:
        with TestClient(app, raise_server_exceptions=False) as test_client:
            yield test_client
    finally:
        app.dependency_overrides.clear()


def high_watermark(config: dict[str, Any], topic: str) -> int:
    consumer = Consumer({**config, "group.id": "masking-exits-lookup"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


async def first_event(trigger: DeadLetterQueueTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return dict(event.payload)
    raise AssertionError("the trigger ended without an event")


async def watcher_events(trigger: DeadLetterQueueEventTrigger, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The watcher's events as the triggerer hands them on: through the trigger's shared-stream filter."""

    async def stream() -> AsyncIterator[dict[str, Any]]:
        for event in events:
            yield event

    return [dict(event.payload) async for event in trigger.filter_shared_stream(stream())]


def assert_hidden(where: str, output: Any, hidden: list[str]) -> None:
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    for secret in hidden:
        assert secret not in text, f"{secret!r} left through {where}: {text[:2000]}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(letters=st.lists(cases.messages(), min_size=LETTERS, max_size=LETTERS))
def test_no_secret_leaves_through_any_exit(
    dlq: tuple[str, dict[str, Any]], client: TestClient, capsys: pytest.CaptureFixture[str], letters: list[Any]
) -> None:
    topic, config = dlq
    hidden = [secret for _, secrets in letters for secret in secrets]
    before = high_watermark(config, topic)
    watch = DeadLetterQueueEventTrigger(topic=topic, sample_size=LETTERS, cursor_group=f"kerr-test-{uuid.uuid4()}")
    stream: Any = DeadLetterQueueEventTrigger.create_shared_stream_producer(watch.serialize()[1])
    stream.open()  # a first start: the watch begins at the ends, before the dead letters below
    try:
        records = [SourceRecord("orders", 0, before + i, RECENT_MS, key=b"k", value=b"{}") for i in range(2)]
        failures = [
            Failure(record, Stage.TRANSFORMATION, RuntimeError(text))
            for record, (text, _) in zip(records, letters, strict=True)
        ]
        write_dead_letters(config, topic, failures)
        after = high_watermark(config, topic)

        raw = newest_dead_letters(config, topic, DeadLetterGrowth(LETTERS, {0: after}, {0: before}), LETTERS)
        for secret in hidden:  # what the exits read holds every secret: the assertions below mean something
            assert secret in json.dumps(raw)

        capsys.readouterr()
        sensor = DeadLetterQueueSensor(
            task_id="dlq", topic=topic, since={0: before}, min_records=LETTERS, sample_size=LETTERS
        )
        poked: Any = sensor.poke({})
        logged = capsys.readouterr()  # Airflow's task logger (structlog) writes to the console here
        assert poked.is_done and poked.xcom_value["count"] == LETTERS
        assert_hidden("the sensor's XCom", poked.xcom_value, hidden)
        assert "gained" in logged.out + logged.err, "the sensor's log line was captured"
        assert_hidden("the sensor's log", logged.out + logged.err, hidden)

        trigger = DeadLetterQueueTrigger(
            topic=topic, baseline={"0": before}, min_records=LETTERS, sample_size=LETTERS, poll_interval=0.1
        )
        event = asyncio.run(first_event(trigger))
        assert event["status"] == "tripped"
        assert_hidden("the trigger's event", event, hidden)
        assert_hidden("the deferred sensor's result", sensor.execute_complete({}, event), hidden)

        observed = [payload for payload, _ in stream.observe()]
        assert observed and observed[0]["count"] == LETTERS
        assert_hidden("the watcher's event payload", asyncio.run(watcher_events(watch, observed)), hidden)

        samples = client.get(f"/api/topics/{topic}/samples", params={"limit": LETTERS})
        summary = client.get(f"/api/topics/{topic}/summary")
        assert samples.status_code == 200 and summary.status_code == 200
        assert len(samples.json()["records"]) == LETTERS
        assert_hidden("the view's samples", samples.text, hidden)
        assert_hidden("the view's summary", summary.text, hidden)

        for notifier in (
            ToleranceBreachNotifier(pipeline="orders", dlq_topic=topic, sample=raw),
            ToleranceBreachNotifier(
                pipeline="orders", dlq_topic=topic, sample_error=f"KafkaException: {letters[0][0]}"
            ),
        ):
            details = notifier.details({})
            assert_hidden("the notifier's message", notifier.text(details), hidden)
            assert_hidden("the notifier's webhook body", notifier.payload(details), hidden)
    finally:
        asyncio.run(stream.aclose())


def test_a_kafka_connections_secrets_are_registered_with_airflows_log_masker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow hides a connection's extras by its own names, which miss Kafka's PEM and JAAS settings; the hook
    registers every value our rule calls secret, so task logs print ``***`` for them."""
    from airflow.sdk._shared.secrets_masker import redact

    from airflow_kerr.hooks.kafka import KafkaClusterHook

    pem = "-----BEGIN PRIVATE KEY-----\nZqPEMbodyNeverLogged\n-----END PRIVATE KEY-----"
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="ZqJaas1";'
    extra = {"bootstrap.servers": "broker:9092", "ssl.key.pem": pem, "sasl.jaas.config": jaas, "client.id": "kerr"}
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_SECRETS", json.dumps({"conn_type": "kafka", "extra": extra}))
    config = KafkaClusterHook(kafka_config_id="kafka_secrets").client_config()
    logged = redact(f"config: {config['ssl.key.pem']} / {config['sasl.jaas.config']} / {config['client.id']}")
    assert "ZqPEMbodyNeverLogged" not in logged and "ZqJaas1" not in logged
    assert "kerr" in logged, "a public setting stays readable"
