"""Every example DAG can be triggered from Airflow's form with its defaults; the schemas say what the form can check.

Airflow 3.3's trigger form marks a field required (a star, Trigger disabled while it is
empty) when the field's ``type`` is set and does not include ``"null"`` (the UI's
``isRequired``), and Airflow validates the run's conf against the Params' JSON schemas
(``ParamsDict.validate``) before it creates the run. So: defaults validate, every field
that may be left unset permits null, only fields that need a value are required, and the
values the schema should refuse (a negative rate...) are refused there.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.definitions.param import ParamsDict

from airflow_kerr.compat import AirflowSkipException, ParamValidationError
from airflow_kerr.replay.form import MIN_RECORDS_PER_SECOND

DAGS = Path(__file__).resolve().parents[3] / "dags"

#: The fields each example DAG's form requires: each has a default, so the form starts valid.
REQUIRED = {
    "dlq_replay": {
        "kafka_config_id",
        "dlq_topic",
        "max_replays",
        "transaction_timeout_s",
        "batch_size",
        "progress_interval_s",
        "value_format",
        "key_format",
        "reencode_with",
        "replay_tasks",
    },
    "error_aware_pipeline": {"orders", "malformed_every", "invalid_every", "flaky_every"},
    "avro_orders": {"orders", "bad_every"},
    "smoke_spark_kafka": {"topic", "result_topic"},
    "tolerance_guard": set(),
    "on_tolerance_breach": set(),
    "on_tolerance_recovery": set(),
    "dlq_auto_replay": set(),
}
#: The optional fields the user found marked required, and the rest of those that may be left unset.
OPTIONAL = {
    "dlq_replay": {
        "source_topics",
        "stages",
        "header_match",
        "dry_run",
        "replay_group",
        "exception_class_regex",
        "start_time",
        "end_time",
        "start_offset",
        "end_offset",
        "dlq_offsets",
        "partitions",
        "fix",
        "target_topic",
        "target_allowlist",
        "parking_topic",
        "max_records_per_second",
        "max_records",
        "schema_registry_conn_id",
    },
    "tolerance_guard": {"resume_without_recovery"},
}


def required_in_the_form(schema: dict[str, Any]) -> bool:
    """Airflow 3.3's rule (``isRequired`` in the UI's FlexibleForm): a type is set and does not include null."""
    kind = schema.get("type")
    return bool(kind) and (not isinstance(kind, list) or "null" not in kind)


@pytest.fixture(scope="module")
def example_dags() -> dict[str, Any]:
    """The repo's dags/ parsed as Airflow parses them (the tests' kafka_default connection is set in conftest)."""
    from airflow_kerr.compat import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return dict(bag.dags)


def schemas(dag: Any) -> dict[str, dict[str, Any]]:
    return {name: dag.params.get_param(name).schema for name in dag.params}


def test_every_example_dag_is_covered(example_dags: dict[str, Any]) -> None:
    assert set(example_dags) == set(REQUIRED)


@pytest.mark.parametrize("dag_id", sorted(REQUIRED))
def test_the_form_defaults_validate_as_airflow_validates_a_trigger(example_dags: dict[str, Any], dag_id: str) -> None:
    params: ParamsDict = copy.deepcopy(example_dags[dag_id].params)

    values = params.validate()

    assert set(values) == set(REQUIRED[dag_id]) | OPTIONAL.get(dag_id, set())
    # A required field left at null would start the form with "This field is required" and Trigger disabled.
    assert all(values[name] is not None for name in REQUIRED[dag_id])


@pytest.mark.parametrize("dag_id", sorted(REQUIRED))
def test_only_the_fields_that_need_a_value_are_required_in_the_form(example_dags: dict[str, Any], dag_id: str) -> None:
    found = {name for name, schema in schemas(example_dags[dag_id]).items() if required_in_the_form(schema)}
    assert found == REQUIRED[dag_id]


@pytest.mark.parametrize("dag_id", sorted(OPTIONAL))
def test_every_optional_field_may_be_left_unset(example_dags: dict[str, Any], dag_id: str) -> None:
    params: ParamsDict = copy.deepcopy(example_dags[dag_id].params)
    for name in OPTIONAL[dag_id]:
        assert "null" in params.get_param(name).schema["type"], name
        params[name] = None  # what the form sends for a cleared field

    params.validate()


def test_the_optional_list_object_and_box_fields_keep_their_widgets(example_dags: dict[str, Any]) -> None:
    """One non-null type each: a second one would turn the field into a raw JSON box."""
    found = schemas(example_dags["dlq_replay"])
    assert found["source_topics"]["type"] == ["null", "array"] and found["source_topics"]["items"]["type"] == "string"
    assert found["stages"]["type"] == ["null", "array"] and found["stages"]["examples"]
    assert found["header_match"]["type"] == ["null", "object"]
    assert found["dry_run"]["type"] == ["null", "boolean"] and example_dags["dlq_replay"].params["dry_run"] is True
    for dag_id in REQUIRED:
        for name, schema in schemas(example_dags[dag_id]).items():
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            assert len([kind for kind in kinds if kind != "null"]) == 1, (dag_id, name)


def test_every_number_field_has_a_minimum_the_form_holds_it_to(example_dags: dict[str, Any]) -> None:
    """The form's number input raises a typed value below ``minimum`` to it when the field loses focus."""
    for dag_id in REQUIRED:
        for name, schema in schemas(example_dags[dag_id]).items():
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if {"integer", "number"} & set(kinds) and "enum" not in schema:
                assert "minimum" in schema, (dag_id, name)


