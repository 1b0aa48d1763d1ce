"""PipelineSpec: JSON round trip and one error listing every problem."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kerr.spark.spec import InvalidPipelineSpec, PipelineSpec

GOOD: dict[str, Any] = {
    "name": "orders",
    "source": {"topics": ["orders"], "group_id": "g"},
    "sink": {"kind": "kafka", "topic": "orders.clean"},
    "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "orders.dlq"},
}


def test_round_trips_through_json_and_base64() -> None:
    spec = PipelineSpec.from_dict(GOOD)
    assert PipelineSpec.from_json(spec.to_json()) == spec
    assert PipelineSpec.from_base64(spec.to_base64()) == spec
    assert spec.metrics_topic == "kerr.metrics"


def test_every_problem_is_listed_once() -> None:
    bad = {
        **GOOD,
        "value_converter": "yaml",
        "sink": {"kind": "s3"},
        "source": {"topics": ["orders"], "group_id": "g", "starting_offsets": "oldest"},
        "errors": {
            "errors.tolerance": "ALL",
            "errors.retry.timeout": "soon",
            "errors.deadletterqueue.topic.name": "orders",
            "errors.bogus": "1",
        },
    }
    with pytest.raises(InvalidPipelineSpec) as raised:
        PipelineSpec.from_dict(bad)
    text = str(raised.value)
    for fragment in (
        "value_converter='yaml'",
        "sink.kind='s3'",
        "source.starting_offsets='oldest'",
        "errors.tolerance",
        "'ALL'",
        "errors.retry.timeout",
        "errors.bogus",
        "errors.deadletterqueue.topic.name",
    ):
        assert fragment in text, f"{fragment!r} missing from:\n{text}"


def test_unknown_fields_and_missing_sections_are_named() -> None:
    with pytest.raises(InvalidPipelineSpec, match="sink: required"):
        PipelineSpec.from_dict({"name": "x", "source": {"topics": ["a"], "group_id": "g"}})
    with pytest.raises(InvalidPipelineSpec, match="colour: unknown field"):
        PipelineSpec.from_dict({**GOOD, "colour": "blue"})
    with pytest.raises(InvalidPipelineSpec, match="must not be one of the source topics"):
        PipelineSpec.from_dict({**GOOD, "sink": {"kind": "kafka", "topic": "orders"}})


def test_the_spec_does_not_share_the_callers_dicts() -> None:
    data = {**GOOD, "kafka": {"bootstrap.servers": "a:9092"}}
    spec = PipelineSpec.from_dict(data)
    spec.kafka["message.max.bytes"] = 1000
    spec.errors["errors.tolerance"] = "none"
    assert data["kafka"] == {"bootstrap.servers": "a:9092"}
    assert GOOD["errors"]["errors.tolerance"] == "all"
