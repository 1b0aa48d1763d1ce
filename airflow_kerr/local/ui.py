"""``make ui``: a real local Airflow wired to the embedded stack, for clicking through the example DAGs.

It starts the embedded broker (or uses ``KAFKA_BOOTSTRAP_SERVERS``), a real Kafka
Connect worker, and ``airflow standalone`` (api-server, scheduler, triggerer,
dag-processor on SQLite, with the LocalExecutor) whose ``kafka_default``,
``spark_default`` and ``kafka_connect_default`` connections point at them. Those
connections are rows of Airflow's metadata DB, not ``AIRFLOW_CONN_*`` variables, so the
Connections page shows them and an edit made there takes effect. Everything it writes
lives under ``.kerr/ui``.

:func:`start_local_ui` is the one piece of code behind both ``make ui`` and the
browser test, so the test clicks through exactly what a person gets.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from airflow_kerr.local.broker import (
    BrokerUnavailable,
    LocalBroker,
    connection_variables,
    ensure_topics,
    free_port,
    parent_death_signal,
    port_free,
    resolve_bootstrap_servers,
)
from airflow_kerr.local.connect_worker import ConnectWorker
from airflow_kerr.local.orders_example import TOPICS, add_sink_connector

# Imported from here before local/process.py held them; kept for callers outside local/ (tests, benchmarks).
from airflow_kerr.local.process import pid_alive as pid_alive
from airflow_kerr.local.process import process_tree as process_tree
from airflow_kerr.local.process import stop_tree
from airflow_kerr.local.state import dags_folder, state_dir

DEFAULT_PORT = 8080
CONNECT_DEFAULT_PORT = 8083
#: The login of a local development UI (it listens on 127.0.0.1 unless told otherwise); printed by ``make ui``.
USERNAME = "admin"
PASSWORD = "admin"
ROLE = "admin"
#: The DLQ topic the ``dlq_replay`` form names by default; seeded so a dry run with the defaults has work to show.
SAMPLE_DLQ_TOPIC = "orders.dlq"
SAMPLE_SOURCE_TOPIC = "orders"
CONNECTION_VARIABLE_PREFIX = "AIRFLOW_CONN_"
_HEALTHY_COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")

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


def preferred_port(port: int, host: str = "127.0.0.1") -> int:
    """``port`` when it is free (so URLs stay familiar), otherwise any free port."""
    return port if port_free(port, host) else free_port(host)


def airflow_environment(
    home: Path,
    *,
    host: str,
    port: int,
    password_file: Path,
    dags: Path,
    stored_connections: Iterable[str] = (),
) -> dict[str, str]:
    """The environment ``airflow standalone`` runs with.

    The component count and pool sizes are kept small because the UI shares a laptop
    (or a 2-core CI machine) with Spark; every process must agree on the JWT secret
    and on where the execution API is, so both are set here rather than left to
    each process's defaults. An ``AIRFLOW_CONN_*`` variable inherited for one of
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
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{_client_host(host)}:{port}/execution/",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": host,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
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
    """``AIRFLOW_CONN_*`` JSON values (as :func:`connection_variables` makes them) as ``connections import`` records.

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
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        raise LocalUIError(
            f"could not store the connections {sorted(connections)} in the metadata DB "
            f"(exit code {result.returncode}):\n{tail}"
        )


def _client_host(host: str) -> str:
    """The address a client on this machine uses to reach a server listening on ``host``."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def write_password_file(path: Path, username: str, password: str) -> None:
    """Give the simple auth manager a known password, so the login can be printed and used by tests."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({username: password}) + "\n")
    path.chmod(0o600)


def seed_dead_letters(
    bootstrap_servers: str, dlq_topic: str, source_topic: str = SAMPLE_SOURCE_TOPIC, count: int = 20
) -> int:
    """Create ``dlq_topic`` and fill it with ``count`` invalid orders as the error-aware job writes them.

    Half have a negative amount (the example fix repairs them), half are cut-short JSON
    (the fix parks them), so a dry run of ``dlq_replay`` has a breakdown to show.
    """
    from airflow_kerr.errors import SourceRecord, Stage, TaskId
    from airflow_kerr.examples.orders import InvalidOrder
    from airflow_kerr.local.dead_letters import Failure, write_dead_letters

    ensure_topics(bootstrap_servers, {source_topic: 1, dlq_topic: 1})
    now_ms = int(time.time() * 1000)
    failures = []
    for index in range(count):
        order_id = f"o-{index}"
        error: Exception
        if index % 2:
            value = f'{{"id": "{order_id}", "amount": '.encode()
            stage, error = Stage.VALUE_CONVERTER, json.JSONDecodeError("Expecting value", value.decode(), len(value))
        else:
            value = json.dumps({"id": order_id, "amount": -12.5 - index}).encode()
            stage, error = Stage.TRANSFORMATION, InvalidOrder(f"order {order_id} has a non-positive amount")
        record = SourceRecord(source_topic, 0, index, now_ms, key=order_id.encode(), value=value)
        failures.append(Failure(record, stage, error))
    try:
        return write_dead_letters(
            {"bootstrap.servers": bootstrap_servers}, dlq_topic, failures, task=TaskId("orders_pipeline", 0)
        )
    except RuntimeError as exc:
        raise LocalUIError(f"could not write the sample dead letters to {dlq_topic}: {exc}") from exc


@dataclass
class LocalUI:
    """A running local Airflow UI and the embedded stack behind it; :meth:`stop` ends all of it."""

    url: str
    username: str
    password: str
    airflow_home: Path
    log_path: Path
    bootstrap_servers: str
    process: subprocess.Popen[bytes] | None = None
    broker: LocalBroker | None = None
    connect: ConnectWorker | None = None
    _stopped: bool = field(default=False, repr=False)

    @property
    def connect_url(self) -> str:
        """The Kafka Connect worker's URL, or "" before it is started."""
        return self.connect.url if self.connect is not None else ""

    def token(self, timeout_s: float = 30.0) -> str:
        """A JWT for the REST API, got with the same login the browser uses."""
        response = httpx.post(
            f"{self.url}/auth/token", json={"username": self.username, "password": self.password}, timeout=timeout_s
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token

    def api(self, timeout_s: float = 30.0) -> httpx.Client:
        """An HTTP client for ``/api/v2``, logged in."""
        return httpx.Client(
            base_url=f"{self.url}/api/v2",
            headers={"Authorization": f"Bearer {self.token()}"},
            timeout=timeout_s,
        )

    def wait_for_run(self, dag_id: str, run_id: str, task_id: str, timeout_s: float = 180.0) -> dict[str, Any]:
        """Poll the REST API until the run succeeds and return it; raise :class:`LocalUIError` with ``task_id``'s log
        and the end of Airflow's log when it fails or is still going after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self.api() as api:
            while True:
                run: dict[str, Any] = api.get(f"/dags/{dag_id}/dagRuns/{run_id}").raise_for_status().json()
                if run["state"] == "success":
                    return run
                if run["state"] == "failed" or time.monotonic() > deadline:
                    log = api.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1")
                    raise LocalUIError(
                        f"run {dag_id}/{run_id} is {run['state']} after {timeout_s:.0f} s at most; "
                        f"log of {task_id}:\n{log.text[-4000:]}\nAirflow log:\n{self.log_tail(40)}"
                    )
                time.sleep(2)

    def log_tail(self, lines: int = 60) -> str:
        """The end of the standalone log, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop Airflow (SIGINT to standalone, as Ctrl-C would), then Kafka Connect and the broker."""
        if self._stopped:
            return
        self._stopped = True
        if self.process is not None:
            # Only standalone gets the SIGINT (Ctrl-C): it then stops each component, see stop_tree.
            stop_tree(self.process, first=signal.SIGINT, grace_s=20.0)
        if self.connect is not None:
            self.connect.stop()
        if self.broker is not None:
            self.broker.stop()

    def __enter__(self) -> LocalUI:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _wait_ready(ui: LocalUI, wait_for_dags: Iterable[str], timeout_s: float) -> None:
    """Return once every component reports healthy and the DAGs are parsed; fail early on a DAG import error."""
    deadline = time.monotonic() + timeout_s
    problem = "the api-server did not answer"

    def check_alive() -> None:
        if ui.process is not None and ui.process.poll() is not None:
            raise LocalUIError(f"airflow standalone exited with code {ui.process.returncode}:\n{ui.log_tail()}")

    while True:
        check_alive()
        try:
            health = httpx.get(f"{ui.url}/api/v2/monitor/health", timeout=5).json()
            unhealthy = [name for name in _HEALTHY_COMPONENTS if health.get(name, {}).get("status") != "healthy"]
            if not unhealthy:
                break
            problem = f"not healthy yet: {', '.join(unhealthy)} ({health})"
        except (httpx.HTTPError, ValueError) as exc:
            problem = f"the api-server did not answer: {exc}"
        if time.monotonic() > deadline:
            raise LocalUIError(f"Airflow was not ready after {timeout_s:.0f} s: {problem}\n{ui.log_tail()}")
        time.sleep(1)

    wanted = set(wait_for_dags)
    with ui.api() as api:
        while True:
            check_alive()
            errors = api.get("/importErrors").json().get("import_errors", [])
            if errors:
                details = "\n".join(f"{e.get('filename')}: {e.get('stack_trace')}" for e in errors)
                raise LocalUIError(f"DAG files failed to import:\n{details}")
            found = {dag["dag_id"] for dag in api.get("/dags", params={"limit": 100}).json().get("dags", [])}
            if wanted <= found:
                return
            if time.monotonic() > deadline:
                raise LocalUIError(
                    f"DAGs {sorted(wanted - found)} were not parsed after {timeout_s:.0f} s (found {sorted(found)})"
                )
            time.sleep(1)


def start_local_ui(
    home: Path | None = None,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    connect_port: int | None = None,
    bootstrap_servers: str | None = None,
    seed_sample_dlq: bool = True,
    wait_for_dags: Iterable[str] = ("dlq_replay",),
    startup_timeout_s: float = 300.0,
    dags: Path | None = None,
    environment: Mapping[str, str] | None = None,
) -> LocalUI:
    """Start the broker, a Kafka Connect worker and ``airflow standalone``; return once the UI can be used.

    ``home`` holds the Airflow home (``airflow/``) and the logs; it defaults to
    ``.kerr/ui``. The metadata DB is kept between runs, so a second start is quicker
    and earlier runs stay visible. The broker is ``bootstrap_servers`` when given (the
    tests share theirs), else ``KAFKA_BOOTSTRAP_SERVERS``, else an embedded one with the
    orders example's topics (``orders.dlq`` seeded with sample dead letters) and its
    ``orders-sink`` connector, so every example DAG, the event-driven ones too, runs as it is. The DAGs are those of
    :func:`~airflow_kerr.local.state.dags_folder` unless ``dags`` names a folder;
    ``environment`` adds variables to Airflow's (``AIRFLOW_VAR_*``, ``AIRFLOW_CONN_*`` ...).
    ``kafka_default``, ``spark_default`` and ``kafka_connect_default`` are written into the
    metadata DB before Airflow starts (see :func:`store_connections`) and are not in the
    components' environment, so the Connections page can show and edit them; an
    ``AIRFLOW_CONN_*`` given in ``environment`` still wins over its row, as the caller asked.
    On any failure everything already started is stopped before the error is raised.
    """
    dags = dags or dags_folder()  # first: a missing DAGs folder fails before anything starts
    home = (home or state_dir() / "ui").resolve()
    airflow_home = home / "airflow"
    airflow_home.mkdir(parents=True, exist_ok=True)
    port = port or preferred_port(DEFAULT_PORT, _client_host(host))
    client_host = _client_host(host)
    ui = LocalUI(
        url=f"http://{client_host}:{port}",
        username=USERNAME,
        password=PASSWORD,
        airflow_home=airflow_home,
        log_path=home / "standalone.log",
        bootstrap_servers="",
    )
    try:
        external = bootstrap_servers or resolve_bootstrap_servers()
        if external:
            ui.bootstrap_servers = external
        else:
            ui.broker = LocalBroker(log_path=home / "broker.log").start()
            ui.bootstrap_servers = ui.broker.bootstrap_servers
            ensure_topics(ui.bootstrap_servers, TOPICS)
            if seed_sample_dlq:
                seed_dead_letters(ui.bootstrap_servers, SAMPLE_DLQ_TOPIC)
        ui.connect = ConnectWorker(
            ui.bootstrap_servers, home / "connect", port=connect_port or preferred_port(CONNECT_DEFAULT_PORT)
        ).start()
        if ui.broker is not None:
            add_sink_connector(ui.connect)
        password_file = airflow_home / "simple_auth_manager_passwords.json"
        write_password_file(password_file, ui.username, ui.password)
        # The embedded broker's clients need a larger receive limit (LOCAL_CLIENT_CONFIG) to read a large DLQ.
        extra = ui.broker.client_config if ui.broker is not None else None
        connections = connection_records(
            connection_variables(ui.bootstrap_servers, ui.connect.host, ui.connect.port, kafka_extra=extra)
        )
        env = airflow_environment(
            airflow_home,
            host=host,
            port=port,
            password_file=password_file,
            dags=dags,
            stored_connections=connections,
        )
        env.update(environment or {})
        ui.log_path.write_bytes(b"")  # this run's log only: the connection import, then standalone
        store_connections(env, connections, ui.log_path, timeout_s=startup_timeout_s)
        with open(ui.log_path, "ab") as log:
            ui.process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "standalone"],
                cwd=airflow_home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # SIGINT is what makes airflow standalone stop its components.
                preexec_fn=parent_death_signal(signal.SIGINT),
            )
        _wait_ready(ui, wait_for_dags, startup_timeout_s)
    except BaseException:
        ui.stop()
        raise
    return ui


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_kerr.local.ui",
        description="A local Airflow UI (airflow standalone) wired to the embedded Kafka stack.",
    )
    parser.add_argument("--port", type=int, default=0, help=f"UI port (default: {DEFAULT_PORT}, or a free one)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the UI listens on (default: 127.0.0.1, this machine only; the login is admin/admin)",
    )
    parser.add_argument("--home", type=Path, default=None, help="state directory (default: .kerr/ui)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for Airflow to be ready")
    return parser


def _banner(ui: LocalUI) -> str:
    kafka = ui.bootstrap_servers + ("" if ui.broker else " (KAFKA_BOOTSTRAP_SERVERS)")
    sample = (
        f"{SAMPLE_DLQ_TOPIC} holds 20 sample dead letters"
        if ui.broker
        else "point the form at a DLQ topic of your cluster"
    )
    return "\n".join(
        [
            "",
            "-" * 72,
            f"Airflow UI      {ui.url}",
            f"Log in as       {ui.username} / {ui.password}",
            "",
            f"kafka_default          {kafka}",
            f"kafka_connect_default  {ui.connect_url} (Kafka Connect)",
            "spark_default          local[2]",
            "(connections in Airflow's metadata DB: Admin > Connections shows and edits them)",
            "",
            f"Try it: open dlq_replay, Trigger, keep 'Dry run' ticked ({sample}).",
            f"Airflow logs    {ui.log_path}",
            "Press Ctrl-C to stop everything.",
            "-" * 72,
        ]
    )


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM stops the UI the way Ctrl-C does."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Start the local UI, print how to reach it, and keep it running until Ctrl-C or SIGTERM."""
    args = build_parser().parse_args(argv)
    if args.port and not port_free(args.port, _client_host(args.host)):
        print(f"kerr ui: port {args.port} is already in use; choose another with --port", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    print("Starting the embedded broker, Kafka Connect and airflow standalone ...", flush=True)
    try:
        ui = start_local_ui(args.home, port=args.port or None, host=args.host, startup_timeout_s=args.timeout)
    except (LocalUIError, BrokerUnavailable, OSError) as exc:
        print(f"kerr ui: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print(_banner(ui), flush=True)
    code = 0
    try:
        while ui.process is not None and ui.process.poll() is None:
            time.sleep(1)
        print(f"kerr ui: airflow standalone exited:\n{ui.log_tail()}", file=sys.stderr)
        code = 1
    except KeyboardInterrupt:
        print("\nStopping Airflow, Kafka Connect and the broker ...", flush=True)
    finally:
        # A second Ctrl-C must not cut the shutdown short and leave components behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ui.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
