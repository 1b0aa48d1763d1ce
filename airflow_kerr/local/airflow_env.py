"""The environment ``airflow standalone`` runs with in the local UI, and its connections, stored in its DB.

``make ui`` and the browser tests use one login (:data:`USERNAME`/:data:`PASSWORD`), the
idle settings of issue #24 (:data:`IDLE_SETTINGS`) and the provider's three connections
written as rows of the metadata DB before Airflow starts (:func:`store_connections`), so
the Connections page shows and edits them. Nothing here imports Airflow: its own CLI
does the DB work in a child process. :class:`LocalUIError` is defined here, the module
the UI's other ones all build on, so each of them can raise it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from airflow_kerr.local.process import parent_death_signal, tail

#: The login of a local development UI (it listens on 127.0.0.1 unless told otherwise); printed by ``make ui``.
USERNAME = "admin"
PASSWORD = "admin"
ROLE = "admin"
CONNECTION_VARIABLE_PREFIX = "AIRFLOW_CONN_"
#: SQLite connection arguments for every process of the local stack (``[database] sql_alchemy_connect_args``).
#: Python's sqlite3 waits 5 s for another writer's lock, then fails; the scheduler, the dag-processor and
#: the api-servers share one file, so a writer waits up to 60 s for another process's commit instead.
#: (Inside one api-server such a wait could deadlock: see :func:`airflow_kerr.local.ui.start_execution_api`.)
SQLITE_CONNECT_ARGS: dict[str, object] = {"timeout": 60.0}

#: How often the idle local stack's Airflow wakes up (issue #24: an idle ``make ui`` stack, Kafka side
#: included, within 0.10 core; ``benchmarks/idle_stack.py --stack ui``). Each: why, and what it costs.
IDLE_SETTINGS = {
    # The scheduler loop sleeps this long when it found nothing to do (1 s): a trigger or a finished
    # task is picked up up to 3 s later, i.e. a run of n sequential tasks may take up to about 2n s longer.
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "3",
    # Its job's heartbeat row (5 s): health turns unhealthy after 30 s without one, so 15 s stays within it.
    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "15",
    # Pool metrics go to StatsD, which the local stack does not run (5 s): no cost.
    "AIRFLOW__SCHEDULER__POOL_METRICS_INTERVAL": "60",
    # A task whose process died unnoticed is failed up to 30 s after its heartbeat times out instead of 10 s.
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "30",
    # Every DAG file was re-parsed, in a new child process, every 30 s (most of the idle dag-processor's CPU).
    # A file that changes is still re-parsed within about a second (the default sort mode re-queues a file
    # newer than its last parse). What now waits up to 5 min: a DAG whose parse reads something outside its
    # file (the example DAGs read nothing), and the asset watcher of a DAG just unpaused (dlq_auto_replay's),
    # which starts at the DAG's next parse; "Reparse DAG" in the UI starts it at once. At 120 s a round of
    # the seven files (about 2.2 CPU-s) still cost 0.018 core on average, which put the stack over 0.10.
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "300",
    # A new DAG file is found within 30 s (Airflow's default is 300 s): listing one folder is cheap.
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
    # Seven example files: one parsing process at a time is enough (2).
    "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
    # How often it asks the DB whether a bundle needs refreshing (5 s); a local folder's refresh is the listing above.
    "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "30",
    # Parsing statistics in the dag-processor's log every 30 s: every 10 min.
    "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "600",
    # The triggerer's heartbeat row (5 s): health allows 30 s without one, so 15 s stays within it.
    "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "15",
}


class LocalUIError(RuntimeError):
    """The local Airflow UI could not be started or did not become ready."""


def airflow_environment(
    home: Path,
    *,
    host: str,
    port: int,
    password_file: Path,
    dags: Path,
    stored_connections: Iterable[str] = (),
    execution_api_port: int | None = None,
) -> dict[str, str]:
    """The environment ``airflow standalone`` runs with.

    The component count and pool sizes are kept small because the UI shares a laptop
    (or a 2-core CI machine) with Spark; every process must agree on the JWT secret
    and on where the execution API is, so both are set here rather than left to
    each process's defaults. Tasks reach the execution API on ``execution_api_port`` when
    given (an api-server of its own: :func:`~airflow_kerr.local.ui.start_execution_api`),
    else on ``port``. An ``AIRFLOW_CONN_*`` variable inherited for one of
    ``stored_connections`` (the ids kept in the metadata DB; the test harness and a
    developer's shell set ``AIRFLOW_CONN_KAFKA_DEFAULT``) is dropped: Airflow looks the
    environment up before the DB, so it would hide the row and make an edit on the
    Connections page do nothing.
    """
    python_bin = Path(sys.executable).parent
    shadowing = {connection_variable(conn_id) for conn_id in stored_connections}
    env = {name: value for name, value in os.environ.items() if name not in shadowing}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:{ROLE}",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": (
                f"http://{client_host(host)}:{execution_api_port or port}/execution/"
            ),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": f"{__name__}.SQLITE_CONNECT_ARGS",
            "AIRFLOW__API__HOST": host,
            "AIRFLOW__API__PORT": str(port),
            # The address people open: the links in alerts (the guard's question, the DLQ view) are built from it.
            "AIRFLOW__API__BASE_URL": f"http://{client_host(host)}:{port}",
            "AIRFLOW__API__WORKERS": "1",
            # 64 bytes: PyJWT warns below that for the HS512 it signs with.
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(48),
            **IDLE_SETTINGS,
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # standalone starts its components as `airflow ...` from PATH, and Spark's submit script lives here too.
            "PATH": f"{python_bin}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    return env


def connection_variable(conn_id: str) -> str:
    """The environment variable through which Airflow would read connection ``conn_id``."""
    return CONNECTION_VARIABLE_PREFIX + conn_id.upper()


def connection_records(variables: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``AIRFLOW_CONN_*`` JSON values (as ``broker.connection_variables`` makes them) as ``connections import`` records.

    The records are keyed by connection id, with ``extra`` as the JSON text the
    Connections page shows and edits, so the CLI, the tests and the demo share one
    description of the three connections whether they end up in the environment or
    in the DB.
    """
    records: dict[str, dict[str, Any]] = {}
    for name, value in variables.items():
        if not name.startswith(CONNECTION_VARIABLE_PREFIX):
            raise ValueError(f"{name} is not an {CONNECTION_VARIABLE_PREFIX}* variable")
        record: dict[str, Any] = json.loads(value)
        if isinstance(record.get("extra"), Mapping):
            record["extra"] = json.dumps(record["extra"])
        records[name[len(CONNECTION_VARIABLE_PREFIX) :].lower()] = record
    return records


#: Run in one interpreter, so the two Airflow commands cost one start-up (a few seconds on 2 cores), not two.
_STORE_CONNECTIONS = """
import sys
from airflow.__main__ import main
connections_file = sys.argv[1]
for command in (["db", "migrate"], ["connections", "import", "--overwrite", connections_file]):
    sys.argv = ["airflow", *command]
    main()
"""


def store_connections(
    env: Mapping[str, str], connections: Mapping[str, Mapping[str, Any]], log_path: Path, timeout_s: float
) -> None:
    """Migrate the metadata DB and write ``connections`` into it, replacing a row of the same id.

    This runs before ``airflow standalone`` starts, because its dag-processor parses the
    example DAGs at once and their ``kafka://`` assets read ``kafka_default`` when parsed
    (a row added later through the REST API would race it). Airflow's own CLI does the
    work (``db migrate``, then ``connections import --overwrite``), under the Airflow home
    and environment standalone gets, so the same ``airflow.cfg`` Fernet key encrypts the
    extras the components decrypt. ``--overwrite`` is what a second ``make ui`` on the same
    state needs: the rows then point at this run's ports. The output goes to ``log_path``.
    """
    records = log_path.parent / "kerr-connections.json"
    records.write_text(json.dumps(connections, indent=2) + "\n")
    records.chmod(0o600)
    try:
        with open(log_path, "ab") as log:
            result = subprocess.run(
                [sys.executable, "-c", _STORE_CONNECTIONS, str(records)],
                cwd=env.get("AIRFLOW_HOME"),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
                check=False,
                preexec_fn=parent_death_signal(signal.SIGTERM),
            )
    except subprocess.TimeoutExpired as exc:
        raise LocalUIError(f"storing the connections in the metadata DB took over {timeout_s:.0f} s") from exc
    finally:
        records.unlink(missing_ok=True)
    if result.returncode != 0:
        raise LocalUIError(
            f"could not store the connections {sorted(connections)} in the metadata DB "
            f"(exit code {result.returncode}):\n{tail(log_path, 40)}"
        )


def client_host(host: str) -> str:
    """The address a client on this machine uses to reach a server listening on ``host``."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def write_password_file(path: Path, username: str, password: str) -> None:
    """Give the simple auth manager a known password, so the login can be printed and used by tests."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({username: password}) + "\n")
    path.chmod(0o600)
