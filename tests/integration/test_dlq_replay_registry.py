"""Issue #42, point 2: a replay's fix works on Schema Registry values, exactly once.

Avro orders are written through the real serializer (:class:`RegistrySerializer`) to the
development registry, dead-lettered as the job writes them (``build_dead_letter_record``)
and replayed by the real engine on the embedded broker. What lands is read back
``read_committed`` and decoded through the registry. The registry here is one of this
module's own, with its own log, so a test counts the requests it served: each request is
one line of that log (``BaseHTTPRequestHandler.log_message``), written before the answer.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record
from airflow_kerr.formats import (
    RegistryClient,
    RegistryDeserializer,
    RegistrySerializer,
    RegistrySettings,
    WireFormat,
)
from airflow_kerr.kafka.offsets import read_to_end
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.options import InvalidReplayOptions, ReplayOptions
from airflow_kerr.replay.policy import HEADER_PARKED_REASON, HEADER_REPLAY_COUNT, ReplayRecord, StopReplay
from tests.clock import RECENT_MS
from tests.dead_letter_writers import Original, schema_registry_rule
from tests.integration.test_dlq_replay import ABORTABLE, FaultyProducer

ORDER_V1 = (
    '{"type": "record", "name": "Order", "namespace": "shop", "fields": ['
    '{"name": "id", "type": "long"}, {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}'
)
#: v1 plus an optional note: BACKWARD-compatible, registered as the subject's latest by one test.
ORDER_V2 = ORDER_V1.replace(
    '{"name": "qty", "type": "int"}]}',
    '{"name": "qty", "type": "int"}, {"name": "note", "type": ["null", "string"], "default": null}]}',
)
REQUEST_LINE = re.compile(r'"(GET|POST|PUT|DELETE) /')


class NegativeQuantity(ValueError):
    """Stands for the pipeline's validation error in the DLQ headers."""


class Registry:
    """This module's development registry: its URL and the requests its log shows it served."""

    def __init__(self, url: str, log: Path) -> None:
        self.url = url
        self.log = log

    def requests(self) -> int:
        return sum(1 for line in self.log.read_text(errors="replace").splitlines() if REQUEST_LINE.search(line))

    def settings(self) -> RegistrySettings:
        return RegistrySettings.from_mapping({"url": self.url})

    def client(self) -> RegistryClient:
        return RegistryClient(self.settings())


