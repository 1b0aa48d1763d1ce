"""tolerance_guard's arguments (the TaskGroup id and the Kafka consumer group cannot be mistaken for each other),
and what its alert says about the DLQ sample."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.kafka.dead_letters import alert_sample
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier
from airflow_kerr.sensors.tolerance import ToleranceSensor
from airflow_kerr.task_groups.tolerance_guard import tolerance_guard

DLQ_GUARD: dict[str, Any] = {
    "connectors": "orders-sink",
    "source": "dlq",
    "dlq_topic": "orders.dlq",
    "source_topics": ["orders"],
    "max_errors": 10,
}


def a_dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"))


def test_group_id_names_the_task_group_and_consumer_group_the_kafka_group() -> None:
    with a_dag("guard_names") as dag:
        group = tolerance_guard(group_id="orders_guard", consumer_group="connect-orders-sink", **DLQ_GUARD)

    assert group.group_id == "orders_guard"
    for task_id in ("orders_guard.wait_for_breach", "orders_guard.wait_for_recovery"):
        sensor = dag.get_task(task_id)
        assert isinstance(sensor, ToleranceSensor)
        assert sensor.group_id == "connect-orders-sink"


def test_a_dlq_guard_without_consumer_group_says_which_argument_is_missing() -> None:
    with a_dag("guard_no_consumer_group"), pytest.raises(ValueError, match=r"consumer_group .* is required") as raised:
        tolerance_guard(group_id="orders_guard", **DLQ_GUARD)
    assert "group_id ('orders_guard') is the TaskGroup's id" in str(raised.value)


def test_an_unknown_keyword_is_refused_by_name() -> None:
    with a_dag("guard_unknown"), pytest.raises(TypeError, match="unexpected keyword argument 'consumer_group_id'"):
        tolerance_guard(consumer_group_id="connect-orders-sink", **DLQ_GUARD)  # type: ignore[call-arg]


READING = {"pipeline": "orders_pipeline", "error_rate": 0.1, "max_error_rate": 0.02, "errors": 50, "records_in": 500}


def alert_text(**notifier: Any) -> str:
    """The text the guard's alert carries for the reading above (the notifier as the guard's notify task sets it)."""
    sender = ToleranceBreachNotifier(reading=READING, dlq_topic="orders.dlq", **notifier)
    return sender.text(sender.details({}))


def test_the_alert_names_the_top_exceptions_and_stages_of_the_sample_and_what_they_count() -> None:
    sample = [{"exception_class": "json.decoder.JSONDecodeError", "stage": "VALUE_CONVERTER"}] * 3 + [
        {"exception_class": "airflow_kerr.examples.orders.InvalidOrder", "stage": "TRANSFORMATION"}
    ]

    text = alert_text(sample=sample)

    assert "Top exceptions: json.decoder.JSONDecodeError (3), airflow_kerr.examples.orders.InvalidOrder (1)" in text
    assert "Failing stages: VALUE_CONVERTER (3), TRANSFORMATION (1)" in text
    assert "Dead letter queue: orders.dlq (counts above: its newest 4 dead letters)" in text
    assert "could not be read" not in text


def test_an_alert_without_its_sample_says_why() -> None:
    text = alert_text(sample_error="OffsetLookupError: topic 'orders.dlq' is not available on the broker")

    assert (
        "Top exceptions and failing stages unknown: the dead letter sample could not be read from orders.dlq: "
        "OffsetLookupError: topic 'orders.dlq' is not available on the broker"
    ) in text
    assert "Top exceptions:" not in text
    assert text.endswith("Dead letter queue: orders.dlq")


def test_the_guard_reads_no_sample_without_a_dlq_and_names_a_missing_connection() -> None:
    assert alert_sample(KafkaClusterHook(kafka_config_id="kafka_default").client_config, None) == ([], None)
    missing = KafkaClusterHook(kafka_config_id="kerr_no_such_connection")
    sample, problem = alert_sample(missing.client_config, "orders.dlq")
    assert sample == [] and problem is not None and "kerr_no_such_connection" in problem, problem


def test_an_alert_whose_sample_has_no_error_context_says_which_setting_adds_it() -> None:
    text = alert_text(sample=[{"exception_class": None, "stage": None}] * 20)

    assert (
        "Top exceptions and failing stages unknown: the newest 20 dead letters carry no error context "
        "(errors.deadletterqueue.context.headers.enable=true adds it)"
    ) in text
    assert text.endswith("Dead letter queue: orders.dlq")


def test_the_breach_sensor_pauses_the_guarded_connectors_itself_and_the_recovery_sensor_does_not() -> None:
    with a_dag("guard_pause_at_once") as dag:
        tolerance_guard(consumer_group="connect-orders-sink", kafka_connect_conn_id="connect_prod", **DLQ_GUARD)
    breach = dag.get_task("tolerance_guard.wait_for_breach")
    recovery = dag.get_task("tolerance_guard.wait_for_recovery")
    assert isinstance(breach, ToleranceSensor) and isinstance(recovery, ToleranceSensor)
    assert (breach.pause_on_breach, breach.kafka_connect_conn_id) == (["orders-sink"], "connect_prod")
    assert recovery.pause_on_breach == []


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"wait_for": "recovery", "pause_on_breach": "orders-sink"}, "only with wait_for='breach', not 'recovery'"),
        ({"pause_on_breach": ["orders-sink", " "]}, "expected Kafka Connect connector names"),
    ],
)
def test_pause_on_breach_is_checked_when_the_dag_file_is_parsed(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"pause_on_breach=.*{message}"):
        ToleranceSensor(task_id="t", pipeline="p", max_error_rate=0.1, **arguments)


def test_a_pause_that_cannot_be_asked_is_reported_not_raised_and_its_reason_is_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The breach event must go out even when Connect cannot be asked: the pause task downstream retries."""
    from airflow_kerr.hooks.breach_pause import pause_on_breach

    monkeypatch.setenv(
        "AIRFLOW_CONN_CONNECT_AWAY",
        '{"conn_type": "kafka_connect", "host": "127.0.0.1", "port": 9, "login": "ops", "password": "s3cret-pw"}',
    )
    done = pause_on_breach("connect_away", ["orders-sink", "payments-sink"])
    assert set(done) == {"orders-sink", "payments-sink"}
    for asked in done.values():
        assert asked["asked_at_ms"] is None
        assert "ConnectUnreachable" in asked["error"] and "could not connect" in asked["error"], asked
        assert "s3cret-pw" not in asked["error"]
    assert pause_on_breach("connect_away", []) == {}


