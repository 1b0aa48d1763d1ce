"""OpenLineage datasets and facets: naming by the spec, what an unfinished or dry run reports, who reports at all."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from openlineage.client.serde import Serde

import airflow_kerr.operators
import airflow_kerr.sensors
from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator
from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator
from airflow_kerr.operators.lineage import JOB_FACET_KEY, job_lineage, kafka_namespace, replay_lineage
from airflow_kerr.spark.spec import PipelineSpec

OL_METHODS = (
    "get_openlineage_facets_on_start",
    "get_openlineage_facets_on_complete",
    "get_openlineage_facets_on_failure",
)


def our_operator_classes() -> list[type]:
    from airflow.sdk import BaseOperator

    found: set[type] = set()
    for package in (airflow_kerr.operators, airflow_kerr.sensors):
        for module_info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(module_info.name)
            found.update(
                cls
                for _, cls in inspect.getmembers(module, inspect.isclass)
                if issubclass(cls, BaseOperator) and cls.__module__.startswith("airflow_kerr.")
            )
    return sorted(found, key=lambda cls: cls.__qualname__)


def test_only_the_operators_that_move_data_report_lineage() -> None:
    """Connector control, sensors and the rest move no data: the provider must find no lineage method on them."""
    classes = our_operator_classes()
    assert len(classes) > 5, classes
    reporting = {cls for cls in classes if any(hasattr(cls, name) for name in OL_METHODS)}
    assert reporting == {ErrorAwareSparkSubmitOperator, DeadLetterQueueReplayOperator}


@pytest.mark.parametrize(
    ("servers", "namespace"),
    [
        ("broker-1:9092,broker-2:9092", "kafka://broker-1:9092"),
        ("SASL_SSL://broker:9093", "kafka://broker:9093"),
        (" broker ", "kafka://broker:9092"),
        ("[::1]:19092", "kafka://[::1]:19092"),
        ("::1", "kafka://[::1]:9092"),
    ],
)
def test_the_namespace_is_the_first_bootstrap_server_as_the_naming_spec_says(servers: str, namespace: str) -> None:
    assert kafka_namespace(servers) == namespace


def spec(topics: list[str], sink: dict[str, str]) -> PipelineSpec:
    """A pipeline ``orders`` reading ``topics`` into ``sink``, tolerance all, DLQ ``orders.dlq``."""
    return PipelineSpec.from_dict(
        {
            "name": "orders",
            "source": {"topics": topics, "group_id": "orders"},
            "sink": sink,
            "kafka": {"bootstrap.servers": "b:9092"},
            "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "orders.dlq"},
        }
    )


def test_a_job_that_did_not_finish_reports_its_inputs_only() -> None:
    lineage = job_lineage(
        spec(["orders", "returns"], {"kind": "parquet", "path": "s3://lake/orders"}),
        bootstrap_servers="b:9092",
        run_id="r",
        summary=None,
        finished=False,
    )
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("kafka://b:9092", "orders"),
        ("kafka://b:9092", "returns"),
    ]
    assert lineage.outputs == [] and lineage.run_facets == {}


def test_a_finished_job_without_its_metrics_names_its_outputs_and_leaves_the_counts_out() -> None:
    lineage = job_lineage(
        spec(["orders"], {"kind": "jsonl", "path": "/data/orders"}),
        bootstrap_servers="b:9092",
        run_id="r",
        summary=None,
        finished=True,
    )
    assert [(d.namespace, d.name) for d in lineage.outputs] == [
        ("file", "/data/orders"),
        ("kafka://b:9092", "orders.dlq"),
    ]
    facet = Serde.to_dict(lineage.run_facets[JOB_FACET_KEY])
    assert "failedRecords" not in facet and facet["deadLetterQueueTopic"] == "orders.dlq"  # None is left out


def test_a_dry_run_replay_writes_nothing_so_it_has_no_outputs() -> None:
    summary = {
        "dry_run": True,
        "status": "completed",
        "scanned": 5,
        "selected": 5,
        "would_replay": 5,
        "breakdown": [{"action": "replay", "topic": "orders", "count": 5}],
    }
    lineage = replay_lineage(bootstrap_servers="b:9092", dlq_topic="d", parking_topic="d.parked", summary=summary)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("kafka://b:9092", "d")]
    assert lineage.outputs == []
    facet = Serde.to_dict(lineage.run_facets["kerr_dlqReplay"])
    assert facet["dryRun"] is True and facet["wouldReplay"] == 5 and facet["replayed"] == 0


def test_a_replay_that_ended_before_its_summary_reports_its_input_only() -> None:
    lineage = replay_lineage(bootstrap_servers="b:9092", dlq_topic="d", parking_topic="d.parked", summary=None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("kafka://b:9092", "d")]
    assert lineage.outputs == [] and lineage.run_facets == {}


def test_the_openlineage_provider_stays_optional() -> None:
    """Only ``operators/lineage.py`` imports OpenLineage, and the operators import it inside their lineage method."""
    import ast
    from pathlib import Path

    package = Path(airflow_kerr.operators.__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                where = f"{path.relative_to(package.parent)}:{getattr(node, 'lineno', 0)} imports {name}"
                if name.startswith(("openlineage", "airflow.providers.openlineage")):
                    assert path.name == "lineage.py" and path.parent.name == "operators", where
                if name == "airflow_kerr.operators.lineage":
                    assert id(node) not in top_level, f"{where} at module level"
