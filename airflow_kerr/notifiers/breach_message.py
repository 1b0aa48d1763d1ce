"""``BreachMessage``: the tolerance-breach alert, written once in every form a channel reads.

The plain text (the task log, a webhook's ``text``, any notifier's ``text`` or ``body``),
Slack blocks in mrkdwn, and an HTML email body all come from one details dict, so a chat
channel and a mailbox say the same thing. Every form is masked by the one rule
(:mod:`airflow_kerr.errors.masking`): the details quote exception text from dead letters,
and a channel or a mailbox is read by more people than the connection's owners.

The forms escape what their reader would otherwise interpret: a dead letter's message is
data, so ``<!channel>`` in it must not ping a Slack channel and ``<script>`` must not reach
a mail client as markup.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_kerr.errors.masking import mask_secrets, mask_text

#: Characters of a dead letter's message an alert quotes: enough to recognise it, never a whole payload.
MESSAGE_CHARS = 100
#: Slack refuses a section block whose text is longer than this.
SLACK_SECTION_CHARS = 3000


def rate(value: Any) -> str:
    """A ratio as a percentage, or ``n/a`` when the reading has none."""
    return f"{float(value):.2%}" if isinstance(value, (int, float)) else "n/a"


def short(message: str) -> str:
    """A message's first line, cut to :data:`MESSAGE_CHARS` (``message`` holds more than blanks)."""
    line = message.strip().splitlines()[0]
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 1] + "\u2026"


def slack_escape(text: str) -> str:
    """Slack's three control characters escaped, so ``<!channel>`` or ``<http://x|y>`` in data stays text."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def outage_lines(details: Mapping[str, Any]) -> list[str]:
    """An outage's lines: not poison to replay, but a cause to fix before the job runs again."""
    outage = details["outage"]
    return [
        f"Outage in pipeline {details['pipeline'] or '?'}: {outage.get('exception_class', '?')} at stage "
        f"{outage.get('stage', '?')} failed {outage.get('failed', '?')} of {outage.get('records', '?')} records "
        f"of a batch ({rate(outage.get('rate'))}), first at {outage.get('topic', '?')}-{outage.get('partition', '?')}"
        f"@{outage.get('first_offset', '?')}.",
        "Not poison: the job stopped without dead-lettering them and committed up to "
        f"offset {outage.get('resume_offset', '?')}. Fix the cause, then run the job again; nothing to replay.",
        *([f"Run: {details['link']}"] if details.get("link") else []),
    ]


def breach_lines(details: Mapping[str, Any]) -> list[str]:
    """The message's lines, unmasked: the first is the summary, the rest say what failed and where."""
    lines = [
        f"Tolerance breached in pipeline {details['pipeline'] or '?'}: "
        f"error rate {rate(details['error_rate'])} (limit {rate(details['max_error_rate'])}), "
        f"{details['errors'] if details['errors'] is not None else '?'} failed records "
        f"(limit {details['max_errors'] if details['max_errors'] is not None else 'none'}) "
        f"out of {details['records_in'] if details['records_in'] is not None else '?'} "
        f"in the last {details['window_s'] or '?'} s.",
    ]
    if details["top_exception_classes"]:
        lines.append("Top exceptions: " + ", ".join(f"{name} ({n})" for name, n in details["top_exception_classes"]))
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
    lines.extend(link_lines(details))
    return lines


def link_lines(details: Mapping[str, Any]) -> list[str]:
    """Where the person acts: the guard's question (Airflow's required-actions page) and the DLQ view."""
    lines = []
    if details.get("question_link"):
        lines.append(f"Decide (resume now, wait for recovery, replay the DLQ, keep paused): {details['question_link']}")
    for run in details.get("run_links") or []:
        if isinstance(run, Mapping) and run.get("link"):
            lines.append(f"Dead letters of run {run.get('run')}: {run['link']}")
    if details.get("dlq_link"):
        lines.append(f"Dead letters: {details['dlq_link']}")
    return lines


def _minutes(seconds: Any) -> str:
    """A duration as people read it in an alert: ``42 s``, ``12.5 min``, ``3.2 h``."""
    if not isinstance(seconds, (int, float)):
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def answer_line(details: Mapping[str, Any]) -> str | None:
    """Who decided what about the paused sink, or that nobody answered and the default was taken."""
    answer = details.get("answer")
    if not answer:
        return None
    who = answer.get("responded_by") or "nobody answered in time, the default"
    return f"Decision: {answer.get('chosen')} ({who})"


def reminder_lines(details: Mapping[str, Any]) -> list[str]:
    """A reminder while the sink is still paused: how long, the latest reading, where to act."""
    figures = details.get("figures") or {}
    connectors = ", ".join(details.get("connectors") or []) or "the sink"
    lines = [
        f"Still paused ({details.get('kind') or 'breach'}) in pipeline {details.get('pipeline') or '?'}: "
        f"{connectors} paused for {_minutes(figures.get('duration_s'))}; "
        f"error rate now {rate(details.get('error_rate'))} (limit {rate(details.get('max_error_rate'))}).",
    ]
    if line := answer_line(details):
        lines.append(line)
    lines.extend(link_lines(details))
    return lines


