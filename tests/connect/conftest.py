"""Fixtures for Kafka Connect control: real Kafka Connect on the session broker, behind a fault proxy.

Every test talks to the module's real Connect worker (``connect_worker``: Kafka
4.3.0 by default; ``make test`` runs these again on 3.9.0) through
:class:`FaultProxy`, a small HTTP proxy on loopback that forwards each request
unchanged and records it. What real Connect does not produce on
demand is injected by the proxy around it, never by a second implementation:
a rebalance window (409 with Connect's own message), a worker busy reading its
internal topics (500 ``Request timed out`` after a delay), a worker whose
status lags behind a state change, a body that is not JSON, and TLS (the proxy
terminates HTTPS with a throwaway CA in front of the plain-HTTP worker).

Failures are real: a task fails on a malformed record (``errors.tolerance=none``,
JSON values), and a connector fails to start when its configuration, resolved
through Kafka's ``FileConfigProvider`` at start time, becomes invalid.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import json
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

import httpx
import pytest

from airflow_kerr.local.connect_worker import ConnectWorker, connector_config

STALE_CONFIG_MESSAGE = (
    "Cannot complete request momentarily due to stale configuration (typically caused by a concurrent config change)"
)
#: Bytes the worker's JsonConverter cannot read: a task with errors.tolerance=none fails on them.
MALFORMED_VALUE = b"{not json"
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "host", "content-length"}
#: Writes a rebalancing worker refuses with 409 (pause and resume write the config topic directly and do not).
_CONFLICTING_WRITES = {"POST", "PUT", "PATCH", "DELETE"}


def _wait_until(predicate: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test with its last value otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s} s (last value {value!r})")
        time.sleep(interval_s)


@pytest.fixture(name="wait_until")
def wait_until_fixture() -> Callable[..., Any]:
    """``wait_until(predicate, timeout_s=30)``: poll until truthy, or fail the test with the last value."""
    return _wait_until


class RecordedRequest(NamedTuple):
    method: str
    path: str
    query: str
    headers: dict[str, str]


@dataclass
class _Fault:
    """One injected fault: applies to matching requests until ``until`` (monotonic)."""

    until: float
    status: int = 0
    body: bytes = b""
    content_type: str = "application/json"
    delay_s: float = 0.0
    writes_only: bool = False
    path_suffix: str = ""


class FaultProxy:
    """A loopback HTTP(S) proxy in front of real Kafka Connect that records requests and injects faults."""

    def __init__(self, upstream: str, ssl_context: ssl.SSLContext | None = None) -> None:
        split = urlsplit(upstream)
        self.upstream_host, self.upstream_port = split.hostname or "127.0.0.1", split.port or 80
        self.requests: list[RecordedRequest] = []
        self._faults: list[_Fault] = []
        self._status_lag_s = 0.0
        self._lagging: dict[str, tuple[float, int, bytes]] = {}
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if ssl_context is not None:
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self.scheme = "https" if ssl_context else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    host = "127.0.0.1"

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # faults ----------------------------------------------------------------------------------------

    def inject_rebalance(self, duration_s: float, message: str = STALE_CONFIG_MESSAGE) -> None:
        """For ``duration_s``, answer writes a rebalancing worker refuses with 409 and Connect's message."""
        body = json.dumps({"error_code": 409, "message": message}).encode()
        self._add(_Fault(time.monotonic() + duration_s, 409, body, writes_only=True))

    def inject_request_timeout(self, duration_s: float, delay_s: float = 0.0) -> None:
        """For ``duration_s``, answer ``/connectors`` requests after ``delay_s`` with 500 ``Request timed out``.

        A real worker answers so after 90 s while it reads to the end of its internal topics.
        """
        began = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
        message = (
            f"Request timed out. The worker is currently reading to the end of internal topics, which began at {began}"
        )
        body = json.dumps({"error_code": 500, "message": message}).encode()
        self._add(_Fault(time.monotonic() + duration_s, 500, body, delay_s=delay_s, path_suffix=""))

    def inject_body(self, duration_s: float, status: int, body: bytes, content_type: str, path_suffix: str) -> None:
        """For ``duration_s``, answer requests whose path ends with ``path_suffix`` with this raw response."""
        self._add(_Fault(time.monotonic() + duration_s, status, body, content_type, path_suffix=path_suffix))

    def inject_status_lag(self, lag_s: float) -> None:
        """From now on, a connector's ``/status`` shows what it showed before a write for ``lag_s`` after it."""
        self._status_lag_s = lag_s

    def _add(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _fault_for(self, method: str, path: str) -> _Fault | None:
        now = time.monotonic()
        with self._lock:
            self._faults = [f for f in self._faults if f.until > now]
            for fault in self._faults:
                if fault.writes_only and (method not in _CONFLICTING_WRITES or path.endswith(("/pause", "/resume"))):
                    continue
                if not path.startswith("/connectors") or not path.endswith(fault.path_suffix):
                    continue
                return fault
        return None

    # forwarding ------------------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        split = urlsplit(handler.path)
        method = handler.command
        self.requests.append(RecordedRequest(method, split.path, split.query, dict(handler.headers.items())))
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        fault = self._fault_for(method, split.path)
        if fault is not None:
            time.sleep(fault.delay_s)
            self._reply(handler, fault.status, fault.body, {"Content-Type": fault.content_type})
            return
        lagging = self._lagging_status(method, split.path)
        if lagging is not None:
            self._reply(handler, lagging[0], lagging[1], {"Content-Type": "application/json"})
            return
        lags = method != "GET" and self._status_lag_s and split.path.count("/") >= 3
        before = self._status_before_write(split.path) if lags else None
        status, payload, headers = self._forward(method, handler.path, dict(handler.headers.items()), body)
        if before is not None:
            # The lag runs from the write's answer, not from its arrival: on a loaded machine the write
            # itself may take seconds, and a client's wait only starts once it has the answer.
            with self._lock:
                self._lagging[self._connector_of(split.path)] = (time.monotonic() + self._status_lag_s, *before)
        self._reply(handler, status, payload, headers)

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, dict[str, str]]:
        connection = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
            connection.request(method, path, body=body or None, headers=sent)
            response = connection.getresponse()
            payload = response.read()
            kept = {k: v for k, v in response.getheaders() if k.lower() in {"content-type", "location"}}
            return response.status, payload, kept
        finally:
            connection.close()

    def _connector_of(self, path: str) -> str:
        return path.split("/")[2]

    def _status_before_write(self, path: str) -> tuple[int, bytes]:
        """The status to keep showing: from before the first write of a lag window still open, else now's."""
        name = self._connector_of(path)
        with self._lock:
            active = self._lagging.get(name)
        if active is not None and active[0] >= time.monotonic():
            return active[1], active[2]
        status, payload, _ = self._forward("GET", f"/connectors/{name}/status", {}, b"")
        return status, payload

    def _lagging_status(self, method: str, path: str) -> tuple[int, bytes] | None:
        if method != "GET" or not path.endswith("/status") or path.count("/") != 3:
            return None
        with self._lock:
            entry = self._lagging.get(self._connector_of(path))
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1], entry[2]

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if body:
            handler.wfile.write(body)


