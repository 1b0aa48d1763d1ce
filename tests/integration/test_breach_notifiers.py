"""The breach alert through the slack provider's real ``SlackWebhookNotifier`` and through our plain webhook,
with the URL in a connection, each received by a real HTTP server on this machine.

What a user sees: the channel gets our text and blocks, masked; a secret in a dead letter's
exception text never reaches the channel or the log; Jinja syntax in it stays text; a notifier
that cannot deliver is logged and changes nothing else.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier

SECRET = "hunter2"
BREACH = {
    "pipeline": "orders_pipeline",
    "error_rate": 0.25,
    "max_error_rate": 0.05,
    "errors": 60,
    "records_in": 240,
    "window_s": 300,
    "dlq_topic": "orders.dlq",
}
#: A KIP-1191 dead letter names no class, so the alert quotes its message: a secret, Jinja and a Slack mention.
SAMPLE = [
    {
        "exception_message": f"SaslAuthenticationException: sasl.password={SECRET} rejected {{{{ 7 * 7 }}}} <!channel>",
        "source_topic": "orders",
    }
]


@dataclass
class Received:
    """What the local server got: one (path, JSON body) per POST; ``status`` is what it answers."""

    posts: list[tuple[str, Any]] = field(default_factory=list)
    status: int = 200
    answer: bytes = b"ok"


@pytest.fixture
def server() -> Iterator[tuple[int, Received]]:
    """A real HTTP server on a port the kernel picks, stopped after the test."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.posts.append((self.path, json.loads(body)))
            self.send_response(received.status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(received.answer)))
            self.end_headers()
            self.wfile.write(received.answer)

        def log_message(self, format: str, *args: Any) -> None:
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_port, received
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: Any) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
    return conn_id


