"""Connector control operators and the sensor against real Kafka Connect: poke-style waits and deferrable ones.

Deferrable runs follow Airflow's path by hand: ``execute`` raises TaskDeferred,
the trigger runs on an asyncio loop, and its event goes to ``execute_complete``.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Callable
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout, TaskDeferred
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kerr.connect.errors import (
    ConnectorNotFound,
    ConnectorStateTimeout,
    ConnectUnreachable,
    RebalanceInProgress,
)
from airflow_kerr.operators.connector_control import (
    PauseConnectorOperator,
    RestartConnectorOperator,
    RestartConnectorTaskOperator,
    ResumeConnectorOperator,
    StopConnectorOperator,
)
from airflow_kerr.sensors.connector_state import ConnectorStateSensor
from airflow_kerr.triggers.connector_state import ConnectorStateTrigger

# A stall shows up as a failure with every thread's stack, not as a slow run.
pytestmark = pytest.mark.timeout(90)

FAST: dict[str, Any] = {"poll_interval": 0.1, "wait_timeout": 20}

# The ``context`` fixture (conftest) is a dict whose ti records XCom pushes: it stands in for
# Airflow's Context, so the tests type it Any.

Sink = Callable[..., tuple[str, str]]


def run_trigger(trigger: BaseTrigger) -> TriggerEvent:
    """Run a trigger as the triggerer would, after a serialize round trip, and return its first event."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    revived = getattr(importlib.import_module(module), name)(**kwargs)

    async def first() -> TriggerEvent:
        async for event in revived.run():
            return event
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(first())


def run_deferred(operator: Any, context: Any, must_defer: bool = True) -> Any:
    """execute -> TaskDeferred -> trigger -> execute_complete, as Airflow does for a deferrable task.

    A deferrable task checks once before deferring; ``must_defer=False`` accepts a task that found
    its target met at once and returned without deferring.
    """
    try:
        result = operator.execute(context)
    except TaskDeferred as deferred:
        assert deferred.method_name == "execute_complete"
        event = run_trigger(deferred.trigger)
        return getattr(operator, deferred.method_name)(context, event.payload)
    assert not must_defer, f"{operator.task_id} did not defer"
    return result


def states(status: dict[str, Any]) -> tuple[str, list[str]]:
    return status["connector"]["state"], [t["state"] for t in status["tasks"]]


# pause -------------------------------------------------------------------------------------------


def test_pause_waits_and_returns_the_paused_status(connect_conn: str, sink: Sink, context: Any) -> None:
    name, _ = sink(tasks=2, partitions=2)
    status = PauseConnectorOperator(task_id="pause", connector=name, **FAST).execute(context)
    assert states(status) == ("PAUSED", ["PAUSED", "PAUSED"])
    assert "failed_tasks" not in context["ti"].pushed
    again = PauseConnectorOperator(task_id="pause_again", connector=name, **FAST).execute(context)
    assert states(again) == ("PAUSED", ["PAUSED", "PAUSED"]), "pausing a paused connector succeeds"


