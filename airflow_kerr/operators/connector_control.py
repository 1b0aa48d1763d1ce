"""Operators that pause, resume, stop or restart Kafka Connect connectors and wait for the change to show.

Connect applies these changes asynchronously, so each operator can wait, with a
timeout, until ``GET /connectors/{c}/status`` shows the result:

- pause: the connector and every task PAUSED; FAILED tasks stay FAILED until
  restarted, so they are reported (log and the ``failed_tasks`` XCom), not waited on;
- resume: the connector and every task RUNNING, FAILED tasks reported the same way;
- stop: the connector STOPPED with no tasks;
- restart: RUNNING again (PAUSED or STOPPED if the connector was, since a restart
  keeps the target state).

The wait is poke-style in the worker, or deferrable (``deferrable=True``) on the
triggerer. Each operator returns the final status body (XCom); given a list of
connectors or ``connector_regex`` it acts on each and returns ``{name: status}``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, ClassVar

from airflow.sdk import BaseOperator, Context

from airflow_kerr.compat import AirflowException, AirflowFailException, conf
from airflow_kerr.connect.errors import TRANSIENT_ERRORS, ConnectorStateTimeout, KafkaConnectError
from airflow_kerr.connect.status import ConnectorTarget, StatusWatch, describe, failed_instances, first_line
from airflow_kerr.hooks.kafka_connect import DEFAULT_REBALANCE_RETRY_BUDGET_S, KafkaConnectHook
from airflow_kerr.kafka.tolerance import seconds
from airflow_kerr.triggers.base import defer_until_deadline
from airflow_kerr.triggers.connector_state import ConnectorStateTrigger

_RESTART_HINT = "Restart it with RestartConnectorOperator(include_tasks=True, only_failed=True)."


def _seconds(value: timedelta | float, name: str) -> float:
    duration = seconds(value)
    if duration <= 0:
        raise ValueError(f"{name} must be positive, not {value!r}")
    return duration


def _state_kept_by_restart(status: dict[str, Any]) -> str:
    """A restart brings instances back in the connector's target state: PAUSED and STOPPED stay so."""
    state = (status.get("connector") or {}).get("state")
    return state if state in ("PAUSED", "STOPPED") else "RUNNING"


