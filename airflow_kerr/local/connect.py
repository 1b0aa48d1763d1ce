"""A Kafka Connect REST stand-in, for development and tests only.

It is not Kafka Connect. It serves the part of the Connect REST API that
``SPEC-connect-rest.md`` describes (status codes, bodies, error bodies and their
texts, asynchronous target-state changes, KIP-745 restarts, KIP-875 stop and
offsets) on a loopback port, and runs one kind of connector for real: a sink
that consumes topics from a Kafka broker into a JSON-lines file with the
consumer group ``connect-<name>``, so pausing visibly stops consumption and
resuming catches up. Deploy real Kafka Connect (see ``docker/``) for anything
else.

Faults a test needs are switches on :class:`ConnectStandIn`: a rebalance window
(409), a request-timeout window (500 ``Request timed out``), a failed connector
or task, and a poison record (config ``kerr.fail.on.value.contains``) that makes
the consuming task FAILED with a trace.

Run it beside a broker with ``python -m airflow_kerr.local.connect
--bootstrap-servers 127.0.0.1:9092 --port 8083``; it serves until SIGTERM.
This module imports no Airflow: ``local/`` is used by tests, the demo and the
``kerr`` CLI, never by operators.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import signal
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from airflow_kerr import __version__
from airflow_kerr.local.broker import resolve_bootstrap_servers
from airflow_kerr.local.cli import state_dir

log = logging.getLogger(__name__)

SINK_CONNECTOR_CLASS = "airflow_kerr.local.connect.JsonLinesSinkConnector"
SINK_TASK_CLASS = "airflow_kerr.local.connect.JsonLinesSinkTask"
#: A record whose value contains this text makes the task that reads it FAILED.
POISON_CONFIG = "kerr.fail.on.value.contains"
#: How many times the poison record fails a task before it is accepted (default: always).
POISON_TIMES_CONFIG = "kerr.fail.times"

STALE_CONFIG_MESSAGE = (
    "Cannot complete request momentarily due to stale configuration (typically caused by a concurrent config change)"
)
RESET_OFFSETS_MESSAGE = (
    "The Connect framework-managed offsets for this connector have been reset successfully. However, if this "
    "connector manages offsets externally, they will need to be manually reset in the system that the connector uses."
)
ALTER_OFFSETS_MESSAGE = (
    "The Connect framework-managed offsets for this connector have been altered successfully. However, if this "
    "connector manages offsets externally, they will need to be manually altered in the system that the connector uses."
)

_STATE_FOR_TARGET = {"STARTED": "RUNNING", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}
_TARGET_FOR_INITIAL_STATE = {"RUNNING": "STARTED", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}


class RecordedRequest(NamedTuple):
    """A request as the stand-in received it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]


