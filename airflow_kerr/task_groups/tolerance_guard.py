"""``tolerance_guard(...)``: the closed loop around a downstream Kafka Connect connector, as a TaskGroup.

wait for a breach (the sensor that sees it asks Connect to pause at once) → pause the
connector(s) (follow up: wait until PAUSED) → notify → with ``ask=True``, ask the on-call
person through Airflow's human-in-the-loop operator (resume now, wait for recovery,
replay the DLQ then resume, keep paused; nobody answering within ``response_timeout``
means wait for recovery) → resume → verify RUNNING → tell them it is resolved, with
the episode's figures. Connector watchdogs react only to a FAILED task; this reacts to
the error rate before anything fails, and undoes itself once the pipeline is healthy again.

Every message of one breach (the alert, the reminders every ``reminder_interval`` while
the guard waits for recovery, the "resolved" message) carries one episode key
(:func:`~airflow_kerr.kafka.episode.episode_key`), so a deduplicating notifier groups them.

The alert quotes the DLQ's newest dead letters (top exception classes, failing
stages), read the way the event-driven breach reads them
(:func:`~airflow_kerr.kafka.dead_letters.latest_dead_letters`), so both alerts say
the same about the same DLQ.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from airflow.sdk import Context, TaskGroup, task

from airflow_kerr.errors.masking import mask_text
from airflow_kerr.hooks.kafka import KafkaClusterHook
from airflow_kerr.hooks.kafka_connect import KafkaConnectHook
from airflow_kerr.kafka.dead_letters import alert_sample
from airflow_kerr.kafka.episode import episode_figures, episode_key
from airflow_kerr.kafka.tolerance import ToleranceSpec, seconds
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier
from airflow_kerr.operators.connector_control import PauseConnectorOperator, ResumeConnectorOperator
from airflow_kerr.sensors.connector_state import ConnectorStateSensor
from airflow_kerr.sensors.tolerance import ToleranceSensor

GO_AHEAD_PARAM = "resume_without_recovery"

#: The on-call person's four answers, as the question shows them.
RESUME_NOW = "Resume now"
WAIT_FOR_RECOVERY = "Wait for recovery"
REPLAY_THEN_RESUME = "Replay the DLQ, then resume"
KEEP_PAUSED = "Keep paused"
#: The XCom key under which the guard records the answer and who gave it.
ANSWER_KEY = "answer"


def _answer(chosen: str, responded_by: str | None, responded_at: str | None, timed_out: bool) -> dict[str, Any]:
    return {"chosen": chosen, "responded_by": responded_by, "responded_at": responded_at, "timed_out": timed_out}


def ui_base_url(ti: Any) -> str | None:
    """Airflow's UI address: ``[api] base_url``, else the scheme and host of the task's log link."""
    from airflow.sdk.configuration import conf

    base = conf.get("api", "base_url", fallback=None)
    if base:
        return str(base).rstrip("/")
    log_url = getattr(ti, "log_url", None)
    if not log_url:
        return None
    parts = urlsplit(str(log_url))
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


def question_link(base: str, dag_id: str, run_id: str, task_id: str) -> str:
    """The question's page in Airflow's UI (what ``HITLOperator.generate_link_to_ui`` builds, the run id quoted)."""
    run = quote(run_id, safe="")
    return f"{base}/dags/{quote(dag_id)}/runs/{run}/tasks/{quote(task_id)}/required_actions?map_index=-1"


def dlq_link(base: str, dlq_topic: str, kafka_config_id: str) -> str:
    """The DLQ view (:mod:`airflow_kerr.plugins.dead_letter_view`) opened on ``dlq_topic``."""
    return f"{base}/kerr/dead-letters?" + urlencode({"topic": dlq_topic, "kafka_config_id": kafka_config_id})


#: Job runs the alert links to at most (the newest): a window rarely holds more than one or two runs.
MAX_RUN_LINKS = 3


def run_tab_link(base: str, job_run_id: str) -> str:
    """The Dead letters tab of the task instance whose job ran as ``job_run_id`` (the view redirects there)."""
    return f"{base}/kerr/run-tab?" + urlencode({"job_run_id": job_run_id})


def run_links(base: str | None, job_run_ids: Sequence[str]) -> list[dict[str, str]]:
    """The newest :data:`MAX_RUN_LINKS` runs' tabs, each ``{"run": job run id, "link": ...}``; none without a base."""
    if not base:
        return []
    return [{"run": run, "link": run_tab_link(base, run)} for run in list(job_run_ids)[-MAX_RUN_LINKS:]]


