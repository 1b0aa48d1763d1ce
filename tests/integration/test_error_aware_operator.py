"""ErrorAwareSparkSubmitOperator in real Airflow: parse-time validation, a DAG run, the metrics in XCom."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kerr.local.broker import ensure_topics
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


def test_errors_problems_are_reported_even_when_source_and_sink_are_missing() -> None:
    """Parse-time validation used to stop at the missing source/sink and hide every errors.* problem."""
    with pytest.raises(InvalidPipelineSpec) as raised:
        ErrorAwareSparkSubmitOperator(
            task_id="no_source", pipeline={"name": "orders"}, errors={"errors.tolerance": "ALL", "errors.oops": 1}
        )

    text = str(raised.value)
    for fragment in ("source: required", "sink: required", "errors.tolerance='ALL'", "errors.oops"):
        assert fragment in text, f"{fragment!r} missing from:\n{text}"


@pytest.mark.parametrize(
    ("pipeline", "errors", "fragment"),
    [
        ({**PIPELINE, "kafka": "x"}, None, "kafka='x': expected a mapping"),
        ({**PIPELINE, "errors": ["errors.tolerance"]}, {"errors.tolerance": "all"}, "errors=['errors.tolerance']"),
        (PIPELINE, [("errors.tolerance", "all")], "errors (operator argument)=[('errors.tolerance', 'all')]"),
        (PIPELINE, "errors.tolerance=all", "errors (operator argument)='errors.tolerance=all'"),
        (["name", "orders"], None, "pipeline=['name', 'orders']: expected a mapping"),
        ({**PIPELINE, "source": {"topics": [""], "group_id": ["g"]}}, None, "source.group_id=['g']"),
        ({**PIPELINE, "batch_size": True}, None, "batch_size=True"),
    ],
)
def test_every_malformed_argument_fails_parsing_with_the_documented_error(
    pipeline: Any, errors: Any, fragment: str
) -> None:
    with pytest.raises(InvalidPipelineSpec) as raised:
        ErrorAwareSparkSubmitOperator(task_id="bad", pipeline=pipeline, errors=errors)
    assert fragment in str(raised.value)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8), st.sampled_from(["a.b"])
)
json_like = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=3)
    ),
    max_leaves=6,
)
fields = st.sampled_from(["name", "source", "sink", "kafka", "errors", "batch_size", "metrics_topic", "task_id"])


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(fields, json_like, max_size=3),
    json_like | st.dictionaries(st.sampled_from(["errors.tolerance", "errors.retry.timeout", 1]), json_like),
)
def test_any_arguments_build_the_operator_or_fail_with_the_documented_error(
    overrides: dict[str, Any], errors: Any
) -> None:
    try:
        ErrorAwareSparkSubmitOperator(task_id="fuzz", pipeline={**PIPELINE, **overrides}, errors=errors)
    except InvalidPipelineSpec as error:
        assert error.problems


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
    load_dag: Callable[[str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    monkeypatch: pytest.MonkeyPatch,
    java_home: str,
) -> None:
    # The example DAG's fixed topic names; another test's job may have published to the default metrics topic.
    ensure_topics(
        kafka_config["bootstrap.servers"], {"orders": 2, "orders.clean": 1, "orders.dlq": 1, "kerr.metrics": 1}
    )
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    dag = load_dag("error_aware_pipeline")

    states = run_dag(dag, orders=700)

    assert states == {"generate": "success", "orders_pipeline": "success", "report": "success"}
    from airflow.models import DagRun

    (dag_run,) = DagRun.find(dag_id="error_aware_pipeline")
    ti = dag_run.get_task_instance("orders_pipeline")
    assert ti is not None
    metrics = ti.xcom_pull(task_ids="orders_pipeline")
    generated = ti.xcom_pull(task_ids="generate")
    assert metrics["pipeline"] == "orders_pipeline" and metrics["scope"] == "run"
    assert metrics["records_in"] == generated["total"] == 700
    assert metrics["total-records-skipped"] == generated["malformed"] + generated["invalid"]
    assert metrics["total-retries"] == generated["flaky"]
    # What the run's Dead letters tab reads: the offsets its DLQ producer was told, as many as its metrics counted.
    written = ti.xcom_pull(task_ids="orders_pipeline", key="kerr_dead_letters")
    assert written["state"] == "finished" and written["topic"] == "orders.dlq", written
    assert written["records"] == metrics["deadletterqueue-produce-requests"] == metrics["total-records-skipped"]


def test_cluster_deploy_mode_is_refused_with_what_to_do_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spec file lives on the submitting machine, so a driver started in the cluster could not read it."""
    with pytest.raises(ValueError, match=r"client deploy mode only, but deploy_mode='cluster'.*Remove deploy-mode"):
        ErrorAwareSparkSubmitOperator(task_id="cluster", pipeline=PIPELINE, deploy_mode="cluster")

    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_YARN_CLUSTER",
        json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}),
    )
    operator = ErrorAwareSparkSubmitOperator(task_id="via_conn", pipeline=PIPELINE, conn_id="spark_yarn_cluster")
    with pytest.raises(AirflowFailException, match=r"the connection 'spark_yarn_cluster' sets deploy-mode 'cluster'"):
        operator.execute({})