@dataclass
class RealConnect:
    """The module's real Connect worker seen through a per-test fault proxy, with what tests do to it.

    ``url``/``host``/``port`` are the proxy's (what the code under test talks to);
    the helpers below talk to the worker directly, so they are not recorded.
    """

    worker: ConnectWorker
    proxy: FaultProxy
    producer_config: dict[str, Any]
    config_dir: Path
    created: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.proxy.url

    @property
    def host(self) -> str:
        return self.proxy.host

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.proxy.requests

    def inject_rebalance(self, duration_s: float, message: str = STALE_CONFIG_MESSAGE) -> None:
        self.proxy.inject_rebalance(duration_s, message)

    def inject_request_timeout(self, duration_s: float, delay_s: float = 0.0) -> None:
        self.proxy.inject_request_timeout(duration_s, delay_s)

    def _http(self) -> httpx.Client:
        return httpx.Client(base_url=self.worker.url, timeout=60)

    def status(self, name: str) -> dict[str, Any]:
        with self._http() as client:
            response = client.get(f"/connectors/{name}/status")
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result

    def states(self, name: str) -> tuple[str, list[str]]:
        """(connector state, task states); ("UNKNOWN", []) while the worker has no status yet (404 after a create)."""
        try:
            status = self.status(name)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code != 404:
                raise
            return "UNKNOWN", []
        return status["connector"]["state"], [t["state"] for t in status["tasks"]]

    def add_connector(self, name: str, config: dict[str, str]) -> None:
        """Create a connector on the worker (recorded for deletion after the test)."""
        self.created.append(name)
        with self._http() as client:
            response = client.post("/connectors", json={"name": name, "config": config})
            assert response.status_code == 201, response.text

    def set_target(self, name: str, state: str) -> None:
        """Ask the worker for a target state as a user would (pause, resume or stop)."""
        verb = {"PAUSED": "pause", "RUNNING": "resume", "STOPPED": "stop"}[state]
        with self._http() as client:
            client.put(f"/connectors/{name}/{verb}").raise_for_status()

    def delete(self, name: str) -> None:
        with self._http() as client:
            response = client.delete(f"/connectors/{quote(name, safe='')}")
            assert response.status_code in (204, 404), response.text

    def topic_of(self, name: str) -> str:
        with self._http() as client:
            return str(client.get(f"/connectors/{name}/config").json()["topics"])

    def fail_task(self, name: str, task_id: int) -> dict[str, Any]:
        """Make task ``task_id`` FAILED for real: a malformed record on the partition it reads."""
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        # After a restart the tasks' consumers rejoin their group one by one, and for a moment one task may
        # read every partition: wait until this task reads its own, so the malformed record fails it.
        admin = AdminClient(self.producer_config)
        seen: dict[int, list[int]] = {}

        def reads_its_partition() -> bool:
            seen.clear()
            seen.update(_assignment(admin, f"connect-{name}"))
            return task_id in seen.get(task_id, [])

        for _ in range(REJOIN_NUDGES):
            try:
                _wait_until(reads_its_partition, timeout_s=20)
                break
            except pytest.fail.Exception:
                self.nudge_rebalance(name, task_id)
        else:
            status = self.status(name)
            pytest.fail(f"task {task_id} never read partition {task_id}: group assignment {seen}, status {status}")
        producer = Producer(self.producer_config)
        producer.produce(self.topic_of(name), value=MALFORMED_VALUE, partition=task_id)
        assert producer.flush(30) == 0, "the broker did not take the records within 30 s"
        return _wait_until(lambda: (s := self.status(name))["tasks"][task_id]["state"] == "FAILED" and s)

    def nudge_rebalance(self, name: str, task_id: int) -> None:
        """Restart ``task_id`` and every task the broker failed, so the group rebalances again.

        noida-db 0.2.3, when members rejoin within milliseconds of each other, may hold a
        rebalance open for a member that left (see QUICK_REJOIN) or answer a member's SyncGroup
        with an empty assignment, which fails that task with Kafka's "insufficient bytes
        available to read assignment". Neither is the Connect behaviour a test is about.
        """
        tasks = self.status(name)["tasks"]
        failed_by_broker = [t["id"] for t in tasks if BROKER_SYNC_DEFECT in str(t.get("trace", ""))]
        with self._http() as client:
            for task in sorted({task_id, *failed_by_broker}):
                client.post(f"/connectors/{name}/tasks/{task}/restart")

    def tolerance_file(self, name: str) -> Path:
        return self.config_dir / f"{name}.properties"

    def set_tolerance(self, name: str, tolerance: str) -> None:
        """What the connector's ``errors.tolerance`` resolves to the next time it or a task starts."""
        self.tolerance_file(name).write_text(f"tolerance={tolerance}\n")

    def fail_connector(self, name: str) -> dict[str, Any]:
        """Make the connector instance FAILED for real: restart it while its resolved config is invalid.

        The bad value is put back right after, so a later restart brings it up again.
        """
        self.set_tolerance(name, "bogus")
        with self._http() as client:
            client.post(f"/connectors/{name}/restart")
        failed = _wait_until(lambda: (s := self.status(name))["connector"]["state"] == "FAILED" and s)
        self.set_tolerance(name, "none")
        return failed

    def output_file(self, name: str) -> Path:
        return self.worker.output_file(f"{name}.txt")

    def output_lines(self, name: str) -> list[str]:
        path = self.output_file(name)
        return path.read_text().splitlines() if path.exists() else []

    def cleanup(self) -> None:
        for name in self.created:
            self.delete(name)


