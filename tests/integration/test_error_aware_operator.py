"""ErrorAwareSparkSubmitOperator in real Airflow: parse-time validation, a DAG run, the metrics in XCom."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator, build_package_zip
from airflow_kerr.spark.spec import InvalidPipelineSpec

PIPELINE = {
    "name": "orders_pipeline",
    "source": {"topics": ["orders"], "group_id": "orders-pipeline"},
    "sink": {"kind": "kafka", "topic": "orders.clean"},
}


def test_an_invalid_errors_dict_fails_dag_parsing_listing_every_bad_key(tmp_path: Path, airflow_home: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "bad_errors.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG
            from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

            with DAG("bad_errors", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
                ErrorAwareSparkSubmitOperator(
                    task_id="run",
                    pipeline={PIPELINE!r},
                    errors={{
                        "errors.tolerance": "ALL",
                        "errors.retry.delay.max.ms": 0,
                        "errors.deadletterqueue.topic.name": "__orders.dlq",
                        "errors.log.enable": "yes",
                        "errors.tolerance.rate.duration": "fortnight",
                        "errors.unknown.key": 1,
                    }},
                )
            """
        )
    )
    bag = DagBag(dag_folder=str(tmp_path))
    assert "bad_errors" not in bag.dag_ids
    (message,) = bag.import_errors.values()
    for key, value in (
        ("errors.tolerance", "'ALL'"),
        ("errors.retry.delay.max.ms", "0"),
        ("errors.deadletterqueue.topic.name", "'__orders.dlq'"),
        ("errors.log.enable", "'yes'"),
        ("errors.tolerance.rate.duration", "'fortnight'"),
        ("errors.unknown.key", ""),
    ):
        assert key in message, f"{key} not named in:\n{message}"
        assert value in message, f"value {value} of {key} not shown in:\n{message}"


def test_templated_pipelines_are_validated_when_rendered() -> None:
    operator = ErrorAwareSparkSubmitOperator(
        task_id="templated", pipeline={**PIPELINE, "name": "{{ params.name }}"}, errors={"errors.tolerance": "ALL"}
    )
    operator.pipeline["name"] = "rendered"
    with pytest.raises(InvalidPipelineSpec, match=r"errors\.tolerance"):
        operator.spec(kafka_config={"bootstrap.servers": "x:9092"})


def test_the_package_zip_ships_the_job_and_the_core(tmp_path: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(build_package_zip(tmp_path)).namelist()
    assert "airflow_kerr/spark/job.py" in names and "airflow_kerr/errors/retry.py" in names
    assert not any("__pycache__" in name for name in names)


@pytest.mark.spark
def test_example_dag_runs_and_pushes_the_run_metrics(
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    load_dag: Callable[[str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    monkeypatch: pytest.MonkeyPatch,
    java_home: str,
) -> None:
    for topic, partitions in (("orders", 2), ("orders.clean", 1), ("orders.dlq", 1), ("kerr.metrics", 1)):
        create_topic(topic, partitions)
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    dag = load_dag("error_aware_pipeline")

    states = run_dag(dag, orders=700)

    assert states == {"generate": "success", "orders_pipeline": "success", "report": "success"}
    from airflow.models import DagRun

    (dag_run,) = DagRun.find(dag_id="error_aware_pipeline")
    ti = dag_run.get_task_instance("orders_pipeline")
    metrics = ti.xcom_pull(task_ids="orders_pipeline")
    generated = ti.xcom_pull(task_ids="generate")
    assert metrics["pipeline"] == "orders_pipeline" and metrics["scope"] == "run"
    assert metrics["records_in"] == generated["total"] == 700
    assert metrics["total-records-skipped"] == generated["malformed"] + generated["invalid"]
    assert metrics["total-retries"] == generated["flaky"]
