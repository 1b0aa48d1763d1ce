"""``make demo``: the story on the embedded stack, end to end, with a printed result.

Starts the broker, points an isolated Airflow (under ``.kerr/demo``) at it, seeds
an orders topic and runs the example DAGs with ``dag.test()``, printing what each
step did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from airflow_kerr.local.broker import LocalBroker, resolve_bootstrap_servers, wait_for_metadata
from airflow_kerr.local.cli import state_dir

REPO = Path(__file__).resolve().parents[2]


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def configure_airflow(home: Path, bootstrap_servers: str) -> None:
    """Environment for an isolated Airflow; it must be set before Airflow is first imported."""
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap_servers}}
            ),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)


def seed(bootstrap_servers: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    if topic not in admin.list_topics(timeout=10).topics:
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5})
    for i in range(count):
        order_id = f"o-{i}"
        order = {"id": order_id, "amount": round(10 + i * 0.5, 2)}
        producer.produce(topic, key=order_id.encode(), value=json.dumps(order).encode())
    if producer.flush(30) != 0:
        raise RuntimeError(f"could not write the seed records to {topic}")


def run_smoke(bootstrap_servers: str) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    topic, result_topic = f"demo.orders.{int(time.time())}", "demo.smoke.result"
    step(f"seeding 1,000 orders into {topic}")
    seed(bootstrap_servers, topic, 1000)
    step("running DAG smoke_spark_kafka: Spark (local[2]) counts the topic through the kerr_kafka source")
    dag = DagBag(dag_folder=str(REPO / "dags")).get_dag("smoke_spark_kafka")
    if dag is None:
        raise RuntimeError("DAG smoke_spark_kafka not found in dags/")
    started = time.monotonic()
    dag_run = dag.test(run_conf={"topic": topic, "result_topic": result_topic})
    states = {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}
    counted = next(
        (ti.xcom_pull(task_ids="read_result") for ti in dag_run.get_task_instances() if ti.task_id == "read_result"),
        None,
    )
    return {"topic": topic, "states": states, "count": counted, "seconds": time.monotonic() - started}


def main() -> int:
    external = resolve_bootstrap_servers()
    broker = None
    try:
        if external:
            step(f"using the Kafka cluster named by KAFKA_BOOTSTRAP_SERVERS: {external}")
            wait_for_metadata(external, timeout_s=30)
            bootstrap = external
        else:
            step("starting the embedded Kafka-protocol broker (Tansu)")
            broker = LocalBroker(log_path=state_dir() / "demo-broker.log")
            state_dir().mkdir(parents=True, exist_ok=True)
            broker.start()
            bootstrap = broker.bootstrap_servers
            print(f"    broker at {bootstrap}")
        step("preparing an isolated Airflow under .kerr/demo (SQLite, examples off)")
        configure_airflow(state_dir() / "demo" / "airflow", bootstrap)
        result = run_smoke(bootstrap)
    finally:
        if broker is not None:
            broker.stop()
    ok = all(state == "success" for state in result["states"].values()) and result["count"] == 1000
    print("\n" + "-" * 60)
    print(f"smoke result: {result['topic']} holds {result['count']} records (expected 1000)")
    for task_id, state in result["states"].items():
        print(f"    task {task_id:<16} {state}")
    print(f"    DAG run took {result['seconds']:.1f} s")
    print("-" * 60)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
