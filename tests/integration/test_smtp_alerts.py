"""The alert by email: the smtp provider's real ``SmtpNotifier`` and ``email_to`` deliver to a real SMTP server.

The server is aiosmtpd on a free local port, with a login the connection carries. What a
person reading the mail would notice: the subject names what happened (the alert, a
reminder, "resolved") and the pipeline; a secret in a dead letter's exception text is
hidden; ``<script>`` from a record is text, never markup; Jinja in it is never evaluated;
every mail of one episode carries the same ``X-Kerr-Episode`` header.
"""

from __future__ import annotations

import email
import email.policy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from airflow.providers.smtp.notifications.smtp import SmtpNotifier

from airflow_kerr.local.broker import free_port
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier

SECRET = "hunter2"
SMTP_LOGIN, SMTP_PASSWORD = "kerr-alerts", "smtp-S3cret-pw"
BREACH = {
    "pipeline": "orders_pipeline",
    "error_rate": 0.25,
    "max_error_rate": 0.05,
    "errors": 60,
    "records_in": 240,
    "window_s": 300,
    "dlq_topic": "orders.dlq",
}
#: A dead letter whose message carries a secret, markup and Jinja: all three are data.
SAMPLE = [
    {
        "exception_class": "org.example.LookupFailed",
        "stage": "TRANSFORMATION",
        "exception_message": f"<script>alert(1)</script> sasl.password={SECRET} {{{{ 7 * 7 }}}}",
    }
]
EPISODE = "kerr-breach-orders_pipeline-0123456789abcdef"


@dataclass
class Mailbox:
    """What the SMTP server accepted: one parsed message per recipient envelope, and the logins it saw."""

    messages: list[EmailMessage] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.raw.append(envelope.content)
        self.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))
        return "250 OK"

    def authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        ok = isinstance(auth_data, LoginPassword) and auth_data.password == SMTP_PASSWORD.encode()
        if ok:
            self.logins.append(auth_data.login.decode())
        return AuthResult(success=ok)


@pytest.fixture
def smtp(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Mailbox]]:
    """A real SMTP server (aiosmtpd) that requires a login, and an ``smtp`` connection ``kerr_smtp`` to it."""
    mailbox = Mailbox()
    port = free_port()
    controller = Controller(
        mailbox, hostname="127.0.0.1", port=port, authenticator=mailbox.authenticate, auth_require_tls=False
    )
    controller.start()
    monkeypatch.setenv(
        "AIRFLOW_CONN_KERR_SMTP",
        json.dumps(
            {
                "conn_type": "smtp",
                "host": "127.0.0.1",
                "port": port,
                "login": SMTP_LOGIN,
                "password": SMTP_PASSWORD,
                "extra": {"disable_tls": True, "disable_ssl": True, "from_email": "kerr@example.com", "retry_limit": 0},
            }
        ),
    )
    try:
        yield "kerr_smtp", mailbox
    finally:
        controller.stop()


def html_of(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("html",))
    assert part is not None, message
    return str(part.get_content())


def test_the_alert_reaches_a_real_smtp_server_through_both_paths(
    smtp: tuple[str, Mailbox], capfd: pytest.CaptureFixture[str]
) -> None:
    conn_id, mailbox = smtp
    notifier = SmtpNotifier(to="oncall@example.com", smtp_conn_id=conn_id)

    ToleranceBreachNotifier(
        reading=BREACH, sample=SAMPLE, notifiers=[notifier], email_to="pager@example.com", smtp_conn_id=conn_id
    ).notify({})

    assert mailbox.logins == [SMTP_LOGIN, SMTP_LOGIN], "both paths logged in with the connection's login"
    by_recipient = {str(m["To"]): m for m in mailbox.messages}
    assert set(by_recipient) == {"oncall@example.com", "pager@example.com"}
    for message in by_recipient.values():
        assert message["Subject"] == "[kerr] tolerance breached in orders_pipeline"
        assert message["From"] == "kerr@example.com"
        body = html_of(message)
        assert "Tolerance breached in pipeline orders_pipeline: error rate 25.00% (limit 5.00%)" in body
        assert "Top exceptions: org.example.LookupFailed (1)" in body
        assert "Failing stages: TRANSFORMATION (1)" in body
    everything = b"".join(mailbox.raw).decode("utf-8", "replace")
    assert SMTP_PASSWORD not in everything
    logged = capfd.readouterr()
    assert SMTP_PASSWORD not in logged.out + logged.err


