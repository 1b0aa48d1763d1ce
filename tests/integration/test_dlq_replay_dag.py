"""The replay operator and the ``dlq_replay`` DAG in real Airflow, against the real broker."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from confluent_kafka import Consumer, Producer, TopicPartition

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record
from airflow_kerr.kafka.offsets import end_offsets
from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator
from airflow_kerr.replay.options import InvalidReplayOptions
from tests.clock import RECENT_MS

#: An hour ago: the records keep a real event time, well inside the broker's retention (7 days), which
#: deletes a record whose timestamp is older (noida-db within a second of the write; Apache Kafka within 5 min).

pytestmark = pytest.mark.airflow

SECTIONS = {"Source", "Selection", "Fix", "Safety", "Pacing"}
#: A run with one replay task: the branch follows ``replay`` and skips the split and the mapped tasks.
ONE_TASK_SUCCEEDED = {
    "fan_out": "success",
    "replay": "success",
    "partition_groups": "skipped",
    "replay_partitions": "skipped",
}


@pytest.fixture
def kafka_connection(monkeypatch: pytest.MonkeyPatch, kafka_config: dict[str, Any]) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))


@pytest.fixture
def dlq(kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str) -> tuple[str, str]:
    """A source topic and its DLQ holding 20 invalid orders (negative amounts), as the job writes them."""
    source, dlq_topic = create_topic(unique_topic), create_topic(f"{unique_topic}.dlq")
    producer = Producer(kafka_config)
    for i in range(20):
        value = json.dumps({"id": f"o-{i}", "amount": -1.5}).encode()
        record = SourceRecord(source, 0, i, RECENT_MS, key=f"o-{i}".encode(), value=value)
        context = ErrorContext(TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "v", ValueError("neg"), record)
        producer.produce(**build_dead_letter_record(context, topic=dlq_topic).produce_kwargs())
    assert producer.flush(10) == 0
    return source, dlq_topic


def group_offset(kafka_config: dict[str, Any], dlq_topic: str) -> int:
    consumer = Consumer({**kafka_config, "group.id": f"kerr-replay.{dlq_topic}"})
    try:
        (found,) = consumer.committed([TopicPartition(dlq_topic, 0)], timeout=10)
    finally:
        consumer.close()
    return int(found.offset)


def end(kafka_config: dict[str, Any], topic: str) -> int:
    return end_offsets(kafka_config, [(topic, 0)])[(topic, 0)]


def test_the_dag_is_a_ui_form_with_sections_and_safe_defaults(load_dag: Callable[[str], Any]) -> None:
    dag = load_dag("dlq_replay")

    assert dag.schedule is None
    assert dag.render_template_as_native_obj and dag.max_active_runs == 1
    params = dag.params
    schemas = {name: params.get_param(name).schema for name in params}
    assert {schema["section"] for schema in schemas.values()} == SECTIONS
    assert all(schema.get("title") for schema in schemas.values())
    assert all(params.get_param(name).description for name in params)
    assert params["dry_run"] is True
    assert set(schemas["stages"]["items"]["enum"]) == {stage.value for stage in Stage}
    assert "enum" in schemas["batch_size"] and "enum" in schemas["progress_interval_s"]
    assert params["transaction_timeout_s"] == 60
    assert (schemas["transaction_timeout_s"]["minimum"], schemas["transaction_timeout_s"]["maximum"]) == (1, 900)
    assert {task.task_id for task in dag.tasks} == {"fan_out", "partition_groups", "replay", "replay_partitions"}
    task = dag.get_task("replay")
    assert isinstance(task, DeadLetterQueueReplayOperator)
    assert task.transaction_timeout_s == "{{ params.transaction_timeout_s }}"
    assert dag.get_task("replay_partitions").operator_class is DeadLetterQueueReplayOperator


def test_every_form_field_is_the_operator_argument_of_the_same_name(load_dag: Callable[[str], Any]) -> None:
    """One name per setting in the form and the operator (``kafka_config_id``, as every operator says)."""
    dag = load_dag("dlq_replay")
    task, split, mapped = (dag.get_task(t) for t in ("replay", "partition_groups", "replay_partitions"))
    attribute = {"dry_run": "dry_run_only"}  # BaseOperator.dry_run is a method
    per_task = {"partitions", "max_records_per_second", "max_records"}  # each mapped task's share, from the split
    for name in dag.params:
        if name == "replay_tasks":
            assert split.replay_tasks == "{{ params.replay_tasks }}"
            continue
        assert getattr(task, attribute.get(name, name)) == f"{{{{ params.{name} }}}}", name
        if name in per_task:
            assert getattr(split, name) == f"{{{{ params.{name} }}}}", name
        else:
            assert mapped.partial_kwargs[name] == f"{{{{ params.{name} }}}}", name


def test_the_default_run_is_a_dry_run_that_writes_nothing(
    load_dag: Callable[[str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    kafka_config: dict[str, Any],
    kafka_connection: None,
    dlq: tuple[str, str],
) -> None:
    source, dlq_topic = dlq

    states = run_dag(load_dag("dlq_replay"), dlq_topic=dlq_topic)

    assert states == ONE_TASK_SUCCEEDED
    assert end(kafka_config, source) == 0 and group_offset(kafka_config, dlq_topic) < 0


def test_a_run_from_the_form_replays_the_repaired_records(
    load_dag: Callable[[str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    kafka_config: dict[str, Any],
    kafka_connection: None,
    dlq: tuple[str, str],
) -> None:
    source, dlq_topic = dlq

    states = run_dag(
        load_dag("dlq_replay"),
        dlq_topic=dlq_topic,
        dry_run=False,
        stages=["TRANSFORMATION"],
        fix="airflow_kerr.examples.orders.repair_order",
        max_records_per_second=None,
    )

    assert states == ONE_TASK_SUCCEEDED
    assert end(kafka_config, source) >= 20
    assert group_offset(kafka_config, dlq_topic) == end(kafka_config, dlq_topic) == 20


def test_bad_settings_from_the_form_fail_the_task_before_any_record_is_read(
    load_dag: Callable[[str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    kafka_config: dict[str, Any],
    kafka_connection: None,
    dlq: tuple[str, str],
) -> None:
    _, dlq_topic = dlq

    for conf in (
        {"exception_class_regex": "Invalid(Order"},
        {"start_offset": 10, "end_offset": 5},
        {"start_time": "2026-02-01T00:00:00+00:00", "end_time": "2026-01-01T00:00:00+00:00"},
        {"target_topic": "no-such-topic"},
    ):
        # A fresh DAG each time: Param.resolve keeps the last run's value in the DAG object.
        states = run_dag(load_dag("dlq_replay"), dlq_topic=dlq_topic, dry_run=False, **conf)
        assert states == {**ONE_TASK_SUCCEEDED, "replay": "failed"}

    assert group_offset(kafka_config, dlq_topic) < 0


def test_rendered_bad_settings_are_reported_together_naming_key_and_value(kafka_connection: None) -> None:
    operator = DeadLetterQueueReplayOperator(task_id="replay", dlq_topic="{{ params.dlq_topic }}")
    operator.dlq_topic = "orders.dlq"
    operator.exception_class_regex = "Invalid(Order"
    operator.start_offset, operator.end_offset = 10, 5

    with pytest.raises(AirflowFailException) as caught:
        operator.execute({})

    message = str(caught.value)
    assert "exception_class_regex='Invalid(Order': not a valid regular expression" in message
    assert "start_offset=10, end_offset=5: inverted or empty range" in message


def test_unknown_topics_fail_naming_them(kafka_connection: None, dlq: tuple[str, str]) -> None:
    operator = DeadLetterQueueReplayOperator(task_id="replay", dlq_topic=f"{dlq[1]}-missing", target_topic="gone")
    with pytest.raises(AirflowFailException, match=r"dlq_topic='.*-missing'.*\n.*target_topic='gone'"):
        operator.execute({})


def test_bad_settings_fail_dag_parsing_when_nothing_is_templated(tmp_path: Path, airflow_home: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "bad_replay.py").write_text(
        textwrap.dedent(
            """
            import pendulum
            from airflow.sdk import DAG
            from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator

            with DAG("bad_replay", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
                DeadLetterQueueReplayOperator(
                    task_id="replay", dlq_topic="orders.dlq", target_topic="__consumer_offsets", stages=["PUT"]
                )
            """
        )
    )
    bag = DagBag(dag_folder=str(tmp_path))
    (message,) = bag.import_errors.values()
    assert "target_topic='__consumer_offsets'" in message and "'PUT' is not a stage" in message
    with pytest.raises(InvalidReplayOptions):
        DeadLetterQueueReplayOperator(task_id="t", dlq_topic="orders.dlq", max_replays=0)


def test_the_summary_is_returned_for_xcom_and_on_kill_stops_gracefully(
    kafka_config: dict[str, Any], kafka_connection: None, dlq: tuple[str, str]
) -> None:
    source, dlq_topic = dlq
    operator = DeadLetterQueueReplayOperator(
        task_id="replay", dlq_topic=dlq_topic, max_records_per_second=10, batch_size=5
    )
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            operator.execute({})
        except BaseException as error:
            outcome["error"] = error

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while group_offset(kafka_config, dlq_topic) < 5:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    operator.on_kill()
    worker.join(30)

    assert isinstance(outcome.get("error"), AirflowException)
    assert "stopped on request" in str(outcome["error"])
    stopped_at = group_offset(kafka_config, dlq_topic)
    assert stopped_at % 5 == 0 and 5 <= stopped_at < 20

    summary = DeadLetterQueueReplayOperator(task_id="replay", dlq_topic=dlq_topic).execute({})

    assert summary["status"] == "completed" and summary["replayed"] == 20 - stopped_at
    assert (summary["would_replay"], summary["would_park"], summary["would_drop"]) == (0, 0, 0), "a real run"
    assert summary["committed_offsets"] == {"0": 20}
    assert summary["breakdown"] == [
        {
            "action": "replay",
            "topic": source,
            "stage": "TRANSFORMATION",
            "exception_class": "ValueError",
            "reason": "",
            "count": 20 - stopped_at,
        }
    ]
    json.dumps(summary)
