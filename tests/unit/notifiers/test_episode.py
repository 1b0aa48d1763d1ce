"""One episode, one key; the "resolved" figures from task metrics records (no broker: the records are given)."""

from __future__ import annotations

import pytest

from airflow_kerr.errors.metrics import TOTAL_RECORD_ERRORS
from airflow_kerr.kafka import episode
from airflow_kerr.kafka.episode import episode_figures, episode_key
from airflow_kerr.kafka.metrics_topic import input_range_fields
from airflow_kerr.kafka.tolerance import ToleranceSpec
from airflow_kerr.notifiers.breach_message import BreachMessage


def test_the_key_is_stable_and_names_kind_and_pipeline() -> None:
    key = episode_key("breach", "orders", ["b", "a"], "guard", "manual__1")
    assert key == episode_key("breach", "orders", ["a", "b"], "guard", "manual__1")
    assert key.startswith("kerr-breach-orders-") and len(key) < 255
    assert key != episode_key("breach", "orders", ["a", "b"], "guard", "manual__2")
    assert key != episode_key("outage", "orders", ["a", "b"], "guard", "manual__1")


def test_an_unknown_kind_is_named() -> None:
    with pytest.raises(ValueError, match="episode kind='flood'; accepted: breach, outage"):
        episode_key("flood", "orders", [], None, None)


def task(end_ms: int, records_in: int, errors: int, start: int) -> dict[str, object]:
    return {
        "scope": "task",
        "pipeline": "orders",
        "window_end_ms": end_ms,
        "records_in": records_in,
        TOTAL_RECORD_ERRORS: errors,
        **input_range_fields("t", 0, start, start + records_in - 1),
    }


def test_figures_count_each_record_once_and_find_the_peak_window(monkeypatch: pytest.MonkeyPatch) -> None:
    records = [task(1_000, 100, 10, 0), task(2_000, 100, 60, 100), task(3_000, 200, 2, 200)]
    monkeypatch.setattr(episode, "read_metrics_records", lambda config, topic, since, accept: records)
    spec = ToleranceSpec(max_error_rate=0.05, min_records=100, window_ms=1_500, pipeline="orders")

    figures = episode_figures({}, spec, started_ms=2_000, ended_ms=62_000)

    assert figures["duration_s"] == 60.0
    assert (figures["records_in"], figures["records_failed"]) == (400, 72)
    # The 1.5 s window ending at the second record holds the first two: 70 of 200.
    assert figures["peak_error_rate"] == pytest.approx(0.35) and figures["peak_at_ms"] == 2_000


def test_the_resolved_message_quotes_the_figures_and_the_decision_masked() -> None:
    message = BreachMessage.of(
        {
            "kind": "breach",
            "episode_event": "resolved",
            "episode_key": "k",
            "pipeline": "orders",
            "connectors": ["orders-sink"],
            "max_error_rate": 0.05,
            "figures": {"duration_s": 95, "records_failed": 12, "records_in": 300, "peak_error_rate": 0.4},
            "answer": {"chosen": "Resume now", "responded_by": "ana password=hunter2"},
        }
    )
    assert message.summary == "Resolved (breach) in pipeline orders: orders-sink running again after 95 s paused."
    assert "Records failed: 12 of 300; peak error rate 40.00% (limit 5.00%)." in message.text
    assert "hunter2" not in message.text and "Decision: Resume now (ana password=" in message.text
    assert message.webhook_payload()["kerr"]["event"] == "breach_resolved"
    assert message.headers == {"X-Kerr-Episode": "k", "X-Kerr-Event": "breach_resolved"}
    assert message.subject == "[kerr] resolved: breach in orders"
