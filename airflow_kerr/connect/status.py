"""Reading a Kafka Connect status body against the state a caller waits for.

Pure functions on the ``GET /connectors/{c}/status`` body, shared by the
poke-style waits, the deferrable trigger and the sensor so all three decide
"done" the same way: :func:`check_poll` judges one poll, and :class:`StatusWatch`
carries a wait across polls (the last status each connector showed). A status body looks like::

    {"name": "orders-sink",
     "connector": {"state": "RUNNING", "worker_id": "10.0.0.1:8083", "trace": "..."},
     "tasks": [{"id": 0, "state": "RUNNING", "worker_id": "10.0.0.1:8083"}],
     "type": "sink"}

Unknown fields (``version`` on newer workers) are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from airflow_kerr.connect.errors import TRANSIENT_ERRORS, KafkaConnectError

STATES = ("UNASSIGNED", "RUNNING", "PAUSED", "FAILED", "RESTARTING", "STOPPED")

#: What to do with a FAILED instance while waiting: keep waiting, report it and not wait for it, or give up.
FailedPolicy = Literal["wait", "report", "fail"]


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one status body against a target."""

    reached: bool
    waiting_on: tuple[str, ...] = ()
    fatal: str | None = None


@dataclass(frozen=True)
class ConnectorTarget:
    """The state a connector (and optionally its tasks) must show.

    ``task_ids`` limits the check to those tasks (a task restart); a STOPPED
    target is met only when the connector lists no tasks, since tasks are never
    STOPPED, and any other target only once tasks are listed: a connector resumed
    from STOPPED reads RUNNING with no tasks until it has started them again, and
    then lists them one by one as each starts. So where the caller also read the
    connector's task configs (``GET /connectors/{c}/tasks``: every task it will run),
    each of those must be listed too (see :attr:`needs_task_configs`).
    FAILED instances follow ``failed_connector`` / ``failed_tasks``.
    """

    state: str
    include_tasks: bool = True
    task_ids: tuple[int, ...] | None = None
    failed_tasks: FailedPolicy = "wait"
    failed_connector: FailedPolicy = "wait"
    hint: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(
                f"target state {self.state!r} is not a Kafka Connect state; use one of {', '.join(STATES)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for a trigger's serialized kwargs."""
        data = asdict(self)
        data["task_ids"] = list(self.task_ids) if self.task_ids is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConnectorTarget:
        task_ids = data.get("task_ids")
        return cls(**{**data, "task_ids": tuple(task_ids) if task_ids is not None else None})

    @property
    def needs_task_configs(self) -> bool:
        """Whether "every task" must be known from the task configs: all tasks are checked, and some must run."""
        return self.include_tasks and self.task_ids is None and self.state != "STOPPED"

    def evaluate(self, status: dict[str, Any], configured_tasks: Sequence[int] | None = None) -> Verdict:
        """Whether ``status`` shows the target, and what is still awaited; ``configured_tasks``: the configs' ids."""
        name = status.get("name", "?")
        waiting: list[str] = []
        given_up: list[str] = []
        state = (status.get("connector") or {}).get("state", "UNKNOWN")
        if state != self.state:
            if state == "FAILED" and self.failed_connector == "fail":
                given_up.append(f"connector {name}")
            elif not (state == "FAILED" and self.failed_connector == "report"):
                waiting.append(f"connector is {state}")
        if self.include_tasks:
            task_waiting, task_given_up = self._check_tasks(status.get("tasks") or [], configured_tasks)
            waiting.extend(task_waiting)
            given_up.extend(f"task {task_id} of {name}" for task_id in task_given_up)
        fatal = None
        if given_up:
            verb = "is" if len(given_up) == 1 else "are"
            fatal = f"{', '.join(given_up)} {verb} FAILED and cannot become {self.state} this way. {self.hint}".strip()
        return Verdict(
            reached=not waiting and fatal is None,
            waiting_on=tuple(waiting),
            fatal=fatal,
        )

    def _check_tasks(
        self, tasks: list[dict[str, Any]], configured: Sequence[int] | None
    ) -> tuple[list[str], list[Any]]:
        """(what is still awaited, ids of FAILED tasks that ``failed_tasks="fail"`` gives up on)."""
        waiting: list[str] = []
        given_up: list[Any] = []
        listed = {int(task.get("id", -1)) for task in tasks}
        if not tasks and self.state != "STOPPED":
            waiting.append("no tasks listed yet")
        elif configured is not None and self.needs_task_configs:
            waiting.extend(f"task {task_id} is not listed yet" for task_id in configured if task_id not in listed)
            # A task the configs do not name yet: they were read before the connector wrote its new ones (Connect
            # 3.9, resumed from STOPPED, listed task 1 RUNNING while its configs still named none), so wait.
            unnamed = sorted(listed - set(configured))
            waiting.extend(f"task {task_id} is listed but not in the task configs yet" for task_id in unnamed)
        if self.task_ids is not None:
            tasks = [task for task in tasks if int(task.get("id", -1)) in self.task_ids]
            waiting.extend(f"task {task_id} is not listed" for task_id in self.task_ids if task_id not in listed)
        for task in tasks:
            state = task.get("state", "UNKNOWN")
            if state == self.state or (state == "FAILED" and self.failed_tasks == "report"):
                continue
            if state == "FAILED" and self.failed_tasks == "fail":
                given_up.append(task.get("id"))
            else:
                waiting.append(f"task {task.get('id')} is {state}")
        return waiting, given_up


@dataclass(frozen=True)
class Poll:
    """Where one connector stands after one status poll; ``waiting`` and ``fatal`` are None when it is done.

    The operators' worker-side wait, the trigger and the sensor all read a poll
    through :func:`check_poll`, so they agree on what is done, what is worth
    waiting for (a transient error included) and what is not.
    """

    status: dict[str, Any] | None
    waiting: str | None = None
    fatal: str | None = None

    @property
    def done(self) -> bool:
        return self.waiting is None and self.fatal is None


def check_poll(
    target: ConnectorTarget, reading: dict[str, Any] | KafkaConnectError, configured_tasks: Sequence[int] | None = None
) -> Poll:
    """Judge one poll: ``reading`` is the status body, or the transient error (``TRANSIENT_ERRORS``) met instead.

    A transient error (worker restarting, rebalancing, overloaded) is something
    to wait through, never a verdict; the callers let every other error propagate.
    """
    if isinstance(reading, KafkaConnectError):
        if not isinstance(reading, TRANSIENT_ERRORS):
            raise reading
        return Poll(status=None, waiting=f"status unavailable: {reading}")
    verdict = target.evaluate(reading, configured_tasks)
    if verdict.fatal:
        return Poll(status=reading, fatal=verdict.fatal)
    if not verdict.reached:
        return Poll(status=reading, waiting=f"{describe(reading)} (waiting: {', '.join(verdict.waiting_on)})")
    return Poll(status=reading)


class StatusWatch:
    """A wait on several connectors across polls: the last status each showed and what each still awaits.

    A poll that fails transiently (a worker restarting, a request cut by the
    wait's deadline) does not erase what earlier polls saw: the reason then
    reads "connector RUNNING; tasks 0=RUNNING (waiting: ...); last poll: timed out"
    (or, before any status was read, the earlier error and then the last one), so a
    timeout still says which state the connector was stuck in, or why it was unreadable.
    """

    def __init__(self, targets: dict[str, ConnectorTarget]) -> None:
        self.targets = targets
        #: The last status body each connector showed.
        self.statuses: dict[str, dict[str, Any]] = {}
        #: What each connector still awaits after the latest poll; empty once all are done.
        self.pending: dict[str, str] = dict.fromkeys(targets, "not polled yet")
        #: What the last status each connector showed still waited for ("" once it met the target).
        self._last_seen: dict[str, str] = {}
        #: The last transient error of each connector since its last status, as its poll described it.
        self._last_error: dict[str, str] = {}

    def needs_task_configs(self, name: str) -> bool:
        """Whether a poll of ``name`` should read its task configs too (:attr:`ConnectorTarget.needs_task_configs`)."""
        return self.targets[name].needs_task_configs

    def record(
        self, name: str, reading: dict[str, Any] | KafkaConnectError, configured_tasks: Sequence[int] | None = None
    ) -> str | None:
        """Judge one connector's poll; return the reason to give up (FAILED where not allowed), else None.

        Raises a non-transient ``KafkaConnectError`` given as ``reading`` (the connector is gone).
        ``configured_tasks`` are the ids of its task configs, read before the status, when
        :meth:`needs_task_configs` says so.
        """
        poll = check_poll(self.targets[name], reading, configured_tasks)
        if poll.status is not None:
            self.statuses[name] = poll.status
            self._last_error.pop(name, None)
            self._last_seen[name] = poll.waiting or ""
        if poll.fatal:
            return poll.fatal
        if poll.done:
            self.pending.pop(name, None)
            return None
        waiting = poll.waiting or ""
        if poll.status is None:
            earlier = self._last_seen.get(name) or self._last_error.get(name)
            self._last_error[name] = waiting
            if earlier and earlier != waiting:
                waiting = f"{earlier}; last poll: {reading}"
        self.pending[name] = waiting
        return None

    def describe_pending(self) -> str:
        """``name: reason; name: reason`` for a log line."""
        return "; ".join(f"{name}: {why}" for name, why in self.pending.items())


def failed_instances(status: dict[str, Any]) -> list[dict[str, Any]]:
    """Every FAILED instance of a status body: ``{"connector", "task" (None for the connector), "trace"}``."""
    name = status.get("name", "?")
    connector = status.get("connector") or {}
    failed = []
    if connector.get("state") == "FAILED":
        failed.append({"connector": name, "task": None, "trace": connector.get("trace", "")})
    failed.extend(
        {"connector": name, "task": task.get("id"), "trace": task.get("trace", "")}
        for task in status.get("tasks") or []
        if task.get("state") == "FAILED"
    )
    return failed


def describe(status: dict[str, Any]) -> str:
    """One line for logs: ``connector PAUSED; tasks 0=PAUSED 1=FAILED``."""
    connector = (status.get("connector") or {}).get("state", "UNKNOWN")
    tasks = " ".join(f"{t.get('id')}={t.get('state')}" for t in status.get("tasks") or [])
    return f"connector {connector}; tasks {tasks or 'none'}"


def first_line(trace: str | None) -> str:
    """The first line of a Java trace: the exception and its message."""
    return (trace or "").strip().splitlines()[0] if (trace or "").strip() else "(no trace)"
