"""PipelineSpec validation raises only InvalidPipelineSpec, naming key, value and what is accepted (issue #12, point 4).

Fuzzed specs used to escape as ValueError, TypeError and AttributeError from deep
inside (a number for ``source.topics``, a list for ``errors``, integers past the
4,300-digit limit, mixed key types at ``to_json``), and some bad values were accepted
silently. The property tests mutate a valid spec at any field with arbitrary JSON-like
data and accept only a valid, serializable spec or the documented error.
"""

from __future__ import annotations

import contextlib
import copy
import math
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kerr.errors.config import show_value
from airflow_kerr.spark.spec import InvalidPipelineSpec, PipelineSpec

GOOD: dict[str, Any] = {
    "name": "orders",
    "source": {"topics": ["orders"], "group_id": "g"},
    "sink": {"kind": "kafka", "topic": "orders.clean"},
    "kafka": {"bootstrap.servers": "localhost:9092", "linger.ms": 5},
    "errors": {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "orders.dlq"},
}
HUGE = 10 ** (sys.get_int_max_str_digits() + 1)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([1, -1]).map(lambda sign: sign * HUGE),  # mapped: hypothesis cannot repr a just(HUGE)
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.sampled_from(["", "a.b", "orders", "__x", "kafka", "jsonl", "1" * 5000, "errors.tolerance", "group"]),
)
hashables = st.one_of(st.text(max_size=8), st.integers(), st.none(), st.booleans(), st.sampled_from(["errors.x", "1"]))
json_like = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(hashables, inner, max_size=3)),
    max_leaves=6,
)
PATHS = [
    ("name",),
    ("kafka",),
    ("key_converter",),
    ("value_converter",),
    ("transformations",),
    ("errors",),
    ("task_id",),
    ("metrics_topic",),
    ("batch_size",),
    ("metrics_interval_ms",),
    ("source",),
    ("sink",),
    ("source", "topics"),
    ("source", "group_id"),
    ("source", "starting_offsets"),
    ("source", "starting_timestamp_ms"),
    ("source", "format"),
    ("source", "max_records_per_partition"),
    ("sink", "kind"),
    ("sink", "topic"),
    ("sink", "path"),
    ("sink", "callable"),
    ("errors", "errors.retry.timeout"),
    ("kafka", "bootstrap.servers"),
    ("extra",),
]
changes = st.lists(st.tuples(st.sampled_from(PATHS) | st.tuples(hashables), json_like), min_size=1, max_size=3)


def mutate(base: dict[str, Any], edits: list[tuple[tuple[Any, ...], Any]]) -> dict[Any, Any]:
    data = copy.deepcopy(base)
    for path, value in edits:
        target = data
        for part in path[:-1]:
            if not isinstance(target.get(part), dict):
                target[part] = {}
            target = target[part]
        target[path[-1]] = value
    return data


def accept_only_the_documented_error(data: Any) -> PipelineSpec | None:
    try:
        spec = PipelineSpec.from_dict(data)
    except InvalidPipelineSpec as error:
        assert error.problems and all(isinstance(problem, str) for problem in error.problems)
        str(error)
        return None
    assert PipelineSpec.from_json(spec.to_json()) == spec
    assert PipelineSpec.from_base64(spec.to_base64()) == spec
    return spec


@settings(max_examples=500)
@given(changes)
def test_any_field_with_any_value_gives_a_spec_or_the_documented_error(edits: list[tuple[Any, Any]]) -> None:
    accept_only_the_documented_error(mutate(GOOD, edits))


@settings(max_examples=200)
@given(json_like)
def test_any_value_as_the_whole_spec_gives_the_documented_error(data: Any) -> None:
    accept_only_the_documented_error(data)


@settings(max_examples=200)
@given(st.text(max_size=40) | st.sampled_from(["[1]", "{", '{"name": 1}', "1" * 5000, "null"]))
def test_any_json_or_base64_text_gives_a_spec_or_the_documented_error(text: str) -> None:
    for parse in (PipelineSpec.from_json, PipelineSpec.from_base64):
        with contextlib.suppress(InvalidPipelineSpec):
            parse(text)


def problems_of(data: dict[Any, Any]) -> str:
    with pytest.raises(InvalidPipelineSpec) as raised:
        PipelineSpec.from_dict(data)
    return str(raised.value)