def _on_call_question_class() -> type:
    """``HITLBranchOperator`` that also records the answer and who gave it as the XCom ``answer``.

    Imported when a guard asks, so a guard that does not ask never needs the standard provider's HITL module.
    """
    from airflow.providers.standard.operators.hitl import HITLBranchOperator

    class OnCallQuestion(HITLBranchOperator):
        """The guard's question: one answer of four; the answer and its author go to XCom and the log."""

        def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
            if "error" not in event:
                user = event.get("responded_by_user") or {}
                chosen = list(event.get("chosen_options") or [])
                responded_at: Any = event.get("responded_at")
                answer = _answer(
                    chosen[0] if chosen else WAIT_FOR_RECOVERY,
                    user.get("name") or user.get("id"),
                    responded_at.isoformat() if hasattr(responded_at, "isoformat") else responded_at,
                    not user,
                )
                self.log.info(
                    "on-call answer: %s (%s)", answer["chosen"], answer["responded_by"] or "timed out, the default"
                )
                context["ti"].xcom_push(key=ANSWER_KEY, value=answer)
            return super().execute_complete(context, event)

    return OnCallQuestion


def tolerance_guard(  # noqa: PLR0913, C901, PLR0915 - flat keyword arguments (issue #28); the tasks' closures share them
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
    ask: bool = False,
    response_timeout: timedelta | float = timedelta(minutes=15),
    assigned_users: Sequence[Mapping[str, str]] | None = None,
    reminder_interval: timedelta | float | None = None,
    replay: Mapping[str, Any] | None = None,
) -> TaskGroup:
    """Build the guard inside the current DAG and return its TaskGroup.

    ``group_id`` is the TaskGroup's id (its tasks are ``<group_id>.wait_for_breach`` …);
    ``consumer_group`` is the Kafka consumer group whose progress over ``source_topics``
    the ``source="dlq"`` rate is measured against (the sensors' ``group_id``). The other
    watch settings are :class:`ToleranceSensor`'s, the Connect settings the control
    operators'. ``notifier`` holds :class:`ToleranceBreachNotifier` arguments
    (``notifiers=[SlackWebhookNotifier(...)]``, ``webhook_conn_id``, ``email_to`` …;
    templated; connections are read when the alert is sent). Setting the DAG param ``go_ahead_param``
    to true resumes without waiting for recovery: the on-call person's override, given before
    the run (deprecated with ``ask=True``: answer the question instead).

    ``ask=True`` asks the on-call person after the alert, through Airflow's human-in-the-loop
    operator (``assigned_users`` may name who may answer, ``[{"id": ..., "name": ...}]``);
    nobody answering within ``response_timeout`` means "wait for recovery". "Replay the DLQ,
    then resume" runs :class:`~airflow_kerr.operators.dlq_replay.DeadLetterQueueReplayOperator`
    on ``dlq_topic`` with ``replay``'s extra arguments. ``reminder_interval`` sends a reminder
    at that interval while the guard waits for recovery (None: no reminders; a deferrable wait sends none).
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
    timeouts = {
        name: seconds(value)
        for name, value in (("breach", breach_timeout), ("recovery", recovery_timeout), ("response", response_timeout))
    }
    remind_s = seconds(reminder_interval) if reminder_interval is not None else None
    if remind_s is not None and remind_s <= 0:
        raise ValueError(
            f"tolerance_guard: reminder_interval={reminder_interval!r}; accepted: a positive duration or None"
        )
    if timeouts["response"] <= 0:
        raise ValueError(f"tolerance_guard: response_timeout={response_timeout!r}; accepted: a positive duration")
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
            details.update(episode_fields(context, details, notifier_task.dlq_topic))
            details["summary"] = notifier_task.send(details, context).summary
            return details

        def episode_fields(context: Any, details: Mapping[str, Any], dlq: str | None) -> dict[str, Any]:
            """What makes the alert the first message of an episode: its key, start, connectors and links."""
            ti = context["ti"]
            asked = [p.get("asked_at_ms") for p in (details.get("paused_on_breach") or {}).values()]
            started = min([a for a in asked if a] or [int(time.time() * 1000)])
            base = ui_base_url(ti)
            # What the episode is about: the reading says when it is not a breach (an outage trip says "outage").
            kind = str((ti.xcom_pull(task_ids=breach.task_id) or {}).get("kind") or "breach")
            fields: dict[str, Any] = {
                "kind": kind,
                "episode_event": "opened",
                "episode_key": episode_key(kind, details.get("pipeline"), names, ti.dag_id, ti.run_id),
                "episode_started_at_ms": started,
                "connectors": names,
                "question_link": question_link(base, ti.dag_id, ti.run_id, ask_task_id) if (ask and base) else None,
                "dlq_link": dlq_link(base, dlq, kafka_config_id) if (base and dlq) else None,
                # Straight to what the breaching runs wrote: each run's Dead letters tab.
                "run_links": run_links(base, details.get("dead_letter_runs") or []),
            }
            return fields

        def recorded_answer(ti: Any) -> dict[str, Any] | None:
            """The on-call answer: the question's, else the deprecated trigger-form go-ahead's."""
            for task_id in (ask_task_id, choose_task_id):
                try:
                    answer = ti.xcom_pull(task_ids=task_id, key=ANSWER_KEY)
                except Exception:  # a task skipped or not in this guard left nothing
                    answer = None
                if answer:
                    return dict(answer)
            return None

        def follow_up(event: str, context: Any, **extra: Any) -> dict[str, Any]:
            """The episode's reminder or "resolved" message: the opening alert's fields, then this event's."""
            ti = context["ti"]
            opened = dict(ti.xcom_pull(task_ids=notify_task_id) or {})
            details = {
                key: opened.get(key)
                for key in (
                    "kind",
                    "episode_key",
                    "episode_started_at_ms",
                    "pipeline",
                    "connectors",
                    "dlq_topic",
                    "max_error_rate",
                    "max_errors",
                    "question_link",
                    "dlq_link",
                    "run_links",
                    "dag_id",
                    "run_id",
                )
            }
            details.update(episode_event=event, answer=recorded_answer(ti), **extra)
            sender = ToleranceBreachNotifier(pipeline=spec.pipeline, dlq_topic=spec.dlq_topic, **dict(notifier or {}))
            sender.render_template_fields(context)
            sender.send(details, context)
            return details

        def remind(context: Any, reading: Any) -> None:
            """A reminder: still paused, for how long, the error rate now, who decided what."""
            opened = context["ti"].xcom_pull(task_ids=notify_task_id) or {}
            started = int(opened.get("episode_started_at_ms") or time.time() * 1000)
            follow_up(
                "reminder",
                context,
                figures={"duration_s": round(time.time() - started / 1000, 1)},
                error_rate=reading.error_rate if reading is not None else None,
            )

        recovery = RemindingToleranceSensor(
            task_id="wait_for_recovery",
            wait_for="recovery",
            timeout=timeouts["recovery"],
            remind_every_s=remind_s,
            remind=remind,
            **watch,
        )
        resume = ResumeConnectorOperator(
            task_id="resume_connectors", trigger_rule="none_failed_min_one_success", **control
        )

        @task.branch(task_id="recovery_or_go_ahead")
        def choose(**context: Any) -> str:
            """Skip the recovery wait (and the question) when the trigger form's go-ahead box was ticked."""
            go_ahead = bool((context.get("params") or {}).get(go_ahead_param))
            if go_ahead:
                if ask:
                    warnings.warn(
                        f"the DAG param {go_ahead_param!r} is deprecated with ask=True: answer the guard's question "
                        f"({RESUME_NOW!r}) in Airflow's required actions instead",
                        DeprecationWarning,
                        stacklevel=1,
                    )
                    context["ti"].log.warning(
                        "%s is ticked in the trigger form: resuming without asking (deprecated: answer the question)",
                        go_ahead_param,
                    )
                context["ti"].xcom_push(
                    key=ANSWER_KEY, value=_answer(RESUME_NOW, f"trigger form ({go_ahead_param})", None, False)
                )
                return resume.task_id
            return ask_task_id if ask else recovery.task_id

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

        @task(task_id="resolve_alert")
        def resolve(**context: Any) -> dict[str, Any]:
            """The "resolved" message: the sink runs again; the episode's duration, failures and peak rate."""
            ti = context["ti"]
            opened = ti.xcom_pull(task_ids=notify_task_id) or {}
            started = int(opened.get("episode_started_at_ms") or time.time() * 1000)
            try:
                figures = episode_figures(
                    KafkaClusterHook(kafka_config_id=kafka_config_id).client_config(),
                    spec_of(opened),
                    started,
                    int(time.time() * 1000),
                )
            except Exception as exc:  # the message still goes, with the duration only
                ti.log.warning("episode figures could not be read: %s", mask_text(f"{type(exc).__name__}: {exc}"))
                figures = {"duration_s": round((time.time() * 1000 - started) / 1000, 1)}
            replayed = None
            if ask:
                try:
                    replayed = ti.xcom_pull(task_ids=replay_task_id)
                except Exception:
                    replayed = None
            return follow_up("resolved", context, figures=figures, replay=replayed)

        def spec_of(opened: Mapping[str, Any]) -> ToleranceSpec:
            """The spec with the pipeline the alert named (a templated pipeline, rendered)."""
            return dataclasses.replace(spec, pipeline=opened.get("pipeline") or spec.pipeline)

        ask_task_id = f"{group_id}.ask_on_call"
        choose_task_id = f"{group_id}.recovery_or_go_ahead"
        notify_task_id = f"{group_id}.notify"
        replay_task_id = f"{group_id}.replay_dlq"
        branch = choose()
        notified = notify()
        breach >> pause >> notified >> branch
        if ask:
            question, replay_task, keep = _question_tasks(
                spec=spec,
                group_id=group_id,
                kafka_config_id=kafka_config_id,
                response_timeout=timeouts["response"],
                assigned_users=assigned_users,
                replay=replay,
                recovery_task_id=recovery.task_id,
                resume_task_id=resume.task_id,
                notify_task_id=notify_task_id,
            )
            branch >> [question, resume]
            question >> [recovery, resume, keep]
            if replay_task is not None:
                question >> replay_task >> resume
        else:
            branch >> [recovery, resume]
        recovery >> resume >> verify
        verify >> resolve()
    return group