class RestError(Exception):
    """An error the REST layer answers with ``{"error_code", "message"}``, as Connect's exception mapper does."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _not_found(message: str) -> RestError:
    return RestError(404, message)


def _java_trace(exception: str, message: str, cause: str | None = None) -> str:
    """A trace shaped like the Java ones Connect reports, so log readers and UIs see the familiar layout."""
    lines = [f"{exception}: {message}", "\tat airflow_kerr.local.connect (Kafka Connect stand-in)"]
    if cause:
        lines.append(f"Caused by: {cause}")
    return "\n".join(lines) + "\n"


def _invalid_config(errors: list[str]) -> RestError:
    return RestError(
        400,
        f"Connector configuration is invalid and contains the following {len(errors)} error(s):\n"
        + "\n".join(errors)
        + "\nYou can also find the above list of errors at the endpoint "
        "`/connector-plugins/{connectorType}/config/validate`",
    )


@dataclass(frozen=True)
class SinkSettings:
    """The validated configuration of one JSON-lines sink connector."""

    topics: tuple[str, ...]
    file: Path
    tasks_max: int
    poison: str | None
    poison_times: int
    consumer_overrides: dict[str, str]

    @classmethod
    def parse(cls, config: dict[str, str], data_dir: Path) -> SinkSettings:
        """Validate ``config`` the way Connect does before it accepts a connector, naming each bad key."""
        errors: list[str] = []
        connector_class = config.get("connector.class")
        if connector_class is None:
            errors.append('Missing required configuration "connector.class" which has no default value.')
        elif connector_class not in (SINK_CONNECTOR_CLASS, "JsonLinesSinkConnector", "JsonLinesSink"):
            errors.append(
                "Failed to find any class that implements Connector and which name matches "
                f"{connector_class}, available connectors are: {SINK_CONNECTOR_CLASS}"
            )
        topics = tuple(t.strip() for t in config.get("topics", "").split(",") if t.strip())
        if "topics.regex" in config:
            errors.append("topics.regex is not supported by the Kafka Connect stand-in; list the topics in 'topics'")
        elif not topics:
            errors.append("Must configure one of topics or topics.regex")
        file_name = config.get("file", "").strip()
        if not file_name:
            errors.append('Missing required configuration "file" which has no default value.')
        tasks_max = 1
        try:
            tasks_max = int(config.get("tasks.max", "1"))
            if tasks_max < 1:
                errors.append(f"Invalid value {tasks_max} for configuration tasks.max: Value must be at least 1")
        except ValueError:
            errors.append(
                f"Invalid value {config.get('tasks.max')} for configuration tasks.max: Not a number of type INT"
            )
        poison_times = -1
        try:
            poison_times = int(config.get(POISON_TIMES_CONFIG, "-1"))
        except ValueError:
            errors.append(
                f"Invalid value {config.get(POISON_TIMES_CONFIG)} for configuration {POISON_TIMES_CONFIG}: "
                "Not a number of type INT"
            )
        if errors:
            raise _invalid_config(errors)
        path = Path(file_name)
        overrides = {
            key.removeprefix("consumer.override."): value
            for key, value in config.items()
            if key.startswith("consumer.override.")
        }
        return cls(
            topics=topics,
            file=path if path.is_absolute() else data_dir / path,
            tasks_max=tasks_max,
            poison=config.get(POISON_CONFIG) or None,
            poison_times=poison_times,
            consumer_overrides=overrides,
        )


@dataclass
class _TaskSlot:
    id: int
    state: str = "UNASSIGNED"
    trace: str | None = None
    runner: _SinkTaskRunner | None = None
    restart_pending: bool = False
    started: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Connector:
    name: str
    config: dict[str, str]
    settings: SinkSettings
    target: str
    state: str = "UNASSIGNED"
    trace: str | None = None
    status_known: bool = False
    tasks: dict[int, _TaskSlot] = field(default_factory=dict)
    restart_pending: bool = False
    reconfigure_pending: bool = False
    poison_failures: int = 0


class _SinkTaskRunner(threading.Thread):
    """One sink task: a consumer in the connector's group that appends records to the JSON-lines file.

    Pausing pauses the consumer's partitions but keeps polling, as Connect's
    WorkerSinkTask does, so the task stays in its group and resumes where it was.
    """

    def __init__(
        self, standin: ConnectStandIn, connector: str, task_id: int, settings: SinkSettings, state: str
    ) -> None:
        super().__init__(name=f"kerr-connect-{connector}-{task_id}", daemon=True)
        self.standin = standin
        self.connector = connector
        self.task_id = task_id
        self.settings = settings
        self.desired = state
        self._applied: str | None = None
        self._stop_event = threading.Event()
        #: Set once the task no longer consumes; closing the consumer (leaving the group) may take longer.
        self.stopped = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def _consumer_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.standin.bootstrap_servers,
            "group.id": f"connect-{self.connector}",
            "client.id": f"connector-consumer-{self.connector}-{self.task_id}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 2000,
            "logger": logging.getLogger(f"{__name__}.rdkafka"),
        }
        config.update(self.settings.consumer_overrides)
        return config

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        if self._applied == "PAUSED":
            consumer.assign(partitions)
            consumer.pause(partitions)

    def run(self) -> None:
        from confluent_kafka import Consumer

        try:
            consumer = Consumer(self._consumer_config())
            consumer.subscribe(list(self.settings.topics), on_assign=self._on_assign)
        except Exception as exc:  # a bad consumer.override.* setting surfaces here
            self.standin._task_failed(self, _java_trace("org.apache.kafka.common.KafkaException", str(exc)))
            self.stopped.set()
            return
        try:
            self._loop(consumer)
        except Exception as exc:
            log.exception("task %s-%d of the Kafka Connect stand-in failed", self.connector, self.task_id)
            self.standin._task_failed(
                self,
                _java_trace(
                    "org.apache.kafka.connect.errors.ConnectException",
                    "Exiting WorkerSinkTask due to unrecoverable exception.",
                    f"{type(exc).__name__}: {exc}",
                ),
            )
        finally:
            self.stopped.set()
            with contextlib.suppress(Exception):
                consumer.close()

    def _loop(self, consumer: Any) -> None:
        while not self._stop_event.is_set():
            wanted = self.desired
            if wanted != self._applied:
                assignment = consumer.assignment()
                if assignment:
                    (consumer.pause if wanted == "PAUSED" else consumer.resume)(assignment)
                self._applied = wanted
                self.standin._task_reported(self, wanted)
            messages = [m for m in consumer.consume(num_messages=500, timeout=0.1) if self._usable(m)]
            if not messages:
                continue
            poison_at = self._poison_index(messages)
            accepted = messages if poison_at is None else messages[:poison_at]
            if accepted:
                self._write(accepted)
                self._commit(consumer, accepted)
            if poison_at is not None:
                record = messages[poison_at]
                self.standin._task_failed(
                    self,
                    _java_trace(
                        "org.apache.kafka.connect.errors.ConnectException",
                        "Exiting WorkerSinkTask due to unrecoverable exception.",
                        "org.apache.kafka.connect.errors.DataException: poison record in "
                        f"{record.topic()}-{record.partition()} at offset {record.offset()}: "
                        f"the value contains {self.settings.poison!r}",
                    ),
                )
                return

    def _usable(self, message: Any) -> bool:
        error = message.error()
        if error is None:
            return True
        log.debug("consumer of %s-%d: %s", self.connector, self.task_id, error)
        return False

    def _poison_index(self, messages: list[Any]) -> int | None:
        marker = self.settings.poison
        if not marker:
            return None
        needle = marker.encode()
        for index, message in enumerate(messages):
            value = message.value()
            if value is not None and needle in value and self.standin._poison_strikes(self.connector):
                return index
        return None

    def _write(self, messages: list[Any]) -> None:
        lines = [json.dumps(_record_json(m), sort_keys=True) + "\n" for m in messages]
        path = self.settings.file
        with self.standin._file_lock(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                handle.writelines(lines)
                handle.flush()

    @staticmethod
    def _commit(consumer: Any, messages: list[Any]) -> None:
        from confluent_kafka import TopicPartition

        ends: dict[tuple[str, int], int] = {}
        for message in messages:
            key = (message.topic(), message.partition())
            ends[key] = max(ends.get(key, -1), message.offset() + 1)
        consumer.commit(
            offsets=[TopicPartition(topic, partition, offset) for (topic, partition), offset in ends.items()],
            asynchronous=False,
        )


def _decode(data: bytes | None) -> tuple[str, Any]:
    if data is None:
        return "", None
    try:
        return "", data.decode("utf-8")
    except UnicodeDecodeError:
        return "_base64", base64.b64encode(data).decode("ascii")


def _record_json(message: Any) -> dict[str, Any]:
    """One output line: where the record came from, its key and value as text (base64 when not UTF-8)."""
    key_suffix, key = _decode(message.key())
    value_suffix, value = _decode(message.value())
    headers = {}
    for name, raw in message.headers() or []:
        suffix, decoded = _decode(raw)
        headers[name + suffix] = decoded
    _, timestamp = message.timestamp()
    return {
        "topic": message.topic(),
        "partition": message.partition(),
        "offset": message.offset(),
        "timestamp": timestamp,
        "key" + key_suffix: key,
        "value" + value_suffix: value,
        "headers": headers,
    }


class ConnectStandIn:
    """A Kafka Connect REST stand-in on a loopback port, running JSON-lines sink connectors (dev and tests only).

    ``transition_delay_s`` is how long pause, resume, stop, restart and config
    changes take to show in ``/status``, as they do asynchronously on a real
    worker. ``ssl_context`` (a server context) serves HTTPS instead of HTTP.
    ``with ConnectStandIn(...) as connect:`` starts and stops it.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        data_dir: str | Path,
        port: int = 0,
        host: str = "127.0.0.1",
        transition_delay_s: float = 1.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.ssl_context = ssl_context
        self.data_dir = Path(data_dir)
        self.host = host
        self.transition_delay_s = transition_delay_s
        self._requested_port = port
        self._server: ThreadingHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._lock = threading.RLock()
        self._reconcile_lock = threading.Lock()
        self._file_locks: dict[Path, threading.Lock] = {}
        self._connectors: dict[str, _Connector] = {}
        self._timers: set[threading.Timer] = set()
        self._rebalance_until = 0.0
        self._rebalance_message = STALE_CONFIG_MESSAGE
        self._timeout_until = 0.0
        self._timeout_stage = "reading to the end of internal topics"
        self._timeout_stage_started = 0.0
        self._timeout_delay_s = 0.0
        self._admin: Any = None
        self._kafka_cluster_id: str | None = None
        #: Every request served, newest last: tests check what clients send.
        self.requests: deque[RecordedRequest] = deque(maxlen=1000)

    # lifecycle -----------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the Kafka Connect stand-in is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def worker_id(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> ConnectStandIn:
        """Bind the port and serve in a background thread; returns once requests are accepted."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        server = ThreadingHTTPServer((self.host, self._requested_port), _Handler)
        server.daemon_threads = True
        if self.ssl_context is not None:
            server.socket = self.ssl_context.wrap_socket(server.socket, server_side=True)
        server.standin = self  # type: ignore[attr-defined]
        self._server = server
        self._serve_thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="kerr-connect-http", daemon=True
        )
        self._serve_thread.start()
        log.info("Kafka Connect stand-in (development and tests only) listening on %s", self.url)
        return self

    def stop(self, close_timeout_s: float = 10.0) -> None:
        """Stop serving and every task; wait up to ``close_timeout_s`` for their consumers to leave their groups."""
        with self._lock:
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()
            runners = [slot.runner for c in self._connectors.values() for slot in c.tasks.values() if slot.runner]
            self._connectors.clear()
        _stop_runners(runners, close_timeout_s)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ConnectStandIn:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # switches for tests and the demo ----------------------------------------------------------------

    def add_connector(self, name: str, config: dict[str, str], initial_state: str = "RUNNING") -> dict[str, Any]:
        """Create a connector as ``POST /connectors`` would and return its info body."""
        return self.create_connector(name, dict(config), initial_state, must_be_new=True)[1]

    def inject_rebalance(self, duration_s: float, message: str = STALE_CONFIG_MESSAGE) -> None:
        """For ``duration_s``, answer requests a rebalance blocks with 409 and ``message``."""
        self._rebalance_until = time.monotonic() + duration_s
        self._rebalance_message = message

    def inject_request_timeout(
        self, duration_s: float, delay_s: float = 0.0, stage: str = "reading to the end of internal topics"
    ) -> None:
        """For ``duration_s``, answer herder requests after ``delay_s`` with 500 ``Request timed out``.

        A real worker gives up after 90 s; ``delay_s`` lets a test choose how long the
        request hangs before the 500 arrives.
        """
        self._timeout_until = time.monotonic() + duration_s
        self._timeout_delay_s = delay_s
        self._timeout_stage = stage
        self._timeout_stage_started = time.time()

    def fail_connector(self, name: str, message: str = "simulated connector failure") -> None:
        """Mark the connector instance FAILED with a trace; its tasks keep running, as in Connect."""
        with self._lock:
            connector = self._get(name, "Connector {} not found")
            connector.state = "FAILED"
            connector.trace = _java_trace("org.apache.kafka.connect.errors.ConnectException", message)

    def fail_task(self, name: str, task_id: int, message: str = "simulated task failure") -> None:
        """Mark a task FAILED with a trace and stop its consumer."""
        with self._lock:
            connector = self._get(name, "Connector {} not found")
            slot = connector.tasks.get(task_id)
            if slot is None:
                raise _not_found(f"Unknown task: {name}-{task_id}")
            runner, slot.runner = slot.runner, None
            slot.state = "FAILED"
            slot.trace = _java_trace("org.apache.kafka.connect.errors.ConnectException", message)
        _stop_runners([runner] if runner else [])

    def output_file(self, name: str) -> Path:
        """Where the connector's sink writes its JSON lines."""
        with self._lock:
            return self._get(name, "Connector {} not found").settings.file

    # the herder ------------------------------------------------------------------------------------

    def _get(self, name: str, not_found: str) -> _Connector:
        connector = self._connectors.get(name)
        if connector is None:
            raise _not_found(not_found.format(name))
        return connector

    def _herder_gate(self, can_conflict: bool) -> None:
        """Fail a request the way a busy worker does: 500 after a timeout, or 409 during a rebalance."""
        now = time.monotonic()
        if now < self._timeout_until:
            time.sleep(self._timeout_delay_s)
            started = datetime.fromtimestamp(self._timeout_stage_started, UTC).isoformat().replace("+00:00", "Z")
            raise RestError(
                500, f"Request timed out. The worker is currently {self._timeout_stage}, which began at {started}"
            )
        if can_conflict and now < self._rebalance_until:
            raise RestError(409, self._rebalance_message)

    def _schedule(self, name: str) -> None:
        """Bring the connector to its target state after the transition delay, as a worker does asynchronously."""
        timer = threading.Timer(self.transition_delay_s, self._fire, (name,))
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()

    def _fire(self, name: str) -> None:
        with self._lock:
            self._timers = {t for t in self._timers if t.is_alive() and t is not threading.current_thread()}
        self._reconcile(name)

    def _reconcile(self, name: str) -> None:
        """Make the connector's instances match its target state and pending restarts; safe to run any time."""
        with self._reconcile_lock:
            with self._lock:
                connector = self._connectors.get(name)
                if connector is None:
                    return
                to_stop, to_start = self._plan(connector)
                # Stopping shuts tasks down completely (their consumers leave the group) before the
                # status reads STOPPED, so offsets can be altered then; other changes need not wait.
                close_timeout_s = 30.0 if connector.target == "STOPPED" else 0.0
            _stop_runners(to_stop, close_timeout_s)
            with self._lock:
                if self._connectors.get(name) is not connector:
                    return
                if connector.target == "STOPPED":
                    connector.status_known = True
                    connector.tasks.clear()
                    connector.state, connector.trace = "STOPPED", None
                    connector.restart_pending = connector.reconfigure_pending = False
                    return
                state = _STATE_FOR_TARGET[connector.target]
                for task_id in to_start:
                    slot = connector.tasks.get(task_id)
                    if slot is None or slot.runner is not None:
                        continue
                    slot.restart_pending = False
                    slot.started.clear()
                    slot.runner = _SinkTaskRunner(self, name, task_id, connector.settings, state)
                    slot.runner.start()

    def _plan(self, connector: _Connector) -> tuple[list[_SinkTaskRunner], list[int]]:
        """Under the lock: update states and say which task runners to stop and which tasks to start."""
        state = _STATE_FOR_TARGET[connector.target]
        to_stop: list[_SinkTaskRunner] = []
        if connector.target == "STOPPED":
            for slot in connector.tasks.values():
                if slot.runner is not None:
                    to_stop.append(slot.runner)
                    slot.runner = None
            return to_stop, []
        connector.status_known = True
        if connector.reconfigure_pending:
            to_stop = [slot.runner for slot in connector.tasks.values() if slot.runner]
            connector.tasks.clear()
            connector.reconfigure_pending = False
            connector.restart_pending = True
        if connector.restart_pending or connector.state != "FAILED":
            connector.state, connector.trace = state, None
            connector.restart_pending = False
        if not connector.tasks:
            connector.tasks = {i: _TaskSlot(i) for i in range(connector.settings.tasks_max)}
        to_start: list[int] = []
        for slot in connector.tasks.values():
            if slot.runner is None and slot.state != "FAILED":
                to_start.append(slot.id)
            elif slot.restart_pending:
                if slot.runner is not None:
                    to_stop.append(slot.runner)
                    slot.runner = None
                to_start.append(slot.id)
            elif slot.runner is not None:
                slot.runner.desired = state
        return to_stop, to_start

    def _task_reported(self, runner: _SinkTaskRunner, state: str) -> None:
        with self._lock:
            slot = self._slot_of(runner)
            if slot is not None:
                slot.state, slot.trace = state, None
                slot.started.set()

    def _task_failed(self, runner: _SinkTaskRunner, trace: str) -> None:
        with self._lock:
            slot = self._slot_of(runner)
            if slot is not None:
                slot.state, slot.trace, slot.runner = "FAILED", trace, None
                slot.started.set()

    def _slot_of(self, runner: _SinkTaskRunner) -> _TaskSlot | None:
        connector = self._connectors.get(runner.connector)
        slot = connector.tasks.get(runner.task_id) if connector else None
        return slot if slot is not None and slot.runner is runner else None

    def _poison_strikes(self, name: str) -> bool:
        """Whether the poison record fails the task this time (``kerr.fail.times`` bounds how often)."""
        with self._lock:
            connector = self._connectors.get(name)
            if connector is None:
                return False
            limit = connector.settings.poison_times
            if 0 <= limit <= connector.poison_failures:
                return False
            connector.poison_failures += 1
            return True

    def _file_lock(self, path: Path) -> threading.Lock:
        with self._lock:
            return self._file_locks.setdefault(path, threading.Lock())

    # REST operations, one per endpoint ----------------------------------------------------------------

    def server_info(self) -> dict[str, Any]:
        return {
            "version": f"{__version__}-kerr-standin",
            "commit": "kerr-standin",
            "kafka_cluster_id": self._cluster_id(),
        }

    def _cluster_id(self) -> str | None:
        if self._kafka_cluster_id is None:
            try:
                cluster = self._admin_client().describe_cluster(request_timeout=5).result(timeout=5)
                self._kafka_cluster_id = str(cluster.cluster_id) if cluster.cluster_id else None
            except Exception:
                log.warning("cannot describe the Kafka cluster at %s", self.bootstrap_servers, exc_info=True)
        return self._kafka_cluster_id

    def list_connectors(self, expand: list[str]) -> Any:
        with self._lock:
            names = sorted(self._connectors)
            if not expand:
                return names
            out: dict[str, Any] = {}
            for name in names:
                expansions: dict[str, Any] = {}
                try:
                    for kind in expand:
                        if kind == "status":
                            expansions["status"] = self.status(name)
                        elif kind == "info":
                            expansions["info"] = self.info(name)
                except RestError:
                    continue
                out[name] = expansions
            return out

    def create_connector(
        self, name: str, config: dict[str, str], initial_state: str = "RUNNING", must_be_new: bool = False
    ) -> tuple[bool, dict[str, Any]]:
        """Create or reconfigure; returns (created, info body)."""
        self._herder_gate(can_conflict=True)
        included = config.get("name")
        if included is not None and included != name:
            raise RestError(
                400, f"Connector name configuration ({included}) doesn't match connector name in the URL ({name})"
            )
        config["name"] = name
        settings = SinkSettings.parse(config, self.data_dir)
        with self._lock:
            existing = self._connectors.get(name)
            if existing is not None:
                if must_be_new:
                    raise RestError(409, f"Connector {name} already exists")
                existing.config, existing.settings = config, settings
                existing.reconfigure_pending = True
                existing.poison_failures = 0
                created = False
            else:
                target = _TARGET_FOR_INITIAL_STATE.get(initial_state.upper())
                if target is None:
                    raise RestError(400, f"Invalid initial_state {initial_state}: use RUNNING, PAUSED or STOPPED")
                self._connectors[name] = _Connector(name=name, config=config, settings=settings, target=target)
                created = True
            body = self.info(name)
        self._schedule(name)
        return created, body

    def info(self, name: str) -> dict[str, Any]:
        with self._lock:
            connector = self._get(name, "Connector {} not found")
            return {
                "name": name,
                "config": dict(connector.config),
                "tasks": [{"connector": name, "task": i} for i in sorted(connector.tasks)],
                "type": "sink",
            }

    def config(self, name: str) -> dict[str, str]:
        with self._lock:
            return dict(self._get(name, "Connector {} not found").config)

    def status(self, name: str) -> dict[str, Any]:
        with self._lock:
            connector = self._connectors.get(name)
            if connector is None or not connector.status_known:
                raise _not_found(f"No status found for connector {name}")
            return {
                "name": name,
                "connector": self._instance(connector.state, connector.trace),
                "tasks": [
                    {"id": slot.id, **self._instance(slot.state, slot.trace)}
                    for slot in sorted(connector.tasks.values(), key=lambda s: s.id)
                ],
                "type": "sink",
            }

    def task_status(self, name: str, task_id: int) -> dict[str, Any]:
        with self._lock:
            connector = self._connectors.get(name)
            slot = connector.tasks.get(task_id) if connector else None
            if slot is None:
                raise _not_found(f"No status found for task {name}-{task_id}")
            return {"id": task_id, **self._instance(slot.state, slot.trace)}

    def _instance(self, state: str, trace: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"state": state, "worker_id": self.worker_id}
        if trace:
            body["trace"] = trace
        return body

    def tasks(self, name: str) -> list[dict[str, Any]]:
        self._herder_gate(can_conflict=False)
        with self._lock:
            connector = self._get(name, "Connector {} not found")
            task_config = {**connector.config, "task.class": SINK_TASK_CLASS}
            return [
                {"id": {"connector": name, "task": i}, "config": dict(task_config)} for i in sorted(connector.tasks)
            ]

    def set_target(self, name: str, target: str) -> None:
        """Pause and resume: record the target state; the worker applies it later (202)."""
        with self._lock:
            connector = self._get(name, "Unknown connector {}")
            connector.target = target
        self._schedule(name)

    def stop_connector(self, name: str) -> None:
        self._herder_gate(can_conflict=True)
        self.set_target(name, "STOPPED")

    def restart(self, name: str, include_tasks: bool, only_failed: bool) -> dict[str, Any] | None:
        """KIP-745: both flags false restarts the connector instance synchronously; otherwise plan and 202."""
        self._herder_gate(can_conflict=True)
        with self._lock:
            connector = self._get(name, "Unknown connector: {}")
            if not include_tasks and not only_failed:
                connector.restart_pending = True
                connector.state = "RESTARTING"
                plan = None
            else:
                if not connector.status_known:
                    raise _not_found(f"Status for connector {name} not found")
                if not only_failed or connector.state == "FAILED":
                    connector.restart_pending = True
                    connector.state = "RESTARTING"
                for slot in connector.tasks.values():
                    if include_tasks and (not only_failed or slot.state == "FAILED"):
                        slot.restart_pending = True
                        slot.state, slot.trace = "RESTARTING", None
                plan = self.status(name)
        if plan is not None:
            self._schedule(name)
            return plan
        time.sleep(self.transition_delay_s)
        self._reconcile(name)
        return None

    def restart_task(self, name: str, task_id: int) -> None:
        """Stop and start one task before answering, as a worker does (204)."""
        self._herder_gate(can_conflict=True)
        with self._lock:
            connector = self._get(name, "Unknown connector: {}")
            slot = connector.tasks.get(task_id)
            if slot is None:
                raise _not_found(f"Unknown task: {name}-{task_id}")
            slot.restart_pending = True
            slot.state, slot.trace = "RESTARTING", None
            slot.started.clear()
        time.sleep(self.transition_delay_s)
        self._reconcile(name)
        slot.started.wait(timeout=30)

    def delete(self, name: str) -> None:
        self._herder_gate(can_conflict=True)
        with self._lock:
            connector = self._get(name, "Connector {} not found")
            del self._connectors[name]
            runners = [slot.runner for slot in connector.tasks.values() if slot.runner]
        _stop_runners(runners)

    def _admin_client(self) -> Any:
        from confluent_kafka.admin import AdminClient

        with self._lock:
            if self._admin is None:
                self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
            return self._admin

    def _group_offsets(self, name: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        request = ConsumerGroupTopicPartitions(f"connect-{name}")
        future = self._admin_client().list_consumer_group_offsets([request], request_timeout=10)[request.group_id]
        result = future.result(timeout=15)
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    def offsets(self, name: str) -> dict[str, Any]:
        self._herder_gate(can_conflict=False)
        with self._lock:
            self._get(name, "Connector {} not found")
        try:
            committed = self._group_offsets(name)
        except Exception as exc:
            raise RestError(500, f"Failed to retrieve consumer group offsets for sink connector {name}: {exc}") from exc
        return {
            "offsets": [
                {"partition": {"kafka_topic": topic, "kafka_partition": partition}, "offset": {"kafka_offset": offset}}
                for (topic, partition), offset in sorted(committed.items())
            ]
        }

    def _require_stopped(self, name: str) -> None:
        self._herder_gate(can_conflict=True)
        with self._lock:
            connector = self._get(name, "Connector {} not found")
            if connector.target != "STOPPED" or connector.tasks:
                raise RestError(
                    400,
                    "Connectors must be in the STOPPED state before their offsets can be modified. This can be done "
                    f"for the specified connector by issuing a 'PUT' request to the '/connectors/{name}/stop' endpoint",
                )

    def alter_offsets(self, name: str, body: Any) -> dict[str, str]:
        entries = body.get("offsets") if isinstance(body, dict) else None
        if not entries:
            raise RestError(400, "Partitions / offsets need to be provided for an alter offsets request")
        self._require_stopped(name)
        wanted = _parse_sink_offsets(entries)
        try:
            current = self._group_offsets(name)
            if any(offset is None for offset in wanted.values()):
                self._delete_group(name)
                merged = {tp: off for tp, off in current.items() if tp not in wanted}
            else:
                merged = {}
            merged.update({tp: off for tp, off in wanted.items() if off is not None})
            if merged:
                self._commit_group(name, merged)
        except RestError:
            raise
        except Exception as exc:
            raise RestError(500, f"Failed to alter consumer group offsets for sink connector {name}: {exc}") from exc
        return {"message": ALTER_OFFSETS_MESSAGE}

    def reset_offsets(self, name: str) -> dict[str, str]:
        self._require_stopped(name)
        try:
            self._delete_group(name)
        except Exception as exc:
            raise RestError(500, f"Failed to reset consumer group offsets for sink connector {name}: {exc}") from exc
        return {"message": RESET_OFFSETS_MESSAGE}

    def _delete_group(self, name: str) -> None:
        from confluent_kafka import KafkaError, KafkaException

        group = f"connect-{name}"
        try:
            self._admin_client().delete_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError.GROUP_ID_NOT_FOUND:
                return
            raise

    def _commit_group(self, name: str, offsets: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap_servers, "group.id": f"connect-{name}", "log_level": 0}
        )
        try:
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())], asynchronous=False
            )
        finally:
            consumer.close()


