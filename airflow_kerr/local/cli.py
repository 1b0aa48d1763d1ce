"""``kerr local up | down | status``: the embedded development stack from a shell.

``up`` starts the broker (and the Kafka Connect stand-in) detached and records
their process ids and addresses in ``<state dir>/local.json``, so ``down`` and
``status`` in a later shell find what ``up`` started. The state directory is
``$KERR_HOME`` or ``./.kerr``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from airflow_kerr.local.broker import (
    BrokerUnavailable,
    LocalBroker,
    connection_variables,
    free_port,
    stop_process,
    wait_for_metadata,
)

STATE_FILE = "local.json"


def state_dir() -> Path:
    """Where ``up`` writes what it started: ``$KERR_HOME`` or ``./.kerr``."""
    return Path(os.environ.get("KERR_HOME") or Path.cwd() / ".kerr")


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


def terminate(pid: int, timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if the process is still there after ``timeout_s``.

    By pid, for what an earlier ``up`` started; a child this process holds as a
    Popen goes through :func:`~airflow_kerr.local.broker.stop_process`, which reaps it.
    """
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


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
        broker = LocalBroker(port=args.port or None, log_path=directory / "broker.log", detach=True).start()
        state["broker"] = {
            "pid": broker.pid,
            "marker": broker.bootstrap_servers,
            "bootstrap_servers": broker.bootstrap_servers,
            "log": str(directory / "broker.log"),
        }
        write_state(state)
        print(f"broker started at {broker.bootstrap_servers} (pid {broker.pid}, log {directory / 'broker.log'})")
    if _running(state, "connect"):
        print(f"Kafka Connect stand-in already running at {state['connect']['url']} (pid {state['connect']['pid']})")
    else:
        state["connect"] = start_connect_standin(state["broker"]["bootstrap_servers"], directory)
        write_state(state)
        print(
            f"Kafka Connect stand-in (development and tests only) started at {state['connect']['url']} "
            f"(pid {state['connect']['pid']})"
        )
    connections = connection_variables(state["broker"]["bootstrap_servers"], "127.0.0.1", state["connect"]["port"])
    print("\nconnections for Airflow:")
    for name, value in connections.items():
        print(f"  {name}='{value}'")
    return 0


def start_connect_standin(bootstrap_servers: str, directory: Path, timeout_s: float = 30.0) -> dict[str, Any]:
    """Start the Kafka Connect stand-in detached and wait until ``GET /`` answers."""
    port = free_port()
    log_path = directory / "connect.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "airflow_kerr.local.connect",
                "--bootstrap-servers",
                bootstrap_servers,
                "--port",
                str(port),
                "--data-dir",
                str(directory / "connect"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url + "/", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_process(process)
                raise BrokerUnavailable(f"the Kafka Connect stand-in did not start; see {log_path}") from None
            time.sleep(0.2)
    return {"pid": process.pid, "marker": f"--port {port}", "url": url, "port": port, "log": str(log_path)}


def down(_: argparse.Namespace) -> int:
    """Stop everything ``up`` started and forget it."""
    state = read_state()
    if not state:
        print("nothing to stop: no local stack recorded in", state_dir() / STATE_FILE)
        return 0
    for name, entry in reversed(list(state.items())):
        if _running(state, name):
            terminate(int(entry["pid"]), timeout_s=15.0)
            print(f"stopped {name} (pid {entry['pid']})")
        else:
            print(f"{name} was not running")
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
    up_parser = actions.add_parser("up", help="start the broker and the Kafka Connect stand-in (dev and tests only)")
    up_parser.add_argument("--port", type=int, default=0, help="broker port (default: a free one)")
    up_parser.set_defaults(func=up)
    actions.add_parser("down", help="stop what 'up' started").set_defaults(func=down)
    actions.add_parser("status", help="show what runs").set_defaults(func=status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
    except BrokerUnavailable as exc:
        print(f"kerr: {exc}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    sys.exit(main())