@pytest.fixture(scope="module")
def registry(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry of this module only (its own ``_schemas`` topic), so its log holds this module's requests alone."""
    from airflow_kerr.local.schema_registry import LocalSchemaRegistry

    log = tmp_path_factory.mktemp("registry") / "schema-registry.log"
    topic = f"_schemas_replay_{uuid.uuid4().hex[:8]}"
    with LocalSchemaRegistry(kafka_bootstrap, log_path=log, topic=topic) as running:
        yield Registry(running.url, log)


def order(i: int, qty: int) -> dict[str, Any]:
    return {"id": i, "sku": f"sku-{i}", "qty": qty}


def write_avro_dlq(
    kafka_config: dict[str, Any], registry: Registry, source: str, dlq: str, count: int
) -> tuple[int, list[bytes]]:
    """``count`` Avro orders with a negative quantity, dead-lettered; the writer's schema id and each value's bytes."""
    serializer = RegistrySerializer(
        "avro", registry.client(), registry.settings(), topic=source, is_key=False, schema=ORDER_V1
    )
    producer = Producer({**kafka_config, "linger.ms": 5})
    values = []
    for i in range(count):
        value = serializer(order(i, -(i + 1)))
        assert value is not None
        values.append(value)
        record = SourceRecord(source, i % 2, i, RECENT_MS + i, key=f"o-{i}".encode(), value=value)
        context = ErrorContext(
            TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "shop.validate", NegativeQuantity(f"o-{i}"), record
        )
        producer.produce(**build_dead_letter_record(context, topic=dlq).produce_kwargs())
    assert producer.flush(30) == 0
    return WireFormat.schema_id(values[0]), values


def replay(kafka_config: dict[str, Any], registry: Registry | None, engine_kwargs: Any = None, **options: Any) -> Any:
    built = ReplayOptions.build(batch_size=10, **options)
    schema_registry = None if registry is None else {"url": registry.url}
    engine = DlqReplay(
        kafka_config,
        built,
        run_id="run-registry",
        idle_timeout_s=10,
        schema_registry=schema_registry,
        **(engine_kwargs or {}),
    )
    return engine.run()


def decoded(registry: Registry, value: bytes | None) -> Any:
    return RegistryDeserializer("avro", registry.client(), is_key=False)(value)


def headers_of(message: Any) -> dict[str, bytes | None]:
    return dict(message.headers() or [])


# -- the fixes, by dotted path as a DAG names them -----------------------------------------------------


def repair_quantity(record: ReplayRecord) -> ReplayRecord:
    """Receives the decoded order (a dict, not bytes) and makes its quantity positive."""
    assert isinstance(record.value, dict), f"the fix got {type(record.value).__name__}, expected the decoded order"
    record.value["qty"] = abs(record.value["qty"])
    return record


def quantity_as_text_for_odd_ids(record: ReplayRecord) -> ReplayRecord:
    """A bad repair for odd ids: a text quantity no longer fits the schema's int."""
    assert isinstance(record.value, dict)
    record.value["qty"] = "many" if record.value["id"] % 2 else abs(record.value["qty"])
    return record


def repair_and_note(record: ReplayRecord) -> ReplayRecord:
    """Repairs the quantity and fills ``note``, a field only the subject's latest schema (v2) has."""
    assert isinstance(record.value, dict)
    record.value["qty"] = abs(record.value["qty"])
    record.value["note"] = "qty sign repaired"
    return record


# -- the tests ----------------------------------------------------------------------------------------------


@pytest.mark.transactions
def test_a_fix_repairs_avro_records_exactly_once_under_read_committed(
    kafka_config: dict[str, Any],
    registry: Registry,
    create_topic: Callable[..., str],
    unique_topic: str,
) -> None:
    """The fix gets decoded orders; each repaired order lands once, in Avro, with the schema it was written with.

    The second transaction is aborted (an injected abortable error, as in ``test_dlq_replay.py``):
    its batch is read, decoded, fixed and encoded again, and ``read_committed`` still sees
    every order exactly once. A second run finds nothing left to do.
    """
    source, dlq = create_topic(unique_topic, 2), create_topic(f"{unique_topic}.dlq", 2)
    schema_id, _ = write_avro_dlq(kafka_config, registry, source, dlq, 30)
    made: list[FaultyProducer] = []

    def factory(config: dict[str, Any]) -> FaultyProducer:
        made.append(FaultyProducer(config, {("commit_transaction", 2): ABORTABLE}))
        return made[-1]

    summary = replay(
        kafka_config,
        registry,
        engine_kwargs={"producer_factory": factory, "retry_backoff_max_ms": 100},
        dlq_topic=dlq,
        fix=f"{__name__}.repair_quantity",
        value_format="avro",
    )

    assert (summary.status, summary.replayed, summary.parked, summary.aborted_batches) == ("completed", 30, 0, 1)
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert sorted(m.key() for m in landed) == sorted(f"o-{i}".encode() for i in range(30)), "each exactly once"
    for message in landed:
        i = int(message.key()[2:])
        assert WireFormat.schema_id(message.value()) == schema_id, "re-encoded with the record's own schema"
        assert decoded(registry, message.value()) == order(i, i + 1)
        assert headers_of(message)[HEADER_REPLAY_COUNT] == b"1"
    again = replay(kafka_config, registry, dlq_topic=dlq, fix=f"{__name__}.repair_quantity", value_format="avro")
    assert (again.scanned, again.replayed) == (0, 0), "the group committed past every record"


def test_a_fixed_value_that_no_longer_fits_is_parked_with_the_serializers_reason(
    kafka_config: dict[str, Any], registry: Registry, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Odd orders get a text quantity: parked ``does_not_fit`` with the serializer's text, their bytes as read."""
    source, dlq = create_topic(unique_topic), create_topic(f"{unique_topic}.dlq")
    _, values = write_avro_dlq(kafka_config, registry, source, dlq, 6)

    summary = replay(
        kafka_config, registry, dlq_topic=dlq, fix=f"{__name__}.quantity_as_text_for_odd_ids", value_format="avro"
    )

    assert (summary.replayed, summary.parked) == (3, 3)
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert [decoded(registry, m.value()) for m in landed] == [order(i, i + 1) for i in (0, 2, 4)]
    parked = read_to_end(kafka_config, f"{dlq}.parked", isolation_level="read_committed")
    assert [m.key() for m in parked] == [b"o-1", b"o-3", b"o-5"]
    for message in parked:
        reason = (headers_of(message)[HEADER_PARKED_REASON] or b"").decode()
        assert reason.startswith(
            f"does_not_fit: Failed to serialize Avro data from topic {source}: Error serializing Avro message: "
        ), reason
        assert "qty" in reason, f"the serializer names the field: {reason}"
        assert message.value() == values[int(message.key()[2:])], "parked with the bytes the DLQ holds"


def test_without_a_fix_the_bytes_go_back_unchanged_and_the_registry_is_never_called(
    kafka_config: dict[str, Any], registry: Registry, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """``value_format`` and the registry are set, but no fix: the Avro bytes are copied as read, zero requests."""
    source, dlq = create_topic(unique_topic), create_topic(f"{unique_topic}.dlq")
    before_writing = registry.requests()
    _, values = write_avro_dlq(kafka_config, registry, source, dlq, 8)
    before = registry.requests()
    assert before > before_writing, "the log counts requests: writing the orders registered their schema"

    summary = replay(kafka_config, registry, dlq_topic=dlq, value_format="avro")

    assert (summary.replayed, summary.parked) == (8, 0)
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert sorted(m.value() for m in landed) == sorted(values), "the bytes as the DLQ held them"
    assert registry.requests() == before, "the replay sent the registry no request"


def test_reencode_with_latest_writes_with_the_subjects_latest_schema(
    kafka_config: dict[str, Any], registry: Registry, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """Orders written with v1 are repaired into v2's ``note`` field and land under v2's id."""
    source, dlq = create_topic(unique_topic), create_topic(f"{unique_topic}.dlq")
    v1, _ = write_avro_dlq(kafka_config, registry, source, dlq, 4)
    v2 = registry.client().register(f"{source}-value", ORDER_V2, "AVRO")
    assert v2 != v1

    summary = replay(
        kafka_config,
        registry,
        dlq_topic=dlq,
        fix=f"{__name__}.repair_and_note",
        value_format="avro",
        reencode_with="latest",
    )

    assert (summary.replayed, summary.parked) == (4, 0)
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert [WireFormat.schema_id(m.value()) for m in landed] == [v2] * 4
    assert [decoded(registry, m.value()) for m in landed] == [
        {**order(i, i + 1), "note": "qty sign repaired"} for i in range(4)
    ]


def test_schema_registry_rule_dead_letters_replay_through_the_same_path(
    kafka_config: dict[str, Any], registry: Registry, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """``__rule.*`` dead letters: READ ones hold the wire bytes, WRITE ones the JSON; both reach the fix decoded.

    The READ one is re-encoded with its own schema, the WRITE one (never serialized) with the
    subject's latest; neither carries a ``__rule.*`` header back to the topic, so the rule runs
    again on the repaired record (``_is_dlq_replay`` in confluent-kafka's ``_sync/serde.py``).
    """
    source, dlq = create_topic(unique_topic), create_topic(f"{unique_topic}.dlq")
    serializer = RegistrySerializer(
        "avro", registry.client(), registry.settings(), topic=source, is_key=False, schema=ORDER_V1
    )
    read_side = serializer(order(1, -1))
    assert read_side is not None
    written_json = b'{"id": 2, "sku": "sku-2", "qty": -2}'
    producer = Producer(kafka_config)
    for built in (
        schema_registry_rule(Original(source, 0, 0, RECENT_MS, b"o-1", read_side), dlq_topic=dlq),
        schema_registry_rule(Original(source, 0, 0, RECENT_MS, b"o-2", written_json), dlq_topic=dlq, mode="WRITE"),
    ):
        producer.produce(**built)
    assert producer.flush(30) == 0

    summary = replay(kafka_config, registry, dlq_topic=dlq, fix=f"{__name__}.repair_quantity", value_format="avro")

    assert (summary.replayed, summary.parked) == (2, 0)
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert [(m.key(), decoded(registry, m.value())) for m in landed] == [(b"o-1", order(1, 1)), (b"o-2", order(2, 2))]
    assert {WireFormat.schema_id(m.value()) for m in landed} == {WireFormat.schema_id(read_side)}
    assert all(not [n for n in headers_of(m) if n.startswith("__rule.")] for m in landed)


def test_a_registry_out_of_reach_stops_the_run_before_the_batch_is_written_and_a_rerun_completes(
    kafka_config: dict[str, Any], registry: Registry, create_topic: Callable[..., str], unique_topic: str
) -> None:
    """No record is parked for an outage: the run stops, commits nothing, and the next run replays every order once.

    The registry URL names a loopback port nothing listens on (connection refused at once).
    """
    from airflow_kerr.local.broker import free_port

    source, dlq = create_topic(unique_topic), create_topic(f"{unique_topic}.dlq")
    write_avro_dlq(kafka_config, registry, source, dlq, 5)
    gone = Registry(f"http://127.0.0.1:{free_port()}", registry.log)

    with pytest.raises(StopReplay, match=r"the Schema Registry is out of reach, so no value can be decoded"):
        replay(kafka_config, gone, dlq_topic=dlq, fix=f"{__name__}.repair_quantity", value_format="avro")

    assert read_to_end(kafka_config, source, isolation_level="read_uncommitted") == [], "nothing was written"
    assert read_to_end(kafka_config, f"{dlq}.parked", isolation_level="read_uncommitted") == [], "nor parked"
    summary = replay(kafka_config, registry, dlq_topic=dlq, fix=f"{__name__}.repair_quantity", value_format="avro")
    assert (summary.scanned, summary.replayed, summary.parked) == (5, 5, 0), "the rerun read every record again"
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert [decoded(registry, m.value()) for m in landed] == [order(i, i + 1) for i in range(5)]


def test_a_fix_on_decoded_values_without_a_registry_is_refused_before_anything_is_read(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    dlq = create_topic(f"{unique_topic}.dlq")
    with pytest.raises(InvalidReplayOptions, match=r"value_format='avro': a fix on decoded values needs a Schema"):
        replay(kafka_config, None, dlq_topic=dlq, fix=f"{__name__}.repair_quantity", value_format="avro")


@pytest.mark.airflow
def test_the_operator_reads_the_schema_registry_connection_and_hands_it_to_the_replay(
    kafka_config: dict[str, Any],
    registry: Registry,
    create_topic: Callable[..., str],
    unique_topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``schema_registry_conn_id`` names a real Airflow connection; the operator repairs the Avro orders through it."""
    from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_ORDERS_REGISTRY", json.dumps({"conn_type": "schema_registry", "host": registry.url})
    )
    source, dlq = create_topic(unique_topic), create_topic(f"{unique_topic}.dlq")
    write_avro_dlq(kafka_config, registry, source, dlq, 5)

    summary = DeadLetterQueueReplayOperator(
        task_id="replay",
        dlq_topic=dlq,
        fix=f"{__name__}.repair_quantity",
        value_format="avro",
        schema_registry_conn_id="orders_registry",
    ).execute({})

    assert (summary["replayed"], summary["parked"]) == (5, 0)
    landed = read_to_end(kafka_config, source, isolation_level="read_committed")
    assert [decoded(registry, m.value()) for m in landed] == [order(i, i + 1) for i in range(5)]