def _parse_sink_offsets(entries: Any) -> dict[tuple[str, int], int | None]:
    """Validate a sink connector's offsets body: partitions by kafka_topic/kafka_partition, offset kafka_offset."""
    if not isinstance(entries, list):
        raise RestError(400, "The 'offsets' field must be a list of partition / offset pairs")
    parsed: dict[tuple[str, int], int | None] = {}
    for entry in entries:
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(partition, dict):
            raise RestError(400, "The partition for a sink connector offset cannot be null or missing")
        topic, number = partition.get("kafka_topic"), partition.get("kafka_partition")
        if not isinstance(topic, str) or not isinstance(number, int) or isinstance(number, bool):
            raise RestError(
                400,
                "The partition for a sink connector offset must contain the keys 'kafka_topic' (a string) "
                "and 'kafka_partition' (an integer)",
            )
        offset = entry.get("offset")
        if offset is None:
            parsed[(topic, number)] = None
            continue
        value = offset.get("kafka_offset") if isinstance(offset, dict) else None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise RestError(
                400, "The offset for a sink connector must contain the key 'kafka_offset' with a non-negative integer"
            )
        parsed[(topic, number)] = value
    return parsed


def _stop_runners(runners: list[_SinkTaskRunner], close_timeout_s: float = 0.0) -> None:
    """Stop the tasks and return once none consumes; give their consumers ``close_timeout_s`` to leave the group."""
    for runner in runners:
        runner.stop()
    for runner in runners:
        runner.stopped.wait(timeout=30)
    deadline = time.monotonic() + close_timeout_s
    for runner in runners:
        runner.join(timeout=max(0.0, deadline - time.monotonic()))