def resolved_lines(details: Mapping[str, Any]) -> list[str]:
    """The episode is over: the sink runs again; its figures and who decided."""
    figures = details.get("figures") or {}
    connectors = ", ".join(details.get("connectors") or []) or "the sink"
    failed = figures.get("records_failed")
    records_in = figures.get("records_in")
    lines = [
        f"Resolved ({details.get('kind') or 'breach'}) in pipeline {details.get('pipeline') or '?'}: "
        f"{connectors} running again after {_minutes(figures.get('duration_s'))} paused.",
        f"Records failed: {'n/a' if failed is None else failed} of {'n/a' if records_in is None else records_in}; "
        f"peak error rate {rate(figures.get('peak_error_rate'))} (limit {rate(details.get('max_error_rate'))}).",
    ]
    if line := answer_line(details):
        lines.append(line)
    if details.get("replay"):
        replay = details["replay"]
        lines.append(f"Replayed from {details.get('dlq_topic') or 'the DLQ'}: {replay.get('replayed')} records")
    if details.get("dlq_link"):
        lines.append(f"Dead letters: {details['dlq_link']}")
    return lines


#: The first message of an episode, by kind. Another kind (the outage guard's) adds its own entry here.
OPENED_LINES: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {"breach": breach_lines, "outage": outage_lines}
#: Subjects by message, ``{kind}`` and ``{pipeline}`` filled in.
SUBJECTS = {
    "opened": "[kerr] {kind} in {pipeline}",
    "reminder": "[kerr] still paused: {kind} in {pipeline}",
    "resolved": "[kerr] resolved: {kind} in {pipeline}",
}


def kind_of(details: Mapping[str, Any]) -> str:
    """The episode's kind: ``details["kind"]``, else ``outage`` when the reading carries the job's outage."""
    return str(details.get("kind") or ("outage" if isinstance(details.get("outage"), Mapping) else "breach"))


def message_lines(details: Mapping[str, Any]) -> list[str]:
    """The lines for ``details``, by its ``episode_event`` (an alert without one is an opening alert)."""
    event = details.get("episode_event") or "opened"
    if event == "reminder":
        return reminder_lines(details)
    if event == "resolved":
        return resolved_lines(details)
    # A kind with no lines of its own yet reads as a breach: an alert must go out whatever its kind.
    return OPENED_LINES.get(kind_of(details), breach_lines)(details)


@dataclass(frozen=True)
class BreachMessage:
    """One breach alert in every form: ``text``, ``summary``, ``subject``, Slack ``blocks``, ``html``.

    Build it with :meth:`of`; every string in it is masked. A notifier's templates can
    quote it as ``{{ kerr_breach.text }}`` (see
    :class:`~airflow_kerr.notifiers.tolerance_breach.ToleranceBreachNotifier`).
    """

    text: str
    summary: str
    subject: str
    blocks: list[dict[str, Any]]
    html: str
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, details: Mapping[str, Any]) -> BreachMessage:
        """The message for ``details`` (as the notifier builds them), masked whatever a caller passed."""
        masked: dict[str, Any] = mask_secrets(dict(details), by_key=False)
        # Masked as one text, not line by line: a PEM block in an exception message spans lines.
        text = mask_text("\n".join(message_lines(masked)))
        lines = text.splitlines()
        summary = lines[0]
        mrkdwn = slack_escape(text)
        if len(mrkdwn) > SLACK_SECTION_CHARS:
            mrkdwn = mrkdwn[: SLACK_SECTION_CHARS - 1] + "\u2026"
        items = "".join(f"<li>{html.escape(line)}</li>" for line in lines[1:])
        html_body = f"<p><strong>{html.escape(summary)}</strong></p>" + (f"<ul>{items}</ul>" if items else "")
        return cls(
            text=text,
            summary=summary,
            subject=mask_text(subject(masked)),
            blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}],
            html=html_body,
            details=masked,
        )

    @property
    def headers(self) -> dict[str, str]:
        """Email headers naming the episode (``X-Kerr-Episode``, ``X-Kerr-Event``), for filters and ticket systems."""
        key = self.details.get("episode_key")
        return {"X-Kerr-Episode": str(key), "X-Kerr-Event": event_name(self.details)} if key else {}

    def webhook_payload(self) -> dict[str, Any]:
        """A Slack incoming-webhook body; other receivers read the structured details under ``kerr``.

        ``kerr.event`` is ``tolerance_breach`` for a breach's first alert and ``outage`` for an
        outage's (as before episodes), else ``<kind>_<episode_event>`` (``breach_reminder``,
        ``breach_resolved``, ``outage_resolved`` ...);
        ``kerr.episode_key`` is the same for every message of one episode.
        """
        return {
            "text": self.summary,
            "blocks": self.blocks,
            "kerr": {"event": event_name(self.details), **self.details},
        }


def event_name(details: Mapping[str, Any]) -> str:
    """The webhook's ``kerr.event`` for ``details``."""
    kind, event = kind_of(details), details.get("episode_event") or "opened"
    if event == "opened":
        return {"breach": "tolerance_breach"}.get(kind, kind)  # first alerts keep their names from before episodes
    return f"{kind}_{event}"


def subject(details: Mapping[str, Any]) -> str:
    """An email's subject: what happened, in which pipeline; a breach's first alert keeps its old subject."""
    kind, event = kind_of(details), details.get("episode_event") or "opened"
    pipeline = details.get("pipeline") or "a pipeline"
    if (kind, event) == ("breach", "opened"):
        return f"[kerr] tolerance breached in {pipeline}"
    return SUBJECTS.get(event, SUBJECTS["opened"]).format(kind=kind, pipeline=pipeline)
