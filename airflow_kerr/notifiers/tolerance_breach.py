"""``ToleranceBreachNotifier``: tell people a pipeline's error rate or count passed its limit.

The message is built once (:class:`~airflow_kerr.notifiers.breach_message.BreachMessage`:
text, Slack blocks, HTML) and goes to the task log, then to every channel configured:

* any Airflow notifier passed in ``notifiers`` (``SlackWebhookNotifier`` with a
  ``slack_webhook`` connection, ``SmtpNotifier``, PagerDuty, apprise …), handed the
  message as :mod:`airflow_kerr.notifiers.delivery` explains;
* a plain JSON webhook (Slack incoming-webhook compatible, with the structured details
  under ``kerr``), the zero-dependency default: its URL from a connection
  (``webhook_conn_id``, read when the task runs) or, as before, ``webhook_url``;
* email through Airflow's smtp provider when ``email_to`` is set.

A notification never changes the task's outcome: a failing webhook is retried a few
times, then logged; a failing notifier is logged. Logs name a webhook's host only (its
path is the credential) and are masked by the one rule (:mod:`airflow_kerr.errors.masking`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from airflow.sdk import BaseHook, BaseNotifier, Context

from airflow_kerr.errors.masking import mask_secrets, mask_text
from airflow_kerr.notifiers.breach_message import BreachMessage, short
from airflow_kerr.notifiers.delivery import deliver
from airflow_kerr.notifiers.webhook_connection import webhook_url_of

WEBHOOK_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


def _has_context(item: Mapping[str, Any]) -> bool:
    """Whether a sampled dead letter carries any error context (a writer's headers), whatever its dialect."""
    return any(item.get(key) is not None for key in ("exception_class", "stage", "exception_message", "source_topic"))


class ToleranceBreachNotifier(BaseNotifier):
    """Send a tolerance-breach alert built from the breach reading and a sample of the DLQ.

    The reading comes from ``reading`` or from the XCom of ``breach_task_id`` (a
    :class:`~airflow_kerr.sensors.tolerance.ToleranceSensor`); the sample of failed
    records from ``sample`` or the XCom of ``dlq_task_id`` (a
    :class:`~airflow_kerr.sensors.dead_letter_queue.DeadLetterQueueSensor`).
    ``sample_error`` says why a caller that read the DLQ itself has no sample (the
    alert then says so instead of leaving the reader to guess why no exceptions are
    named). Use it as ``on_failure_callback=ToleranceBreachNotifier(...)`` or call
    ``notify(context)`` inside a task.

    Where it goes: ``notifiers`` (Airflow notifiers, e.g.
    ``[SlackWebhookNotifier(slack_webhook_conn_id="slack_alerts", text="")]``: an empty
    ``text`` is filled with the breach; templates may quote ``{{ kerr_breach.text }}``),
    ``webhook_conn_id`` (an ``http`` or ``slack_webhook`` connection holding a webhook URL,
    read when the alert is sent, so the DAG file parses without it), ``webhook_url`` (the
    URL itself; it is a credential for Slack, so prefer a connection) and ``email_to``.
    With none of them the alert is in the task log only.

    The sample's dead letters are named as :func:`~airflow_kerr.errors.parse_dead_letter`
    reads them, whichever writer wrote them: Spring Kafka's under their root cause, Schema
    Registry's under ``rule:<name>``; KIP-1191 share-group dead letters, which carry no
    exception class, by their messages.
    """

    template_fields: Sequence[str] = ("pipeline", "webhook_url", "webhook_conn_id", "email_to", "dlq_topic")

    def __init__(  # noqa: PLR0913 - a DAG author's keyword arguments: where and how the alert goes
        self,
        *,
        pipeline: str | None = None,
        webhook_url: str | None = None,
        webhook_conn_id: str | None = None,
        notifiers: Sequence[BaseNotifier] | None = None,
        email_to: str | Sequence[str] | None = None,
        smtp_conn_id: str = "smtp_default",
        dlq_topic: str | None = None,
        breach_task_id: str | None = None,
        dlq_task_id: str | None = None,
        reading: Mapping[str, Any] | None = None,
        sample: Sequence[Mapping[str, Any]] | None = None,
        sample_error: str | None = None,
        webhook_attempts: int = 3,
        webhook_timeout_s: float = 10.0,
        webhook_backoff_s: float = 1.0,
    ) -> None:
        super().__init__()
        if webhook_url and webhook_conn_id:
            raise ValueError(
                f"ToleranceBreachNotifier: webhook_url and webhook_conn_id={webhook_conn_id!r} are both set; "
                "accepted: one of them (webhook_conn_id keeps the URL out of the DAG file)"
            )
        if isinstance(notifiers, BaseNotifier):
            notifiers = [notifiers]
        for i, item in enumerate(notifiers or []):
            if not isinstance(item, BaseNotifier):
                raise TypeError(
                    f"ToleranceBreachNotifier: notifiers[{i}]={item!r} is a {type(item).__name__}; accepted: "
                    "Airflow notifiers (BaseNotifier instances such as SlackWebhookNotifier(...) or SmtpNotifier(...))"
                )
        self.pipeline = pipeline
        self.webhook_url = webhook_url
        self.webhook_conn_id = webhook_conn_id
        self.notifiers: list[BaseNotifier] = list(notifiers or [])
        self.email_to = email_to
        self.smtp_conn_id = smtp_conn_id
        self.dlq_topic = dlq_topic
        self.breach_task_id = breach_task_id
        self.dlq_task_id = dlq_task_id
        self.reading = dict(reading) if reading else None
        self.sample = [dict(item) for item in sample] if sample else None
        self.sample_error = sample_error
        self.webhook_attempts = max(1, webhook_attempts)
        self.webhook_timeout_s = webhook_timeout_s
        self.webhook_backoff_s = webhook_backoff_s

    def _xcom(self, context: Context, task_id: str | None) -> Any:
        ti = context.get("ti") or context.get("task_instance")
        if task_id is None or ti is None:
            return None
        try:
            return ti.xcom_pull(task_ids=task_id)
        except Exception as exc:  # a callback must not fail because an upstream left nothing behind
            self.log.warning("could not read the XCom of %s: %s", task_id, mask_text(str(exc)))
            return None

    def details(self, context: Context) -> dict[str, Any]:
        """Everything the message says, as plain data (the webhook sends it under ``kerr``)."""
        reading = self.reading or self._xcom(context, self.breach_task_id) or {}
        dlq = self._xcom(context, self.dlq_task_id) or {}
        sample = self.sample or list(dlq.get("sample") or [])
        ti = context.get("ti") or context.get("task_instance")
        dag_run = context.get("dag_run")
        details = {
            "pipeline": self.pipeline or reading.get("pipeline"),
            "error_rate": reading.get("error_rate"),
            "max_error_rate": reading.get("max_error_rate"),
            "errors": reading.get("errors"),
            "max_errors": reading.get("max_errors"),
            "records_in": reading.get("records_in"),
            "window_s": reading.get("window_s"),
            "dlq_topic": self.dlq_topic or reading.get("dlq_topic") or dlq.get("topic"),
            "dlq_count": dlq.get("count"),
            "top_exception_classes": Counter(
                s.get("exception_class") for s in sample if s.get("exception_class")
            ).most_common(3),
            "top_stages": Counter(s.get("stage") for s in sample if s.get("stage")).most_common(3),
            # What names a dead letter that names no exception class: a KIP-1191 share-group dead letter
            # carries the delivery's message (and its coordinates) but no class.
            "top_messages": Counter(
                short(str(s["exception_message"]))
                for s in sample
                if not s.get("exception_class") and str(s.get("exception_message") or "").strip()
            ).most_common(3),
            "sample_with_context": sum(1 for s in sample if _has_context(s)),
            "sample_size": len(sample),
            "sample_error": None if sample else self.sample_error,
            # The connectors the breach sensor or watcher paused the moment it saw the breach, and when.
            "paused_on_breach": reading.get("paused_on_breach"),
            # The job's errors.outage.* trip, when that is what the breach was: the alert then says "outage".
            "outage": reading.get("outage"),
            # The job runs that wrote the window's dead letters: each has a Dead letters tab the alert links to.
            "dead_letter_runs": list(reading.get("dead_letter_runs") or []),
            "dag_id": getattr(dag_run, "dag_id", None) or getattr(ti, "dag_id", None),
            "run_id": getattr(dag_run, "run_id", None) or getattr(ti, "run_id", None),
            "task_id": getattr(ti, "task_id", None),
            "link": getattr(ti, "log_url", None),
        }
        masked: dict[str, Any] = mask_secrets(details, by_key=False)
        return masked

    def message(self, details: Mapping[str, Any]) -> BreachMessage:
        """The alert in every form, built once from ``details``."""
        return BreachMessage.of(details)

    def text(self, details: Mapping[str, Any]) -> str:
        """The message people read, masked whatever ``details`` a caller passed."""
        return self.message(details).text

    def payload(self, details: Mapping[str, Any]) -> dict[str, Any]:
        """A Slack incoming-webhook message; other receivers read the ``kerr`` object."""
        return self.message(details).webhook_payload()

    def resolve_webhook_url(self) -> str | None:
        """``webhook_url``, or the URL the ``webhook_conn_id`` connection holds (read now, never at parse).

        Raises when the connection is missing or holds no URL; :meth:`send` logs that.
        """
        if self.webhook_url:
            return self.webhook_url
        if not self.webhook_conn_id:
            return None
        return webhook_url_of(BaseHook.get_connection(self.webhook_conn_id), self.webhook_conn_id)

    def send_webhook(self, payload: Mapping[str, Any], url: str | None = None) -> bool:
        """POST the payload, retrying timeouts and 5xx/429 answers; False (and a log line) when it never went."""
        if url is None:
            try:
                url = self.resolve_webhook_url()
            except Exception as exc:  # a missing connection raises the secrets backend's own type
                self.log.error(
                    "tolerance webhook connection %s could not be read, the alert is only in this log: %s",
                    self.webhook_conn_id,
                    mask_text(f"{type(exc).__name__}: {exc}"),
                )
                return False
        if not url:
            return False
        for attempt in range(1, self.webhook_attempts + 1):
            try:
                response = httpx.post(url, json=payload, timeout=self.webhook_timeout_s)
                if response.status_code < 400:
                    return True
                problem = f"HTTP {response.status_code}: {mask_text(response.text[:200])}"
                retry = response.status_code in WEBHOOK_RETRY_STATUSES
            except httpx.HTTPError as exc:
                # httpx names no URL in its errors; mask anyway, the text may quote a proxy's answer.
                problem, retry = mask_text(f"{type(exc).__name__}: {exc}"), True
            self.log.warning("tolerance webhook attempt %d/%d failed: %s", attempt, self.webhook_attempts, problem)
            if not retry:
                break
            if attempt < self.webhook_attempts:
                time.sleep(self.webhook_backoff_s * attempt)
        # The host only: a webhook URL's path is its credential (Slack's /services/T…/B…/<secret>).
        self.log.error("tolerance webhook to %s was not delivered; the alert is only in this log", httpx.URL(url).host)
        return False

    def send_email(self, message: BreachMessage) -> bool:
        """The HTML message to ``email_to`` through the smtp provider's hook; False (and a log line) when it failed."""
        try:
            from airflow.providers.smtp.hooks.smtp import SmtpHook
        except ImportError:
            self.log.error("email_to is set but apache-airflow-providers-smtp is not installed; no email sent")
            return False
        try:
            with SmtpHook(smtp_conn_id=self.smtp_conn_id) as smtp:
                smtp.send_email_smtp(
                    to=self.email_to,  # type: ignore[arg-type]
                    subject=message.subject,
                    html_content=message.html,
                    custom_headers=message.headers or None,
                )
            return True
        except Exception as exc:  # smtplib and the hook raise many unrelated types
            self.log.error("tolerance email to %s failed: %s", self.email_to, mask_text(str(exc)))
            return False

    def notify(self, context: Context) -> None:
        self.send(self.details(context), context)

    def send(self, details: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> BreachMessage:
        """Log and send already-built ``details``, for a caller that also keeps them (the guard returns them).

        ``context`` is what the ``notifiers`` render their own templates with (the task's).
        """
        message = self.message(details)
        self.log.warning("%s", message.text)
        if self.webhook_url or self.webhook_conn_id:
            self.send_webhook(message.webhook_payload())
        if self.email_to:
            self.send_email(message)
        for notifier in self.notifiers:
            deliver(notifier, message, context or {}, self)
        return message
