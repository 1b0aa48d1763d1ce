"""``ConnectorStateSensor``: wait until a Kafka Connect connector (and its tasks) reads a given state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_kerr.compat import AirflowException, AirflowSensorTimeout, conf
from airflow_kerr.connect.errors import TRANSIENT_ERRORS, KafkaConnectError
from airflow_kerr.connect.status import STATES, ConnectorTarget, StatusWatch
from airflow_kerr.errors.masking import mask_secrets, mask_text
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.triggers.base import defer_sensor
from airflow_kerr.triggers.connector_state import ConnectorStateTrigger


class ConnectorStateSensor(BaseSensorOperator):
    """Wait until ``GET /connectors/{c}/status`` shows ``target_state``.

    :param connector: the connector's name (templated).
    :param target_state: one of UNASSIGNED, RUNNING, PAUSED, FAILED, RESTARTING, STOPPED (templated).
        STOPPED is met when the connector is STOPPED and lists no tasks.
    :param include_tasks: every task must read ``target_state`` too, not only the connector instance.
    :param kafka_connect_conn_id: the ``kafka_connect`` connection.
    :param deferrable: poll on the triggerer (asynchronously) instead of in the worker.

    Returns (XCom) the status body that met the target. A connector the worker
    does not know fails the sensor at once; a worker that is restarting,
    rebalancing or answering 5xx is waited through until the timeout.
    """

    template_fields: Sequence[str] = ("connector", "target_state", "kafka_connect_conn_id")
    ui_color = "#dbe9f6"

    def __init__(
        self,
        *,
        connector: str,
        target_state: str = "RUNNING",
        include_tasks: bool = True,
        kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if "{{" not in target_state and target_state.upper() not in STATES:
            raise ValueError(f"{self.task_id}: target_state {target_state!r} is not one of {', '.join(STATES)}")
        self.connector = connector
        self.target_state = target_state
        self.include_tasks = include_tasks
        self.kafka_connect_conn_id = kafka_connect_conn_id
        self.deferrable = deferrable
        self._hook: KafkaConnectHook | None = None
        self._watch: StatusWatch | None = None

    @property
    def target(self) -> ConnectorTarget:
        return ConnectorTarget(self.target_state.upper(), include_tasks=self.include_tasks)

    def _connect_hook(self) -> KafkaConnectHook:
        """One hook (connection read, HTTP client) for every poke of this run; ``execute`` closes it."""
        if self._hook is None:
            self._hook = KafkaConnectHook(self.kafka_connect_conn_id)
        return self._hook

    def poke(self, context: Context) -> PokeReturnValue | bool:
        reading: dict[str, Any] | KafkaConnectError
        configured: list[int] | None = None
        if self._watch is None:
            self._watch = StatusWatch({self.connector: self.target})
        try:
            if self._watch.needs_task_configs(self.connector):  # first: see StatusWatch.record
                configured = self._connect_hook().get_task_ids(self.connector)
            reading = self._connect_hook().get_status(self.connector)
        except TRANSIENT_ERRORS as exc:
            # The worker may be restarting or rebalancing: keep poking until the timeout, as the trigger does.
            reading = exc
        fatal = self._watch.record(self.connector, reading, configured)
        if fatal:
            raise AirflowException(mask_text(f"{self.connector}: {fatal}"))
        if not self._watch.pending:
            # Connect's task traces are Java stack traces, which may quote a client's configuration.
            status = mask_secrets(self._watch.statuses[self.connector], by_key=False)
            return PokeReturnValue(is_done=True, xcom_value=status)
        self.log.info("%s: waiting for %s: %s", self.connector, self.target.state, self._watch.pending[self.connector])
        return False

    def execute(self, context: Context) -> Any:
        try:
            if not self.deferrable:
                return super().execute(context)
            first = self.poke(context)
        finally:
            if self._hook is not None:
                self._hook.close()
                self._hook = None
        if isinstance(first, PokeReturnValue):
            return first.xcom_value
        targets = {self.connector: self.target.to_dict()}
        defer_sensor(self, ConnectorStateTrigger, targets=targets, kafka_connect_conn_id=self.kafka_connect_conn_id)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger: the status that met the target, or the reason it was not met."""
        if event.get("status") == "success":
            return mask_secrets(event["statuses"][self.connector], by_key=False)
        if event.get("status") == "timeout":
            why = "; ".join(event.get("pending", {}).values())
            raise AirflowSensorTimeout(
                f"{self.connector} did not read {self.target.state} within {self.timeout:g} s: {why}"
            )
        raise AirflowException(mask_text(f"{self.connector}: {event.get('message')}"))
