"""``ConnectorStateSensor``: wait until a Kafka Connect connector (and its tasks) reads a given state."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowSensorTimeout

from airflow_kerr.hooks.connect_status import STATES, ConnectorTarget, describe
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
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
    does not know fails the sensor at once.
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

    @property
    def target(self) -> ConnectorTarget:
        return ConnectorTarget(self.target_state.upper(), include_tasks=self.include_tasks)

    def poke(self, context: Context) -> PokeReturnValue | bool:
        with KafkaConnectHook(self.kafka_connect_conn_id) as hook:
            status = hook.get_status(self.connector)
        verdict = self.target.evaluate(status)
        if verdict.reached:
            return PokeReturnValue(is_done=True, xcom_value=status)
        self.log.info(
            "%s: %s; waiting for %s (%s)",
            self.connector,
            describe(status),
            self.target.state,
            ", ".join(verdict.waiting_on),
        )
        return False

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if isinstance(first, PokeReturnValue):
            return first.xcom_value
        self.defer(
            trigger=ConnectorStateTrigger(
                targets={self.connector: self.target.to_dict()},
                deadline=time.time() + self.timeout,
                poll_interval=self.poke_interval,
                kafka_connect_conn_id=self.kafka_connect_conn_id,
            ),
            method_name="execute_complete",
            # A backstop only: the trigger's own deadline fires first, with a better message.
            timeout=timedelta(seconds=self.timeout + max(60.0, 2 * self.poke_interval)),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger: the status that met the target, or the reason it was not met."""
        if event.get("status") == "success":
            return event["statuses"][self.connector]
        if event.get("status") == "timeout":
            why = "; ".join(event.get("pending", {}).values())
            raise AirflowSensorTimeout(
                f"{self.connector} did not read {self.target.state} within {self.timeout:g} s: {why}"
            )
        raise AirflowException(f"{self.connector}: {event.get('message')}")
