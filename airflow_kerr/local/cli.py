"""``kerr local up | down | status``: the embedded development stack from a shell.

``up`` starts the broker, the development Schema Registry and a real Kafka Connect
worker detached and records
their process ids and addresses in ``<state dir>/local.json``, so ``down`` and
``status`` in a later shell find what ``up`` started. The state directory is
``$KERR_HOME`` or ``./.kerr``. ``KAFKA_CONNECT_URL`` names an existing Connect
to use instead of starting one, ``SCHEMA_REGISTRY_URL`` an existing registry.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow_kerr.local.broker import (
    BROKER_ENV,
    BROKER_KINDS,
    DEFAULT_BROKER,
    LOCAL_CLIENT_CONFIG,
    BrokerUnavailable,
    LocalBroker,
    connection_variables,
    wait_for_metadata,
)
from airflow_kerr.local.connect_runtime import ConnectRuntimeUnavailable
from airflow_kerr.local.connect_worker import ConnectWorker
from airflow_kerr.local.process import StopTarget, stop_stack
from airflow_kerr.local.schema_registry import REGISTRY_URL_ENV, LocalSchemaRegistry, SchemaRegistryUnavailable
from airflow_kerr.local.spark_cluster import LocalSparkCluster, SparkClusterUnavailable
from airflow_kerr.local.state import state_dir

STATE_FILE = "local.json"
#: An existing Kafka Connect to use instead of starting a worker (``http://host:8083``).
CONNECT_URL_ENV = "KAFKA_CONNECT_URL"


def read_state() -> dict[str, Any]:
    path = state_dir() / STATE_FILE
    if not path.exists():
        return {}
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def write_state(state: dict[str, Any]) -> None:
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def process_alive(pid: int, marker: str) -> bool:
    """True when ``pid`` runs and its command line mentions ``marker`` (guards against a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return marker in cmdline


def _running(state: dict[str, Any], name: str) -> bool:
    entry = state.get(name)
    if not entry:
        return False
    return process_alive(int(entry["pid"]), str(entry["marker"]))


def up(args: argparse.Namespace) -> int:
    """Start what is not running yet and print how to reach it."""
    state = read_state()
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    if _running(state, "broker"):
        print(f"broker already running at {state['broker']['bootstrap_servers']} (pid {state['broker']['pid']})")
    else:
        broker = LocalBroker(
            port=args.port or None,
            log_path=directory / "broker.log",
            detach=True,
            kind=args.broker,
            data_dir=directory / "broker-data",
        ).start()
        state["broker"] = {
            "pid": broker.pid,
            "kind": broker.kind,
            "marker": broker.process_marker,
            "bootstrap_servers": broker.bootstrap_servers,
            "log": str(directory / "broker.log"),
        }
        write_state(state)
        log = directory / "broker.log"
        print(f"{broker.kind} broker started at {broker.bootstrap_servers} (pid {broker.pid}, log {log})")
    registry_url = _schema_registry_up(state, directory)
    connect = _connect_up(state, directory)
    spark_master = _spark_cluster_up(state, directory) if args.spark_cluster else "local[2]"
    connections = connection_variables(
        state["broker"]["bootstrap_servers"],
        connect.hostname or "127.0.0.1",
        connect.port or 8083,
        # The embedded broker's clients need a larger receive limit to read a large DLQ (LOCAL_CLIENT_CONFIG).
        kafka_extra=LOCAL_CLIENT_CONFIG if state["broker"].get("kind", DEFAULT_BROKER) == "noida" else None,
        spark_master=spark_master,
        schema_registry_url=registry_url,
    )
    print("\nconnections for Airflow:")
    for name, value in connections.items():
        print(f"  {name}='{value}'")
    return 0


def _schema_registry_up(state: dict[str, Any], directory: Path) -> str:
    """Use ``SCHEMA_REGISTRY_URL``, or the registry already running, or start one on the broker; return its URL."""
    external = os.environ.get(REGISTRY_URL_ENV, "").strip()
    if external:
        state.pop("schema-registry", None)
        write_state(state)
        print(f"Schema Registry: using {external} ({REGISTRY_URL_ENV})")
        return external
    if _running(state, "schema-registry"):
        entry = state["schema-registry"]
        print(f"Schema Registry already running at {entry['url']} (pid {entry['pid']})")
    else:
        log = directory / "schema-registry.log"
        registry = LocalSchemaRegistry(state["broker"]["bootstrap_servers"], log_path=log, detach=True).start()
        state["schema-registry"] = registry.describe()
        write_state(state)
        print(f"Schema Registry (development stand-in) started at {registry.url} (pid {registry.pid}, log {log})")
    return str(state["schema-registry"]["url"])


def _connect_up(state: dict[str, Any], directory: Path) -> Any:
    """Use ``KAFKA_CONNECT_URL``, or the worker already running, or start one; return its URL, split."""
    external = os.environ.get(CONNECT_URL_ENV, "").strip()
    if external:
        state.pop("connect", None)
        write_state(state)
        print(f"Kafka Connect: using {external} ({CONNECT_URL_ENV})")
        return urlsplit(external)
    if _running(state, "connect"):
        print(f"Kafka Connect already running at {state['connect']['url']} (pid {state['connect']['pid']})")
    else:
        worker = ConnectWorker(state["broker"]["bootstrap_servers"], directory / "connect", detach=True).start()
        state["connect"] = worker.describe()
        write_state(state)
        print(f"Kafka Connect {worker.version} started at {worker.url} (pid {worker.pid}, log {worker.log_path})")
    return urlsplit(state["connect"]["url"])


def _spark_cluster_up(state: dict[str, Any], directory: Path) -> str:
    """Start a standalone master and two one-core workers (unless running); return the master URL."""
    names = [name for name in state if name.startswith("spark-")]
    if names and all(_running(state, name) for name in names):
        print(f"Spark cluster already running at {state['spark-master']['url']}")
        return str(state["spark-master"]["url"])
    cluster = LocalSparkCluster(directory / "spark", detach=True).start()
    for index, pid in enumerate(cluster.pids):
        name = "spark-master" if index == 0 else f"spark-worker-{index}"
        state[name] = {"pid": pid, "marker": "org.apache.spark.deploy", "url": cluster.master_url}
    write_state(state)
    print(f"Spark master {cluster.master_url} with {cluster.workers} workers (UI {cluster.ui_url})")
    return cluster.master_url


def down(_: argparse.Namespace) -> int:
    """Stop everything ``up`` started and forget it."""
    state = read_state()
    if not state:
        print("nothing to stop: no local stack recorded in", state_dir() / STATE_FILE)
        return 0
    running = [name for name in state if _running(state, name)]
    for name in state:
        if name not in running:
            print(f"{name} was not running")
    # By pid, for what an earlier `up` started, each with its tree (the fetch shim's noida-db, for one):
    # Connect and Spark at once, then the broker they need to stop cleanly; within 10 s in all.
    targets = {name: StopTarget(name, int(state[name]["pid"])) for name in running}
    report = stop_stack(
        [target for name, target in targets.items() if name != "broker"],
        [targets["broker"]] if "broker" in targets else [],
    )
    for name in running:
        print(f"stopped {name} (pid {state[name]['pid']})")
    print(report)
    (state_dir() / STATE_FILE).unlink(missing_ok=True)
    return 0


def status(_: argparse.Namespace) -> int:
    """Print what runs; exit 1 when the broker is not up and answering."""
    state = read_state()
    if not _running(state, "broker"):
        print("broker: not running (start it with: kerr local up)")
        return 1
    bootstrap = state["broker"]["bootstrap_servers"]
    try:
        wait_for_metadata(bootstrap, timeout_s=5)
    except BrokerUnavailable as exc:
        print(f"broker: pid {state['broker']['pid']} runs but does not answer: {exc}")
        return 1
    print(f"broker: running at {bootstrap} (pid {state['broker']['pid']})")
    for name, entry in state.items():
        if name != "broker":
            alive = "running" if _running(state, name) else "not running"
            print(f"{name}: {alive} at {entry.get('url', '?')} (pid {entry['pid']})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kerr", description="Tools for airflow-provider-kerr.")
    commands = parser.add_subparsers(dest="command", required=True)
    local = commands.add_parser("local", help="the embedded development stack")
    actions = local.add_subparsers(dest="action", required=True)
    up_parser = actions.add_parser(
        "up", help="start the embedded broker, a development Schema Registry and a Kafka Connect worker"
    )
    up_parser.add_argument("--port", type=int, default=0, help="broker port (default: a free one)")
    up_parser.add_argument(
        "--spark-cluster",
        action="store_true",
        help="also start a Spark standalone master and two one-core workers; spark_default points at it",
    )
    up_parser.add_argument(
        "--broker",
        choices=BROKER_KINDS,
        default=None,
        help=f"which embedded broker to start (default: ${BROKER_ENV} or {DEFAULT_BROKER})",
    )
    up_parser.set_defaults(func=up)
    actions.add_parser("down", help="stop what 'up' started").set_defaults(func=down)
    actions.add_parser("status", help="show what runs").set_defaults(func=status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
    except (BrokerUnavailable, ConnectRuntimeUnavailable, SparkClusterUnavailable, SchemaRegistryUnavailable) as exc:
        print(f"kerr: {exc}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    sys.exit(main())
