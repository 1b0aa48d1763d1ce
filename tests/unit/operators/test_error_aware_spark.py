"""``ErrorAwareSparkSubmitOperator(emit_assets=True)``: its outlet alias and the asset events a run adds, no Spark."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_kerr.assets.kafka import topic_asset
from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator
from airflow_kerr.spark.spec import PipelineSpec

PIPELINE = {
    "name": "orders_pipeline",
    "source": {"topics": ["orders"], "group_id": "orders-pipeline"},
    "sink": {"kind": "kafka", "topic": "orders.clean"},
    "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "orders.dlq"},
}
SUMMARY = {
    "pipeline": "orders_pipeline",
    "run_id": "r1",
    "scope": "run",
    "records_in": 100,
    "total-record-errors": 3,
    "deadletterqueue-produce-requests": 3,
}


def test_emit_assets_adds_the_outputs_alias_to_the_outlets() -> None:
    declared = topic_asset("orders.audit", server="broker-1:9092")
    operator = ErrorAwareSparkSubmitOperator(task_id="run", pipeline=PIPELINE, emit_assets=True, outlets=[declared])

    assert operator.outputs_alias == AssetAlias(name="kerr.orders_pipeline.outputs")
    assert operator.outlets == [declared, AssetAlias(name="kerr.orders_pipeline.outputs")]


def test_a_templated_pipeline_name_names_the_alias_after_the_task() -> None:
    operator = ErrorAwareSparkSubmitOperator(
        task_id="run_orders", pipeline={**PIPELINE, "name": "{{ params.name }}"}, emit_assets=True
    )
    assert operator.outlets == [AssetAlias(name="kerr.run_orders.outputs")]


def test_without_emit_assets_the_outlets_are_untouched() -> None:
    operator = ErrorAwareSparkSubmitOperator(task_id="run", pipeline=PIPELINE)
    assert operator.outlets == [] and operator.outputs_alias is None


def alias_events(pipeline: dict[str, Any], summary: dict[str, Any] | None, **operator_kwargs: Any) -> list[Any]:
    operator = ErrorAwareSparkSubmitOperator(task_id="run", pipeline=pipeline, emit_assets=True, **operator_kwargs)
    outlet_events = OutletEventAccessors()
    operator.add_asset_events(outlet_events, PipelineSpec.from_dict(pipeline), "r1", summary)
    assert operator.outputs_alias is not None
    return outlet_events[operator.outputs_alias].asset_alias_events


def test_a_run_with_dead_letters_adds_the_sink_and_the_dlq_events_with_the_metrics() -> None:
    sink, dlq = alias_events(PIPELINE, SUMMARY, asset_server="broker-1:9092")

    assert sink.source_alias_name == dlq.source_alias_name == "kerr.orders_pipeline.outputs"
    assert (sink.dest_asset_key.name, sink.dest_asset_key.uri) == (
        "kafka.orders.clean",
        "kafka://broker-1:9092/orders.clean",
    )
    assert (dlq.dest_asset_key.name, dlq.dest_asset_key.uri) == ("kafka.orders.dlq", "kafka://broker-1:9092/orders.dlq")
    assert sink.extra == {**SUMMARY, "role": "sink", "topic": "orders.clean"}
    assert dlq.extra == {**SUMMARY, "role": "dead_letter_queue", "topic": "orders.dlq"}


def test_a_clean_run_adds_no_dlq_event() -> None:
    (sink,) = alias_events(PIPELINE, {**SUMMARY, "deadletterqueue-produce-requests": 0})
    assert sink.extra["role"] == "sink"


def test_a_missing_summary_adds_the_sink_event_without_metrics_and_no_dlq_event() -> None:
    (sink,) = alias_events(PIPELINE, None)
    assert sink.extra == {
        "metrics": None,
        "pipeline": "orders_pipeline",
        "run_id": "r1",
        "role": "sink",
        "topic": "orders.clean",
    }


def test_the_events_name_the_connection_as_the_watched_assets_do_by_default() -> None:
    """No server given: the cluster part is the connection id, the same as ``dead_letter_queue_asset``'s."""
    from airflow_kerr.assets.watched import dead_letter_queue_asset

    sink, dlq = alias_events(PIPELINE, SUMMARY, kafka_config_id="kafka_orders")

    assert sink.dest_asset_key.uri == "kafka://kafka_orders/orders.clean"
    watched = dead_letter_queue_asset("orders.dlq", kafka_config_id="kafka_orders")
    assert (dlq.dest_asset_key.name, dlq.dest_asset_key.uri) == (watched.name, watched.uri)


def test_a_bad_asset_server_fails_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match=r"server='broker:9092/x': expected one bootstrap server as host:port"):
        ErrorAwareSparkSubmitOperator(task_id="run", pipeline=PIPELINE, emit_assets=True, asset_server="broker:9092/x")


@pytest.mark.parametrize("sink", [{"kind": "parquet", "path": "/tmp/orders"}, {"kind": "jsonl", "path": "/tmp/o"}])
def test_a_sink_that_is_not_kafka_has_no_asset_event(sink: dict[str, str]) -> None:
    (dlq,) = alias_events({**PIPELINE, "sink": sink}, SUMMARY)
    assert dlq.extra["role"] == "dead_letter_queue"
    assert alias_events({**PIPELINE, "sink": sink}, {**SUMMARY, "deadletterqueue-produce-requests": 0}) == []