def test_pause_reports_failed_tasks_without_waiting_for_them(
    connect_conn: str,
    connect: Any,
    sink: Sink,
    context: Any,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Task 1 fails on a malformed record; the pause reports it instead of waiting for it.

    When task 1's consumer closes, the sink's group rebalances and task 0 may take partition 1
    and fail on the same record before the pause lands (seen with Connect 4.3's clients, which
    rejoin within a second on noida-db): then both are FAILED, and both are reported.
    """
    name, _ = sink(tasks=2, partitions=2)
    connect.fail_task(name, 1)
    status = PauseConnectorOperator(task_id="pause", connector=name, **FAST).execute(context)
    connector_state, task_states = states(status)
    assert connector_state == "PAUSED" and task_states[1] == "FAILED" and task_states[0] in {"PAUSED", "FAILED"}
    failed = context["ti"].pushed["failed_tasks"]
    assert [task["task"] for task in failed] == [i for i, state in enumerate(task_states) if state == "FAILED"]
    assert all(task["connector"] == name and "Tolerance exceeded in error handler" in task["trace"] for task in failed)
    logged = "".join(capfd.readouterr())
    assert f"{name} task 1 is FAILED" in logged and "Tolerance exceeded in error handler" in logged


def test_pause_deferrable(connect_conn: str, connect: Any, sink: Sink, context: Any) -> None:
    name, _ = sink()
    # Real Connect is quick: without a lag the first check may already see it. 0.5 s was too short on a loaded
    # machine (Connect 4.3: the operator's first check came after the lag and saw PAUSED).
    connect.proxy.inject_status_lag(3.0)
    operator = PauseConnectorOperator(task_id="pause", connector=name, deferrable=True, **FAST)
    assert states(run_deferred(operator, context)) == ("PAUSED", ["PAUSED"])


def test_a_deferrable_pause_of_a_paused_connector_does_not_defer(
    connect_conn: str,
    connect: Any,
    sink: Sink,
    context: Any,
    wait_until: Callable[..., Any],
) -> None:
    name, _ = sink()
    connect.set_target(name, "PAUSED")
    wait_until(lambda: states(connect.status(name)) == ("PAUSED", ["PAUSED"]))
    operator = PauseConnectorOperator(task_id="pause", connector=name, deferrable=True, **FAST)
    assert states(operator.execute(context)) == ("PAUSED", ["PAUSED"]), "met at once: returns without deferring"


def test_pause_of_several_connectors_by_list_and_by_regex(
    connect_conn: str, connect: Any, sink: Sink, context: Any
) -> None:
    first, _ = sink()
    second, _ = sink()
    statuses = PauseConnectorOperator(task_id="pause", connector=[first, second, first], **FAST).execute(context)
    assert set(statuses) == {first, second}
    assert all(states(s)[0] == "PAUSED" for s in statuses.values())

    connect.proxy.inject_status_lag(0.5)
    resumed = ResumeConnectorOperator(task_id="resume", connector_regex="sink-.*", deferrable=True, **FAST)
    statuses = run_deferred(resumed, context)
    assert set(statuses) == {first, second}
    assert all(states(s) == ("RUNNING", ["RUNNING"]) for s in statuses.values())

    with pytest.raises(AirflowException, match=r"No connector .* matches connector_regex 'orders-\.\*'"):
        PauseConnectorOperator(task_id="none", connector_regex="orders-.*", **FAST).execute(context)


def test_pause_times_out_with_what_it_waited_for(
    slow_connect: Any, sink: Sink, monkeypatch: pytest.MonkeyPatch, context: Any
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KC_SLOW", f"kafka-connect://127.0.0.1:{slow_connect.port}")
    name, _ = sink()
    operator = PauseConnectorOperator(
        task_id="pause", connector=name, kafka_connect_conn_id="kc_slow", poll_interval=0.1, wait_timeout=2
    )
    with pytest.raises(
        ConnectorStateTimeout, match=rf"(?s)not visible in /status after 2 s.*{name}: connector RUNNING"
    ):
        operator.execute(context)
    deferrable = PauseConnectorOperator(
        task_id="pause_deferred",
        connector=name,
        kafka_connect_conn_id="kc_slow",
        poll_interval=0.1,
        wait_timeout=2,  # within the 3 s lag, and long enough for a poll on a loaded machine
        deferrable=True,
    )
    # The last poll may be cut by the deadline; the message still names the state the earlier polls saw.
    with pytest.raises(
        ConnectorStateTimeout, match=rf"(?s)not visible in /status after 2 s.*{name}: connector RUNNING"
    ):
        run_deferred(deferrable, context)


def test_no_wait_returns_the_status_at_once(connect_conn: str, slow_connect: Any, sink: Sink, context: Any) -> None:
    name, _ = sink()
    started = time.monotonic()
    status = PauseConnectorOperator(task_id="pause", connector=name, wait_for_completion=False).execute(context)
    assert time.monotonic() - started < 2, "no waiting for the 3 s the slow worker takes"
    assert states(status) == ("RUNNING", ["RUNNING"]), "the pause shows only later"


def test_unknown_connector_fails(connect_conn: str, context: Any) -> None:
    with pytest.raises(ConnectorNotFound, match="Unknown connector ghost"):
        PauseConnectorOperator(task_id="pause", connector="ghost", **FAST).execute(context)


# strimzi -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator_class", "state"),
    [(PauseConnectorOperator, "paused"), (ResumeConnectorOperator, "running"), (StopConnectorOperator, "stopped")],
)
def test_strimzi_managed_connectors_are_left_to_the_kafkaconnector_resource(
    connect_conn: str, connect: Any, operator_class: type, state: str, context: Any
) -> None:
    operator = operator_class(task_id="op", connector="orders-sink", strimzi_managed=True)
    with pytest.raises(AirflowFailException, match=rf"managed by Strimzi.*spec.state to '{state}'"):
        operator.execute(context)
    assert not connect.requests, "no REST request was sent"


# resume and stop ---------------------------------------------------------------------------------


def test_stop_then_resume(connect_conn: str, sink: Sink, context: Any) -> None:
    name, _ = sink(tasks=2, partitions=2)
    stopped = StopConnectorOperator(task_id="stop", connector=name, **FAST).execute(context)
    assert states(stopped) == ("STOPPED", [])
    resumed = ResumeConnectorOperator(task_id="resume", connector=name, **FAST).execute(context)
    assert states(resumed) == ("RUNNING", ["RUNNING", "RUNNING"])


def test_stop_deferrable(connect_conn: str, connect: Any, sink: Sink, context: Any) -> None:
    name, _ = sink()
    connect.proxy.inject_status_lag(0.5)
    operator = StopConnectorOperator(task_id="stop", connector=name, deferrable=True, **FAST)
    assert states(run_deferred(operator, context)) == ("STOPPED", [])


def test_resume_reports_failed_tasks_and_fails_fast_on_a_failed_connector(
    connect_conn: str, connect: Any, sink: Sink, context: Any
) -> None:
    name, _ = sink(tasks=2, partitions=2)
    connect.fail_task(name, 0)
    status = ResumeConnectorOperator(task_id="resume", connector=name, **FAST).execute(context)
    assert states(status) == ("RUNNING", ["FAILED", "RUNNING"])
    assert context["ti"].pushed["failed_tasks"][0]["task"] == 0

    connect.fail_connector(name)
    started = time.monotonic()
    with pytest.raises(AirflowException, match=r"is FAILED and cannot become RUNNING.*RestartConnectorOperator"):
        ResumeConnectorOperator(task_id="resume", connector=name, **FAST).execute(context)
    assert time.monotonic() - started < 5, "no waiting for a state a resume cannot reach"
    deferrable = ResumeConnectorOperator(task_id="resume_deferred", connector=name, deferrable=True, **FAST)
    with pytest.raises(AirflowException, match="is FAILED and cannot become RUNNING"):
        run_deferred(deferrable, context)


# restarts ----------------------------------------------------------------------------------------


def test_restart_of_a_poisoned_task_catches_up(
    connect_conn: str,
    connect: Any,
    sink: Sink,
    produce: Callable[..., None],
    context: Any,
    wait_until: Callable[..., Any],
) -> None:
    """A malformed record fails the task for real; after the fix (tolerance all) a restart catches up."""
    name, topic = sink()
    produce(topic, ["ok-1"])
    wait_until(lambda: connect.output_lines(name) == ["ok-1"])
    failed = connect.fail_task(name, 0)
    assert "Tolerance exceeded in error handler" in failed["tasks"][0]["trace"]
    produce(topic, ["ok-3"])
    # A sentinel sink on the same topic (tolerating the malformed record) writes ok-3: it was there to be
    # read, and the FAILED task, still FAILED, wrote nothing more.
    sentinel, _ = sink(topic=topic, **{"errors.tolerance": "all"})
    wait_until(lambda: connect.output_lines(sentinel) == ["ok-1", "ok-3"], timeout_s=30)
    assert connect.output_lines(name) == ["ok-1"], "a FAILED task writes nothing more"
    assert connect.states(name) == ("RUNNING", ["FAILED"])

    connect.set_tolerance(name, "all")
    operator = RestartConnectorOperator(
        task_id="restart", connector=name, include_tasks=True, only_failed=True, deferrable=True, **FAST
    )
    assert states(run_deferred(operator, context, must_defer=False)) == ("RUNNING", ["RUNNING"])
    wait_until(lambda: connect.output_lines(name) == ["ok-1", "ok-3"])


def test_restart_connector_only_and_of_a_paused_connector(
    connect_conn: str, connect: Any, sink: Sink, context: Any
) -> None:
    name, _ = sink()
    connect.fail_connector(name)
    status = RestartConnectorOperator(task_id="restart", connector=name, only_failed=True, **FAST).execute(context)
    assert states(status) == ("RUNNING", ["RUNNING"])
    PauseConnectorOperator(task_id="pause", connector=name, **FAST).execute(context)
    status = RestartConnectorOperator(task_id="restart", connector=name, include_tasks=True, **FAST).execute(context)
    assert states(status) == ("PAUSED", ["PAUSED"]), "a restart keeps the paused target state"


def test_restart_task(connect_conn: str, connect: Any, sink: Sink, context: Any) -> None:
    name, _ = sink(tasks=2, partitions=2)
    connect.fail_task(name, 1)
    connect.set_tolerance(name, "all")  # the fix, so the restarted task reads past the malformed record
    # Task 0 takes the fix first: while task 1 restarts, task 0 reads partition 1 (the malformed record
    # too) until task 1 rejoins the group, as real Connect does.
    deferrable = RestartConnectorTaskOperator(
        task_id="restart_task_deferred", connector=name, connector_task_id=0, deferrable=True, **FAST
    )
    restarted = run_deferred(deferrable, context, must_defer=False)
    assert states(restarted) == ("RUNNING", ["RUNNING", "FAILED"]), "a task restart is synchronous"
    operator = RestartConnectorTaskOperator(task_id="restart_task", connector=name, connector_task_id="1", **FAST)
    assert states(operator.execute(context)) == ("RUNNING", ["RUNNING", "RUNNING"])
    with pytest.raises(ConnectorNotFound, match=f"Unknown task: {name}-9"):
        RestartConnectorTaskOperator(task_id="t", connector=name, connector_task_id=9, **FAST).execute(context)


# the trigger itself ------------------------------------------------------------------------------


def test_trigger_reports_a_vanished_connector(connect_conn: str, connect: Any, sink: Sink) -> None:
    name, _ = sink()
    connect.delete(name)
    trigger = ConnectorStateTrigger(targets={name: {"state": "PAUSED"}}, deadline=time.time() + 10)
    event = run_trigger(trigger)
    assert event.payload["status"] == "error"
    # The task configs are read before the status (see StatusWatch.record): Connect's 404 for them names the connector.
    assert f"/connectors/{name}/tasks answered HTTP 404" in event.payload["message"]
    assert f"Connector {name} not found" in event.payload["message"]


def test_trigger_keeps_polling_through_an_unreachable_worker_until_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KC_GONE", "kafka-connect://127.0.0.1:9")
    trigger = ConnectorStateTrigger(
        targets={"orders": {"state": "PAUSED"}},
        deadline=time.time() + 0.5,
        poll_interval=0.1,
        kafka_connect_conn_id="kc_gone",
    )
    event = run_trigger(trigger)
    assert event.payload["status"] == "timeout"
    assert "could not connect" in event.payload["pending"]["orders"]


# operator validation -----------------------------------------------------------------------------


def test_operator_arguments_are_checked_when_the_dag_is_parsed() -> None:
    with pytest.raises(ValueError, match="exactly one of 'connector'"):
        PauseConnectorOperator(task_id="both", connector="a", connector_regex="a.*")
    with pytest.raises(ValueError, match="exactly one of 'connector'"):
        PauseConnectorOperator(task_id="neither")
    with pytest.raises(ValueError, match="wait_timeout must be positive"):
        PauseConnectorOperator(task_id="t", connector="a", wait_timeout=0)
    with pytest.raises(ValueError, match="target_state 'SLEEPING' is not one of"):
        ConnectorStateSensor(task_id="s", connector="a", target_state="SLEEPING")
    assert "connector_task_id" in RestartConnectorTaskOperator.template_fields
    assert {"connector", "connector_regex"} <= set(PauseConnectorOperator.template_fields)


# the sensor --------------------------------------------------------------------------------------


def test_sensor_pokes_until_the_state_shows(connect_conn: str, connect: Any, sink: Sink, context: Any) -> None:
    name, _ = sink()
    sensor = ConnectorStateSensor(task_id="s", connector=name, target_state="paused", poke_interval=0.1, timeout=20)
    assert sensor.poke(context) is False
    connect.set_target(name, "PAUSED")
    status = sensor.execute(context)
    assert states(status) == ("PAUSED", ["PAUSED"])


def test_sensor_deferrable_and_connector_only(connect_conn: str, connect: Any, sink: Sink, context: Any) -> None:
    name, _ = sink()
    connect.fail_task(name, 0)
    running = ConnectorStateSensor(task_id="s", connector=name, include_tasks=False, deferrable=True)
    assert states(running.execute(context)) == ("RUNNING", ["FAILED"]), "met at once: returns without deferring"
    connect.set_target(name, "STOPPED")
    stopped = ConnectorStateSensor(
        task_id="stopped", connector=name, target_state="STOPPED", deferrable=True, poke_interval=0.1, timeout=20
    )
    assert states(run_deferred(stopped, context, must_defer=False)) == ("STOPPED", [])


def test_sensor_times_out(connect_conn: str, sink: Sink, context: Any) -> None:
    name, _ = sink()
    poke = ConnectorStateSensor(task_id="s", connector=name, target_state="PAUSED", poke_interval=0.1, timeout=0.4)
    with pytest.raises(AirflowSensorTimeout):
        poke.execute(context)
    deferred = ConnectorStateSensor(
        task_id="d", connector=name, target_state="PAUSED", poke_interval=0.1, timeout=0.4, deferrable=True
    )
    with pytest.raises(AirflowSensorTimeout, match=f"{name} did not read PAUSED within 0.4 s"):
        run_deferred(deferred, context)


def test_sensor_waits_through_an_unreachable_worker_like_the_operator_and_trigger(
    monkeypatch: pytest.MonkeyPatch, context: Any
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_KC_GONE", "kafka-connect://127.0.0.1:9")
    sensor = ConnectorStateSensor(
        task_id="s", connector="orders", kafka_connect_conn_id="kc_gone", poke_interval=0.1, timeout=0.4
    )
    assert sensor.poke(context) is False, "a transient error is waited through, not raised"
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute(context)


# the wait's budget -------------------------------------------------------------------------------


@pytest.mark.parametrize("deferrable", [False, True])
def test_endless_rebalance_409s_end_the_task_within_wait_timeout(
    connect_conn: str, connect: Any, sink: Sink, context: Any, deferrable: bool
) -> None:
    """The hook retries a 409 for up to a minute; a stop asked to wait 2 s must not take that minute.

    The 409s are injected by the fault proxy in front of the real worker.
    """
    name, _ = sink()
    connect.inject_rebalance(120)
    operator = StopConnectorOperator(
        task_id="stop", connector=name, wait_timeout=2, poll_interval=0.1, deferrable=deferrable
    )
    started = time.monotonic()
    with pytest.raises(RebalanceInProgress, match="stale configuration"):
        run_deferred(operator, context, must_defer=False)
    assert time.monotonic() - started < 3.5


def test_a_slow_worker_ends_the_wait_within_wait_timeout(
    monkeypatch: pytest.MonkeyPatch, connect: Any, sink: Sink, context: Any
) -> None:
    """Status polls that hang for 30 s (a worker busy reading its topics, injected by the fault proxy)
    are cut at the wait's deadline: the worker-side wait and the trigger both end on time."""
    name, _ = sink()
    monkeypatch.setenv(
        "AIRFLOW_CONN_KC_SLOW_POLLS",
        f'{{"conn_type": "kafka_connect", "host": "127.0.0.1", "port": {connect.port}, "extra": {{"timeout": 60}}}}',
    )
    connect.proxy.inject_request_timeout(120, delay_s=30)
    operator = PauseConnectorOperator(
        task_id="pause", connector=name, kafka_connect_conn_id="kc_slow_polls", wait_timeout=2, poll_interval=0.1
    )
    started = time.monotonic()
    with pytest.raises((ConnectorStateTimeout, ConnectUnreachable)):
        operator.execute(context)
    assert time.monotonic() - started < 3.5

    trigger = ConnectorStateTrigger(
        targets={name: {"state": "PAUSED"}},
        deadline=time.time() + 1.5,
        poll_interval=0.1,
        kafka_connect_conn_id="kc_slow_polls",
    )
    started = time.monotonic()
    event = run_trigger(trigger)
    assert event.payload["status"] == "timeout"
    assert "timed out" in event.payload["pending"][name]
    assert time.monotonic() - started < 3
