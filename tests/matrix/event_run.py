"""One real event-driven run on the Airflow this Python has: an AssetWatcher on our DLQ event trigger starts a DAG.

Run by ``tests/matrix/run.py`` in each matrix virtualenv (``python tests/matrix/event_run.py``).
Real: the embedded broker and ``airflow standalone`` (api-server, scheduler, dag-processor,
triggerer, LocalExecutor) with one DAG scheduled on :func:`dead_letter_queue_asset`. On
Airflow 3.3 the triggerer serves the watch from a shared stream in ack mode; on 3.1 and 3.2
it calls ``WatchTrigger.run()``. The check: once the watcher has opened (its cursor group
committed), three dead letters written to the DLQ start one DAG run, and it succeeds. No
Kafka Connect, no Spark: this proves the watcher path, ``tests/integration`` the rest.
Exit 0 and one line ``EVENT-RUN OK <seconds>`` on success.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from airflow_kerr.assets.watched import dead_letter_queue_asset
from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.kafka.offsets import group_offsets
from airflow_kerr.local.broker import LocalBroker, ensure_topics, free_port, parent_death_signal
from airflow_kerr.local.dead_letters import Failure, write_dead_letters
from airflow_kerr.local.ui import PASSWORD, USERNAME, airflow_environment, write_password_file
from airflow_kerr.triggers.dead_letter_queue_events import DeadLetterQueueEventTrigger

TOPIC = "matrix.dlq"
DAG_ID = "matrix_dlq_watch"
DAG = f"""
import pendulum
from airflow.sdk import DAG, task
from airflow_kerr.assets.watched import dead_letter_queue_asset

with DAG(dag_id="{DAG_ID}", schedule=[dead_letter_queue_asset("{TOPIC}", min_records=3, poll_interval=1.0)],
         start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False, is_paused_upon_creation=False):
    @task
    def triage():
        return None

    triage()
"""


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
            raise SystemExit(f"EVENT-RUN FAILED: {what}: not within {timeout_s:.0f} s; airflow log tail:\n{tail}")
        time.sleep(1.0)


def runs(db: Path, state: str) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as connection:
            found = connection.execute(
                "SELECT count(*) FROM dag_run WHERE dag_id = ? AND state = ?", (DAG_ID, state)
            ).fetchone()
    except sqlite3.OperationalError:  # not migrated yet, or locked for a moment
        return 0
    return int(found[0])


def main() -> int:
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="kerr-matrix-event-"))
    airflow_home, dags = home / "airflow", home / "dags"
    airflow_home.mkdir()
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG)
    broker = LocalBroker(log_path=home / "broker.log").start()
    process: subprocess.Popen[bytes] | None = None
    log_path = home / "standalone.log"
    log_path.write_bytes(b"")
    try:
        servers = broker.bootstrap_servers
        ensure_topics(servers, {TOPIC: 1})
        password_file = airflow_home / "simple_auth_manager_passwords.json"
        write_password_file(password_file, USERNAME, PASSWORD)
        env = airflow_environment(
            airflow_home, host="127.0.0.1", port=free_port(), password_file=password_file, dags=dags
        )
        extra = {"bootstrap.servers": servers, **broker.client_config}
        # The log servers' fixed ports (8793, 8794) may be taken by another Airflow on this machine.
        env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(free_port())
        env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(free_port())
        env["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka", "extra": extra})
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "standalone"],
                cwd=airflow_home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=parent_death_signal(signal.SIGINT),
            )
        trigger = dead_letter_queue_asset(TOPIC, min_records=3, poll_interval=1.0).watchers[0].trigger
        assert isinstance(trigger, DeadLetterQueueEventTrigger)
        config = {"bootstrap.servers": servers}
        wait_for(
            "the watcher to open (its cursor group to commit)",
            lambda: bool(group_offsets(config, trigger.cursor_group, [(TOPIC, 0)])),
            420,
            log_path,
        )
        now_ms = int(time.time() * 1000)
        failures = [
            Failure(
                SourceRecord("orders", 0, o, now_ms, key=b"k", value=b"{bad"), Stage.VALUE_CONVERTER, ValueError("x")
            )
            for o in range(3)
        ]
        write_dead_letters(config, TOPIC, failures)
        wait_for(
            "a successful DAG run started by the DLQ's growth",
            lambda: runs(airflow_home / "airflow.db", "success") >= 1,
            300,
            log_path,
        )
        print(f"EVENT-RUN OK {time.monotonic() - started:.0f}", flush=True)
        return 0
    finally:
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGINT)
                process.wait(timeout=60)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
