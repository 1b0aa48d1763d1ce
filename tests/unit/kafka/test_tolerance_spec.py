"""``ToleranceSpec``: the one frozen value a tolerance watch's settings travel as, checked when it is built."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from airflow_kerr.kafka.tolerance import (
    ToleranceSpec,
    ToleranceSpecError,
    ToleranceWatch,
    reading_with_limits,
    window_ms_of,
)

DLQ: dict[str, Any] = {
    "source": "dlq",
    "dlq_topic": "orders.dlq",
    "source_topics": ("orders",),
    "group_id": "connect-orders-sink",
    "max_errors": 10,
}


def test_the_dict_round_trips_and_keeps_the_keys_the_triggers_stored_before_the_spec() -> None:
    spec = ToleranceSpec(**DLQ, window_ms=window_ms_of(timedelta(minutes=1)))
    data = spec.to_dict()
    assert data == {
        "window_ms": 60_000,
        "max_error_rate": None,
        "max_errors": 10,
        "min_records": 100,
        "source": "dlq",
        "pipeline": None,
        "metrics_topic": "kerr.metrics",
        "dlq_topic": "orders.dlq",
        "source_topics": ["orders"],
        "group_id": "connect-orders-sink",
    }
    assert ToleranceSpec.from_dict(data) == spec


def test_the_spec_is_frozen_and_keeps_source_topics_as_a_tuple() -> None:
    spec = ToleranceSpec(**{**DLQ, "source_topics": ["orders", "refunds"]})
    assert spec.source_topics == ("orders", "refunds")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.max_errors = 11  # type: ignore[misc]


def test_every_problem_is_named_with_its_key_value_and_what_is_accepted() -> None:
    with pytest.raises(ToleranceSpecError) as raised:
        ToleranceSpec(source="metrics", max_error_rate=2.0, max_errors=-1, min_records=-5, window_ms=-1000)
    assert raised.value.problems == [
        "max_error_rate=2.0: expected a fraction between 0 and 1",
        "max_errors=-1: expected an integer >= 0",
        "min_records=-5: expected an integer >= 0",
        "window=-1: expected a positive duration",
        "pipeline: required with source='metrics' (the pipeline name in the metrics records)",
    ]
    assert isinstance(raised.value, ValueError)
    assert str(raised.value).startswith("invalid tolerance settings:\n  - max_error_rate=2.0")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"source": "kafka", "pipeline": "p", "max_errors": 1}, "source='kafka': expected one of metrics, dlq"),
        ({"pipeline": "p"}, "max_error_rate=None and max_errors=None: set at least one limit"),
        ({**DLQ, "group_id": None}, "dlq_topic, source_topics and group_id: all required with source='dlq'"),
        ({"pipeline": "p", "max_errors": 1, "wait_for": "breach"}, "wait_for='breach': not a tolerance setting"),
    ],
)
def test_one_problem_one_line(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ToleranceSpecError) as raised:
        ToleranceSpec.from_dict(settings)
    assert raised.value.problems == [message]


def test_the_watch_and_the_alert_read_their_settings_from_the_spec() -> None:
    spec = ToleranceSpec(pipeline="orders", max_error_rate=0.02, window_ms=90_500)
    watch = ToleranceWatch(kafka_config={}, wait_for="recovery", spec=spec)
    assert watch.describe(None) == "no reading yet (the DLQ mode needs two samples)"
    limits = reading_with_limits({"errors": 3}, spec, "recovery")
    assert limits == {
        "errors": 3,
        "pipeline": "orders",
        "wait_for": "recovery",
        "max_error_rate": 0.02,
        "max_errors": None,
        "min_records": 100,
        "window_s": 90.5,
        "dlq_topic": None,
    }
    with pytest.raises(ValueError, match="wait_for='later': expected one of breach, recovery"):
        ToleranceWatch(kafka_config={}, wait_for="later", spec=spec)
