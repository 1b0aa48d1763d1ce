"""Reading a Kafka Connect status body against the state a caller waits for.

Pure functions on the ``GET /connectors/{c}/status`` body, shared by the
poke-style waits, the deferrable trigger and the sensor so all three decide
"done" the same way. A status body looks like::

    {"name": "orders-sink",
     "connector": {"state": "RUNNING", "worker_id": "10.0.0.1:8083", "trace": "..."},
     "tasks": [{"id": 0, "state": "RUNNING", "worker_id": "10.0.0.1:8083"}],
     "type": "sink"}

Unknown fields (``version`` on newer workers) are ignored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

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
    STOPPED. FAILED instances follow ``failed_connector`` / ``failed_tasks``.
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

    def evaluate(self, status: dict[str, Any]) -> Verdict:
        """Whether ``status`` shows the target, and what is still awaited."""
        name = status.get("name", "?")
        waiting: list[str] = []
        fatal: str | None = None
        state = (status.get("connector") or {}).get("state", "UNKNOWN")
        if state != self.state:
            if state == "FAILED" and self.failed_connector == "fail":
                fatal = f"connector {name} is FAILED and cannot become {self.state} this way. {self.hint}".strip()
            elif not (state == "FAILED" and self.failed_connector == "report"):
                waiting.append(f"connector is {state}")
        if self.include_tasks:
            waiting.extend(self._check_tasks(status.get("tasks") or []))
        return Verdict(
            reached=not waiting and fatal is None,
            waiting_on=tuple(waiting),
            fatal=fatal,
        )

    def _check_tasks(self, tasks: list[dict[str, Any]]) -> list[str]:
        waiting: list[str] = []
        listed = {int(task.get("id", -1)) for task in tasks}
        if self.task_ids is not None:
            tasks = [task for task in tasks if int(task.get("id", -1)) in self.task_ids]
            waiting.extend(f"task {task_id} is not listed" for task_id in self.task_ids if task_id not in listed)
        for task in tasks:
            state = task.get("state", "UNKNOWN")
            if state == self.state or (state == "FAILED" and self.failed_tasks == "report"):
                continue
            waiting.append(f"task {task.get('id')} is {state}")
        return waiting


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
