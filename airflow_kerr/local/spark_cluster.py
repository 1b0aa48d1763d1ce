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
import subprocess
import urllib.request
from pathlib import Path

from airflow_kerr.local.broker import free_port
from airflow_kerr.local.process import CLIENTS_GRACE_S, Launcher


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


class LocalSparkCluster(Launcher):
    """A standalone master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1."""

    host = "127.0.0.1"
    #: The JVMs get as long to stop cleanly as the Connect worker's, all three at once.
    stop_timeout_s = CLIENTS_GRACE_S
    #: The master's status page is a JVM's web UI: asked twice a second, not five times.
    poll_interval_s = 0.5

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
        super().__init__(detach=detach, start_timeout_s=start_timeout_s)
        self.work_dir = Path(work_dir).resolve()
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    def _spark_class(self, name: str, arguments: list[str]) -> None:
        """Start ``spark-class`` with ``arguments`` (it execs the JVM), logging to ``<work dir>/<name>.log``."""
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
        command = [str(home / "bin" / "spark-class"), *arguments]
        self._spawn(command, log_path=self.work_dir / f"{name}.log", cwd=self.work_dir, env=env)

    def _launch(self) -> None:
        """Start the master, then the workers (ready once the master lists every worker ALIVE)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._spark_class(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", self.host, "--port", str(self.port),
             "--webui-port", str(self.ui_port)],
        )  # fmt: skip
        for index in range(self.workers):
            work = self.work_dir / f"worker-{index}"
            work.mkdir(exist_ok=True)
            self._spark_class(
                f"worker-{index}",
                ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", self.host,
                 "--cores", str(self.cores), "--memory", self.memory, "--webui-port", "0",
                 "--work-dir", str(work)],
            )  # fmt: skip

    def alive_workers(self) -> int:
        """How many workers the master lists as ALIVE (its JSON status page); ValueError when it is not JSON."""
        import json

        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as response:
            status = json.loads(response.read())
        return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")

    def _not_ready_because(self) -> str | None:
        try:
            alive = self.alive_workers()
        except OSError as exc:
            return str(exc)
        except ValueError as exc:
            # Seen once in a fresh-clone run: right after the master's UI bound its port, /json/ answered
            # the HTML status page. Not ready yet, like no answer; the deadline still bounds the wait.
            return f"the master's /json/ page did not answer JSON ({exc})"
        return None if alive >= self.workers else f"{alive} of {self.workers} workers registered"

    def _exited(self, process: subprocess.Popen[bytes]) -> Exception:
        return SparkClusterUnavailable(
            f"a Spark process exited with code {process.returncode} while starting; see {self.work_dir}/*.log"
        )

    def _timed_out(self, problem: str) -> Exception:
        return SparkClusterUnavailable(
            f"the Spark master at {self.master_url} did not list {self.workers} workers within "
            f"{self.start_timeout_s:.0f} s ({problem}); see {self.work_dir}/*.log"
        )