# Values the validator used to accept silently or to let escape; path, value, text the message must hold.
BAD = [
    (("kafka",), "x", "kafka='x': expected a mapping of librdkafka properties"),
    (("kafka",), ["bootstrap.servers"], "kafka=['bootstrap.servers']: expected a mapping"),
    (("kafka", "linger.ms"), math.inf, "kafka['linger.ms']=inf: expected a string, a finite number or a boolean"),
    (("kafka", "sasl.password"), ["hunter2"], "kafka['sasl.password']='[hidden]'"),
    (("source", "group_id"), ["g"], "source.group_id=['g']: expected a non-empty string"),
    (("source", "group_id"), "", "source.group_id='': expected a non-empty string"),
    (("source", "topics"), [""], "source.topics[0]='': expected a Kafka topic name, not an empty string"),
    (("source", "topics"), ["a b"], "source.topics[0]='a b': expected a Kafka topic name: ASCII letters"),
    (("source", "topics"), 5, "source.topics=5: expected a non-empty list of distinct Kafka topic names"),
    (("source", "topics"), "orders", "source.topics='orders': expected a non-empty list"),
    (("source", "topics"), ["a", "a"], "(a topic listed twice would be read twice)"),
    (("source", "starting_timestamp_ms"), "yesterday", "source.starting_timestamp_ms='yesterday': expected an integer"),
    (("source", "starting_timestamp_ms"), math.nan, "source.starting_timestamp_ms=nan: expected an integer in 0.."),
    (("source", "starting_timestamp_ms"), math.inf, "source.starting_timestamp_ms=inf"),
    (("source", "starting_timestamp_ms"), HUGE, "source.starting_timestamp_ms=<an integer of"),
    (("source", "max_records_per_partition"), True, "source.max_records_per_partition=True: expected an integer"),
    (("source", "starting_offsets"), ["group"], "source.starting_offsets=['group']: expected one of group"),
    (("batch_size",), True, "batch_size=True: expected an integer in 1..2147483647"),
    (("batch_size",), HUGE, "batch_size=<an integer of"),
    (("batch_size",), 2048.0, "batch_size=2048.0: expected an integer"),
    (("metrics_interval_ms",), 50, "metrics_interval_ms=50: expected an integer in 100..3600000"),
    (("metrics_interval_ms",), 1.5, "metrics_interval_ms=1.5: expected an integer in 100..3600000"),
    (("task_id",), False, "task_id=False: expected an integer in 0..2147483647"),
    (("metrics_topic",), 5, "metrics_topic=5: expected a Kafka topic name (a string)"),
    (("metrics_topic",), "__m", "metrics_topic='__m': expected a topic name not starting with '__'"),
    (("name",), ["orders"], "name=['orders']: expected a non-empty string"),
    (
        ("key_converter",),
        ".",
        "key_converter='.': expected one of bytes, string, json, avro, protobuf, json_schema or a dotted-path callable",
    ),
    (("transformations",), ["ok.fn", 3], "transformations[1]=3: expected a dotted-path callable"),
    (("transformations",), "a.b", "transformations='a.b': expected a list"),
    (("sink", "topic"), 7, "sink.topic=7: expected a Kafka topic name (a string)"),
    (("sink", "topic"), "orders", "sink.topic='orders': must not be one of the source topics"),
    (("sink", "callable"), ["x"], "sink.callable=['x']: expected a dotted-path callable"),
    (("errors",), ["errors.tolerance", "all"], "errors=['errors.tolerance', 'all']: expected a mapping"),
    (("errors", "tolerance"), "all", "errors['tolerance']='all': expected keys starting with 'errors.'"),
    (("errors", 1), "all", "1='all': expected a string key such as 'errors.tolerance'"),
    (("errors", "errors.retry.timeout"), HUGE, "errors.retry.timeout=<an integer of"),
    ((1,), "x", "1: field names must be strings"),
    (("source", 1), "x", "source.1: field names must be strings"),
    (("source", "colour"), "x", "source.colour: unknown field"),
    (("sink", "colour"), "x", "sink.colour: unknown field"),
]


@pytest.mark.parametrize(("path", "value", "text"), BAD, ids=[show_value(row[:2])[:60] for row in BAD])
def test_each_bad_value_is_named_with_what_is_accepted(path: tuple[Any, ...], value: Any, text: str) -> None:
    assert text in problems_of(mutate(GOOD, [(path, value)]))


def test_errors_problems_are_reported_even_when_source_and_sink_are_missing() -> None:
    data = {"name": "orders", "errors": {"errors.tolerance": "ALL", "errors.bogus": 1}, "batch_size": 0}

    text = problems_of(data)

    for fragment in ("source: required", "sink: required", "errors.tolerance='ALL'", "errors.bogus", "batch_size=0"):
        assert fragment in text, f"{fragment!r} missing from:\n{text}"


def test_missing_required_fields_of_a_section_are_named() -> None:
    text = problems_of({**GOOD, "source": {}, "sink": {}})

    for fragment in ("source.topics: required", "source.group_id: required", "sink.kind: required"):
        assert fragment in text


def test_a_secret_of_the_wrong_type_is_not_echoed() -> None:
    text = problems_of(mutate(GOOD, [(("kafka", "ssl.key.pem"), {"pem": "-----BEGIN PRIVATE KEY-----"})]))
    assert "BEGIN PRIVATE KEY" not in text


@pytest.mark.parametrize("text", ["not json", "[1]", "1" * 5000, '{"name": '])
def test_text_that_is_no_spec_object_is_the_documented_error(text: str) -> None:
    with pytest.raises(InvalidPipelineSpec):
        PipelineSpec.from_json(text)
    with pytest.raises(InvalidPipelineSpec):
        PipelineSpec.from_base64(text)


def test_a_valid_spec_still_round_trips() -> None:
    spec = PipelineSpec.from_dict({**GOOD, "source": {**GOOD["source"], "starting_timestamp_ms": 0}})
    assert spec.source.starting_timestamp_ms == 0
    assert PipelineSpec.from_json(spec.to_json()) == spec
