"""The breach message's forms (text, Slack blocks, HTML) say the same, masked and escaped for their reader,
and the notifier refuses settings it cannot honour, naming them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_kerr.notifiers.breach_message import BreachMessage
from airflow_kerr.notifiers.tolerance_breach import ToleranceBreachNotifier
from airflow_kerr.notifiers.webhook_connection import webhook_url_of

READING = {"pipeline": "orders_pipeline", "error_rate": 0.1, "max_error_rate": 0.02, "errors": 50, "records_in": 500}
SAMPLE = [
    {"exception_message": "bad <script>alert(1)</script> & ssl.key.password=zqKeyPass", "source_topic": "orders"},
]


def message() -> BreachMessage:
    notifier = ToleranceBreachNotifier(reading=READING, sample=SAMPLE, dlq_topic="orders.dlq")
    return notifier.message(notifier.details({}))


def test_every_form_carries_the_same_lines_masked() -> None:
    built = message()

    assert built.summary == built.text.splitlines()[0]
    assert built.summary.startswith("Tolerance breached in pipeline orders_pipeline: error rate 10.00%")
    assert built.subject == "[kerr] tolerance breached in orders_pipeline"
    for form in (built.text, built.html, built.blocks[0]["text"]["text"], str(built.webhook_payload())):
        assert "zqKeyPass" not in form
        assert "ssl.key.password=[hidden]" in form
        assert "Dead letter queue: orders.dlq" in form


def test_html_and_slack_escape_what_a_dead_letter_says() -> None:
    built = message()

    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in built.html and "<script>" not in built.html
    assert built.html.startswith("<p><strong>Tolerance breached in pipeline orders_pipeline")
    mrkdwn = built.blocks[0]["text"]["text"]
    assert "&lt;script&gt;" in mrkdwn and "<script>" not in mrkdwn
    assert "<script>" in built.text, "the plain text is quoted as it is"


def test_both_webhook_url_and_webhook_conn_id_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"webhook_url and webhook_conn_id='slack_alerts' are both set"):
        ToleranceBreachNotifier(webhook_url="https://example.invalid/hook", webhook_conn_id="slack_alerts")


def test_a_notifier_that_is_not_an_airflow_notifier_is_refused_by_position() -> None:
    with pytest.raises(TypeError, match=r"notifiers\[0\]='slack_alerts' is a str; accepted: Airflow notifiers"):
        ToleranceBreachNotifier(notifiers=["slack_alerts"])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("fields", "url"),
    [
        ({"password": "https://hooks.slack.com/services/T/B/x"}, "https://hooks.slack.com/services/T/B/x"),
        ({"host": "hooks.slack.com/services", "password": "T/B/x"}, "https://hooks.slack.com/services/T/B/x"),
        ({"host": "http://127.0.0.1:8080/a/", "password": "/T/B/x"}, "http://127.0.0.1:8080/a/T/B/x"),
        ({"host": "alerts.example.com", "schema": "http", "port": 8080}, "http://alerts.example.com:8080"),
        ({"conn_type": "slackwebhook", "password": "T/B/x"}, "https://hooks.slack.com/services/T/B/x"),
    ],
)
def test_a_connection_holds_the_webhook_url_as_slacks_hook_reads_it(fields: dict[str, object], url: str) -> None:
    conn = SimpleNamespace(**{"host": None, "password": None, "schema": None, "port": None, **fields})
    assert webhook_url_of(conn, "alerts") == url


def test_a_connection_without_a_url_is_named() -> None:
    conn = SimpleNamespace(conn_type="http", host="", password="T/B/x", schema=None, port=None)
    with pytest.raises(ValueError, match=r"webhook_conn_id='alerts': the connection holds no webhook URL; accepted:"):
        webhook_url_of(conn, "alerts")


def test_the_alert_links_straight_to_each_breaching_runs_dead_letters_tab() -> None:
    """The reading names the job runs that wrote the window's dead letters; the guard turns each into its tab's link."""
    from airflow_kerr.task_groups.tolerance_guard import MAX_RUN_LINKS, run_links

    reading = {**READING, "dead_letter_runs": ["old.run", "error_aware_pipeline.manual__1.orders_pipeline.1"]}
    notifier = ToleranceBreachNotifier(reading=reading, sample=SAMPLE, dlq_topic="orders.dlq")
    details = notifier.details({})
    assert details["dead_letter_runs"] == reading["dead_letter_runs"]
    details["run_links"] = run_links("http://airflow:8080", details["dead_letter_runs"])
    built = notifier.message(details)

    tab = "http://airflow:8080/kerr/run-tab?job_run_id=error_aware_pipeline.manual__1.orders_pipeline.1"
    assert f"Dead letters of run error_aware_pipeline.manual__1.orders_pipeline.1: {tab}" in built.text.splitlines()
    assert tab in built.html
    assert run_links(None, ["r"]) == [], "no link without Airflow's address"
    assert [r["run"] for r in run_links("http://a", [str(i) for i in range(9)])] == ["6", "7", "8"][-MAX_RUN_LINKS:]
