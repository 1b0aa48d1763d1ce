"""Shared test harness: a real broker, real Spark, real Airflow.

Airflow reads its configuration from the environment when it is first imported,
so the isolated AIRFLOW_HOME is set here at import time, before any test module
imports Airflow.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Generated-input tests check what any input gives, not how fast: on a 2-core machine with Spark and
# Kafka Connect running beside them, Hypothesis's 200 ms per-example deadline only adds failures.
settings.register_profile("kerr", deadline=None)
settings.load_profile("kerr")

REPO = Path(__file__).resolve().parent.parent
_AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="kerr-airflow-home-"))
# dag.test() runs only DAGs of the configured bundle, so DAGs that tests write live beside
# links to the repo's example DAGs in one session folder.
_DAGS_FOLDER = _AIRFLOW_HOME / "dags"
_DAGS_FOLDER.mkdir()
for _example in (REPO / "dags").glob("*.py"):
    (_DAGS_FOLDER / _example.name).symlink_to(_example)

os.environ["AIRFLOW_HOME"] = str(_AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(_DAGS_FOLDER)
# The local UI and the demo run the repo's example DAGs whatever the working directory.
os.environ.setdefault("KERR_DAGS_FOLDER", str(REPO / "dags"))
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_AIRFLOW_HOME / 'airflow.db'}"
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "INFO"
os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = '{"conn_type": "spark", "host": "local[2]"}'
# A placeholder kafka_default for code that runs a task without a broker (DAG files read no connection
# when parsed); a test that talks to Kafka sets the connection to its broker (the kafka_connection fixtures).
os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = '{"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:9092"}}'
# Spark's Python workers must run this interpreter, or they cannot import pyarrow or confluent_kafka.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# spark-submit is installed beside this interpreter by the pyspark wheel.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"

#: Markers for behaviours one embedded broker lacks, with the brokers that have them.
BROKER_BEHAVIOURS = {
    "transactions": (
        ("noida",),
        "read_committed readers must not see aborted records, which Tansu shows "
        "(run with KERR_BROKER=noida, the default, or KAFKA_BOOTSTRAP_SERVERS naming an Apache Kafka cluster)",
    ),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked for a broker behaviour runs on an external cluster or on an embedded broker that has it."""
    from airflow_kerr.local.broker import broker_kind, resolve_bootstrap_servers

    if resolve_bootstrap_servers():
        return
    kind = broker_kind()
    for marker, (kinds, behaviour) in BROKER_BEHAVIOURS.items():
        if kind in kinds:
            continue
        skip = pytest.mark.skip(reason=f"the embedded {kind} broker lacks this: {behaviour}")
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a real broker: KAFKA_BOOTSTRAP_SERVERS, or the embedded one (KERR_BROKER picks which)."""
    from airflow_kerr.local.broker import LocalBroker, resolve_bootstrap_servers, wait_for_metadata

    external = resolve_bootstrap_servers()
    if external:
        wait_for_metadata(external, timeout_s=30)
        yield external
        return
    log = _AIRFLOW_HOME / "broker.log"
    with LocalBroker(log_path=log) as broker:
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def schema_registry(kafka_bootstrap: str) -> Iterator[Any]:
    """The development Schema Registry on the session broker; started only when a test asks for it.

    Tests share it, so each uses subjects of its own (``unique_topic`` gives names no other test uses).
    """
    from airflow_kerr.local.schema_registry import LocalSchemaRegistry

    with LocalSchemaRegistry(kafka_bootstrap, log_path=_AIRFLOW_HOME / "schema-registry.log") as registry:
        yield registry


@pytest.fixture
def kafka_config(kafka_bootstrap: str) -> dict[str, Any]:
    """librdkafka settings for the test broker, as a `kafka` connection's extra would hold them (a fresh dict)."""
    return {"bootstrap.servers": kafka_bootstrap}


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (the topic itself is created on demand)."""
    stem = "".join(ch if ch.isalnum() else "-" for ch in request.node.name)[:40].strip("-")
    return f"t-{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def create_topic(kafka_config: dict[str, Any]) -> Callable[..., str]:
    """Create a topic with the given partitions and return its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(kafka_config)

    def create(name: str, partitions: int = 1) -> str:
        futures = admin.create_topics([NewTopic(name, partitions, 1)])
        for future in futures.values():
            future.result(timeout=30)
        return name

    return create


@pytest.fixture(scope="module")
def connect_worker(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Kafka Connect worker (distributed mode) on the session broker, shared by one module's tests.

    One per module, not per session: noida-db answers a fetch at once instead of waiting
    ``fetch.max.wait.ms`` for data, so an idle worker's consumers poll it about 12,000
    times a second and keep a core busy; a worker that outlived the Connect tests slowed
    every Spark test after them. Tests give their connectors unique names and delete them
    afterwards. A missing Java or Connect runtime fails the test with what to install
    (never a skip).
    """
    from airflow_kerr.local.connect_runtime import ConnectRuntimeUnavailable
    from airflow_kerr.local.connect_worker import ConnectWorker

    try:
        worker = ConnectWorker(kafka_bootstrap, tmp_path_factory.mktemp("connect-worker")).start()
    except ConnectRuntimeUnavailable as exc:
        pytest.fail(f"real Kafka Connect could not start: {exc}")
    yield worker
    worker.stop()


@pytest.fixture(scope="session")
def java_home() -> str:
    """The Java runtime Spark needs; fail (never skip) with what to install when it is missing."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("Java 17 is required for Spark: install it (Debian: apt-get install openjdk-17-jre-headless)")
    return java


@pytest.fixture(scope="session")
def spark(java_home: str) -> Iterator[Any]:
    """A local[2] SparkSession whose Python workers run this interpreter."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kerr-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """An isolated AIRFLOW_HOME with a migrated SQLite metadata DB, examples off, the repo's DAGs in its folder."""
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"airflow db migrate failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return _AIRFLOW_HOME


@pytest.fixture
def run_dag(airflow_home: Path) -> Callable[..., dict[str, str | None]]:
    """Run a DAG with ``dag.test()`` and return each task's final state by task id."""

    def run(dag: Any, **conf: Any) -> dict[str, str | None]:
        dag_run = dag.test(run_conf=conf or None)
        return {ti.task_id: (str(ti.state) if ti.state else None) for ti in dag_run.get_task_instances()}

    return run


def _parse_dag(dag_id: str) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(_DAGS_FOLDER))
    if bag.import_errors:
        pytest.fail(f"DAG import errors: {bag.import_errors}")
    dag = bag.get_dag(dag_id)
    if dag is None:
        pytest.fail(f"no DAG {dag_id!r} in {_DAGS_FOLDER}; found {sorted(bag.dag_ids)}")
    return dag


@pytest.fixture
def load_dag(airflow_home: Path) -> Callable[[str], Any]:
    """Parse the DAGs folder the way Airflow does and return one DAG, failing on any import error."""
    return _parse_dag


@pytest.fixture
def write_dag(airflow_home: Path) -> Iterator[Callable[[str, str], Any]]:
    """Write a DAG file into the session's DAGs folder (so dag.test() can run it) and return the parsed DAG."""
    written: list[Path] = []

    def write(dag_id: str, source: str) -> Any:
        path = _DAGS_FOLDER / f"{dag_id}.py"
        path.write_text(source)
        written.append(path)
        return _parse_dag(dag_id)

    yield write
    for path in written:
        path.unlink(missing_ok=True)