def _flag(query: dict[str, list[str]], name: str) -> bool:
    """A JAX-RS Boolean query parameter: true only for 'true' in any case."""
    values = query.get(name) or [""]
    return values[0].strip().lower() == "true"


Answer = tuple[int, Any, dict[str, str]]


def _empty(status: int, action: Callable[..., None], *args: Any) -> Callable[[], Answer]:
    """An endpoint that answers ``status`` with no body once ``action`` has run."""

    def run() -> Answer:
        action(*args)
        return status, None, {}

    return run


class _Handler(BaseHTTPRequestHandler):
    """Routes requests to the stand-in and writes Connect-shaped answers."""

    protocol_version = "HTTP/1.1"
    server_version = "KafkaConnectStandIn"
    timeout = 30

    @property
    def standin(self) -> ConnectStandIn:
        standin: ConnectStandIn = self.server.standin  # type: ignore[attr-defined]
        return standin

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        segments = [unquote(s) for s in split.path.split("/") if s]
        query = parse_qs(split.query, keep_blank_values=True)
        self.standin.requests.append(RecordedRequest(method, split.path, split.query, dict(self.headers.items())))
        body = self._read_body()
        try:
            status, payload, headers = self._route(method, segments, query, body)
        except RestError as exc:
            status, payload, headers = exc.status, {"error_code": exc.status, "message": exc.message}, {}
        except Exception as exc:
            log.exception("Kafka Connect stand-in failed on %s %s", method, self.path)
            status, payload, headers = 500, {"error_code": 500, "message": str(exc)}, {}
        self._send(status, payload, headers)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    @staticmethod
    def _json(body: bytes) -> Any:
        try:
            return json.loads(body or b"null")
        except ValueError as exc:
            raise RestError(400, f"Request body is not valid JSON: {exc}") from exc

    def _route(self, method: str, seg: list[str], query: dict[str, list[str]], body: bytes) -> Answer:
        standin = self.standin
        methods: dict[str, Callable[[], Answer]] = {}
        if not seg:
            methods = {"GET": lambda: (200, standin.server_info(), {})}
        elif seg == ["connector-plugins"]:
            methods = {
                "GET": lambda: (200, [{"class": SINK_CONNECTOR_CLASS, "type": "sink", "version": __version__}], {})
            }
        elif seg[0] == "connectors":
            methods = self._connector_routes(seg[1:], query, body)
        if not methods:
            raise RestError(404, "HTTP 404 Not Found")
        action = methods.get(method)
        if action is None:
            raise RestError(405, "HTTP 405 Method Not Allowed")
        return action()

    def _connector_routes(
        self, seg: list[str], query: dict[str, list[str]], body: bytes
    ) -> dict[str, Callable[[], Answer]]:
        standin = self.standin
        if not seg:
            return {
                "GET": lambda: (200, standin.list_connectors(query.get("expand", [])), {}),
                "POST": lambda: self._create(body),
            }
        name, rest = seg[0], seg[1:]
        if not rest:
            return {
                "GET": lambda: (200, standin.info(name), {}),
                "DELETE": _empty(204, standin.delete, name),
            }
        if rest == ["config"]:
            return {"GET": lambda: (200, standin.config(name), {}), "PUT": lambda: self._put_config(name, body)}
        if rest == ["status"]:
            return {"GET": lambda: (200, standin.status(name), {})}
        if rest == ["pause"]:
            return {"PUT": _empty(202, standin.set_target, name, "PAUSED")}
        if rest == ["resume"]:
            return {"PUT": _empty(202, standin.set_target, name, "STARTED")}
        if rest == ["stop"]:
            return {"PUT": _empty(204, standin.stop_connector, name)}
        if rest == ["restart"]:
            return {"POST": lambda: self._restart(name, query)}
        if rest == ["tasks"]:
            return {"GET": lambda: (200, standin.tasks(name), {})}
        if rest == ["offsets"]:
            return {
                "GET": lambda: (200, standin.offsets(name), {}),
                "PATCH": lambda: (200, standin.alter_offsets(name, self._json(body)), {}),
                "DELETE": lambda: (200, standin.reset_offsets(name), {}),
            }
        if len(rest) == 3 and rest[0] == "tasks" and rest[1].lstrip("-").isdigit():
            task_id = int(rest[1])
            if rest[2] == "status":
                return {"GET": lambda: (200, standin.task_status(name, task_id), {})}
            if rest[2] == "restart":
                return {"POST": _empty(204, standin.restart_task, name, task_id)}
        return {}

    def _create(self, body: bytes) -> Answer:
        request = self._json(body)
        if not isinstance(request, dict) or not isinstance(request.get("config"), dict):
            raise RestError(400, "Request body must be a JSON object with 'name' and 'config'")
        name = str(request.get("name") or "").strip()
        if not name:
            raise RestError(400, "Connector name must not be empty")
        config = {str(k): str(v) for k, v in request["config"].items()}
        _, info = self.standin.create_connector(
            name, config, str(request.get("initial_state") or "RUNNING"), must_be_new=True
        )
        return 201, info, {"Location": f"/connectors/{name}"}

    def _put_config(self, name: str, body: bytes) -> Answer:
        config = self._json(body)
        if not isinstance(config, dict):
            raise RestError(400, "Request body must be a JSON object of connector configuration")
        created, info = self.standin.create_connector(name, {str(k): str(v) for k, v in config.items()})
        if created:
            return 201, info, {"Location": f"/connectors/{name}"}
        return 200, info, {}

    def _restart(self, name: str, query: dict[str, list[str]]) -> Answer:
        plan = self.standin.restart(name, _flag(query, "includeTasks"), _flag(query, "onlyFailed"))
        return (204, None, {}) if plan is None else (202, plan, {})

    def _send(self, status: int, payload: Any, headers: dict[str, str]) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        if status != 204:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if status != 204:
            self.wfile.write(data)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_kerr.local.connect",
        description="Kafka Connect REST stand-in for development and tests only (not Kafka Connect).",
    )
    parser.add_argument(
        "--bootstrap-servers",
        default=resolve_bootstrap_servers(),
        help="broker the sink connectors consume from (default: $KAFKA_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8083, help="port to listen on, 0 for a free one (default: 8083)")
    parser.add_argument(
        "--data-dir",
        default=str(state_dir() / "connect"),
        help="where relative sink 'file' paths go (default: $KERR_HOME/connect or ./.kerr/connect)",
    )
    parser.add_argument(
        "--transition-delay", type=float, default=1.0, help="seconds a state change takes to show in /status"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM or SIGINT; prints the URL once requests are accepted."""
    args = build_parser().parse_args(argv)
    if not args.bootstrap_servers:
        print("kerr connect stand-in: --bootstrap-servers (or KAFKA_BOOTSTRAP_SERVERS) is required", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    try:
        standin = ConnectStandIn(
            args.bootstrap_servers,
            args.data_dir,
            port=args.port,
            host=args.host,
            transition_delay_s=args.transition_delay,
        ).start()
    except OSError as exc:
        print(f"kerr connect stand-in: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    print(f"Kafka Connect stand-in (development and tests only) listening on {standin.url}", flush=True)
    done.wait()
    standin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
