"""common.messaging's real ``MessageQueueTrigger`` finds our queue providers and builds our watch triggers.

No service is needed: the trigger is built and serialized as the dag-processor does when it
parses a DAG file. That the triggerer then runs the watch is tested end to end in
``tests/integration/test_event_driven.py`` (``dlq_queue_watch`` and ``on_tolerance_recovery``).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from airflow.providers.common.messaging.triggers.msg_queue import MESSAGE_QUEUE_PROVIDERS, MessageQueueTrigger

from airflow_kerr.assets.watched import dead_letter_queue_asset, tolerance_asset
from airflow_kerr.queues.dead_letter_queue import DeadLetterQueueMessageQueueProvider
from airflow_kerr.queues.tolerance import ToleranceMessageQueueProvider

ORDERS: dict[str, Any] = {
    "pipeline": "orders_pipeline",
    "dlq_topic": "orders.dlq",
    "max_error_rate": 0.02,
    "min_records": 100,
    "window": timedelta(minutes=5),
    "poll_interval": 1.0,
}


def test_airflow_registers_both_schemes_from_the_provider_info_and_no_other_provider_claims_them() -> None:
    registered = {type(provider): provider for provider in MESSAGE_QUEUE_PROVIDERS}
    assert DeadLetterQueueMessageQueueProvider in registered and ToleranceMessageQueueProvider in registered
    for scheme in ("kerr+dlq", "kerr+tolerance"):
        claiming = [type(p).__name__ for p in MESSAGE_QUEUE_PROVIDERS if p.scheme_matches(scheme)]
        assert len(claiming) == 1, (scheme, claiming)
    assert not any(
        type(p).__module__.startswith("airflow_kerr") for p in MESSAGE_QUEUE_PROVIDERS if p.scheme_matches("kafka")
    )


def test_the_dlq_scheme_serializes_as_the_same_watch_as_the_asset_helper() -> None:
    door = MessageQueueTrigger(scheme="kerr+dlq", topic="orders.dlq", min_records=5, poll_interval=2.0)
    helper = dead_letter_queue_asset("orders.dlq", min_records=5, poll_interval=2.0).watchers[0].trigger
    assert door.serialize() == helper.serialize()
    classpath, kwargs = door.serialize()
    assert classpath == "airflow_kerr.triggers.dead_letter_queue_events.DeadLetterQueueEventTrigger"
    assert (kwargs["topic"], kwargs["min_records"], kwargs["poll_interval"]) == ("orders.dlq", 5, 2.0)


def test_a_tolerance_watch_through_either_door_shares_one_poll_loop_and_state() -> None:
    """The triggerer runs one stream per ``shared_stream_key``: the queue's recovery and the asset's breach share it."""
    recovery = MessageQueueTrigger(scheme="kerr+tolerance", event="recovery", **ORDERS)
    breach: Any = tolerance_asset(event="breach", **ORDERS).watchers[0].trigger
    classpath, kwargs = recovery.serialize()
    assert classpath == "airflow_kerr.triggers.tolerance_events.ToleranceEventTrigger", "the triggerer runs the watch"
    assert kwargs["fire_on"] == ["recovery"] and kwargs["spec"]["window_ms"] == 300_000
    assert recovery.trigger.shared_stream_key() == breach.shared_stream_key()
    assert kwargs["cursor_group"] == breach.cursor_group


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"event": "breached"}, "event='breached': expected breach or recovery"),
        ({"max_error_rate": 2.0}, "max_error_rate"),
        ({"max_error_rate": None}, "max_error_rate"),
    ],
)
def test_bad_tolerance_settings_fail_when_the_dag_file_is_parsed_naming_the_key(
    arguments: dict[str, Any], message: str
) -> None:
    trigger = MessageQueueTrigger(scheme="kerr+tolerance", **{**ORDERS, **arguments})
    with pytest.raises(ValueError, match=message):
        trigger.serialize()  # what the dag-processor calls to store the watcher


def test_an_unknown_scheme_names_itself() -> None:
    with pytest.raises(ValueError, match=re.escape("'kerr+dlqs' is not recognized")):
        MessageQueueTrigger(scheme="kerr+dlqs", topic="orders.dlq").serialize()
