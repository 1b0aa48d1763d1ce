"""Fixtures for Kafka Connect control: the REST stand-in on loopback, sink connectors on the real test broker.

The stand-in consumes from the session broker (``kafka_bootstrap``). State-only
tests never wait for a consumer to join its group, so they stay fast; tests that
need records consumed wait for the group join (a few seconds on Tansu).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_kerr.local.connect import SINK_CONNECTOR_CLASS, ConnectStandIn

TRANSITION_DELAY_S = 0.2


def _wait_until(predicate: Callable[[], Any], timeout_s: float = 20.0, interval_s: float = 0.05) -> Any:
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
    """``wait_until(predicate, timeout_s=20)``: poll until truthy, or fail the test with the last value."""
    return _wait_until


def _states(standin: ConnectStandIn, name: str) -> tuple[str, list[str]]:
    """(connector state, task states) straight from the stand-in, bypassing HTTP."""
    status = standin.status(name)
    return status["connector"]["state"], [t["state"] for t in status["tasks"]]


@pytest.fixture
def connect(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ConnectStandIn]:
    """A started stand-in with a 0.2 s transition delay, stopped after the test."""
    standin = ConnectStandIn(kafka_bootstrap, tmp_path / "connect", transition_delay_s=TRANSITION_DELAY_S).start()
    yield standin
    standin.stop(close_timeout_s=0.5)


@pytest.fixture
def slow_connect(kafka_bootstrap: str, tmp_path: Path) -> Iterator[ConnectStandIn]:
    """A stand-in whose state changes take 3 s to show, for timeouts and not-yet-there statuses."""
    standin = ConnectStandIn(kafka_bootstrap, tmp_path / "slow-connect", transition_delay_s=3.0).start()
    yield standin
    standin.stop(close_timeout_s=0.5)


@pytest.fixture
def connect_conn(connect: ConnectStandIn, monkeypatch: pytest.MonkeyPatch) -> str:
    """``kafka_connect_default`` pointing at the stand-in, as an environment-variable connection."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT",
        json.dumps(
            {
                "conn_type": "kafka_connect",
                "host": connect.host,
                "port": connect.port,
                "schema": "http",
                "extra": {"timeout": 15},
            }
        ),
    )
    return "kafka_connect_default"


@pytest.fixture
def sink(connect: ConnectStandIn, create_topic: Callable[..., str]) -> Callable[..., tuple[str, str]]:
    """Create a JSON-lines sink on a fresh topic and wait until it reads RUNNING; returns (connector, topic)."""

    def make(
        tasks: int = 1, partitions: int = 1, standin: ConnectStandIn | None = None, **config: str
    ) -> tuple[str, str]:
        target = standin or connect
        suffix = uuid.uuid4().hex[:8]
        topic = create_topic(f"connect-in-{suffix}", partitions)
        name = f"sink-{suffix}"
        target.add_connector(
            name,
            {
                "connector.class": SINK_CONNECTOR_CLASS,
                "topics": topic,
                "file": f"{name}.jsonl",
                "tasks.max": str(tasks),
                **config,
            },
        )
        _wait_until(lambda: target._connectors[name].status_known and _states(target, name)[0] == "RUNNING")
        _wait_until(lambda: _states(target, name)[1] == ["RUNNING"] * tasks)
        return name, topic

    return make


@pytest.fixture
def produce(kafka_bootstrap: str) -> Callable[..., None]:
    """Produce values to a topic with one flush per record (Tansu's ListOffsets is only exact that way)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "log_level": 0})

    def send(topic: str, values: list[str], partition: int | None = None) -> None:
        for value in values:
            if partition is None:
                producer.produce(topic, value=value.encode())
            else:
                producer.produce(topic, value=value.encode(), partition=partition)
            producer.flush(10)

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
