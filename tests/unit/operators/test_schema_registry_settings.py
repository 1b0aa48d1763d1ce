"""A pipeline on Avro, Protobuf or JSON Schema: the registry's settings, checked when the DAG is parsed.

The connection itself is read at run time by ``SchemaRegistryHook`` (its own tests); no
registry is contacted here.
"""

from __future__ import annotations

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
