"""``make demo``: the whole story on the embedded stack, end to end, with a summary table.

1. an orders stream with poison in it goes through the error-aware Spark job
   (``error_aware_pipeline``): bad records land in ``orders.dlq``;
2. the tolerance guard (``tolerance_guard``, running alongside) sees the breach,
   pauses the downstream ``orders-sink`` connector (a real Kafka Connect FileStreamSink),
   posts an alert to a local webhook receiver, which prints it, and asks the on-call person,
   who answers "Wait for recovery" (recorded through Airflow's own response route);
3. the replay DAG (``dlq_replay``) repairs the invalid orders and puts them back
   on ``orders`` in transactions; what cannot be repaired is parked;
4. a clean run brings the error rate down: the guard sees recovery, resumes the
   connector and posts the "resolved" message with the episode's figures.

Everything runs against the embedded broker (or ``KAFKA_BOOTSTRAP_SERVERS``), a real
Kafka Connect worker and an isolated Airflow under ``.kerr/demo``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from airflow_kerr.local.broker import (
    LocalBroker,
    connection_variables,
    ensure_topics,
    resolve_bootstrap_servers,
    wait_for_metadata,
)
from airflow_kerr.local.connect_worker import ConnectWorker
from airflow_kerr.local.hitl import answer_question
from airflow_kerr.local.orders_example import CONNECTOR, OUTPUT_FILE, TOPICS, add_sink_connector
from airflow_kerr.local.process import StopTarget, stop_stack
from airflow_kerr.local.schema_registry import LocalSchemaRegistry, start_registry
from airflow_kerr.local.state import DAGS_FOLDER_ENV, dags_folder, state_dir

GUARD_TIMEOUT_S = 600


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def wait(description: str, condition: Callable[[], bool], timeout_s: float) -> float:
    """Wait for ``condition``, printing a dot a second so a long step shows progress; return when it held."""
    print(f"    waiting for {description} ", end="", flush=True)
    deadline = time.monotonic() + timeout_s
    last_dot = time.monotonic()
    while not condition():
        if time.monotonic() > deadline:
            print(" timed out", flush=True)
            raise TimeoutError(f"{description} did not happen within {timeout_s:.0f} s")
        if time.monotonic() - last_dot >= 1:
            print(".", end="", flush=True)
            last_dot = time.monotonic()
        time.sleep(0.05)
    print(" done", flush=True)
    return time.time()


def configure_airflow(
    home: Path, bootstrap_servers: str, connect_port: int, dags: Path, schema_registry_url: str | None = None
) -> None:
    """Environment for an isolated Airflow; it must be set before Airflow is first imported.

    ``$KERR_DAGS_FOLDER`` is set to ``dags`` too, so the guard's process runs the same DAGs.
    """
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            DAGS_FOLDER_ENV: str(dags),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            **connection_variables(
                bootstrap_servers, "127.0.0.1", connect_port, schema_registry_url=schema_registry_url
            ),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)


class AlertReceiver:
    """A local webhook that prints each alert it receives, standing in for a Slack channel."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.alerts.append(payload)
                print("\n    ALERT received by the local webhook:", flush=True)
                for line in payload.get("blocks", [{}])[0].get("text", {}).get("text", payload["text"]).splitlines():
                    print(f"      | {line}", flush=True)
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def connection(self) -> str:
        """A ``slack_webhook`` connection (as ``AIRFLOW_CONN_*`` JSON) whose webhook URL is this receiver."""
        return json.dumps({"conn_type": "slackwebhook", "password": self.url})

    def stop(self) -> None:
        self.server.shutdown()


def run_dag(dag_id: str, conf: dict[str, Any]) -> tuple[dict[str, str], Any]:
    """Run a DAG of :func:`dags_folder` with ``dag.test()``; return each task's state and the run."""
    from airflow.dag_processing.dagbag import DagBag

    dags = dags_folder()
    dag = DagBag(dag_folder=str(dags)).get_dag(dag_id)
    if dag is None:
        raise RuntimeError(f"DAG {dag_id} not found in {dags}")
    dag_run = dag.test(run_conf=conf)
    return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances()}, dag_run