def test_asking_guard_maps_each_answer_to_its_task_and_waits_for_recovery_by_default() -> None:
    from airflow.providers.standard.operators.hitl import HITLBranchOperator

    with a_dag("guard_asks") as dag:
        tolerance_guard(connectors="orders-sink", pipeline="p", dlq_topic="orders.dlq", max_errors=1, ask=True)

    question: Any = dag.get_task("tolerance_guard.ask_on_call")
    assert isinstance(question, HITLBranchOperator)
    assert question.options == ["Resume now", "Wait for recovery", "Replay the DLQ, then resume", "Keep paused"]
    assert question.defaults == ["Wait for recovery"]
    assert question.options_mapping == {
        "Resume now": "tolerance_guard.resume_connectors",
        "Wait for recovery": "tolerance_guard.wait_for_recovery",
        "Replay the DLQ, then resume": "tolerance_guard.replay_dlq",
        "Keep paused": "tolerance_guard.keep_paused",
    }
    assert question.response_timeout == timedelta(minutes=15)
    replay: Any = dag.get_task("tolerance_guard.replay_dlq")
    assert replay.dlq_topic == "orders.dlq"
    # Whatever the answer, the resume waits on it and the "resolved" message follows the verification.
    assert dag.get_task("tolerance_guard.verify_running").downstream_task_ids == {"tolerance_guard.resolve_alert"}


def test_without_a_dlq_the_question_offers_no_replay() -> None:
    with a_dag("guard_asks_no_dlq") as dag:
        tolerance_guard(connectors="orders-sink", pipeline="p", max_errors=1, ask=True)
    question: Any = dag.get_task("tolerance_guard.ask_on_call")
    assert "Replay the DLQ, then resume" not in question.options
    assert "tolerance_guard.replay_dlq" not in dag.task_dict


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"reminder_interval": 0}, "reminder_interval=0; accepted: a positive duration or None"),
        ({"response_timeout": -5}, "response_timeout=-5; accepted: a positive duration"),
    ],
)
def test_a_bad_lifecycle_setting_is_named(arguments: dict[str, Any], message: str) -> None:
    with a_dag("guard_bad_lifecycle"), pytest.raises(ValueError, match=message.replace("(", r"\(")):
        tolerance_guard(connectors="orders-sink", pipeline="p", max_errors=1, ask=True, **arguments)


def test_the_recovery_wait_reminds_at_the_interval() -> None:
    from airflow_kerr.task_groups.tolerance_guard import RemindingToleranceSensor

    with a_dag("guard_reminds") as dag:
        tolerance_guard(connectors="orders-sink", pipeline="p", max_errors=1, reminder_interval=1800)
    wait: Any = dag.get_task("tolerance_guard.wait_for_recovery")
    assert isinstance(wait, RemindingToleranceSensor) and wait.remind_every_s == 1800
    assert wait.wait_for == "recovery"
