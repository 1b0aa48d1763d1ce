"""A running local Airflow UI: a logged-in client of its REST API, and the stop of all it started."""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from airflow_kerr.local.airflow_env import LocalUIError
from airflow_kerr.local.broker import LocalBroker
from airflow_kerr.local.connect_worker import ConnectWorker
from airflow_kerr.local.process import StopReport, StopTarget, stop_stack, tail
from airflow_kerr.local.schema_registry import LocalSchemaRegistry


@dataclass
class LocalUI:
    """A running local Airflow UI and the embedded stack behind it; :meth:`stop` ends all of it."""

    url: str
    username: str
    password: str
    airflow_home: Path
    log_path: Path
    bootstrap_servers: str
    process: subprocess.Popen[bytes] | None = None
    #: The api-server of the tasks' execution API (see :func:`~airflow_kerr.local.ui.start_execution_api`).
    execution_api: subprocess.Popen[bytes] | None = None
    #: Its URL, ``.../execution/``, as the tasks get it ("" before it is known).
    execution_api_url: str = ""
    broker: LocalBroker | None = None
    connect: ConnectWorker | None = None
    schema_registry: LocalSchemaRegistry | None = None
    #: The registry's URL: the stand-in's, or ``SCHEMA_REGISTRY_URL``'s ("" before it is known).
    schema_registry_url: str = ""
    _stopped: bool = field(default=False, repr=False)

    @property
    def connect_url(self) -> str:
        """The Kafka Connect worker's URL, or "" before it is started."""
        return self.connect.url if self.connect is not None else ""

    def token(self, timeout_s: float = 30.0) -> str:
        """A JWT for the REST API, got with the same login the browser uses."""
        response = httpx.post(
            f"{self.url}/auth/token", json={"username": self.username, "password": self.password}, timeout=timeout_s
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token

    def api(self, timeout_s: float = 30.0) -> httpx.Client:
        """An HTTP client for ``/api/v2``, logged in."""
        return httpx.Client(
            base_url=f"{self.url}/api/v2",
            headers={"Authorization": f"Bearer {self.token()}"},
            timeout=timeout_s,
        )

    def wait_for_run(self, dag_id: str, run_id: str, task_id: str, timeout_s: float = 180.0) -> dict[str, Any]:
        """Poll the REST API until the run succeeds and return it; raise :class:`LocalUIError` with ``task_id``'s log
        and the end of Airflow's log when it fails or is still going after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self.api() as api:
            while True:
                run: dict[str, Any] = api.get(f"/dags/{dag_id}/dagRuns/{run_id}").raise_for_status().json()
                if run["state"] == "success":
                    return run
                if run["state"] == "failed" or time.monotonic() > deadline:
                    log = api.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/1")
                    raise LocalUIError(
                        f"run {dag_id}/{run_id} is {run['state']} after {timeout_s:.0f} s at most; "
                        f"log of {task_id}:\n{log.text[-4000:]}\nAirflow log:\n{self.log_tail(40)}"
                    )
                time.sleep(2)

    def log_tail(self, lines: int = 60) -> str:
        """The end of the standalone log, for error messages."""
        return tail(self.log_path, lines)

    def stop(self) -> StopReport | None:
        """Stop Airflow and Kafka Connect at once, then the broker, all within 10 s (see :func:`stop_stack`).

        Only standalone gets the SIGINT (Ctrl-C): it stops its components itself, and a
        scheduler that got the SIGINT too would hang waiting for its executor's workers.
        Returns the stop's report (None when stopped already): what had to be killed, if anything.
        """
        if self._stopped:
            return None
        self._stopped = True
        clients = [StopTarget("airflow", self.process, signal.SIGINT)] if self.process is not None else []
        if self.execution_api is not None:
            clients.append(StopTarget("airflow-execution-api", self.execution_api, signal.SIGTERM))
        clients += self.connect.stop_targets("kafka-connect") if self.connect is not None else []
        clients += self.schema_registry.stop_targets("schema-registry") if self.schema_registry is not None else []
        servers = self.broker.stop_targets("broker") if self.broker is not None else []
        report = stop_stack(clients, servers)
        for launcher in (self.connect, self.schema_registry, self.broker):
            if launcher is not None:
                launcher.forget()
        return report

    def __enter__(self) -> LocalUI:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
