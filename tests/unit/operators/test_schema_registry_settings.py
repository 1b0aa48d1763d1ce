"""A pipeline on Avro, Protobuf or JSON Schema: the registry's settings, checked when the DAG is parsed.

The connection itself is read at run time by ``SchemaRegistryHook`` (its own tests); no
registry is contacted here.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator
from airflow_kerr.spark.spec import InvalidPipelineSpec, PipelineSpec

PIPELINE: dict[str, Any] = {
    "name": "orders_avro",
    "source": {"topics": ["orders"], "group_id": "orders-avro"},
    "sink": {"kind": "kafka", "topic": "orders.clean"},
    "value_converter": "avro",
}


def test_a_registry_converter_without_a_registry_fails_the_parse_naming_the_setting() -> None:
    with pytest.raises(InvalidPipelineSpec) as raised:
        ErrorAwareSparkSubmitOperator(task_id="run", pipeline=PIPELINE, schema_registry_conn_id=None)
    assert "schema_registry: required by value_converter='avro'" in str(raised.value)
    assert "schema_registry_conn_id" in str(raised.value)


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_a_dag_file_naming_a_registry_format_without_a_registry_is_an_import_error(tmp_path: Path, fmt: str) -> None:
    """As Airflow's dag-processor parses it: the file's import error names the setting and the converter."""
    from airflow_kerr.compat import DagBag

    (tmp_path / "no_registry.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG
            from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

            with DAG("no_registry", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
                ErrorAwareSparkSubmitOperator(
                    task_id="run", pipeline={{**{PIPELINE!r}, "key_converter": {fmt!r}}}, schema_registry_conn_id=None
                )
            """
        )
    )
    bag = DagBag(dag_folder=str(tmp_path))
    assert "no_registry" not in bag.dag_ids
    (message,) = bag.import_errors.values()
    assert f"schema_registry: required by key_converter={fmt!r}, value_converter='avro'" in message, message


def test_with_a_registry_connection_or_settings_the_dag_parses() -> None:
    ErrorAwareSparkSubmitOperator(task_id="run", pipeline=PIPELINE)  # schema_registry_default, read at run time
    own = {**PIPELINE, "schema_registry": {"url": "http://registry:8081"}}
    ErrorAwareSparkSubmitOperator(task_id="run", pipeline=own, schema_registry_conn_id=None)


def test_an_avro_sink_needs_its_schema_unless_it_writes_with_the_latest() -> None:
    sink = {**PIPELINE, "sink": {"kind": "avro", "topic": "orders.avro"}, "schema_registry": {"url": "http://r:1"}}
    with pytest.raises(InvalidPipelineSpec, match=r"sink\.schema: required when sink\.kind='avro'"):
        PipelineSpec.from_dict(sink)
    latest = {"url": "http://r:1", "use.latest.version": True, "auto.register.schemas": False}
    PipelineSpec.from_dict({**sink, "schema_registry": latest})


def test_registry_settings_problems_hide_the_credentials() -> None:
    bad = {**PIPELINE, "schema_registry": {"url": "http://r:1", "ssl.key.password": 12345, "timeout": -1}}
    with pytest.raises(InvalidPipelineSpec) as raised:
        PipelineSpec.from_dict(bad)
    text = str(raised.value)
    assert "schema_registry['ssl.key.password']=[hidden]: expected a non-empty string" in text
    assert "schema_registry['timeout']=-1: expected a positive number" in text
    assert "12345" not in text
