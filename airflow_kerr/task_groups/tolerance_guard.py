"""``tolerance_guard(...)``: the closed loop around a downstream Kafka Connect connector, as a TaskGroup.

wait for a breach (the sensor that sees it asks Connect to pause at once) → pause the
connector(s) (follow up: wait until PAUSED) → notify → wait for recovery (or a
manual go-ahead given as a DAG param) → resume → verify RUNNING. Connector
watchdogs react only to a FAILED task; this reacts to the error rate before
anything fails, and undoes itself once the pipeline is healthy again.

The alert quotes the DLQ's newest dead letters (top exception classes, failing
stages), read the way the event-driven breach reads them
(:func:`~airflow_kerr.kafka.dead_letters.latest_dead_letters`), so both alerts say
the same about the same DLQ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import TaskGroup, task

from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.dead_letters import alert_sample
from airflow_kerr.kafka.tolerance import ToleranceSpec, seconds
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier
from airflow_kerr.operators.connector_control import PauseConnectorOperator, ResumeConnectorOperator
from airflow_kerr.sensors.connector_state import ConnectorStateSensor
from airflow_kerr.sensors.tolerance import ToleranceSensor

GO_AHEAD_PARAM = "resume_without_recovery"


def tolerance_guard(  # noqa: PLR0913 - a DAG author's keyword arguments, kept flat at this edge (issue #28); the spec is built here
    *,
    connectors: str | Sequence[str],
    group_id: str = "tolerance_guard",
    pipeline: str | None = None,
    metrics_topic: str = "kerr.metrics",
    max_error_rate: float | None = None,
    max_errors: int | None = None,
    min_records: int = 100,
    window: timedelta | float = timedelta(minutes=5),
    source: str = "metrics",
    dlq_topic: str | None = None,
    source_topics: Sequence[str] | None = None,
    consumer_group: str | None = None,
    kafka_config_id: str = "kafka_default",
    kafka_connect_conn_id: str = KafkaConnectHook.default_conn_name,
    poke_interval: float = 30.0,
    breach_timeout: timedelta | float = timedelta(hours=24),
    recovery_timeout: timedelta | float = timedelta(hours=6),
    deferrable: bool = False,
    notifier: Mapping[str, Any] | None = None,
    go_ahead_param: str = GO_AHEAD_PARAM,
) -> TaskGroup:
    """Build the guard inside the current DAG and return its TaskGroup.

    ``group_id`` is the TaskGroup's id (its tasks are ``<group_id>.wait_for_breach`` …);
    ``consumer_group`` is the Kafka consumer group whose progress over ``source_topics``
    the ``source="dlq"`` rate is measured against (the sensors' ``group_id``). The other
    watch settings are :class:`ToleranceSensor`'s, the Connect settings the control
    operators'. ``notifier`` holds :class:`ToleranceBreachNotifier` arguments
    (``notifiers=[SlackWebhookNotifier(...)]``, ``webhook_conn_id``, ``email_to`` …;
    templated; connections are read when the alert is sent). Setting the DAG param ``go_ahead_param``
    to true resumes without waiting for recovery: the on-call person's override.
    Arguments are keyword-only, so a misspelt one fails with a ``TypeError`` naming it.

    The watch settings make one :class:`~airflow_kerr.kafka.tolerance.ToleranceSpec`, built
    (and checked) here once; both sensors take it, and the alert names its pipeline and DLQ.
    """
    settings = locals()
    if source == "dlq" and not consumer_group:
        raise ValueError(
            "tolerance_guard: consumer_group (the Kafka consumer group that reads source_topics) is required "
            f"with source='dlq'; group_id ({group_id!r}) is the TaskGroup's id"
        )
    names = [connectors] if isinstance(connectors, str) else list(connectors)
    timeouts = {name: seconds(value) for name, value in (("breach", breach_timeout), ("recovery", recovery_timeout))}
    spec = ToleranceSpec.from_settings(settings)
    watch: dict[str, Any] = {
        "spec": spec,
        "kafka_config_id": kafka_config_id,
        "poke_interval": poke_interval,
        "deferrable": deferrable,
    }
    control: dict[str, Any] = {
        "connector": names,
        "kafka_connect_conn_id": kafka_connect_conn_id,
        "poll_interval": min(poke_interval, 5.0),
        "deferrable": deferrable,
    }
    with TaskGroup(group_id=group_id) as group:
        # The sensor that sees the breach pauses at once; pause_connectors follows up and waits for PAUSED.
        breach = ToleranceSensor(
            task_id="wait_for_breach",
            wait_for="breach",
            timeout=timeouts["breach"],
            pause_on_breach=names,
            kafka_connect_conn_id=kafka_connect_conn_id,
            **watch,
        )
        pause = PauseConnectorOperator(task_id="pause_connectors", **control)

        @task(task_id="notify")
        def notify(**context: Any) -> dict[str, Any]:
            """Alert with the DLQ's newest dead letters quoted; a notification failure never fails the guard."""
            notifier_task = ToleranceBreachNotifier(
                pipeline=spec.pipeline,
                dlq_topic=spec.dlq_topic,
                breach_task_id=breach.task_id,
                **dict(notifier or {}),
            )
            notifier_task.render_template_fields(context)  # type: ignore[arg-type]
            # The rendered topic: a templated dlq_topic is read as the sensors read it.
            sample, problem = alert_sample(
                KafkaClusterHook(kafka_config_id=kafka_config_id).client_config, notifier_task.dlq_topic
            )
            if problem:
                notifier_task.log.warning("no dead-letter sample from %s: %s", notifier_task.dlq_topic, problem)
            notifier_task.sample = notifier_task.sample or sample
            notifier_task.sample_error = None if notifier_task.sample else problem
            details = notifier_task.details(context)  # type: ignore[arg-type]
            notifier_task.send(details, context)
            return details

        recovery = ToleranceSensor(
            task_id="wait_for_recovery", wait_for="recovery", timeout=timeouts["recovery"], **watch
        )
        resume = ResumeConnectorOperator(
            task_id="resume_connectors", trigger_rule="none_failed_min_one_success", **control
        )

        @task.branch(task_id="recovery_or_go_ahead")
        def choose(**context: Any) -> str:
            """Skip the recovery wait when the on-call person gave the go-ahead in the trigger form."""
            go_ahead = bool((context.get("params") or {}).get(go_ahead_param))
            return resume.task_id if go_ahead else recovery.task_id

        verify = [
            ConnectorStateSensor(
                task_id=f"verify_running_{i}" if len(names) > 1 else "verify_running",
                connector=name,
                target_state="RUNNING",
                kafka_connect_conn_id=kafka_connect_conn_id,
                poke_interval=min(poke_interval, 5.0),
                timeout=600,
                deferrable=deferrable,
            )
            for i, name in enumerate(names)
        ]
        branch = choose()
        breach >> pause >> notify() >> branch
        branch >> [recovery, resume]
        recovery >> resume >> verify
    return group