def test_a_message_only_dead_letter_is_escaped_and_masked_in_the_mail(smtp: tuple[str, Mailbox]) -> None:
    """A dead letter with no exception class is quoted by its message: the part of a record a mail shows."""
    conn_id, mailbox = smtp
    sample = [{k: v for k, v in SAMPLE[0].items() if k == "exception_message"}]

    ToleranceBreachNotifier(
        reading=BREACH, sample=sample, notifiers=[SmtpNotifier(to="oncall@example.com", smtp_conn_id=conn_id)]
    ).notify({})

    (message,) = mailbox.messages
    body = html_of(message)
    assert "Top messages: &lt;script&gt;alert(1)&lt;/script&gt; sasl.password=[hidden] {{ 7 * 7 }}" in body, body
    assert "<script>" not in body and SECRET not in body


def test_one_episode_by_email_alert_reminder_resolved(smtp: tuple[str, Mailbox]) -> None:
    """The three mails of one episode: subjects say which, each carries the episode's header; figures when resolved."""
    conn_id, mailbox = smtp
    notifier = ToleranceBreachNotifier(notifiers=[SmtpNotifier(to="oncall@example.com", smtp_conn_id=conn_id)])
    episode = {"kind": "breach", "episode_key": EPISODE, "pipeline": "orders_pipeline", "connectors": ["orders-sink"]}
    link = "http://airflow.example/dags/g/runs/r/tasks/tolerance_guard.ask_on_call/required_actions?map_index=-1"

    notifier.send({**notifier.details({}), **BREACH, **episode, "episode_event": "opened", "question_link": link})
    notifier.send(
        {
            **episode,
            "episode_event": "reminder",
            "max_error_rate": 0.05,
            "error_rate": 0.2,
            "figures": {"duration_s": 1800},
            "question_link": link,
        }
    )
    notifier.send(
        {
            **episode,
            "episode_event": "resolved",
            "max_error_rate": 0.05,
            "figures": {"duration_s": 2700, "records_failed": 612, "records_in": 2400, "peak_error_rate": 0.31},
            "answer": {"chosen": "Wait for recovery", "responded_by": "Ana <ana@example.com>", "timed_out": False},
        }
    )

    opened, reminder, resolved = mailbox.messages
    assert [m["Subject"] for m in mailbox.messages] == [
        "[kerr] tolerance breached in orders_pipeline",
        "[kerr] still paused: breach in orders_pipeline",
        "[kerr] resolved: breach in orders_pipeline",
    ]
    assert {m["X-Kerr-Episode"] for m in mailbox.messages} == {EPISODE}
    assert [m["X-Kerr-Event"] for m in mailbox.messages] == ["tolerance_breach", "breach_reminder", "breach_resolved"]
    assert f"Decide (resume now, wait for recovery, replay the DLQ, keep paused): {link}".replace("&", "&amp;") in (
        html_of(opened)
    )
    assert (
        "Still paused (breach) in pipeline orders_pipeline: orders-sink paused for 30.0 min; error rate now 20.00%"
        in (html_of(reminder))
    )
    body = html_of(resolved)
    assert "Resolved (breach) in pipeline orders_pipeline: orders-sink running again after 45.0 min paused." in body
    assert "Records failed: 612 of 2400; peak error rate 31.00% (limit 5.00%)." in body
    # A name from the identity provider is data too: escaped.
    assert "Decision: Wait for recovery (Ana &lt;ana@example.com&gt;)" in body, body
