"""The error-aware job on a real Spark standalone cluster: a master and two one-core workers from the pyspark wheel.

``ErrorAwareSparkSubmitOperator`` runs in a real Airflow DAG run (``dag.test()``)
through a ``spark://`` connection, in client deploy mode. The executors run a
Python that does not have the provider installed: a venv whose only link to
this one is a ``.pth`` line naming its site-packages (so pyarrow and
confluent-kafka import), which does not process the provider's editable-install
hook there. The provider reaches them only through ``--py-files``. A wrapper
around that Python records each start, so the test knows the executors used it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from airflow_kerr.errors import parse_dead_letter
from airflow_kerr.examples.orders import generate_orders
from airflow_kerr.kafka.offsets import end_offsets, read_to_end
from airflow_kerr.local.spark_cluster import LocalSparkCluster

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, java_home: str) -> Iterator[LocalSparkCluster]:
    with LocalSparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, memory="1g") as running:
        yield running


@pytest.fixture(scope="module")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a Python without the provider, the file its wrapper appends a line to on each start)."""
    root = tmp_path_factory.mktemp("executor-python")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    site = root / "venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "kerr_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    real = root / "venv" / "bin" / "python"
    starts = root / "starts.log"
    wrapper = root / "python"
    wrapper.write_text(f'#!/bin/sh\necho "$$ $*" >> {starts}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    probe = subprocess.run(
        [str(real), "-c", "import pyarrow, confluent_kafka; import airflow_kerr"],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=60,
    )
    assert "No module named 'airflow_kerr'" in probe.stderr, f"the executors' Python must lack the provider: {probe}"
    return wrapper, starts


DAG = """
import pendulum
from airflow.sdk import DAG
from airflow_kerr.operators.error_aware_spark import ErrorAwareSparkSubmitOperator

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    ErrorAwareSparkSubmitOperator(
        task_id="orders_pipeline",
        conn_id="spark_cluster",
        pipeline={pipeline!r},
        conf={conf!r},
    )
"""


def test_the_job_runs_on_a_standalone_cluster_whose_executors_lack_the_provider(
    cluster: LocalSparkCluster,
    executor_python: tuple[Path, Path],
    kafka_config: dict[str, Any],
    create_topic: Callable[..., str],
    unique_topic: str,
    write_dag: Callable[[str, str], Any],
    run_dag: Callable[..., dict[str, str | None]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    python, starts = executor_python
    topic = create_topic(unique_topic, partitions=2)
    for suffix in (".clean", ".dlq", ".metrics"):
        create_topic(topic + suffix)
    generated = generate_orders(kafka_config, topic, 400, malformed_every=20, invalid_every=25, flaky_every=0)
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": kafka_config}))
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_CLUSTER",
        json.dumps({"conn_type": "spark", "host": f"spark://{cluster.host}", "port": cluster.port}),
    )
    pipeline = {
        "name": "orders_on_cluster",
        "source": {"topics": [topic], "group_id": f"{topic}-cluster"},
        "key_converter": "string",
        "value_converter": "json",
        "transformations": ["airflow_kerr.examples.orders.validate_order"],
        "sink": {"kind": "kafka", "topic": f"{topic}.clean"},
        "metrics_topic": f"{topic}.metrics",
        "errors": {
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": f"{topic}.dlq",
            "errors.deadletterqueue.context.headers.enable": True,
        },
    }
    conf = {
        "spark.pyspark.python": str(python),
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
    }
    dag_id = f"cluster_{unique_topic[-8:]}"
    dag = write_dag(dag_id, textwrap.dedent(DAG.format(dag_id=dag_id, pipeline=pipeline, conf=conf)))

    assert run_dag(dag) == {"orders_pipeline": "success"}

    bad = generated.malformed + generated.invalid
    clean = read_to_end(kafka_config, f"{topic}.clean")
    dead = read_to_end(kafka_config, f"{topic}.dlq")
    assert len(clean) == generated.total - bad and len(dead) == bad
    coordinates = {(d.source_topic, d.source_partition, d.source_offset) for d in
                   (parse_dead_letter(m.headers() or [], m.key(), m.value()) for m in dead)}  # fmt: skip
    assert len(coordinates) == bad, "each bad record once in the DLQ, with its source coordinates"
    ends = end_offsets(kafka_config, [(topic, 0), (topic, 1)])
    assert _committed(kafka_config, f"{topic}-cluster", topic) == [ends[(topic, 0)], ends[(topic, 1)]], "committed"
    from airflow.models import DagRun

    (dag_run,) = DagRun.find(dag_id=dag_id)
    ti = dag_run.get_task_instance("orders_pipeline")
    assert ti is not None
    metrics = ti.xcom_pull(task_ids="orders_pipeline")
    assert metrics["records_in"] == generated.total and metrics["total-records-skipped"] == bad

    assert starts.exists() and starts.read_text().strip(), "the executors never started the provider-less Python"
    executors = list(cluster.work_dir.glob("worker-*/app-*/*/stderr"))
    assert {path.parts[-4] for path in executors} == {"worker-0", "worker-1"}, "both workers ran executors"


def _committed(kafka_config: dict[str, Any], group: str, topic: str) -> list[int]:
    consumer = Consumer({**kafka_config, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        consumer.close()
    return [int(tp.offset) for tp in found]
