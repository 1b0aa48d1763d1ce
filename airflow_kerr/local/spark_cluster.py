"""A Spark standalone cluster on loopback, from the pyspark wheel: one master and N one-core workers.

``spark-class org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker`` from the installed pyspark, bound to
127.0.0.1 on free ports, each worker with one core and a small memory. Jobs
reach it as ``spark://127.0.0.1:<port>``. ``detach=False`` ties every JVM to
this process (stopped on ``stop()``, on leaving the ``with`` block, and by the
kernel if this process dies).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from airflow_kerr.local.broker import free_port, parent_death_signal, stop_process


class SparkClusterUnavailable(RuntimeError):
    """The standalone cluster could not be started; the message says why."""


def spark_home() -> Path:
    """The pyspark package directory, which is a Spark distribution (bin/, jars/)."""
    try:
        import pyspark
    except ImportError as exc:
        raise SparkClusterUnavailable(
            "a Spark cluster needs the 'spark' extra: pip install 'airflow-provider-kerr[spark]'"
        ) from exc
    return Path(pyspark.__file__).parent


class LocalSparkCluster:
    """A standalone master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1."""

    host = "127.0.0.1"

    def __init__(
        self,
        work_dir: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        detach: bool = False,
        start_timeout_s: float = 120.0,
    ) -> None:
        self.work_dir = Path(work_dir).resolve()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.detach = detach
        self.start_timeout_s = start_timeout_s
        self.port = free_port()
        self.ui_port = free_port()
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def _launch(self, name: str, arguments: list[str]) -> None:
        home = spark_home()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": self.host,
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOG_DIR": str(self.work_dir / "logs"),
            # The master and worker daemons themselves need little; executors get the workers' --memory.
            "SPARK_DAEMON_MEMORY": "256m",
        }
        log_path = self.work_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            self.processes.append(
                subprocess.Popen(
                    [str(home / "bin" / "spark-class"), *arguments],
                    cwd=self.work_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=self.detach,
                    preexec_fn=None if self.detach else parent_death_signal(signal.SIGTERM),
                )
            )

    def start(self) -> LocalSparkCluster:
        """Start the master and the workers; return once the master lists every worker ALIVE."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._launch(
                "master",
                ["org.apache.spark.deploy.master.Master", "--host", self.host, "--port", str(self.port),
                 "--webui-port", str(self.ui_port)],
            )  # fmt: skip
            for index in range(self.workers):
                work = self.work_dir / f"worker-{index}"
                work.mkdir(exist_ok=True)
                self._launch(
                    f"worker-{index}",
                    ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", self.host,
                     "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0",
                     "--work-dir", str(work)],
                )  # fmt: skip
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def alive_workers(self) -> int:
        """How many workers the master lists as ALIVE (its JSON status page); ValueError when it is not JSON."""
        import json

        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as response:
            status = json.loads(response.read())
        return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        problem = "no answer yet"
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise SparkClusterUnavailable(
                        f"a Spark process exited with code {process.returncode} while starting; "
                        f"see {self.work_dir}/*.log"
                    )
            try:
                alive = self.alive_workers()
                if alive >= self.workers:
                    return
                problem = f"{alive} of {self.workers} workers registered"
            except OSError as exc:
                problem = str(exc)
            except ValueError as exc:
                # Seen once in a fresh-clone run: right after the master's UI bound its port, /json/ answered
                # the HTML status page. Not ready yet, like no answer; the deadline still bounds the wait.
                problem = f"the master's /json/ page did not answer JSON ({exc})"
            time.sleep(0.5)
        raise SparkClusterUnavailable(
            f"the Spark master at {self.master_url} did not list {self.workers} workers within "
            f"{self.start_timeout_s:.0f} s ({problem}); see {self.work_dir}/*.log"
        )

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop the workers, then the master."""
        for process in reversed(self.processes):
            stop_process(process, timeout_s)
        self.processes = []

    def __enter__(self) -> LocalSparkCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