class RemindingToleranceSensor(ToleranceSensor):
    """The recovery wait that also reminds: every ``remind_every_s`` of waiting, ``remind(context, reading)``.

    The wait pokes in one worker process (``mode="poke"``), so the next reminder's time is kept
    on the sensor between looks; a deferrable wait sends no reminders (its looks run on the triggerer).
    """

    def __init__(self, *, remind_every_s: float | None, remind: Callable[..., None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.remind_every_s = remind_every_s
        self.remind = remind
        self._next_reminder_s: float | None = None

    def poke(self, context: Context) -> Any:
        done = super().poke(context)
        if done or not self.remind_every_s:
            return done
        now = time.time()
        if self._next_reminder_s is None:
            self._next_reminder_s = now + self.remind_every_s
        elif now >= self._next_reminder_s:
            self._next_reminder_s = now + self.remind_every_s
            try:
                self.remind(context, self.watch().check()[1])
            except Exception as exc:  # a reminder never changes the wait's outcome
                self.log.warning("reminder not sent: %s", mask_text(f"{type(exc).__name__}: {exc}"))
        return done


def _question_tasks(  # noqa: PLR0913 - the question's settings, passed from tolerance_guard's own arguments
    *,
    spec: ToleranceSpec,
    group_id: str,
    kafka_config_id: str,
    response_timeout: float,
    assigned_users: Sequence[Mapping[str, str]] | None,
    replay: Mapping[str, Any] | None,
    recovery_task_id: str,
    resume_task_id: str,
    notify_task_id: str,
) -> tuple[Any, Any, Any]:
    """The question (four answers, "wait for recovery" by default), the replay, and the keep-paused end."""
    from airflow.providers.standard.operators.empty import EmptyOperator

    from airflow_kerr.operators.dlq_replay import DeadLetterQueueReplayOperator

    options = [RESUME_NOW, WAIT_FOR_RECOVERY, REPLAY_THEN_RESUME, KEEP_PAUSED]
    if not spec.dlq_topic:
        options.remove(REPLAY_THEN_RESUME)  # nothing to replay from
    keep = EmptyOperator(task_id="keep_paused")
    mapping = {RESUME_NOW: resume_task_id, WAIT_FOR_RECOVERY: recovery_task_id, KEEP_PAUSED: keep.task_id}
    replay_task = None
    if spec.dlq_topic:
        replay_task = DeadLetterQueueReplayOperator(
            task_id="replay_dlq", dlq_topic=spec.dlq_topic, kafka_config_id=kafka_config_id, **dict(replay or {})
        )
        mapping[REPLAY_THEN_RESUME] = replay_task.task_id
    pulled = f"ti.xcom_pull(task_ids={notify_task_id!r})"
    body = (
        "{% set a = " + pulled + " or {} %}"
        "**{{ a.get('summary') or 'Tolerance breached' }}**\n\n"
        "The sink is paused. Nobody answering within " + f"{response_timeout / 60:g}" + " min means "
        f"*{WAIT_FOR_RECOVERY}*: it resumes by itself once the error rate is back under the limit.\n\n"
        "{% for r in a.get('run_links') or [] %}[Dead letters of run {{ r['run'] }}]({{ r['link'] }})\n\n{% endfor %}"
        "{% if a.get('dlq_link') %}[The dead letters]({{ a['dlq_link'] }}){% endif %}"
    )
    question = _on_call_question_class()(
        task_id="ask_on_call",
        subject=f"Resume the paused sink of {spec.pipeline or 'the pipeline'}?",
        body=body,
        options=options,
        defaults=[WAIT_FOR_RECOVERY],
        options_mapping=mapping,
        response_timeout=timedelta(seconds=response_timeout),
        assigned_users=list(assigned_users) if assigned_users else None,
    )
    return question, replay_task, keep
