"""``make ui``: a real local Airflow wired to the embedded stack, for clicking through the example DAGs.

It starts the embedded broker (or uses ``KAFKA_BOOTSTRAP_SERVERS``), the development
Schema Registry (or uses ``SCHEMA_REGISTRY_URL``), a real Kafka Connect worker, and
``airflow standalone`` (api-server, scheduler, triggerer, dag-processor on SQLite, with
the LocalExecutor) whose ``kafka_default``, ``spark_default``, ``kafka_connect_default``
and ``schema_registry_default`` connections point at them. Those
connections are rows of Airflow's metadata DB, not ``AIRFLOW_CONN_*`` variables, so the
Connections page shows them and an edit made there takes effect. Everything it writes
lives under ``.kerr/ui``.

:func:`start_local_ui` is the one piece of code behind both ``make ui`` and the
browser test, so the test clicks through exactly what a person gets. This module is
that start-up and the ``make ui`` command; Airflow's environment and connections are
in :mod:`~airflow_kerr.local.airflow_env`, the sample DLQ in
:mod:`~airflow_kerr.local.sample_dlq`, and the running UI (its REST API client and
its stop) in :mod:`~airflow_kerr.local.ui_client`.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx

# Names other than start_local_ui are imported from here by callers outside local/ (tests, benchmarks)
# from before ui.py was split; they stay importable from here.
from airflow_kerr.local.airflow_env import IDLE_SETTINGS as IDLE_SETTINGS
from airflow_kerr.local.airflow_env import PASSWORD as PASSWORD
from airflow_kerr.local.airflow_env import ROLE as ROLE
from airflow_kerr.local.airflow_env import USERNAME as USERNAME
from airflow_kerr.local.airflow_env import (
    LocalUIError,
    airflow_environment,
    client_host,
    connection_records,
    store_connections,
    write_password_file,
)
from airflow_kerr.local.broker import (
    BrokerUnavailable,
    LocalBroker,
    connection_variables,
    ensure_topics,
    free_port,
    port_free,
    resolve_bootstrap_servers,
)
from airflow_kerr.local.connect_worker import ConnectWorker
from airflow_kerr.local.orders_example import TOPICS, add_sink_connector
from airflow_kerr.local.process import parent_death_signal, tail
from airflow_kerr.local.process import pid_alive as pid_alive
from airflow_kerr.local.process import process_tree as process_tree
from airflow_kerr.local.sample_dlq import SAMPLE_DLQ_TOPIC, seed_dead_letters
from airflow_kerr.local.schema_registry import start_registry
from airflow_kerr.local.state import dags_folder, state_dir
from airflow_kerr.local.ui_client import LocalUI

DEFAULT_PORT = 8080
CONNECT_DEFAULT_PORT = 8083
_HEALTHY_COMPONENTS = ("metadatabase", "scheduler", "triggerer", "dag_processor")


def preferred_port(port: int, host: str = "127.0.0.1") -> int:
    """``port`` when it is free (so URLs stay familiar), otherwise any free port."""
    return port if port_free(port, host) else free_port(host)


def _check_alive(ui: LocalUI) -> None:
    """Raise with the log's end when standalone or the execution API server has exited."""
    if ui.process is not None and ui.process.poll() is not None:
        raise LocalUIError(f"airflow standalone exited with code {ui.process.returncode}:\n{ui.log_tail()}")
    if ui.execution_api is not None and ui.execution_api.poll() is not None:
        log = tail(ui.log_path.with_name("execution-api.log"), 40)
        raise LocalUIError(f"the execution API server exited with code {ui.execution_api.returncode}:\n{log}")


def _wait_ready(ui: LocalUI, wait_for_dags: Iterable[str], timeout_s: float) -> None:
    """Return once every component reports healthy and the DAGs are parsed; fail early on a DAG import error."""
    deadline = time.monotonic() + timeout_s
    problem = "the api-server did not answer"

    while True:
        _check_alive(ui)
        try:
            health = httpx.get(f"{ui.url}/api/v2/monitor/health", timeout=5).json()
            unhealthy = [name for name in _HEALTHY_COMPONENTS if health.get(name, {}).get("status") != "healthy"]
            if ui.execution_api_url and httpx.get(f"{ui.execution_api_url}health", timeout=5).status_code != 200:
                unhealthy.append("execution API")
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
            _check_alive(ui)
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