ASSETS_DAG = """
import pendulum
from airflow.sdk import DAG
from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    ErrorAwareSparkSubmitOperator(task_id="orders_pipeline", pipeline={pipeline!r}, emit_assets=True)
"""


@pytest.mark.spark
@pytest.mark.airflow
def test_emit_assets_stores_a_sink_event_per_run_and_a_dlq_event_only_for_a_run_with_dead_letters(
    kafka_config: dict[str, Any],
    unique_topic: str,
    write_dag: Callable[[str, str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    monkeypatch: pytest.MonkeyPatch,
    java_home: str,
) -> None:
    from airflow.models.asset import AssetEvent
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select
    from sqlalchemy.orm import selectinload

    from airflow_kerr.assets.kafka import topic_asset
    from airflow_kerr.examples.orders import generate_orders

    topic = unique_topic
    sink, dlq = f"{topic}.clean", f"{topic}.dlq"
    ensure_topics(kafka_config["bootstrap.servers"], {topic: 2, sink: 1, dlq: 1, f"{topic}.metrics": 1})
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    pipeline = {
        "name": f"assets_{topic[-8:]}",
        "source": {"topics": [topic], "group_id": f"{topic}-assets"},
        "key_converter": "string",
        "value_converter": "json",
        "transformations": ["airflow_kerr.examples.orders.validate_order"],
        "sink": {"kind": "kafka", "topic": sink},
        "metrics_topic": f"{topic}.metrics",
        "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq},
    }
    dag_id = f"assets_{topic[-8:]}"
    dag = write_dag(dag_id, textwrap.dedent(ASSETS_DAG.format(dag_id=dag_id, pipeline=pipeline)))
    sink_asset, dlq_asset = topic_asset(sink), topic_asset(dlq)

    dirty = generate_orders(kafka_config, topic, 300, malformed_every=20, invalid_every=30, flaky_every=0)
    assert run_dag(dag) == {"orders_pipeline": "success"}
    clean = generate_orders(kafka_config, topic, 120, malformed_every=0, invalid_every=0, flaky_every=0)
    assert run_dag(dag) == {"orders_pipeline": "success"}

    dirty_run, clean_run = sorted(DagRun.find(dag_id=dag_id), key=lambda run: run.run_after)
    with create_session() as session:
        stored = session.scalars(
            select(AssetEvent)
            .where(AssetEvent.source_dag_id == dag_id)
            .options(selectinload(AssetEvent.asset), selectinload(AssetEvent.source_aliases))
            .order_by(AssetEvent.id)
        ).all()
        events = [
            (e.source_run_id, e.asset.name, e.asset.uri, dict(e.extra), [a.name for a in e.source_aliases])
            for e in stored
        ]

    alias = [f"kerr.{pipeline['name']}.outputs"]
    by_run = {
        run.run_id: {
            (name, uri): (extra, aliases) for run_id, name, uri, extra, aliases in events if run_id == run.run_id
        }
        for run in (dirty_run, clean_run)
    }
    assert len(events) == 3, events
    dirty_events, clean_events = by_run[dirty_run.run_id], by_run[clean_run.run_id]
    assert set(dirty_events) == {(sink_asset.name, sink_asset.uri), (dlq_asset.name, dlq_asset.uri)}
    assert set(clean_events) == {(sink_asset.name, sink_asset.uri)}, "a clean run must not start DLQ-scheduled DAGs"

    bad = dirty.malformed + dirty.invalid
    sink_extra, aliases = dirty_events[sink_asset.name, sink_asset.uri]
    assert aliases == alias
    assert sink_extra["role"] == "sink" and sink_extra["topic"] == sink and sink_extra["scope"] == "run"
    assert sink_extra["records_in"] == dirty.total and sink_extra["total-records-skipped"] == bad
    dlq_extra, aliases = dirty_events[dlq_asset.name, dlq_asset.uri]
    assert aliases == alias
    assert dlq_extra["role"] == "dead_letter_queue" and dlq_extra["topic"] == dlq
    assert dlq_extra["deadletterqueue-produce-requests"] == bad
    assert dlq_extra["run_id"] == sink_extra["run_id"] and dlq_extra["pipeline"] == pipeline["name"]

    clean_extra, aliases = clean_events[sink_asset.name, sink_asset.uri]
    assert aliases == alias
    assert clean_extra["role"] == "sink" and clean_extra["records_in"] == clean.total
    assert clean_extra["deadletterqueue-produce-requests"] == 0 and clean_extra["run_id"] != sink_extra["run_id"]