def xcom(dag_run: Any, task_id: str) -> Any:
    ti = dag_run.get_task_instance(task_id)
    return ti.xcom_pull(task_ids=task_id) if ti is not None else None


def task_running(dag_id: str, task_id: str) -> bool:
    """True once the task instance is running (the guard's process has finished writing its DAGs to the DB)."""
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        states = session.query(TaskInstance.state).filter(
            TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id
        )
        return any(str(state) == "running" for (state,) in states)


def connector_state(connect: ConnectWorker) -> str:
    return str(connect.status(CONNECTOR)["connector"]["state"])


def dlq_size(bootstrap_servers: str) -> int:
    from airflow_kerr.kafka.offsets import end_offsets

    return sum(end_offsets({"bootstrap.servers": bootstrap_servers}, [("orders.dlq", 0)]).values())


class PauseWatch:
    """Polls the connector's status every 50 ms in a thread: when it first read PAUSED (Unix seconds)."""

    def __init__(self, connect: ConnectWorker) -> None:
        self.connect = connect
        self.paused_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.paused_at is None:
            try:
                if connector_state(self.connect) == "PAUSED":
                    self.paused_at = time.time()
            except Exception:  # a worker busy rebalancing: look again
                pass
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def breach_written_at(bootstrap_servers: str, since_ms: int) -> float | None:
    """When the job wrote the metrics record that took the guard's window over its limit (Unix seconds).

    The guard's rule (``ORDERS_TOLERANCE``, the example guard's settings) applied after each task
    record of the orders pipeline in turn, as a poke just after it would have read them.
    """
    from airflow_kerr.examples.orders_tolerance import ORDERS_TOLERANCE as WATCH
    from airflow_kerr.kafka.metrics_topic import read_metrics_records
    from airflow_kerr.kafka.tolerance import metrics_reading

    window_ms = int(WATCH["window"].total_seconds() * 1000)
    records = read_metrics_records(
        {"bootstrap.servers": bootstrap_servers},
        WATCH["metrics_topic"],
        since_ms,
        lambda r: r.get("scope") == "task" and r.get("pipeline") == WATCH["pipeline"],
    )
    for count, record in enumerate(records, start=1):
        end_ms = int(record.get("window_end_ms", 0))
        inside = [r for r in records[:count] if int(r.get("window_end_ms", 0)) >= end_ms - window_ms]
        if metrics_reading(inside, end_ms - window_ms, end_ms).breaches(
            WATCH["max_error_rate"], None, WATCH["min_records"]
        ):
            return end_ms / 1000
    return None


def summary(rows: list[tuple[str, Any]]) -> None:
    width = max(len(label) for label, _ in rows)
    print("\n" + "-" * (width + 24))
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
    print("-" * (width + 24))


