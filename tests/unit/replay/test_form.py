"""The replay form is the one list of replay settings: ReplayOptions.build, the operator and the DAG agree with it."""

from __future__ import annotations

import inspect

from airflow_kerr.operators.dlq_replay import (
    ATTRIBUTES,
    DeadLetterQueueReplayOperator,
    arguments_from_the_form,
    replay_form_params,
)
from airflow_kerr.replay.form import DAG_ONLY, REPLAY_FORM, REPLAY_SETTINGS
from airflow_kerr.replay.options import ReplayOptions


def _keywords(function: object) -> list[str]:
    return [
        name
        for name, parameter in inspect.signature(function).parameters.items()  # type: ignore[arg-type]
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]


def test_the_form_lists_exactly_the_settings_build_accepts() -> None:
    assert sorted(REPLAY_SETTINGS) == sorted(_keywords(ReplayOptions.build))
    assert len(set(REPLAY_SETTINGS)) == len(REPLAY_SETTINGS)


def test_the_operator_takes_every_setting_under_its_name_and_templates_it() -> None:
    assert sorted(_keywords(DeadLetterQueueReplayOperator.__init__)) == sorted(
        [*REPLAY_SETTINGS, "kafka_config_id", "schema_registry_conn_id"]
    )
    connections = {"kafka_config_id", "schema_registry_conn_id"}
    assert set(DeadLetterQueueReplayOperator.template_fields) == {*ATTRIBUTES.values(), *connections}


def test_the_form_defaults_are_valid_settings_and_a_safe_dry_run() -> None:
    options = ReplayOptions.build(**{field.name: field.default for field in REPLAY_FORM})
    assert options.dry_run and options.max_records_per_second == 500


def test_every_form_field_renders_into_the_operator_argument_of_the_same_name() -> None:
    params, arguments = replay_form_params(), arguments_from_the_form()
    assert list(arguments) == ["kafka_config_id", "schema_registry_conn_id", *REPLAY_SETTINGS]
    assert list(params) == [*arguments, *DAG_ONLY], "the DAG's own fields (its fan-out) come last"
    operator = DeadLetterQueueReplayOperator(task_id="replay", **arguments)
    for name in arguments:
        assert getattr(operator, ATTRIBUTES.get(name, name)) == f"{{{{ params.{name} }}}}", name
    assert all(params[name].description and params[name].schema.get("section") for name in params)


def test_every_default_is_valid_for_its_own_schema_and_unset_settings_permit_null() -> None:
    """Airflow's form marks a field required unless its type allows null; only settings that need a value do."""
    from airflow.sdk import Param

    needs_a_value = {
        "dlq_topic",
        "max_replays",
        "transaction_timeout_s",
        "batch_size",
        "progress_interval_s",
        "value_format",
        "key_format",
        "reencode_with",
    }
    for field in REPLAY_FORM:
        assert Param(field.default, **field.schema).resolve() == field.default, field.name
        allows_null = "null" in field.schema["type"]
        assert allows_null == (field.name not in needs_a_value), field.name
        if allows_null:
            assert Param(field.default, **field.schema).resolve(None) is None, field.name