@pytest.fixture
def connect(connect_worker: ConnectWorker, kafka_bootstrap: str, tmp_path: Path) -> Iterator[RealConnect]:
    """The real worker behind a fresh fault proxy; connectors the test created are deleted afterwards."""
    proxy = FaultProxy(connect_worker.url)
    real = RealConnect(connect_worker, proxy, {"bootstrap.servers": kafka_bootstrap, "log_level": 0}, tmp_path)
    yield real
    proxy.close()
    real.cleanup()


@pytest.fixture
def slow_connect(connect: RealConnect) -> RealConnect:
    """The same worker, but a state change shows in ``/status`` only 3 s after it was asked for."""
    connect.proxy.inject_status_lag(3.0)
    return connect


def connection_json(host: str, port: int, schema: str = "http", **extra: Any) -> str:
    return json.dumps({"conn_type": "kafka_connect", "host": host, "port": port, "schema": schema, "extra": extra})


@pytest.fixture
def connect_conn(connect: RealConnect, monkeypatch: pytest.MonkeyPatch) -> str:
    """``kafka_connect_default`` pointing at the proxy in front of real Connect, as an environment variable."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT", connection_json(connect.host, connect.port, timeout=15))
    return "kafka_connect_default"


def _assignment(admin: Any, group: str) -> dict[int, list[int]]:
    """Task id to assigned partitions, from the sink's consumer group (client ids end in ``-<task id>``)."""
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    result: dict[int, list[int]] = {}
    for member in described.members:
        task = int(member.client_id.rsplit("-", 1)[1])
        result[task] = sorted(tp.partition for tp in member.assignment.topic_partitions)
    return result


