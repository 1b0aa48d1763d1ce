"""Tolerance triggers serialize their ``ToleranceSpec`` as a plain dict and still read what an older version stored.

A trigger row written before the spec (``watch=`` holding the flat settings) must resume
after an upgrade: a sensor deferred across it, an asset watcher with its saved state.
"""

from __future__ import annotations

import importlib
import json
from datetime import timedelta
from typing import Any

import pytest

from airflow_kerr.assets.watched import tolerance_asset
from airflow_kerr.kafka.tolerance import ToleranceSpec
from airflow_kerr.sensors.tolerance import ToleranceSensor
from airflow_kerr.triggers.tolerance import ToleranceTrigger
from airflow_kerr.triggers.tolerance_events import ToleranceEventTrigger

SPEC = ToleranceSpec(pipeline="orders", max_error_rate=0.05, min_records=10, window_ms=60_000)

#: What the previous version serialized for a deferred ToleranceSensor (wait_for inside the settings).
STORED_SENSOR_TRIGGER: dict[str, Any] = {
    "watch": {"wait_for": "recovery", **SPEC.to_dict()},
    "poll_interval": 1.0,
    "kafka_config_id": "kafka_default",
    "deadline": 1_900_000_000.0,
    "pause_on_breach": [],
    "kafka_connect_conn_id": "kafka_connect_default",
}


def rebuilt(classpath: str, kwargs: dict[str, Any]) -> Any:
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)


def test_the_sensor_trigger_writes_the_spec_as_json_and_reads_it_back() -> None:
    classpath, kwargs = ToleranceTrigger(spec=SPEC, wait_for="recovery", poll_interval=1.0).serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert kwargs["spec"] == SPEC.to_dict() and kwargs["wait_for"] == "recovery"
    again = rebuilt(classpath, kwargs)
    assert again.spec == SPEC and again.serialize() == (classpath, kwargs)


def test_a_sensor_trigger_stored_by_the_previous_version_resumes() -> None:
    trigger = ToleranceTrigger(**STORED_SENSOR_TRIGGER)
    assert (trigger.spec, trigger.wait_for, trigger.deadline) == (SPEC, "recovery", 1_900_000_000.0)
    assert "watch" not in trigger.serialize()[1]


def test_the_deferring_sensor_hands_its_spec_to_the_trigger() -> None:
    sensor = ToleranceSensor(task_id="t", pipeline="orders", max_error_rate=0.05, min_records=10, window=60)
    assert sensor.tolerance_spec() == SPEC
    assert ToleranceTrigger(watch=sensor.watch_settings()).spec == SPEC


def test_the_sensor_takes_a_spec_or_the_flat_settings_not_both() -> None:
    sensor = ToleranceSensor(task_id="s", spec=SPEC, wait_for="recovery")
    assert (sensor.pipeline, sensor.window_ms, sensor.tolerance_spec()) == ("orders", 60_000, SPEC)
    with pytest.raises(ValueError, match="spec: given with watch settings"):
        ToleranceSensor(task_id="both", spec=SPEC, pipeline="other")


def test_an_asset_watcher_keeps_its_cursor_group_across_the_upgrade() -> None:
    """The default cursor group hashes the spec's dict: the same name the previous version computed."""
    asset = tolerance_asset(
        event="recovery",
        pipeline="orders_pipeline",
        dlq_topic="orders.dlq",
        max_error_rate=0.02,
        window=timedelta(minutes=5),
        poll_interval=1.0,
        pause_on_breach=["orders-sink"],
    )
    classpath, kwargs = asset.watchers[0].trigger.serialize()
    assert kwargs["cursor_group"] == "kerr-watch.tolerance.orders_pipeline.5da02193"
    dlq = tolerance_asset(
        source="dlq",
        dlq_topic="orders.dlq",
        source_topics=["orders"],
        consumer_group="connect-orders-sink",
        max_errors=10,
        window=60,
    )
    assert dlq.watchers[0].trigger.serialize()[1]["cursor_group"] == "kerr-watch.tolerance.orders.dlq.39ecd020"

    stored = {key: value for key, value in kwargs.items() if key not in ("spec", "cursor_group")}
    previous = ToleranceEventTrigger(watch=kwargs["spec"], **stored)  # a row the previous version wrote
    assert previous.serialize() == (classpath, kwargs)
    assert previous.shared_stream_key() == asset.watchers[0].trigger.shared_stream_key()


def test_the_event_trigger_names_every_bad_setting_in_one_error() -> None:
    with pytest.raises(ValueError) as raised:
        ToleranceEventTrigger(spec={**SPEC.to_dict(), "max_errors": -1}, fire_on="later", pause_on_breach=[" "])
    assert str(raised.value).splitlines() == [
        "invalid ToleranceEventTrigger arguments:",
        "  - max_errors=-1: expected an integer >= 0",
        "  - fire_on='later': expected breach or recovery",
        "  - pause_on_breach=[' ']: expected Kafka Connect connector names",
    ]
