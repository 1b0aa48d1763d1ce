"""Hundreds of watches on one triggerer: CPU, memory, broker connections, event and pause latency, 1 vs 100 + 100.

A real ``airflow triggerer`` (Airflow's own CLI, a throwaway ``AIRFLOW_HOME`` on SQLite, no
scheduler: the asset events it stores are what is measured) runs the asset watchers of DAGs
generated into a temporary dags folder, against the embedded broker (noida-db behind the
fetch shim, as the local stack runs it) and a real Kafka Connect worker (distributed mode,
niced, as ``tests/conftest.py`` and the local stack start it; ``kafka_connect_default`` points
at it). Four set-ups, each with its own metadata DB:

- ``empty``: no DAGs; the triggerer's own cost, the baseline for memory;
- ``one``: one DAG on a DLQ asset and one on a tolerance breach asset (metrics mode);
- ``hundred``: 100 DLQ assets (each its own topic) and 100 tolerance breach assets (each its own
  pipeline on ``kerr.metrics``), each a DAG of its own: 200 watches;
- ``hundred_unshared``: the same 200 with ``KERR_SHARED_WATCH_CLIENTS=0``, each watch with
  its own clients as before the shared clients (``airflow_kerr/kafka/shared_clients.py``).

Every tolerance watch carries ``pause_on_breach`` as a user writes it, naming its pipeline's own
connector (``<set-up>-sink-<i>``), so on the triggerer each watch prepares its Connect client
when it opens. Only the connector of the pipeline a sample breaches is live, created (and seen
holding its partition) just before the breach and deleted after PAUSED: 100 live sinks would
keep the 2 cores busy with their consumers. It is Kafka's FileStreamSink on an idle topic, the
sink ``watcher_latency.py`` pauses; through the fetch shim an idle one costs little
(``idle_stack.py``). The worker runs while every set-up is measured, ``empty`` too, and is not
in the triggerer's figures (CPU, RSS and connections are the triggerer's process tree).

``hundred_unshared`` runs in ``--unshared-rounds`` only (round 3 by default): its events take
minutes (see the results), which five rounds of it would not fit in a quiet window.

Every watch uses the defaults a DAG author gets (``poll_interval`` 5 s); the tolerance
window is 3 s so a breach can be undone quickly. Each round starts each set-up's
triggerer afresh (in a rotating order), waits until the triggerer took all its triggers
and a settle time passed, then measures, on the triggerer's process tree (the supervisor and
its trigger runner): CPU over an idle span, RSS, TCP connections to the broker's port and
librdkafka clients (threads named ``rdk:main``, one per consumer, producer or admin client);
then ``--samples`` events of each kind, one at a time: a dead letter written (flushed) → the
DLQ asset's event stored in the metadata DB; a breaching metrics record written → the breach
asset's event stored, → Connect accepted the pause (``paused_on_breach.asked_at_ms`` in the
event), and → the connector, then its task, read PAUSED (``/status`` polled every 50 ms, as
``watcher_latency.py`` does; ``stack_waits.py`` holds the wait both use). In ``one`` the
pipeline is recovered (a clean record once the window passed) before the next breach; the
hundreds breach a pipeline not breached before. CPU "while events flow" is the triggerer's over
the samples, without the connectors' creation and deletion. Then, for the hundreds, a burst: a
dead letter to each of the 100 DLQs at once → every event stored (the time to the last one, and
the CPU over it). The target (issue #44): 100 + 100 watches' latencies (DLQ → event, breach →
event, breach → PAUSED) within twice one watch's (``*_vs_one``, ``latencies_within_target``).

Writes ``benchmarks/results/watch_scale.json`` and ``watch_scale.png``. Figures: median with
min and max over all samples of all rounds, with what others used of the machine meanwhile.
A 5-round run took 10 minutes on a quiet machine (2026-11-28).

    .venv/bin/python benchmarks/watch_scale.py --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from graceful import exit_on_sigterm
from machine_load import CpuMeter, spread
from stack_waits import STATUS_POLL_S, BenchmarkError, epoch_s, wait_for, wait_until_paused

from airflow_kerr.errors import SourceRecord, Stage
from airflow_kerr.local.broker import LocalBroker, connection_variables, free_port
from airflow_kerr.local.connect_worker import ConnectWorker, connector_config
from airflow_kerr.local.dead_letters import Failure, write_dead_letters, write_task_metrics

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
METRICS_TOPIC = "kerr.metrics"
WINDOW_S = 3.0
MAX_ERRORS = 5
SETUPS = ("empty", "one", "hundred", "hundred_unshared")
#: The topic every benchmark sink reads (nothing is written to it: a sink's cost here is its idle consumer).
SINK_TOPIC = "scale.sink.in"
#: How long a connector is given to start, stop or reach PAUSED (a niced JVM on a loaded 2-core machine).
CONNECT_TIMEOUT_S = 120.0
#: What the 100 + 100 watches' latencies must stay within, as multiples of one watch's (issue #44).
LATENCY_TARGET = 2.0
#: The breach samples' figures, each a list per run: the breaching record written → ...
BREACH_KEYS = (
    ("breach_latency_s", "breach → event stored"),
    ("breach_pause_asked_s", "breach → Connect accepted the pause"),
    ("breach_paused_latency_s", "breach → connector PAUSED"),
    ("breach_tasks_paused_latency_s", "breach → its task PAUSED"),
)
LATENCY_KEYS = ("dlq_latency_s", *(key for key, _ in BREACH_KEYS))
#: The latencies held to :data:`LATENCY_TARGET`: a DLQ's event, a breach's event, a breach's connector PAUSED.
TARGET_KEYS = ("dlq_latency_s", "breach_latency_s", "breach_paused_latency_s")

DAGS = '''
"""Generated by benchmarks/watch_scale.py: {count} DLQ-asset DAGs and {count} tolerance-breach-asset DAGs."""
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from airflow_kerr.assets.watched import dead_letter_queue_asset, tolerance_asset

for i in range({count}):
    with DAG(dag_id=f"scale_dlq_{{i:03d}}", schedule=[dead_letter_queue_asset(f"scale.dlq.{{i:03d}}")], catchup=False):
        EmptyOperator(task_id="noop")
    breach = tolerance_asset(
        event="breach",
        pipeline=f"scale-{{i:03d}}",
        max_errors={max_errors},
        min_records=0,
        window={window},
        pause_on_breach=[f"{connector_prefix}-sink-{{i:03d}}"],
    )
    with DAG(dag_id=f"scale_tol_{{i:03d}}", schedule=[breach], catchup=False):
        EmptyOperator(task_id="noop")
'''


# The triggerer's process tree, read from /proc --------------------------------------------------------------


def tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in stat[11:15])
    return total


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def threads(pids: list[int]) -> tuple[int, int]:
    """All threads of the tree, and librdkafka clients (each has exactly one ``rdk:main`` thread)."""
    count = clients = 0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            count += 1
            try:
                clients += (task / "comm").read_text().strip() == "rdk:main"
            except OSError:
                continue
    return count, clients


def broker_sockets(pids: list[int], port: int) -> int:
    """TCP connections of the tree to ``port`` on loopback (its sockets' inodes matched in /proc/net/tcp)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                count += 1
    return count


# The Airflow side -------------------------------------------------------------------------------------------


class Setup:
    """One metadata DB and dags folder, and how its triggerer is started and read."""

    def __init__(
        self, name: str, base: Path, template_db: Path, bootstrap: str, count: int, connect: ConnectWorker
    ) -> None:
        self.name = name
        self.home = base / name
        self.home.mkdir(parents=True)
        self.dags = self.home / "dags"
        self.dags.mkdir()
        self.count = count
        shutil.copy(template_db, self.home / "airflow.db")
        if count:
            prefix = connector_prefix(name)
            text = DAGS.format(count=count, max_errors=MAX_ERRORS, window=WINDOW_S, connector_prefix=prefix)
            (self.dags / "watch_scale_dags.py").write_text(text)
        kafka = {"bootstrap.servers": bootstrap, "receive.message.max.bytes": 2147483647}
        self.env = environment(self.home, self.dags, kafka, connect)
        if name == "hundred_unshared":
            self.env["KERR_SHARED_WATCH_CLIENTS"] = "0"
        self.process: subprocess.Popen[bytes] | None = None
        self.stopping: subprocess.Popen[bytes] | None = None
        self.next_pipeline = 0

    def reserialize(self, expected_triggers: int) -> None:
        for _ in range(3):  # a DAG's assets are active (and their watchers stored) from the parse after its first
            airflow(self.env, ["dags", "reserialize"], self.home / "reserialize.log")
            if self.query("SELECT count(*) FROM trigger")[0][0] >= expected_triggers:
                return
        raise BenchmarkError(f"{self.name}: the DAGs' watchers did not reach the trigger table")

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        for _ in range(50):
            try:
                with sqlite3.connect(f"file:{self.home / 'airflow.db'}?mode=ro", uri=True, timeout=5) as db:
                    return list(db.execute(sql, args))
            except sqlite3.OperationalError:
                time.sleep(0.05)
        raise BenchmarkError(f"{self.name}: the metadata DB stayed locked")

    def start(self) -> None:
        self.reap()
        log = open(self.home / "triggerer.log", "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [sys.executable, "-m", "airflow", "triggerer", "--skip-serve-logs"],
            env=self.env,
            cwd=self.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def stop(self) -> None:
        """Ask the triggerer to stop (SIGTERM) and go on: its graceful exit takes ~10 s, while the next set-up
        starts and settles (another DB, another process tree); :meth:`reap` makes sure it ended."""
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.stopping, self.process = self.process, None

    def reap(self) -> None:
        """Wait for the triggerer asked to stop to end; kill its tree after 30 s."""
        if self.stopping is None:
            return
        with_tree = tree(self.stopping.pid)
        try:
            self.stopping.wait(30)
        except subprocess.TimeoutExpired:
            for pid in with_tree:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            self.stopping.wait(10)
        self.stopping = None

    def running_triggers(self) -> int:
        """Triggers the newest triggerer job took (an earlier run's job may still be named on them)."""
        rows = self.query(
            "SELECT count(*) FROM trigger WHERE triggerer_id = "
            "(SELECT max(id) FROM job WHERE job_type = 'TriggererJob' AND state = 'running')"
        )
        return int(rows[0][0])

    def last_event_id(self, uri: str) -> int:
        rows = self.query("SELECT max(e.id) FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ?", uri)
        return int(rows[0][0] or 0)

    def event_after(self, uri: str, after_id: int) -> float | None:
        """When the first event of ``uri`` after ``after_id`` was stored (Unix seconds), None before."""
        found = self.event_with_payload(uri, after_id)
        return found[0] if found else None

    def event_with_payload(self, uri: str, after_id: int) -> tuple[float, dict[str, Any]] | None:
        """The first event of ``uri`` after ``after_id``: when it was stored, and the trigger's payload."""
        rows = self.query(
            "SELECT e.timestamp, e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.uri = ? AND e.id > ? ORDER BY e.id LIMIT 1",
            uri,
            after_id,
        )
        if not rows:
            return None
        stored = epoch_s(rows[0][0])
        assert stored is not None
        extra = json.loads(rows[0][1]) if rows[0][1] else {}
        return stored, dict(extra.get("payload") or {})

    def connector(self, i: int) -> str:
        """The Kafka Connect connector pipeline ``i``'s watch pauses on a breach (this set-up's own name)."""
        return connector_name(self.name, i)


def connector_prefix(setup: str) -> str:
    """What the names of set-up ``setup``'s connectors start with: its own, so that a triggerer still stopping
    never pauses a connector the next set-up measures."""
    return setup.replace("_", "-")


def connector_name(setup: str, i: int) -> str:
    """The connector set-up ``setup``'s pipeline ``i`` pauses on a breach: one per pipeline."""
    return f"{connector_prefix(setup)}-sink-{i:03d}"


def environment(home: Path, dags: Path, kafka: dict[str, Any], connect: ConnectWorker | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "airflow_kerr.local.airflow_env.SQLITE_CONNECT_ARGS",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "15",
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": kafka}),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
    )
    if connect is not None:  # kafka_connect_default, as the local stack writes it
        variables = connection_variables(str(kafka["bootstrap.servers"]), connect.host, connect.port)
        env["AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"] = variables["AIRFLOW_CONN_KAFKA_CONNECT_DEFAULT"]
    return env


def airflow(env: dict[str, str], command: list[str], log_path: Path) -> None:
    with open(log_path, "ab") as log:
        done = subprocess.run(
            [sys.executable, "-m", "airflow", *command], env=env, stdout=log, stderr=subprocess.STDOUT, check=False
        )
    if done.returncode != 0:
        raise BenchmarkError(f"airflow {' '.join(command)} failed; see {log_path}")


# Measuring one triggerer ------------------------------------------------------------------------------------


def dlq_uri(i: int) -> str:
    return f"kafka://kafka_default/scale.dlq.{i:03d}"


def breach_uri(i: int) -> str:
    return f"kafka://kafka_default/{METRICS_TOPIC}?event=breach&pipeline=scale-{i:03d}"


def footprint(setup: Setup, port: int) -> dict[str, Any]:
    assert setup.process is not None
    pids = tree(setup.process.pid)
    count, clients = threads(pids)
    return {
        "rss_mib": rss_mib(pids),
        "broker_connections": broker_sockets(pids, port),
        "librdkafka_clients": clients,
        "threads": count,
        "processes": len(pids),
    }


def cpu_over(setup: Setup, seconds: float) -> float:
    assert setup.process is not None
    hz = os.sysconf("SC_CLK_TCK")
    pids = tree(setup.process.pid)
    before, started = cpu_ticks(pids), time.monotonic()
    time.sleep(seconds)
    return (cpu_ticks(tree(setup.process.pid)) - before) / hz / (time.monotonic() - started)


def dlq_latency(setup: Setup, kafka: dict[str, Any], i: int) -> float:
    uri = dlq_uri(i)
    after = setup.last_event_id(uri)
    failure = Failure(
        SourceRecord("orders", 0, 0, int(time.time() * 1000), key=b"k", value=b"{bad"),
        Stage.VALUE_CONVERTER,
        ValueError("x"),
    )
    write_dead_letters(kafka, f"scale.dlq.{i:03d}", [failure])
    written = time.time()
    stored = wait_for(f"{setup.name}: the event of {uri}", lambda: setup.event_after(uri, after), 300, 0.05)
    return stored - written


def cursor_state(admin: AdminClient, group: str) -> str | None:
    asked = ConsumerGroupTopicPartitions(group, [TopicPartition(METRICS_TOPIC, 0)])
    found = admin.list_consumer_group_offsets([asked])[group].result().topic_partitions
    metadata = found[0].metadata if found else None
    return json.loads(metadata).get("state") if metadata else None


def sink_assigned(admin: AdminClient, name: str) -> bool:
    """Whether sink ``name``'s consumer group is stable with its one partition assigned: the task reads."""
    group = f"connect-{name}"
    try:
        described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except Exception:  # not known to the broker yet
        return False
    assigned = [tp.partition for member in described.members for tp in member.assignment.topic_partitions]
    return assigned == [0]


def start_sink(connect: ConnectWorker, admin: AdminClient, name: str) -> None:
    """A fresh FileStreamSink ``name`` on :data:`SINK_TOPIC`, RUNNING and reading, as a long-lived sink is.

    Right after the previous sample's connector was deleted the worker may still rebalance and answer 409: asked
    again. It is measured once its consumer holds the partition, so the pause does not wait on a group join.
    """

    def added() -> bool:
        try:
            connect.add_connector(name, connector_config(SINK_TOPIC, f"{name}.jsonl"), timeout_s=CONNECT_TIMEOUT_S)
        except urllib.error.HTTPError as error:
            if error.code != 409:
                raise
            return False
        return True

    wait_for(f"connector {name} created", added, CONNECT_TIMEOUT_S, 0.5)
    wait_for(f"connector {name}'s task reading", lambda: sink_assigned(admin, name), CONNECT_TIMEOUT_S, 0.2)


def remove_sink(connect: ConnectWorker, name: str) -> None:
    """Delete connector ``name`` (a rebalancing worker's 409 asked again) and wait until the worker no longer has it."""

    def deleted() -> bool:
        try:
            connect.rest("DELETE", f"/connectors/{name}")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return True
            if error.code != 409:
                raise
            return False
        return True

    wait_for(f"connector {name} deleted", deleted, CONNECT_TIMEOUT_S, 0.5)
    wait_for(f"connector {name} gone", lambda: name not in cast(list[str], connect.rest("GET", "/connectors")), 60, 0.2)


def breach_sample(setup: Setup, kafka: dict[str, Any], connect: ConnectWorker, i: int) -> dict[str, float | None]:
    """Pipeline ``i`` breaches, its connector live: seconds from the breaching record written to the watch's
    event stored, to Connect accepting the pause (the event says when), and to the connector and its task PAUSED."""
    name = setup.connector(i)
    uri = breach_uri(i)
    after = setup.last_event_id(uri)
    write_task_metrics(kafka, METRICS_TOPIC, f"scale-{i:03d}", records_in=100, errors=MAX_ERRORS + 4)
    written = time.time()
    paused, tasks_paused = wait_until_paused(lambda: connect.status(name), name, CONNECT_TIMEOUT_S)
    stored, payload = wait_for(
        f"{setup.name}: the event of {uri}", lambda: setup.event_with_payload(uri, after), 300, 0.05
    )
    asked_ms = ((payload.get("paused_on_breach") or {}).get(name) or {}).get("asked_at_ms")
    return {
        "breach_latency_s": stored - written,
        "breach_pause_asked_s": asked_ms / 1000 - written if asked_ms else None,
        "breach_paused_latency_s": paused - written,
        "breach_tasks_paused_latency_s": tasks_paused - written,
    }


def recover(setup: Setup, kafka: dict[str, Any], admin: AdminClient, i: int) -> None:
    """Once the breaching record left the window, a clean one: the watch goes back to healthy (saved)."""
    from airflow_kerr.assets.watched import tolerance_asset
    from airflow_kerr.triggers.tolerance_events import ToleranceEventTrigger

    asset = tolerance_asset(
        event="breach",
        pipeline=f"scale-{i:03d}",
        max_errors=MAX_ERRORS,
        min_records=0,
        window=WINDOW_S,
        pause_on_breach=[setup.connector(i)],
    )
    trigger = asset.watchers[0].trigger
    assert isinstance(trigger, ToleranceEventTrigger)
    time.sleep(WINDOW_S + 0.2)
    write_task_metrics(kafka, METRICS_TOPIC, f"scale-{i:03d}", records_in=100, errors=0)
    wait_for(
        f"{setup.name}: scale-{i:03d} recovered",
        lambda: cursor_state(admin, trigger.cursor_group) == "healthy",
        60,
        0.2,
    )


def burst(setup: Setup, kafka: dict[str, Any]) -> dict[str, float]:
    """A dead letter to every DLQ at once: time until the last of their events is stored, and the CPU meanwhile."""
    assert setup.process is not None
    hz = os.sysconf("SC_CLK_TCK")
    afters = {i: setup.last_event_id(dlq_uri(i)) for i in range(setup.count)}
    before = cpu_ticks(tree(setup.process.pid))
    started = time.time()
    for i in range(setup.count):
        failure = Failure(
            SourceRecord("orders", 0, 0, int(started * 1000), key=b"k", value=b"{bad"),
            Stage.VALUE_CONVERTER,
            ValueError("b"),
        )
        write_dead_letters(kafka, f"scale.dlq.{i:03d}", [failure])
    written = time.time()
    pending = set(afters)
    last = written

    def all_stored() -> bool:
        nonlocal last
        for i in list(pending):
            at = setup.event_after(dlq_uri(i), afters[i])
            if at is not None:
                pending.discard(i)
                last = max(last, at)
        return not pending

    wait_for(f"{setup.name}: the burst's {setup.count} events", all_stored, 300, 0.2)
    elapsed = time.time() - started
    return {
        "write_s": written - started,
        "last_event_after_write_s": last - written,
        "cpu_cores": (cpu_ticks(tree(setup.process.pid)) - before) / hz / elapsed,
    }


class CpuSpans:
    """The CPU of a process tree over several stretches of time, as cores: what it used while events flowed, without
    the stretches between them (a sample's connector being created or deleted)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ticks = 0
        self.seconds = 0.0

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        before, started = cpu_ticks(tree(self.pid)), time.monotonic()
        try:
            yield
        finally:
            self.ticks += cpu_ticks(tree(self.pid)) - before
            self.seconds += time.monotonic() - started

    @property
    def cores(self) -> float:
        return self.ticks / os.sysconf("SC_CLK_TCK") / self.seconds if self.seconds else 0.0


def events(
    setup: Setup, kafka: dict[str, Any], admin: AdminClient, connect: ConnectWorker, samples: int
) -> dict[str, Any]:
    """``samples`` dead letters, then ``samples`` breaches, one at a time; the triggerer's CPU over them.

    Each breach's connector is created (and seen reading) before it and deleted after it, outside the CPU span;
    in ``one`` the pipeline is recovered before the next breach, the hundreds breach a pipeline not breached before.
    """
    assert setup.process is not None
    spans = CpuSpans(setup.process.pid)
    picks = [(7 + 31 * k) % setup.count for k in range(samples)]
    with spans.counting():
        found: dict[str, Any] = {"dlq_latency_s": [dlq_latency(setup, kafka, i) for i in picks]}
    found.update({key: [] for key, _ in BREACH_KEYS})
    for _ in range(samples):
        i = setup.next_pipeline % setup.count
        setup.next_pipeline += 1
        start_sink(connect, admin, setup.connector(i))
        with spans.counting():
            for key, value in breach_sample(setup, kafka, connect, i).items():
                found[key].append(value)
        remove_sink(connect, setup.connector(i))
        if setup.count == 1:
            with spans.counting():
                recover(setup, kafka, admin, i)
    found["events_cpu_cores"] = spans.cores
    return found


def measure(
    setup: Setup,
    port: int,
    kafka: dict[str, Any],
    admin: AdminClient,
    connect: ConnectWorker,
    args: argparse.Namespace,
    meter: CpuMeter,
) -> dict[str, Any]:
    expected = 2 * setup.count
    started = time.monotonic()
    setup.start()
    try:
        if expected:
            wait_for(
                f"{setup.name}: the triggerer took its {expected} triggers",
                lambda: setup.running_triggers() >= expected,
                180,
                0.5,
            )
        else:
            wait_for(
                f"{setup.name}: the triggerer started",
                lambda: setup.query("SELECT count(*) FROM job WHERE job_type = 'TriggererJob' AND state = 'running'")[
                    0
                ][0],
                120,
                0.5,
            )
        ready_s = time.monotonic() - started
        time.sleep(args.settle if expected else 3.0)  # the watches open after the triggerer took them
        load_before = meter.sample()
        row: dict[str, Any] = {"setup": setup.name, "ready_s": ready_s, **footprint(setup, port)}
        row["idle_cpu_cores"] = cpu_over(setup, args.idle)
        if expected:
            row.update(events(setup, kafka, admin, connect, args.samples))
            row["after_events"] = footprint(setup, port)
            if setup.count > 1:
                row["burst"] = burst(setup, kafka)
        row["others_cores"] = meter.foreign_cores(load_before, meter.sample())
        return row
    finally:
        setup.stop()
        print(f"  {setup.name}: {time.monotonic() - started:.0f} s", flush=True)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: C901 - one pass per figure, read top to bottom
    out: dict[str, Any] = {}
    for name in SETUPS:
        mine = [r for r in rows if r["setup"] == name]
        if not mine:
            continue
        summary: dict[str, Any] = {"runs": len(mine)}
        for key in (
            "idle_cpu_cores",
            "rss_mib",
            "broker_connections",
            "librdkafka_clients",
            "threads",
            "others_cores",
            "ready_s",
            "events_cpu_cores",
        ):
            values = [r[key] for r in mine if key in r]
            if values:
                summary[key] = spread(values)
        for key in LATENCY_KEYS:
            values = [v for r in mine for v in r.get(key, []) if v is not None]
            if values:
                summary[key] = spread(values)
        bursts = [r["burst"] for r in mine if "burst" in r]
        if bursts:
            summary["burst"] = {key: spread([b[key] for b in bursts]) for key in bursts[0]}
        out[name] = summary
    empty = [r["rss_mib"] for r in rows if r["setup"] == "empty"]
    for name in ("one", "hundred", "hundred_unshared"):
        if name in out and empty:
            extra = [r["rss_mib"] - e for r, e in zip([r for r in rows if r["setup"] == name], empty, strict=False)]
            out[name]["rss_over_empty_mib"] = spread(extra)
    for name in ("hundred", "hundred_unshared"):
        if name in out and "one" in out:
            for key in LATENCY_KEYS:
                if key in out[name] and key in out["one"]:
                    out[name][f"{key}_vs_one"] = out[name][key]["median"] / out["one"][key]["median"]
            ratios = [out[name].get(f"{key}_vs_one") for key in TARGET_KEYS]
            if all(ratio is not None for ratio in ratios):  # the target: each within 2x of one watch's
                out[name]["latencies_within_target"] = all(ratio <= LATENCY_TARGET for ratio in ratios)
    return out


def chart(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = report["summary"]
    names = [n for n in SETUPS if n in summary]
    fig, axes = plt.subplots(1, 5, figsize=(21, 4.4))
    panels = (
        ("idle_cpu_cores", "idle CPU (cores)", 0.10),
        ("rss_mib", "RSS (MiB)", None),
        ("broker_connections", "TCP connections to the broker", None),
    )
    for ax, (key, title, target) in zip(axes, panels, strict=False):
        values = [summary[n][key]["median"] for n in names]
        lows = [summary[n][key]["median"] - summary[n][key]["min"] for n in names]
        highs = [summary[n][key]["max"] - summary[n][key]["median"] for n in names]
        ax.bar(names, values, yerr=[lows, highs], capsize=4, color="#4c72b0")
        if target is not None:
            ax.axhline(target, color="#c44e52", linestyle="--", label="target")
            ax.legend()
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=20)
    ax = axes[3]
    latency_names = [n for n in names if "dlq_latency_s" in summary[n]]
    labels = {"dlq_latency_s": "DLQ grew → event", **dict(BREACH_KEYS)}
    width = 0.8 / len(TARGET_KEYS)
    for offset, key in enumerate(TARGET_KEYS):
        shown = [n for n in latency_names if key in summary[n]]
        xs = [latency_names.index(n) + (offset - (len(TARGET_KEYS) - 1) / 2) * width for n in shown]
        med = [summary[n][key]["median"] for n in shown]
        lo = [summary[n][key]["median"] - summary[n][key]["min"] for n in shown]
        hi = [summary[n][key]["max"] - summary[n][key]["median"] for n in shown]
        ax.bar(xs, med, width, yerr=[lo, hi], capsize=4, label=labels[key])
    ax.set_xticks(range(len(latency_names)), latency_names, rotation=20)
    ax.set_yscale("log")  # seconds for a DLQ's event, tens of milliseconds for a pause
    ax.set_ylim(top=ax.get_ylim()[1] * 30)  # room for the legend
    ax.set_title("latency (s, log scale), median, min-max")
    ax.legend(fontsize=7, loc="upper left")
    ax = axes[4]
    ratio_names = [n for n in latency_names if n != "one" and f"{TARGET_KEYS[0]}_vs_one" in summary[n]]
    for offset, key in enumerate(TARGET_KEYS):
        xs = [i + (offset - (len(TARGET_KEYS) - 1) / 2) * width for i in range(len(ratio_names))]
        ax.bar(xs, [summary[n].get(f"{key}_vs_one", 0.0) for n in ratio_names], width, label=labels[key])
    ax.axhline(LATENCY_TARGET, color="#c44e52", linestyle="--", label=f"target: {LATENCY_TARGET:g}x")
    ratios = [summary[n].get(f"{key}_vs_one", 0.0) for n in ratio_names for key in TARGET_KEYS]
    ax.set_ylim(0, max([LATENCY_TARGET, *ratios]) * 1.5)  # room for the legend
    ax.set_xticks(range(len(ratio_names)), ratio_names, rotation=20)
    ax.set_title("latency (median) over one watch's")
    ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(
        f"One airflow triggerer: empty, 1+1 and 100+100 watches, each breach pausing a real Kafka Connect sink "
        f"({report['rounds']} rounds, {report['machine']['cpus']} cores)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=2, help="events of each kind per triggerer run")
    parser.add_argument("--idle", type=float, default=8.0, help="seconds of the idle CPU span")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between 'all triggers taken' and measuring")
    parser.add_argument(
        "--unshared-rounds", default="3", help="the rounds (1-based, comma-separated) that also run hundred_unshared"
    )
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--keep", action="store_true", help="keep the temporary homes and logs (for a failed run)")
    parser.add_argument("--output", type=Path, default=RESULTS / "watch_scale.json")
    args = parser.parse_args()
    setups_wanted = [s for s in args.setups.split(",") if s]
    base = Path(tempfile.mkdtemp(prefix="kerr-watch-scale-"))
    meter = CpuMeter()
    rows: list[dict[str, Any]] = []
    setups: dict[str, Setup] = {}
    began = time.monotonic()
    try:
        # One Connect worker for the whole run, running while every set-up is measured (empty too); connectors
        # only while a breach is sampled. It stops before the broker, the broker before the folder goes.
        with (
            LocalBroker(log_path=base / "broker.log") as broker,
            ConnectWorker(broker.bootstrap_servers, base / "connect", start_timeout_s=240) as connect,
        ):
            kafka = {"bootstrap.servers": broker.bootstrap_servers, **broker.client_config}
            admin = AdminClient(kafka)
            topics = [NewTopic(f"scale.dlq.{i:03d}", 1, 1) for i in range(args.count)]
            topics += [NewTopic(METRICS_TOPIC, 1, 1), NewTopic(SINK_TOPIC, 1, 1)]
            for future in admin.create_topics(topics).values():
                future.result()
            template = base / "template"
            template.mkdir()
            template_env = environment(template, template / "dags", kafka)
            (template / "dags").mkdir()
            airflow(template_env, ["db", "migrate"], base / "migrate.log")
            for name in setups_wanted:
                count = {"empty": 0, "one": 1}.get(name, args.count)
                setups[name] = Setup(name, base, template / "airflow.db", broker.bootstrap_servers, count, connect)
                if count:
                    setups[name].reserialize(2 * count)
            print(f"set up in {time.monotonic() - began:.0f} s", flush=True)
            unshared_rounds = {int(r) for r in args.unshared_rounds.split(",") if r}
            for number in range(args.rounds):
                this_round = [s for s in setups_wanted if s != "hundred_unshared" or number + 1 in unshared_rounds]
                order = this_round[number % len(this_round) :] + this_round[: number % len(this_round)]
                for name in order:
                    row = measure(setups[name], broker.port, kafka, admin, connect, args, meter)
                    row["round"] = number + 1
                    rows.append(row)
                    print(json.dumps({k: v for k, v in row.items() if k != "after_events"}), flush=True)
            for setup in setups.values():
                setup.reap()  # before the broker goes
            connect_version = connect.version
    finally:
        for setup in setups.values():
            setup.reap()
        if args.keep:
            print(f"kept {base}", flush=True)
        else:
            shutil.rmtree(base, ignore_errors=True)
    report = {
        "benchmark": "watch_scale",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "rounds": args.rounds,
        "samples_per_run": args.samples,
        "idle_span_s": args.idle,
        "settle_s": args.settle,
        "unshared_rounds": args.unshared_rounds,
        "count": args.count,
        "window_s": WINDOW_S,
        "poll_interval_s": 5.0,
        "connect": {
            "version": connect_version,
            "connector": f"FileStreamSinkConnector on {SINK_TOPIC} (idle), one per breached pipeline, live only "
            "from just before its breach to just after PAUSED",
            "status_poll_s": STATUS_POLL_S,
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "wall_s": time.monotonic() - began,
        "targets": {"idle_cpu_cores": 0.10, "rss_over_empty_mib": 300, "latency_vs_one": LATENCY_TARGET},
        "summary": summarize(rows),
        "runs": rows,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    chart(report, args.output.with_suffix(".png"))
    print(json.dumps(report["summary"], indent=2))
    return 0


if __name__ == "__main__":
    exit_on_sigterm()
    sys.exit(main())
