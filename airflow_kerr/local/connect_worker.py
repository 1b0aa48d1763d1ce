"""Start and stop a real Apache Kafka Connect worker (distributed mode) beside the embedded broker.

The worker keeps its internal topics on the broker it is given (names derived
from its group, so several workers can share one broker), serves its REST API
on a free loopback port, and has Kafka's FileStreamSink/Source connectors on its
class path. Files a FileStreamSink writes with a relative ``file`` land in the
worker's directory.

``detach=False`` (tests, the demo) ties the JVM's life to this process: it is
stopped on ``stop()``, on leaving the ``with`` block, and by the kernel if this
process dies. ``detach=True`` (``kerr local up``) lets it outlive the caller.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from airflow_kerr.local.broker import free_port
from airflow_kerr.local.connect_runtime import (
    ConnectRuntimeUnavailable,
    connect_version,
    ensure_connect_runtime,
    java_binary,
    plugin_path,
)
from airflow_kerr.local.process import CLIENTS_GRACE_S, Launcher, tail

#: The embedded worker's niceness. noida-db, the default embedded broker, answers a fetch at once
#: instead of waiting ``fetch.max.wait.ms`` for data, so an idle worker's consumers poll it about
#: 12,000 times a second (``benchmarks/idle_fetch.py``: 11.8k fetches/s from one idle consumer); at this niceness
#: that polling only takes CPU that Spark, Airflow and the tests do not want.
WORKER_NICENESS = 10
#: Linux's scheduler autogroup of the calling process: its niceness weighs the whole group against the others.
AUTOGROUP = Path("/proc/self/autogroup")


def _yielding_the_cpu(then: Callable[[], None] | None) -> Callable[[], None]:
    """A ``preexec_fn`` that lowers the child's priority by :data:`WORKER_NICENESS`, then runs ``then``.

    With Linux's autogroup scheduling on (the default of most distributions), a niceness
    counts only among the processes of one session: the CPU is first shared out between
    sessions. ``airflow standalone`` runs in a session of its own, so a worker niced in the
    caller's session still took half the machine from it (seen: the worker at 70-190 % CPU
    while the api-server, scheduler and triggerer got 25 % each, and DAG imports timed out).
    The worker therefore gets a session of its own, niced as a group.
    """

    def lower_priority() -> None:
        os.nice(WORKER_NICENESS)
        if os.getsid(0) != os.getpid():
            os.setsid()
        # No autogroup scheduling (another OS, or a kernel without it): the niceness above is all there is.
        with contextlib.suppress(OSError):
            AUTOGROUP.write_text(str(WORKER_NICENESS))
        if then is not None:
            then()

    return lower_priority


#: Kafka's file sink: writes each record's value, one per line, to the file named by ``file``.
FILE_SINK_CLASS = "org.apache.kafka.connect.file.FileStreamSinkConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
STRING_CONVERTER = "org.apache.kafka.connect.storage.StringConverter"
#: Small heap and the serial collector: the embedded worker runs a few file sinks on a 2-core machine.
JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")

_LOG4J = """\
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=org.apache.kafka
logger.kafka.level=WARN
logger.connect.name=org.apache.kafka.connect
logger.connect.level=INFO
logger.reflections.name=org.reflections
logger.reflections.level=ERROR
"""


def worker_properties(
    bootstrap_servers: str, group_id: str, listeners: str, overrides: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A distributed worker's configuration for a single-node development broker.

    Internal topics are named after the group and have one replica and one
    partition each; sink offsets are committed every second (Connect's default is
    60 s) so that consumption shows in the group's offsets while one watches; a
    leaving worker's tasks are reassigned at once (no scheduled rebalance delay).
    """
    return {
        "bootstrap.servers": bootstrap_servers,
        "group.id": group_id,
        "listeners": listeners,
        "key.converter": STRING_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": "false",
        "config.storage.topic": f"{group_id}-configs",
        "offset.storage.topic": f"{group_id}-offsets",
        "status.storage.topic": f"{group_id}-status",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "status.storage.partitions": "1",
        "offset.flush.interval.ms": "1000",
        "scheduled.rebalance.max.delay.ms": "0",
        "connector.client.config.override.policy": "All",
        "plugin.discovery": "service_load",
        "config.providers": "file",
        "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
        **(overrides or {}),
    }