def start_execution_api(ui: LocalUI, env: Mapping[str, str], host: str, port: int) -> subprocess.Popen[bytes]:
    """Start ``airflow api-server --apps execution`` on ``port``: the API the tasks talk to, apart from the UI's.

    On SQLite one writer locks the whole file. Airflow's ``action_logging`` dependency (every
    POST, PATCH and DELETE of the REST API) commits on the api-server's event loop, while a
    task's heartbeat, served by the same process in a worker thread, commits only when its
    session dependency exits, which needs that loop. When the two met, each waited for the
    other until SQLite's busy timeout: the api-server froze (a CI run's 30 s login timed out;
    with the 5 s default a dagRun PATCH answered 500). In a process of its own, a task's
    commit never waits for the UI's loop. Its log is ``execution-api.log`` beside standalone's.
    """
    with open(ui.log_path.with_name("execution-api.log"), "wb") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "airflow",
                "api-server",
                *("--apps", "execution", "--host", host),
                *("--port", str(port), "--workers", "1"),
            ],
            cwd=ui.airflow_home,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=parent_death_signal(signal.SIGTERM),
        )


def start_local_ui(  # noqa: PLR0913 - the local UI's start-up knobs; the CLI, the demo and the UI tests each set some
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
    address = client_host(host)
    port = port or preferred_port(DEFAULT_PORT, address)
    ui = LocalUI(
        url=f"http://{address}:{port}",
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
        ui.schema_registry_url, ui.schema_registry = start_registry(
            ui.bootstrap_servers, external_cluster=ui.broker is None, log_path=home / "schema-registry.log"
        )
        # The worker gets the stack's whole start-up allowance: on a shared 2-core machine a JVM may take
        # longer than the worker's own default while other stacks start beside it.
        ui.connect = ConnectWorker(
            ui.bootstrap_servers,
            home / "connect",
            port=connect_port or preferred_port(CONNECT_DEFAULT_PORT),
            start_timeout_s=max(90.0, startup_timeout_s),
        ).start()
        if ui.broker is not None:
            add_sink_connector(ui.connect)
        password_file = airflow_home / "simple_auth_manager_passwords.json"
        write_password_file(password_file, ui.username, ui.password)
        # The embedded broker's clients need a larger receive limit (LOCAL_CLIENT_CONFIG) to read a large DLQ.
        extra = ui.broker.client_config if ui.broker is not None else None
        connections = connection_records(
            connection_variables(
                ui.bootstrap_servers,
                ui.connect.host,
                ui.connect.port,
                kafka_extra=extra,
                schema_registry_url=ui.schema_registry_url,
            )
        )
        execution_api_port = free_port(address)
        env = airflow_environment(
            airflow_home,
            host=host,
            port=port,
            password_file=password_file,
            dags=dags,
            stored_connections=connections,
            execution_api_port=execution_api_port,
        )
        env.update(environment or {})
        ui.log_path.write_bytes(b"")  # this run's log only: the connection import, then standalone
        store_connections(env, connections, ui.log_path, timeout_s=startup_timeout_s)
        ui.execution_api = start_execution_api(ui, env, address, execution_api_port)
        ui.execution_api_url = env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
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
            f"schema_registry_default  {ui.schema_registry_url}"
            + (" (development stand-in)" if ui.schema_registry else " (SCHEMA_REGISTRY_URL)"),
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
    if args.port and not port_free(args.port, client_host(args.host)):
        print(f"kerr ui: port {args.port} is already in use; choose another with --port", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    # Python keeps SIGINT ignored when it was ignored at start (a job a script put in the background):
    # then Ctrl-C or `kill -INT` would stop nothing. The UI always stops on it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print("Starting the embedded broker, the Schema Registry, Kafka Connect and airflow standalone ...", flush=True)
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
        print("\nStopping Airflow, Kafka Connect, the Schema Registry and the broker ...", flush=True)
    finally:
        # A second Ctrl-C must not cut the shutdown short and leave components behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        report = ui.stop()
        if report is not None:
            print(f"kerr ui: {report}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