class BaseConnectorControlOperator(BaseOperator):
    """Shared selection, waiting and result handling of the connector control operators.

    :param connector: a connector name, or a list of names (templated).
    :param connector_regex: instead of ``connector``: every connector whose whole name matches (templated).
    :param kafka_connect_conn_id: the ``kafka_connect`` connection.
    :param wait_for_completion: wait until ``/status`` shows the change.
    :param wait_timeout: how long to wait, in seconds or as a timedelta.
    :param poll_interval: seconds between status polls while waiting.
    :param deferrable: wait on the triggerer instead of in the worker.
    :param strimzi_managed: the connector is a Strimzi KafkaConnector: refuse to change its state
        through REST, which the Strimzi operator would revert, and say what to change instead.
    :param rebalance_retry_budget: seconds to keep retrying a 409 (rebalance) before failing.
    """

    template_fields: Sequence[str] = ("connector", "connector_regex", "kafka_connect_conn_id")
    ui_color = "#dbe9f6"

    #: The verb used in logs and errors.
    action: ClassVar[str] = ""
    #: The KafkaConnector ``spec.state`` that does the same on Strimzi; None where Strimzi does not own it.
    strimzi_state: ClassVar[str | None] = None

    def __init__(  # noqa: PLR0913 - an operator's keyword arguments, written by DAG authors
        self,
        *,
        connector: str | list[str] | None = None,
        connector_regex: str | None = None,
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
        wait_for_completion: bool = True,
        wait_timeout: timedelta | float = 300.0,
        poll_interval: float = 5.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        strimzi_managed: bool = False,
        rebalance_retry_budget: float = DEFAULT_REBALANCE_RETRY_BUDGET_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if bool(connector) == bool(connector_regex):
            raise ValueError(
                f"{self.task_id}: give exactly one of 'connector' (a name or a list) and 'connector_regex'"
            )
        self.connector = connector
        self.connector_regex = connector_regex
        self.kafka_connect_conn_id = kafka_connect_conn_id
        self.wait_for_completion = wait_for_completion
        self.wait_timeout = _seconds(wait_timeout, "wait_timeout")
        self.poll_interval = _seconds(poll_interval, "poll_interval")
        self.deferrable = deferrable
        self.strimzi_managed = strimzi_managed
        self.rebalance_retry_budget = rebalance_retry_budget

    # what each operator does ----------------------------------------------------------------------

    def act(self, hook: KafkaConnectHook, connector: str) -> ConnectorTarget:
        """Send the request for one connector and return the state to wait for."""
        raise NotImplementedError

    # shared machinery -------------------------------------------------------------------------------

    def _hook(self) -> KafkaConnectHook:
        return KafkaConnectHook(self.kafka_connect_conn_id, rebalance_retry_budget_s=self.rebalance_retry_budget)

    def _refuse_if_strimzi(self) -> None:
        if not self.strimzi_managed or self.strimzi_state is None:
            return
        what = repr(self.connector) if self.connector else f"the connectors matching {self.connector_regex!r}"
        patch = json.dumps({"spec": {"state": self.strimzi_state}}, separators=(",", ":"))
        raise AirflowFailException(
            f"Not sending a REST {self.action} for {what}: the connector is managed by Strimzi, whose "
            "KafkaConnector resource's spec.state wins, so the Strimzi operator would revert a change made "
            f"through the REST API. Change the KafkaConnector resource instead: set spec.state to "
            f"'{self.strimzi_state}', e.g. kubectl patch kafkaconnector <name> --type merge -p '{patch}'."
        )

    def _select(self, hook: KafkaConnectHook) -> list[str]:
        """The connectors this task acts on: the given names, or those the regex matches in full."""
        if self.connector_regex:
            try:
                pattern = re.compile(self.connector_regex)
            except re.error as exc:
                raise AirflowException(f"connector_regex {self.connector_regex!r} is not a valid regex: {exc}") from exc
            known = sorted(hook.list_connectors())
            names = [name for name in known if pattern.fullmatch(name)]
            if not names:
                raise AirflowException(
                    f"No connector on {hook.base_url} matches connector_regex {self.connector_regex!r}; "
                    f"the worker has {known}"
                )
            return names
        given = [self.connector] if isinstance(self.connector, str) else list(self.connector or [])
        names = list(dict.fromkeys(name.strip() for name in given if name and name.strip()))
        if not names:
            raise AirflowException(f"{self.task_id}: 'connector' rendered to no connector name: {self.connector!r}")
        return names

    def execute(self, context: Context) -> Any:
        self._refuse_if_strimzi()
        with self._hook() as hook:
            if self.wait_for_completion:
                # One budget for asking and waiting: no request (409 retries, a slow worker) outlasts wait_timeout.
                hook.deadline = time.monotonic() + self.wait_timeout
            names = self._select(hook)
            targets = {name: self.act(hook, name) for name in names}
            if not self.wait_for_completion:
                return self._finish(context, {name: hook.get_status(name) for name in names})
            watch = StatusWatch(targets)
            if self.deferrable:
                if self._poll(hook, watch):
                    return self._finish(context, watch.statuses)
                plain = {name: target.to_dict() for name, target in targets.items()}
                defer_until_deadline(
                    self,
                    lambda deadline: ConnectorStateTrigger(
                        plain, deadline, self.poll_interval, self.kafka_connect_conn_id
                    ),
                    timeout_s=self.wait_timeout,
                    poll_interval=self.poll_interval,
                )
            return self._finish(context, self._wait(hook, watch))

    def _poll(self, hook: KafkaConnectHook, watch: StatusWatch) -> bool:
        """Read every connector's status once into ``watch``; True when all meet their targets."""
        for name in watch.targets:
            reading: dict[str, Any] | KafkaConnectError
            configured: list[int] | None = None
            try:
                # The task configs first: a status read after them lists every task they name once all started.
                configured = hook.get_task_ids(name) if watch.needs_task_configs(name) else None
                reading = hook.get_status(name)
            except TRANSIENT_ERRORS as exc:
                reading = exc
            fatal = watch.record(name, reading, configured)
            if fatal:
                raise AirflowException(f"{self.action} of {name}: {fatal}")
        return not watch.pending

    def _wait(self, hook: KafkaConnectHook, watch: StatusWatch) -> dict[str, dict[str, Any]]:
        """Poll until every connector meets its target; the worker-side twin of the trigger."""
        deadline = hook.deadline if hook.deadline is not None else time.monotonic() + self.wait_timeout
        while not self._poll(hook, watch):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConnectorStateTimeout(self._timeout_message(watch.pending, watch.statuses))
            self.log.info("Waiting for %s", watch.describe_pending())
            time.sleep(min(self.poll_interval, remaining))
        return watch.statuses

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger: return the statuses, or fail with what was still awaited."""
        if event.get("status") == "success":
            return self._finish(context, event["statuses"])
        if event.get("status") == "timeout":
            raise ConnectorStateTimeout(self._timeout_message(event.get("pending", {}), event.get("statuses", {})))
        raise AirflowException(f"{self.action} of {self.connector or self.connector_regex}: {event.get('message')}")

    def _timeout_message(self, pending: dict[str, str], statuses: dict[str, dict[str, Any]]) -> str:
        lines = [f"{self.action}: not visible in /status after {self.wait_timeout:g} s"]
        lines += [f"  {name}: {why}" for name, why in pending.items()]
        lines += [
            f"  {f['connector']} {'connector' if f['task'] is None else 'task ' + str(f['task'])} FAILED: "
            f"{first_line(f['trace'])}"
            for f in _failed_instances(statuses)
        ]
        return "\n".join(lines)

    def _finish(self, context: Context, statuses: dict[str, dict[str, Any]]) -> Any:
        """Log and push FAILED instances, then return one status body, or ``{name: status}`` for several."""
        failed = _failed_instances(statuses)
        for entry in failed:
            where = "connector" if entry["task"] is None else f"task {entry['task']}"
            self.log.warning(
                "%s %s is FAILED (not waited on; a pause or resume does not change it): %s. %s",
                entry["connector"],
                where,
                first_line(entry["trace"]),
                _RESTART_HINT,
            )
        if failed:
            context["ti"].xcom_push(key="failed_tasks", value=failed)
        for name, status in statuses.items():
            self.log.info("%s after %s: %s", name, self.action, describe(status))
        if isinstance(self.connector, str):
            return next(iter(statuses.values()))
        return statuses


def _failed_instances(statuses: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for status in statuses.values() for entry in failed_instances(status)]


class PauseConnectorOperator(BaseConnectorControlOperator):
    """Pause connectors (``PUT /connectors/{c}/pause``); pausing a paused connector succeeds.

    Waits until the connector and every task read PAUSED. FAILED tasks (and a
    FAILED connector instance) are reported, not waited on: a pause does not change them.
    """

    action = "pause"
    strimzi_state = "paused"

    def act(self, hook: KafkaConnectHook, connector: str) -> ConnectorTarget:
        hook.pause(connector)
        self.log.info("Asked %s to pause %s", hook.base_url, connector)
        return ConnectorTarget("PAUSED", failed_tasks="report", failed_connector="report")


class ResumeConnectorOperator(BaseConnectorControlOperator):
    """Resume connectors (``PUT /connectors/{c}/resume``), which also starts a STOPPED one; idempotent.

    Waits until the connector and every task read RUNNING. FAILED tasks are
    reported, not waited on; a FAILED connector instance fails the wait at once,
    since only a restart brings it back.
    """

    action = "resume"
    strimzi_state = "running"

    def act(self, hook: KafkaConnectHook, connector: str) -> ConnectorTarget:
        hook.resume(connector)
        self.log.info("Asked %s to resume %s", hook.base_url, connector)
        return ConnectorTarget("RUNNING", failed_tasks="report", failed_connector="fail", hint=_RESTART_HINT)


class StopConnectorOperator(BaseConnectorControlOperator):
    """Stop connectors (``PUT /connectors/{c}/stop``, Kafka 3.5+): tasks shut down, config kept; idempotent.

    Waits until the connector reads STOPPED and lists no tasks. A stopped
    connector's offsets can then be altered or reset.
    """

    action = "stop"
    strimzi_state = "stopped"

    def act(self, hook: KafkaConnectHook, connector: str) -> ConnectorTarget:
        hook.stop(connector)
        self.log.info("Asked %s to stop %s", hook.base_url, connector)
        return ConnectorTarget("STOPPED")


class RestartConnectorOperator(BaseConnectorControlOperator):
    """Restart connectors (``POST /connectors/{c}/restart``, KIP-745).

    :param include_tasks: restart the tasks too, not only the connector instance.
    :param only_failed: restart only the instances that are FAILED.

    Waits until the restarted instances read RUNNING again (PAUSED or STOPPED
    when the connector was, since a restart keeps the target state). With
    ``include_tasks=False`` only the connector instance is awaited.
    """

    action = "restart"

    def __init__(self, *, include_tasks: bool = False, only_failed: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.include_tasks = include_tasks
        self.only_failed = only_failed

    def act(self, hook: KafkaConnectHook, connector: str) -> ConnectorTarget:
        before = hook.get_status(connector)
        plan = hook.restart(connector, include_tasks=self.include_tasks, only_failed=self.only_failed)
        if plan is None:
            self.log.info("Restarted the connector instance of %s", connector)
        else:
            restarting = [str(t.get("id")) for t in plan.get("tasks") or [] if t.get("state") == "RESTARTING"]
            self.log.info(
                "Restarting %s: connector %s, tasks [%s]",
                connector,
                (plan.get("connector") or {}).get("state"),
                ", ".join(restarting),
            )
        return ConnectorTarget(_state_kept_by_restart(before), include_tasks=self.include_tasks)


class RestartConnectorTaskOperator(BaseConnectorControlOperator):
    """Restart one task of connectors (``POST /connectors/{c}/tasks/{t}/restart``).

    :param connector_task_id: the task's id within the connector (templated).

    Waits until that task reads RUNNING (PAUSED when the connector is paused).
    """

    template_fields: Sequence[str] = (*BaseConnectorControlOperator.template_fields, "connector_task_id")
    action = "task restart"

    def __init__(self, *, connector_task_id: int | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connector_task_id = connector_task_id

    def act(self, hook: KafkaConnectHook, connector: str) -> ConnectorTarget:
        try:
            task_id = int(self.connector_task_id)
        except (TypeError, ValueError) as exc:
            raise AirflowException(f"connector_task_id must be an integer, not {self.connector_task_id!r}") from exc
        before = hook.get_status(connector)
        hook.restart_task(connector, task_id)
        self.log.info("Restarted task %d of %s", task_id, connector)
        return ConnectorTarget(_state_kept_by_restart(before), task_ids=(task_id,), failed_connector="report")
