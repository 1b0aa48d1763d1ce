"""``ToleranceBreachNotifier``: tell people a pipeline's error rate or count passed its limit.

One message, three senders: a JSON webhook (Slack incoming-webhook compatible,
with the structured details under ``kerr``), email through Airflow's smtp
provider when it is installed, and the task log. A notification never changes
the task's outcome: a failing webhook is retried a few times, then logged.

The message, its details and our log lines are masked by the one rule
(:mod:`airflow_kerr.errors.masking`): the sample's reason quotes exception text, and a
webhook channel or a mailbox is read by more people than the connection's owners.
"""

from __future__ import annotations

import html
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from airflow.sdk import BaseNotifier, Context

from airflow_kerr.errors.masking import mask_secrets, mask_text

WEBHOOK_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
#: Characters of a dead letter's message an alert quotes: enough to recognise it, never a whole payload.
MESSAGE_CHARS = 100


def _rate(value: Any) -> str:
    return f"{float(value):.2%}" if isinstance(value, (int, float)) else "n/a"


def _short(message: str) -> str:
    """A message's first line, cut to :data:`MESSAGE_CHARS` (``message`` holds more than blanks)."""
    line = message.strip().splitlines()[0]
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 1] + "\u2026"


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

    The sample's dead letters are named as :func:`~airflow_kerr.errors.parse_dead_letter`
    reads them, whichever writer wrote them: Spring Kafka's under their root cause, Schema
    Registry's under ``rule:<name>``; KIP-1191 share-group dead letters, which carry no
    exception class, by their messages.
    """

    template_fields: Sequence[str] = ("pipeline", "webhook_url", "email_to", "dlq_topic")

    def __init__(
        self,
        *,
        pipeline: str | None = None,
        webhook_url: str | None = None,
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
        self.pipeline = pipeline
        self.webhook_url = webhook_url
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
                _short(str(s["exception_message"]))
                for s in sample
                if not s.get("exception_class") and str(s.get("exception_message") or "").strip()
            ).most_common(3),
            "sample_with_context": sum(1 for s in sample if _has_context(s)),
            "sample_size": len(sample),
            "sample_error": None if sample else self.sample_error,
            "dag_id": getattr(dag_run, "dag_id", None) or getattr(ti, "dag_id", None),
            "run_id": getattr(dag_run, "run_id", None) or getattr(ti, "run_id", None),
            "task_id": getattr(ti, "task_id", None),
            "link": getattr(ti, "log_url", None),
        }
        masked: dict[str, Any] = mask_secrets(details, by_key=False)
        return masked

    def text(self, details: Mapping[str, Any]) -> str:
        """The message people read, masked whatever ``details`` a caller passed."""
        lines = [
            f"Tolerance breached in pipeline {details['pipeline'] or '?'}: "
            f"error rate {_rate(details['error_rate'])} (limit {_rate(details['max_error_rate'])}), "
            f"{details['errors'] if details['errors'] is not None else '?'} failed records "
            f"(limit {details['max_errors'] if details['max_errors'] is not None else 'none'}) "
            f"out of {details['records_in'] if details['records_in'] is not None else '?'} "
            f"in the last {details['window_s'] or '?'} s.",
        ]
        if details["top_exception_classes"]:
            lines.append(
                "Top exceptions: " + ", ".join(f"{name} ({n})" for name, n in details["top_exception_classes"])
            )
        if details["top_stages"]:
            lines.append("Failing stages: " + ", ".join(f"{name} ({n})" for name, n in details["top_stages"]))
        messages = details.get("top_messages") or []
        classified = bool(details["top_exception_classes"] or details["top_stages"])
        counted = classified or bool(messages)
        if details.get("sample_error"):
            lines.append(
                f"Top exceptions and failing stages unknown: the dead letter sample could not be read from "
                f"{details['dlq_topic'] or 'the DLQ'}: {details['sample_error']}"
            )
        elif details.get("sample_size") and not classified and (messages or details.get("sample_with_context")):
            # A KIP-1191 share-group dead letter carries its error context, but no class and no stage:
            # Connect's setting would not add them, so the alert names what the records do say.
            lines.append(
                f"Top exceptions and failing stages unknown: the newest {details['sample_size']} dead letters "
                "name no exception class or stage (KIP-1191 share-group dead letters carry a message instead)"
            )
        elif details.get("sample_size") and not classified:
            # Connect's default writes dead letters without their error context: say so, or the
            # missing lines look like a bug of the alert rather than a setting of the job.
            lines.append(
                f"Top exceptions and failing stages unknown: the newest {details['sample_size']} dead letters "
                "carry no error context (errors.deadletterqueue.context.headers.enable=true adds it)"
            )
        if messages:
            of = "" if not classified else " of those without an exception class"
            lines.append(f"Top messages{of}: " + ", ".join(f"{text} ({n})" for text, n in messages))
        if details["dlq_topic"]:
            # The counts above are of a bounded sample, not of the whole DLQ: say which.
            of = f" (counts above: its newest {details['sample_size']} dead letters)" if counted else ""
            lines.append(f"Dead letter queue: {details['dlq_topic']}{of}")
        if details["link"]:
            lines.append(f"Run: {details['link']}")
        return mask_text("\n".join(lines))

    def payload(self, details: Mapping[str, Any]) -> dict[str, Any]:
        """A Slack incoming-webhook message; other receivers read the ``kerr`` object."""
        text = self.text(details)
        return {
            "text": text.splitlines()[0],
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
            "kerr": mask_secrets({"event": "tolerance_breach", **details}, by_key=False),
        }

    def send_webhook(self, payload: Mapping[str, Any]) -> bool:
        """POST the payload, retrying timeouts and 5xx/429 answers; False (and a log line) when it never went."""
        assert self.webhook_url is not None
        for attempt in range(1, self.webhook_attempts + 1):
            try:
                response = httpx.post(self.webhook_url, json=payload, timeout=self.webhook_timeout_s)
                if response.status_code < 400:
                    return True
                problem = f"HTTP {response.status_code}: {mask_text(response.text[:200])}"
                retry = response.status_code in WEBHOOK_RETRY_STATUSES
            except httpx.HTTPError as exc:
                problem, retry = mask_text(f"{type(exc).__name__}: {exc}"), True
            self.log.warning("tolerance webhook attempt %d/%d failed: %s", attempt, self.webhook_attempts, problem)
            if not retry:
                break
            if attempt < self.webhook_attempts:
                time.sleep(self.webhook_backoff_s * attempt)
        # The host only: a webhook URL's path is its credential (Slack's /services/T…/B…/<secret>).
        self.log.error(
            "tolerance webhook to %s was not delivered; the alert is only in this log", httpx.URL(self.webhook_url).host
        )
        return False

    def send_email(self, details: Mapping[str, Any], text: str) -> bool:
        try:
            from airflow.providers.smtp.hooks.smtp import SmtpHook
        except ImportError:
            self.log.error("email_to is set but apache-airflow-providers-smtp is not installed; no email sent")
            return False
        try:
            with SmtpHook(smtp_conn_id=self.smtp_conn_id) as smtp:
                smtp.send_email_smtp(
                    to=self.email_to,  # type: ignore[arg-type]
                    subject=f"[kerr] tolerance breached in {details['pipeline'] or 'a pipeline'}",
                    html_content="<pre>" + html.escape(text) + "</pre>",
                )
            return True
        except Exception as exc:  # smtplib and the hook raise many unrelated types
            self.log.error("tolerance email to %s failed: %s", self.email_to, mask_text(str(exc)))
            return False

    def notify(self, context: Context) -> None:
        self.send(self.details(context))

    def send(self, details: Mapping[str, Any]) -> None:
        """Log and send already-built ``details``, for a caller that also keeps them (the guard returns them)."""
        text = self.text(details)
        self.log.warning("%s", text)
        if self.webhook_url:
            self.send_webhook(self.payload(details))
        if self.email_to:
            self.send_email(details, text)