#: A rebalance of a sink's group is given seconds, not minutes. When tasks are restarted within a few
#: hundred milliseconds of each other, noida-db 0.2.3 has been seen to leave the group without members or
#: assignment for minutes while every task reads RUNNING: it holds the rebalance open for a member that
#: already left, up to the rebalance timeout, which is ``max.poll.interval.ms`` (Connect's default: 5
#: minutes). The session timeout stays at its default, so a task starved of CPU is not taken as gone.
#: Connect's default client override policy (``All``) lets a connector set this.
QUICK_REJOIN = {"consumer.override.max.poll.interval.ms": "20000"}

#: How many times fail_task restarts a task whose consumer does not get its partition within 20 s.
REJOIN_NUDGES = 3

#: What Kafka's consumer says when the broker's SyncGroup answer holds no assignment for it.
BROKER_SYNC_DEFECT = "insufficient bytes available to read assignment"


@pytest.fixture
def sink(
    connect: RealConnect, create_topic: Callable[..., str], kafka_bootstrap: str
) -> Callable[..., tuple[str, str]]:
    """Create a FileStreamSink on a fresh topic (or on ``topic``) and wait until it runs; returns (connector, topic).

    A second sink on another's topic is a sentinel: it reads the same records with a group
    of its own, so what it has written proves those records could be read by then.

    With several tasks it also waits until task ``i`` reads partition ``i``, so a
    malformed record on a partition fails the task a test names. Its
    ``errors.tolerance`` is resolved from a file at start time (none by default).
    """
    from confluent_kafka.admin import AdminClient

    def make(tasks: int = 1, partitions: int = 1, topic: str | None = None, **config: str) -> tuple[str, str]:
        suffix = uuid.uuid4().hex[:8]
        topic = topic or create_topic(f"connect-in-{suffix}", partitions)
        name = f"sink-{suffix}"
        connect.set_tolerance(name, "none")
        tolerance = f"${{file:{connect.tolerance_file(name)}:tolerance}}"
        connect.add_connector(
            name,
            connector_config(
                topic,
                f"{name}.txt",
                **{"tasks.max": str(tasks), "errors.tolerance": tolerance, **QUICK_REJOIN, **config},
            ),
        )
        _wait_until(lambda: connect.states(name) == ("RUNNING", ["RUNNING"] * tasks), timeout_s=90)
        if tasks > 1:
            admin = AdminClient({"bootstrap.servers": kafka_bootstrap, "log_level": 0})
            expected = {task: [task] for task in range(tasks)}
            _wait_until(lambda: _assignment(admin, f"connect-{name}") == expected)
        return name, topic

    return make


@pytest.fixture
def produce(kafka_bootstrap: str) -> Callable[..., None]:
    """Produce values to a topic as JSON strings (what the worker's JsonConverter reads)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "log_level": 0})

    def send(topic: str, values: list[str], partition: int | None = None) -> None:
        for value in values:
            encoded = json.dumps(value).encode()
            if partition is None:
                producer.produce(topic, value=encoded)
            else:
                producer.produce(topic, value=encoded, partition=partition)
        assert producer.flush(30) == 0, "the broker did not take the records within 30 s"

    return send


@dataclass
class FakeTaskInstance:
    """Just enough of a task instance for ``op.execute(context)``: it records XCom pushes."""

    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@pytest.fixture
def context() -> dict[str, Any]:
    """A minimal execution context: a task instance that records XCom pushes."""
    ti = FakeTaskInstance()
    return {"ti": ti, "task_instance": ti}


@dataclass(frozen=True)
class Tls:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it."""

    ca_file: Path
    server_context: ssl.SSLContext


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory = tmp_path_factory.mktemp("tls")
    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, issuer: x509.Name | None, issuer_key: Any, key: Any, ca: bool) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            ).add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = build("kerr test CA", None, ca_key, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = build("127.0.0.1", ca_cert.subject, ca_key, server_key, ca=False)
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file = directory / "server.pem"
    cert_file.write_bytes(
        server_cert.public_bytes(serialization.Encoding.PEM)
        + server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file)
    return Tls(ca_file=ca_file, server_context=context)