def run_story(bootstrap: str, connect: ConnectWorker, receiver: AlertReceiver) -> int:
    ensure_topics(bootstrap, TOPICS)
    add_sink_connector(connect)
    step("starting the tolerance guard (DAG tolerance_guard) beside the pipeline")
    guard_log = state_dir() / "demo" / "tolerance_guard.log"
    with open(guard_log, "w") as log:
        guard = subprocess.Popen(
            [sys.executable, "-m", "airflow_kerr.local.demo", "--run-dag", "tolerance_guard"],
            # The example guard alerts through SlackWebhookNotifier and its kerr_slack_alerts connection.
            env={**os.environ, "AIRFLOW_CONN_KERR_SLACK_ALERTS": receiver.connection()},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait(
            "the guard to start watching",
            lambda: guard.poll() is not None or task_running("tolerance_guard", "tolerance_guard.wait_for_breach"),
            120,
        )
        if guard.poll() is not None:
            raise RuntimeError(f"the tolerance guard exited early; see {guard_log}")
        step("DAG error_aware_pipeline: 2,000 orders with poison through the error-aware Spark job")
        started_ms = int(time.time() * 1000)
        pause_watch = PauseWatch(connect)
        states, first = run_dag("error_aware_pipeline", {"orders": 2000})
        first_metrics = xcom(first, "orders_pipeline") or {}
        generated = xcom(first, "generate") or {}
        print(f"    tasks: {states}")
        print(f"    generated: {generated}")
        wait("the guard to pause orders-sink", lambda: pause_watch.paused_at is not None, 120)
        pause_watch.stop()
        breach_at = breach_written_at(bootstrap, started_ms)
        latency = None if breach_at is None or pause_watch.paused_at is None else pause_watch.paused_at - breach_at
        print(
            f"    orders-sink is PAUSED {latency:.1f} s after the job wrote the metrics record that breached"
            if latency is not None
            else "    orders-sink is PAUSED (no metrics record of this run breaches the guard's limit: see its log)"
        )

        step("the guard asks the on-call person in Required actions; they answer 'Wait for recovery'")
        answered = answer_question("tolerance_guard", "tolerance_guard.ask_on_call", "Wait for recovery", "on-call")
        print(f"    answered by {answered.get('responded_by', {}).get('name')}: {answered.get('chosen_options')}")

        step("DAG dlq_replay: repair the invalid orders and put them back on 'orders' (transactional)")
        states, replay = run_dag(
            "dlq_replay",
            {"dlq_topic": "orders.dlq", "fix": "airflow_kerr.examples.orders.repair_order", "dry_run": False},
        )
        replayed = xcom(replay, "replay") or {}
        print(f"    tasks: {states}")
        print(f"    replay summary: {json.dumps(replayed, default=str)[:600]}")

        step("DAG error_aware_pipeline again: 3,000 clean orders plus the replayed ones")
        states, second = run_dag(
            "error_aware_pipeline", {"orders": 3000, "malformed_every": 0, "invalid_every": 0, "flaky_every": 0}
        )
        second_metrics = xcom(second, "orders_pipeline") or {}
        print(f"    tasks: {states}")
        wait("recovery: the guard to resume orders-sink", lambda: guard.poll() is not None, GUARD_TIMEOUT_S)
    finally:
        if guard.poll() is None:
            # With its tree (the DAG's sensors run in it), killed after a short grace if need be.
            print(f"    tolerance guard: {stop_stack([StopTarget('tolerance guard', guard)])}", flush=True)
    guard_ok = guard.returncode == 0 and connector_state(connect) == "RUNNING"
    print(f"    orders-sink is {connector_state(connect)}; guard run {'succeeded' if guard_ok else 'FAILED'}")
    runs = [first_metrics, second_metrics]
    summary(
        [
            ("records in", sum(int(m.get("records_in", 0)) for m in runs)),
            (
                "ok (written to orders.clean)",
                sum(int(m.get("records_in", 0)) - int(m.get("total-records-skipped", 0)) for m in runs),
            ),
            ("failed (tolerated, sent to the DLQ)", sum(int(m.get("total-records-skipped", 0)) for m in runs)),
            ("retried (transient failures)", sum(int(m.get("total-retries", 0)) for m in runs)),
            ("in the DLQ", dlq_size(connect.bootstrap_servers)),
            ("replayed", replayed.get("replayed", "?")),
            ("parked", replayed.get("parked", "?")),
            ("breach-to-paused latency", "unknown" if latency is None else f"{latency:.1f} s"),
            ("alerts received", len(breach_alerts(receiver))),
            ("resolved messages received", len(resolved_messages(receiver))),
            ("connector orders-sink", connector_state(connect)),
        ]
    )
    print(
        "\nWhere to look next:\n"
        f"  - the sink connector's output: {connect.output_file(OUTPUT_FILE)}\n"
        f"  - the guard's log: {guard_log}\n"
        f"  - the DAGs: error_aware_pipeline.py, tolerance_guard.py, dlq_replay.py in {dags_folder()}\n"
        "  - the same DAGs in the Airflow UI: make ui\n"
        "  - how to write your own: README.md"
    )
    return 0 if guard_ok and len(breach_alerts(receiver)) == 1 and len(resolved_messages(receiver)) == 1 else 1


def breach_alerts(receiver: AlertReceiver) -> list[dict[str, Any]]:
    """The breach alerts among the messages (one per episode); reminders and "resolved" messages are not alerts.

    The example guard posts through SlackWebhookNotifier, whose body is Slack's (text and blocks, no ``kerr``
    object), so the message is told by its first line.
    """
    return [a for a in receiver.alerts if str(a.get("text", "")).startswith("Tolerance breached")]


def resolved_messages(receiver: AlertReceiver) -> list[dict[str, Any]]:
    return [a for a in receiver.alerts if str(a.get("text", "")).startswith("Resolved (breach)")]


def run_single_dag(dag_id: str) -> int:
    """The guard's process: run one DAG with the JSON conf in KERR_DEMO_CONF."""
    states, _ = run_dag(dag_id, json.loads(os.environ.get("KERR_DEMO_CONF", "{}")))
    print(f"{dag_id}: {states}", flush=True)
    return 0 if all(state in ("success", "skipped") for state in states.values()) else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--run-dag"]:
        return run_single_dag(args[1])
    try:
        dags = dags_folder()
    except FileNotFoundError as exc:
        print(f"kerr demo: {exc}", file=sys.stderr)
        return 2
    directory = state_dir() / "demo"
    directory.mkdir(parents=True, exist_ok=True)
    # Stop on SIGINT even when it was ignored at start (a background job of a script), as make ui does.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    external = resolve_bootstrap_servers()
    broker = None
    connect = None
    registry = None
    receiver = AlertReceiver()
    try:
        if external:
            step(f"using the Kafka cluster named by KAFKA_BOOTSTRAP_SERVERS: {external}")
            wait_for_metadata(external, timeout_s=30)
            bootstrap = external
        else:
            broker = LocalBroker(log_path=directory / "broker.log")
            step(f"starting the embedded Kafka-protocol broker ({broker.kind})")
            bootstrap = broker.start().bootstrap_servers
            print(f"    broker at {bootstrap}")
        step("starting the Schema Registry (the development stand-in, or SCHEMA_REGISTRY_URL)")
        registry_url, registry = start_registry(
            bootstrap, external_cluster=bool(external), log_path=directory / "schema-registry.log"
        )
        print(f"    Schema Registry at {registry_url}")
        step("starting Kafka Connect (a real worker, distributed mode) with the FileStreamSink orders-sink")
        connect = ConnectWorker(bootstrap, directory / f"connect-{int(time.time())}").start()
        print(f"    Connect REST at {connect.url}; alerts go to {receiver.url}")
        step("preparing an isolated Airflow under .kerr/demo (SQLite, examples off)")
        configure_airflow(directory / "airflow", bootstrap, connect.port, dags, registry_url)
        return run_story(bootstrap, connect, receiver)
    except KeyboardInterrupt:
        print("\nkerr demo: Ctrl-C, stopping Kafka Connect and the broker ...", flush=True)
        return 130
    finally:
        # A second Ctrl-C must not cut the stop short and leave the JVM or the broker behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        receiver.stop()
        stop_demo_stack(connect, registry, broker)


def stop_demo_stack(
    connect: ConnectWorker | None, registry: LocalSchemaRegistry | None, broker: LocalBroker | None
) -> None:
    """Kafka Connect and the registry, then the broker, within 10 s (:func:`stop_stack`); say what had to be killed."""
    report = stop_stack(
        (connect.stop_targets("kafka-connect") if connect is not None else [])
        + (registry.stop_targets("schema-registry") if registry is not None else []),
        broker.stop_targets("broker") if broker is not None else [],
    )
    for launcher in (connect, registry, broker):
        if launcher is not None:
            launcher.forget()
    print(f"kerr demo: {report}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