def test_slack_webhook_notifier_delivers_our_text_and_blocks_masked(
    server: tuple[int, Received], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, received = server
    conn_id = connection(
        monkeypatch,
        "kerr_slack_alerts",
        conn_type="slackwebhook",
        host=f"http://127.0.0.1:{port}/services",
        password="T000/B000/XXXXXXXX",
    )
    slack = SlackWebhookNotifier(slack_webhook_conn_id=conn_id, text="")

    ToleranceBreachNotifier(reading=BREACH, sample=SAMPLE, notifiers=[slack]).notify({})

    ((path, body),) = received.posts
    assert path == "/services/T000/B000/XXXXXXXX"
    assert body["text"].startswith("Tolerance breached in pipeline orders_pipeline: error rate 25.00%")
    (block,) = body["blocks"]
    assert block["type"] == "section" and block["text"]["type"] == "mrkdwn"
    mrkdwn = block["text"]["text"]
    assert mrkdwn.startswith("Tolerance breached in pipeline orders_pipeline")
    assert "Top messages: SaslAuthenticationException: sasl.password=[hidden]" in mrkdwn
    assert "Dead letter queue: orders.dlq" in mrkdwn
    assert SECRET not in json.dumps(body)
    assert "{{ 7 * 7 }}" in mrkdwn and "49" not in mrkdwn, "exception text is data, never a template"
    assert "&lt;!channel&gt;" in mrkdwn and "<!channel>" not in mrkdwn, "a dead letter must not ping the channel"
    assert slack.text == "" and slack.blocks is None, "the notifier in the DAG file stays as written"


def test_a_slack_text_template_may_quote_the_breach(
    server: tuple[int, Received], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, received = server
    conn_id = connection(
        monkeypatch, "kerr_slack_url", conn_type="slackwebhook", password=f"http://127.0.0.1:{port}/hooks/abc"
    )
    slack = SlackWebhookNotifier(
        slack_webhook_conn_id=conn_id, text="[{{ run_id }}] {{ kerr_breach.summary }}", blocks=[]
    )

    ToleranceBreachNotifier(reading=BREACH, sample=SAMPLE, notifiers=[slack]).notify({"run_id": "manual__1"})

    ((path, body),) = received.posts
    assert path == "/hooks/abc"
    assert body["text"].startswith("[manual__1] Tolerance breached in pipeline orders_pipeline")
    assert "Top messages" in body["blocks"][0]["text"]["text"], "an empty blocks list gets ours"


def test_a_failing_notifier_is_logged_masked_and_the_others_still_deliver(
    server: tuple[int, Received], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    port, received = server
    received.status, received.answer = 500, f"upstream said sasl.password={SECRET}".encode()
    failing = connection(
        monkeypatch, "kerr_slack_down", conn_type="slackwebhook", password=f"http://127.0.0.1:{port}/down/tok"
    )
    missing = SlackWebhookNotifier(slack_webhook_conn_id="kerr_no_such_slack", text="")

    ToleranceBreachNotifier(
        reading=BREACH,
        sample=SAMPLE,
        notifiers=[missing, SlackWebhookNotifier(slack_webhook_conn_id=failing, text="")],
    ).notify({})
    logged = "".join(capfd.readouterr())

    assert [path for path, _ in received.posts] == ["/down/tok"], "the second notifier ran after the first failed"
    failures = [line for line in logged.splitlines() if "was not delivered" in line]
    assert len(failures) == 2, logged
    assert "kerr_no_such_slack" in failures[0]
    assert "Status Code: 500" in failures[1] and "sasl.password=[hidden]" in failures[1]
    assert SECRET not in logged
    assert "Tolerance breached in pipeline orders_pipeline" in logged, "the alert is in the task log"


def test_the_plain_webhook_reads_its_url_from_a_connection(
    server: tuple[int, Received], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An http connection (host, port, schema, the token as password) or a slack_webhook one (the whole URL)."""
    port, received = server
    http_conn = connection(
        monkeypatch, "kerr_http_hook", conn_type="http", host="127.0.0.1", port=port, schema="http", password="T1/B1/s"
    )
    slack_conn = connection(
        monkeypatch, "kerr_slack_hook", conn_type="slackwebhook", password=f"http://127.0.0.1:{port}/services/T2/B2/s"
    )

    for conn_id in (http_conn, slack_conn):
        ToleranceBreachNotifier(webhook_conn_id=conn_id, reading=BREACH, sample=SAMPLE).notify({})

    assert [path for path, _ in received.posts] == ["/T1/B1/s", "/services/T2/B2/s"]
    for _, body in received.posts:
        assert body["text"].startswith("Tolerance breached in pipeline orders_pipeline")
        assert body["kerr"]["event"] == "tolerance_breach" and body["kerr"]["dlq_topic"] == "orders.dlq"
        assert SECRET not in json.dumps(body)


def test_the_old_webhook_url_sends_what_the_connection_sends(
    server: tuple[int, Received], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, received = server
    conn_id = connection(monkeypatch, "kerr_same_hook", conn_type="http", host=f"http://127.0.0.1:{port}/same")

    ToleranceBreachNotifier(webhook_url=f"http://127.0.0.1:{port}/same", reading=BREACH, sample=SAMPLE).notify({})
    ToleranceBreachNotifier(webhook_conn_id=conn_id, reading=BREACH, sample=SAMPLE).notify({})

    (by_url, by_conn) = received.posts
    assert by_url == by_conn and by_url[0] == "/same"


def test_a_webhook_connection_that_fails_is_logged_by_host_never_by_its_token(
    server: tuple[int, Received], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    port, received = server
    received.status = 404
    token = "T9/B9/zqTokenNeverLogged"
    conn_id = connection(
        monkeypatch, "kerr_hook_404", conn_type="slackwebhook", host=f"http://127.0.0.1:{port}/services", password=token
    )

    ToleranceBreachNotifier(webhook_conn_id=conn_id, reading=BREACH, webhook_backoff_s=0.01).notify({})
    ToleranceBreachNotifier(webhook_conn_id="kerr_no_such_hook", reading=BREACH).notify({})
    logged = "".join(capfd.readouterr())

    assert [path for path, _ in received.posts] == [f"/services/{token}"], "a 404 is not retried"
    assert "tolerance webhook to 127.0.0.1 was not delivered" in logged, logged
    assert "zqTokenNeverLogged" not in logged
    assert "tolerance webhook connection kerr_no_such_hook could not be read" in logged