class ConnectWorker(Launcher):
    """One Kafka Connect worker JVM on a free loopback port, in distributed mode.

    It runs niced in a session of its own, also with ``detach=False`` (see :func:`_yielding_the_cpu`).
    """

    #: A clean stop lets the worker leave its group: about 3.4 s here while its broker runs.
    stop_timeout_s = CLIENTS_GRACE_S

    def __init__(
        self,
        bootstrap_servers: str,
        work_dir: Path,
        *,
        port: int | None = None,
        group_id: str | None = None,
        overrides: Mapping[str, str] | None = None,
        detach: bool = False,
        start_timeout_s: float = 90.0,
        version: str | None = None,
    ) -> None:
        super().__init__(detach=detach, start_timeout_s=start_timeout_s)
        self.bootstrap_servers = bootstrap_servers
        self.work_dir = Path(work_dir).resolve()
        self.port = port or free_port()
        self.group_id = group_id or f"kerr-connect-{uuid.uuid4().hex[:8]}"
        self.overrides = dict(overrides or {})
        #: The Kafka Connect version (``$KERR_CONNECT_VERSION``, else the default), checked here, before any work.
        self.version = connect_version(version).kafka

    host = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "connect.log"

    def output_file(self, file: str) -> Path:
        """Where a FileStreamSink configured with ``file`` writes (relative names are under the work dir)."""
        return self.work_dir / file

    def _launch(self) -> None:
        """Write the worker's configuration and start the JVM."""
        runtime = ensure_connect_runtime(version=self.version)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        properties = worker_properties(self.bootstrap_servers, self.group_id, f"http://{self.host}:{self.port}")
        plugins = plugin_path(runtime)
        if plugins is not None:
            properties["plugin.path"] = str(plugins)
        properties.update(self.overrides)
        (self.work_dir / "worker.properties").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        (self.work_dir / "log4j2.properties").write_text(_LOG4J)
        command = [
            java_binary(),
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile=file:{self.work_dir / 'log4j2.properties'}",
            "-cp",
            f"{runtime}/*",
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(self.work_dir / "worker.properties"),
        ]
        self._spawn(command, log_path=self.log_path, cwd=self.work_dir)

    def _preexec_fn(self) -> Callable[[], None] | None:
        """The launcher's ``preexec_fn``, after lowering the worker's priority in a session of its own."""
        return _yielding_the_cpu(super()._preexec_fn())

    def _not_ready_because(self) -> str | None:
        """Ask ``GET /health`` (KIP-1017: 200 once the worker has joined its group and read its topics)."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return None if response.status == 200 else f"/health answered {response.status}"
        except urllib.error.HTTPError as exc:
            return f"/health answered {exc.code}: {exc.read()[:300]!r}"
        except OSError as exc:
            return str(exc)

    def _exited(self, process: subprocess.Popen[bytes]) -> Exception:
        return ConnectRuntimeUnavailable(
            f"Kafka Connect exited with code {process.returncode} while starting; "
            f"last lines of {self.log_path}:\n{self.log_tail()}"
        )

    def _timed_out(self, problem: str) -> Exception:
        return ConnectRuntimeUnavailable(
            f"Kafka Connect at {self.url} was not ready within {self.start_timeout_s:.0f} s ({problem}); "
            f"last lines of {self.log_path}:\n{self.log_tail()}"
        )

    def rest(self, method: str, path: str, body: object = None) -> object:
        """One REST call to this worker (urllib: ``local/`` needs neither httpx nor Airflow); JSON in and out."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}", data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            payload = response.read()
        return json.loads(payload) if payload else None

    def add_connector(self, name: str, config: Mapping[str, str], timeout_s: float = 60.0) -> None:
        """Create a connector and wait until it and its tasks run."""
        self.rest("POST", "/connectors", {"name": name, "config": dict(config)})
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                status = self.status(name)
                tasks = [task["state"] for task in status["tasks"]]
                if status["connector"]["state"] == "RUNNING" and tasks and set(tasks) == {"RUNNING"}:
                    return
            except urllib.error.HTTPError as exc:
                if exc.code != 404:  # 404 until the worker has written the first status
                    raise
                status = {"status": 404}
            if time.monotonic() > deadline:
                raise ConnectRuntimeUnavailable(f"connector {name} did not start within {timeout_s:.0f} s: {status}")
            time.sleep(0.1)

    def status(self, name: str) -> dict[str, Any]:
        """``GET /connectors/{name}/status``."""
        result = self.rest("GET", f"/connectors/{name}/status")
        assert isinstance(result, dict)
        return result

    def log_tail(self, lines: int = 30) -> str:
        """The end of the worker's log, for error messages."""
        return tail(self.log_path, lines)

    def describe(self) -> dict[str, object]:
        """What ``kerr local up`` records about this worker."""
        return {
            "pid": self.pid,
            "marker": str(self.work_dir / "worker.properties"),
            "url": self.url,
            "port": self.port,
            "log": str(self.log_path),
            "group_id": self.group_id,
        }


def connector_config(topic: str, file: str, **overrides: str) -> dict[str, str]:
    """A FileStreamSink reading ``topic`` into ``file`` (JSON values, one per line), with ``overrides``."""
    return {"connector.class": FILE_SINK_CLASS, "topics": topic, "file": file, "tasks.max": "1", **overrides}
