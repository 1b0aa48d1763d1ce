"""OpenLineage from a real run: the openlineage provider's listener, its file transport, the events it wrote.

One DAG runs the error-aware Spark job on dirty orders and then replays its DLQ, under
``airflow dags test`` in a child process configured the way a deployment configures the
provider (``[openlineage] transport`` a file, ``spark_inject_parent_job_info`` on): the
provider's plugin reads that configuration when Airflow loads plugins, once per process,
so the test's own process (which loaded them without it) cannot switch it on. The events
are read back from the file the provider's file transport wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.examples.orders import generate_orders
from airflow_kerr.local.broker import ensure_topics
from airflow_kerr.operators.lineage import kafka_namespace

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.transactions]

DAG = """
import pendulum
from airflow.sdk import DAG
from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator
from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    job = ErrorAwareSparkSubmitOperator(task_id="orders_pipeline", pipeline={pipeline!r})
    replay = DeadLetterQueueReplayOperator(
        task_id="replay", dlq_topic={dlq!r}, fix="airflow_kerr.examples.orders.repair_order"
    )
    job >> replay
"""


def complete_event(events: list[dict[str, Any]], job_name: str) -> dict[str, Any]:
    found = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == job_name]
    assert len(found) == 1, f"COMPLETE events of {job_name}: {[(e['eventType'], e['job']['name']) for e in events]}"
    return found[0]


def datasets(entries: list[dict[str, Any]]) -> dict[tuple[str, str], int | None]:
    """(namespace, name) of each dataset with its outputStatistics rowCount (None without one)."""
    return {
        (d["namespace"], d["name"]): d.get("outputFacets", {}).get("outputStatistics", {}).get("rowCount")
        for d in entries
    }


def test_the_job_and_the_replay_report_their_kafka_datasets_and_counts_to_openlineage(
    kafka_config: dict[str, Any],
    unique_topic: str,
    write_dag: Callable[[str, str], Any],
    tmp_path: Path,
    java_home: str,
) -> None:
    topic = unique_topic
    sink, dlq, metrics = f"{topic}.clean", f"{topic}.dlq", f"{topic}.metrics"
    ensure_topics(kafka_config["bootstrap.servers"], {topic: 2, sink: 1, dlq: 1, metrics: 1})
    pipeline = {
        "name": f"lineage_{topic[-8:]}",
        "source": {"topics": [topic], "group_id": f"{topic}-lineage"},
        "key_converter": "string",
        "value_converter": "json",
        "transformations": ["airflow_kerr.examples.orders.validate_order"],
        "sink": {"kind": "kafka", "topic": sink},
        "metrics_topic": metrics,
        "errors": {
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
            "errors.deadletterqueue.context.headers.enable": True,  # the replay finds the source topic in them
        },
    }
    dag_id = f"lineage_{topic[-8:]}"
    write_dag(dag_id, textwrap.dedent(DAG.format(dag_id=dag_id, pipeline=pipeline, dlq=dlq)))
    orders = generate_orders(kafka_config, topic, 300, malformed_every=20, invalid_every=30, flaky_every=0)

    events_file = tmp_path / "openlineage.jsonl"
    env = {
        **os.environ,
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": kafka_config}),
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "kerr-tests",
        "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": "true",
    }
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", dag_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    print(f"airflow dags test took {time.monotonic() - started:.1f} s")

    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    namespace = kafka_namespace(kafka_config["bootstrap.servers"])
    assert namespace.startswith("kafka://127.0.0.1:") or namespace.startswith("kafka://localhost:")

    # The job: the source topic in; the sink and the DLQ out, the dead letters counted on the DLQ.
    job = complete_event(events, f"{dag_id}.orders_pipeline")
    bad = orders.malformed + orders.invalid
    assert datasets(job["inputs"]) == {(namespace, topic): None}
    assert datasets(job["outputs"]) == {(namespace, sink): None, (namespace, dlq): bad}
    facet = job["run"]["facets"]["kerr_errorHandling"]
    assert facet["pipeline"] == pipeline["name"] and facet["errorsTolerance"] == "all"
    assert facet["deadLetterQueueTopic"] == dlq
    assert facet["recordsIn"] == orders.total == 300
    assert facet["failedRecords"] == facet["skippedRecords"] == facet["deadLetters"] == bad
    assert facet["metrics"]["total-record-errors"] == bad and facet["_producer"] and facet["_schemaURL"]

    # The parent job reached spark-submit as the apache-spark provider passes it: the task's own run.
    for key, value in (
        ("spark.openlineage.parentJobNamespace", "kerr-tests"),
        ("spark.openlineage.parentJobName", f"{dag_id}.orders_pipeline"),
        ("spark.openlineage.parentRunId", job["run"]["runId"]),
    ):
        assert f"{key}={value}" in output, f"--conf {key}={value} not in the spark-submit command"

    # The replay: the DLQ in; the source topic (repaired negative amounts) and the parking topic (malformed) out.
    replay = complete_event(events, f"{dag_id}.replay")
    assert datasets(replay["inputs"]) == {(namespace, dlq): None}
    assert datasets(replay["outputs"]) == {
        (namespace, topic): orders.invalid,
        (namespace, f"{dlq}.parked"): orders.malformed,
    }
    facet = replay["run"]["facets"]["kerr_dlqReplay"]
    assert (facet["replayed"], facet["parked"], facet["dropped"]) == (orders.invalid, orders.malformed, 0)
    assert facet["deadLetterQueueTopic"] == dlq and facet["dryRun"] is False and facet["status"] == "completed"