@pytest.mark.parametrize(
    ("dag_id", "name", "value"),
    [
        ("dlq_replay", "max_records_per_second", -5),
        ("dlq_replay", "max_records_per_second", 0),
        ("dlq_replay", "max_records_per_second", MIN_RECORDS_PER_SECOND - 0.5),
        ("dlq_replay", "max_records", 0),
        ("dlq_replay", "start_offset", -1),
        ("dlq_replay", "end_offset", -1),
        ("dlq_replay", "max_replays", 0),
        ("dlq_replay", "max_replays", 101),
        ("dlq_replay", "transaction_timeout_s", 0),
        ("dlq_replay", "transaction_timeout_s", 901),
        ("dlq_replay", "replay_tasks", 0),
        ("dlq_replay", "replay_tasks", 65),
        ("dlq_replay", "batch_size", 7),
        ("dlq_replay", "progress_interval_s", 1),
        ("dlq_replay", "stages", ["PUT"]),
        ("dlq_replay", "dlq_topic", ""),
        ("dlq_replay", "dlq_topic", None),
        ("dlq_replay", "dlq_topic", "t" * 250),
        ("dlq_replay", "target_topic", "t" * 250),
        ("dlq_replay", "kafka_config_id", ""),
        ("dlq_replay", "dry_run", "yes"),
        ("dlq_replay", "header_match", ["kind", "invalid"]),
        ("dlq_replay", "source_topics", "orders"),
        ("tolerance_guard", "resume_without_recovery", "yes"),
        ("error_aware_pipeline", "orders", -1),
        ("error_aware_pipeline", "malformed_every", -1),
        ("avro_orders", "bad_every", -1),
        ("smoke_spark_kafka", "topic", ""),
    ],
)
def test_values_the_schema_refuses_before_a_run_is_created(
    example_dags: dict[str, Any], dag_id: str, name: str, value: Any
) -> None:
    params: ParamsDict = copy.deepcopy(example_dags[dag_id].params)
    with pytest.raises(ParamValidationError, match=name):
        params[name] = value
        params.validate()


def test_the_dry_run_default_is_safe_and_the_rate_limited(example_dags: dict[str, Any]) -> None:
    values = copy.deepcopy(example_dags["dlq_replay"].params).validate()
    assert values["dry_run"] is True and values["max_records_per_second"] == 500


def test_the_example_alerts_name_connections_never_a_webhook_url() -> None:
    """A Slack webhook URL is a credential: the examples name connections, read when the alert is sent, and the
    trigger form asks for no URL (a run's conf is shown to everyone who can see the run)."""
    guard = (DAGS / "tolerance_guard.py").read_text()
    assert 'SlackWebhookNotifier(slack_webhook_conn_id="kerr_slack_alerts"' in guard
    breach = (DAGS / "on_tolerance_breach.py").read_text()
    assert '{"webhook_conn_id": "kerr_alert_webhook"}' in breach
    for path in DAGS.glob("*.py"):
        text = path.read_text()
        assert "webhook_url" not in text and "hooks.slack.com" not in text, path.name


def test_the_breach_dag_triggered_by_hand_skips_the_alert_saying_why(example_dags: dict[str, Any]) -> None:
    """No breach event (Trigger in the UI): the pause runs as asked, the alert is skipped with a line saying so."""
    alert = example_dags["on_tolerance_breach"].get_task("alert")

    with pytest.raises(AirflowSkipException, match="triggered by hand: no breach event came with this run"):
        alert.python_callable(triggering_asset_events={})

    assert {task.task_id for task in example_dags["on_tolerance_breach"].tasks} == {"pause_connector", "alert"}
    assert not example_dags["on_tolerance_breach"].get_task("pause_connector").upstream_task_ids
