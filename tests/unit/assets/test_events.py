"""Reading watcher events in a task, and one alert per breach, with Airflow's own event and state types stood in for.

The task context's ``triggering_asset_events`` and ``asset_state_store`` come from a
running Airflow; here they are plain objects with the same attributes (the end-to-end
test in ``tests/integration/test_event_driven.py`` runs the real ones).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import Asset

from airflow_kerr.assets.events import ALERTED_KEY, alert_once_per_breach, event_payloads
from airflow_kerr.assets.watched import dead_letter_queue_asset

BREACH = Asset(name="kerr.tolerance_breach.orders", uri="kafka://b:9092/kerr.metrics?event=breach&pipeline=orders")
T0 = datetime(2026, 11, 23, tzinfo=UTC)


def watcher_event(payload: dict[str, Any], seconds: int, uri: str = BREACH.uri) -> Any:
    return SimpleNamespace(
        asset=SimpleNamespace(uri=uri),
        timestamp=T0 + timedelta(seconds=seconds),
        extra={"from_trigger": True, "payload": payload},
    )


class StateStore(dict[str, Any]):
    """What ``asset_state_store[asset]`` offers a task: get and set."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


def breach(breach_id: str) -> dict[str, Any]:
    return {
        "status": "breach",
        "breach_id": breach_id,
        "pipeline": "orders",
        "error_rate": 0.3,
        "errors": 3,
        "records_in": 10,
    }


def test_payloads_come_oldest_first_once_each_whether_from_a_watcher_or_a_task() -> None:
    outlet = SimpleNamespace(asset=SimpleNamespace(uri="kafka://b/orders.clean"), timestamp=T0, extra={"records_in": 5})
    late, early = watcher_event(breach("b@2"), 2), watcher_event(breach("b@1"), 1)
    # An event reached through an alias is listed under the alias too.
    events = {"breach": [late, early], "alias": [late], "sink": [outlet]}
    assert [p.get("breach_id", "outlet") for p in event_payloads(events)] == ["outlet", "b@1", "b@2"]


def test_a_breach_is_alerted_once_even_when_its_event_comes_again(caplog: pytest.LogCaptureFixture) -> None:
    state = StateStore()
    context: dict[str, Any] = {"asset_state_store": {BREACH: state}}
    context["triggering_asset_events"] = {"breach": [watcher_event(breach("orders@1"), 1)]}
    sent = alert_once_per_breach(context, BREACH)
    assert sent is not None and sent["pipeline"] == "orders" and state[ALERTED_KEY] == "orders@1"

    context["triggering_asset_events"] = {"breach": [watcher_event(breach("orders@1"), 5)]}  # a repeat
    assert alert_once_per_breach(context, BREACH) is None
    assert "breach orders@1 was alerted already" in caplog.text

    context["triggering_asset_events"] = {"breach": [watcher_event(breach("orders@9"), 9)]}  # the next breach
    assert alert_once_per_breach(context, BREACH) is not None and state[ALERTED_KEY] == "orders@9"


def test_a_breach_whose_dlq_could_not_be_read_alerts_saying_why_it_has_no_sample() -> None:
    context: dict[str, Any] = {"asset_state_store": {BREACH: StateStore()}}
    event = {**breach("orders@3"), "dlq_topic": "orders.dlq", "sample": [], "sample_error": "OffsetLookupError: gone"}
    context["triggering_asset_events"] = {"breach": [watcher_event(event, 3)]}
    sent = alert_once_per_breach(context, BREACH)
    assert sent is not None and sent["sample_error"] == "OffsetLookupError: gone"


def test_a_dlq_asset_reads_no_connection_its_uri_names_the_connection_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """The asset's identity comes from the DAG file alone, so it parses where no connection is defined."""
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_DEFAULT", raising=False)
    assert dead_letter_queue_asset("orders.dlq").uri == "kafka://kafka_default/orders.dlq"
    assert dead_letter_queue_asset("orders.dlq", kafka_config_id="kafka_eu").uri == "kafka://kafka_eu/orders.dlq"
    assert dead_letter_queue_asset("orders.dlq", server="k1:9092").uri == "kafka://k1:9092/orders.dlq"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"server": " "}, r"server=' ': expected one bootstrap server as host:port"),
        ({"server": "k1:9092/x"}, r"server='k1:9092/x': expected one bootstrap server as host:port"),
        ({"kafka_config_id": ""}, r"kafka_config_id='': expected a connection id"),
    ],
)
def test_a_dlq_asset_names_a_bad_cluster_setting(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dead_letter_queue_asset("orders.dlq", **kwargs)
