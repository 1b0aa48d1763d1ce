"""The errors.* validator raises only InvalidErrorsConfig, naming key, value and domain (issue #12, point 4).

Fuzzed inputs used to escape as ValueError (integers past Python's 4,300-digit limit,
in ``int()`` and even in the error message's ``repr``) and AttributeError (``errors``
given as a list). The property tests feed arbitrary JSON-like data, nested and with
mixed key types, and accept only a valid configuration or the documented error.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import ErrorHandlingConfig, InvalidErrorsConfig
from airflow_kerr.errors.config import SPARK_CONF_PREFIX, show_value

KEYS = list(ErrorHandlingConfig.KEYS)
PAST_DIGIT_LIMIT = sys.get_int_max_str_digits() + 1

huge_integers = st.integers(PAST_DIGIT_LIMIT, PAST_DIGIT_LIMIT + 300).map(lambda digits: 10**digits)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**70), 2**70),
    huge_integers,
    huge_integers.map(lambda n: -n),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["inf", "-inf", "nan", "1e3", "0x10", "\uff11\uff12", " 12 ", "-1", "all", "true", "minute"]),
    st.integers(PAST_DIGIT_LIMIT, PAST_DIGIT_LIMIT + 50).map(lambda n: "9" * n),
    st.integers(20, 40).map(lambda n: "-" + "0" * n + "1"),
)
hashables = st.one_of(st.text(max_size=12), st.integers(), st.none(), st.booleans(), st.floats(), st.sampled_from(KEYS))
json_like = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(hashables, inner, max_size=3)),
    max_leaves=8,
)
properties = st.dictionaries(st.one_of(st.sampled_from(KEYS), hashables), json_like, max_size=6)


def accept_only_the_documented_error(call: Any) -> ErrorHandlingConfig | None:
    try:
        config = call()
    except InvalidErrorsConfig as error:
        text = str(error)  # the message itself must render, whatever the values
        assert error.problems
        for problem in error.problems:
            assert isinstance(problem.key, str)
            assert problem.accepted
            assert problem.key in text
        return None
    assert isinstance(config, ErrorHandlingConfig)
    assert ErrorHandlingConfig.from_properties(config.to_properties()) == config
    return config


@settings(max_examples=400)
@given(properties)
def test_any_properties_give_a_config_or_the_documented_error(data: dict[Any, Any]) -> None:
    accept_only_the_documented_error(lambda: ErrorHandlingConfig.from_properties(data))


@settings(max_examples=200)
@given(json_like)
def test_any_value_in_place_of_the_properties_gives_a_config_or_the_documented_error(data: Any) -> None:
    accept_only_the_documented_error(lambda: ErrorHandlingConfig.from_properties(data))


@settings(max_examples=300)
@given(st.sampled_from(KEYS), json_like)
def test_any_value_of_any_key_gives_a_config_or_a_problem_naming_that_key(key: str, value: Any) -> None:
    config = accept_only_the_documented_error(lambda: ErrorHandlingConfig.from_properties({key: value}))
    if config is None:
        with pytest.raises(InvalidErrorsConfig) as raised:
            ErrorHandlingConfig.from_properties({key: value})
        assert key in raised.value.keys


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(KEYS), json_like, max_size=4))
def test_spark_conf_and_direct_construction_raise_only_the_documented_error(data: dict[str, Any]) -> None:
    accept_only_the_documented_error(
        lambda: ErrorHandlingConfig.from_spark_conf({SPARK_CONF_PREFIX + key: value for key, value in data.items()})
    )
    names = [field.name for field in dataclasses.fields(ErrorHandlingConfig) if field.name != "source_topics"]
    values = dict(zip(names, data.values(), strict=False))
    accept_only_the_documented_error(lambda: ErrorHandlingConfig(**values))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("errors.retry.timeout", "9" * PAST_DIGIT_LIMIT),
        ("errors.retry.timeout", 10**PAST_DIGIT_LIMIT),
        ("errors.tolerance.limit", -(10**PAST_DIGIT_LIMIT)),
        ("errors.tolerance.rate.duration", "1" * PAST_DIGIT_LIMIT),
        ("errors.deadletterqueue.topic.partitions", [10**PAST_DIGIT_LIMIT]),
        ("errors.retry.delay.max.ms", math.inf),
        ("errors.retry.delay.max.ms", math.nan),
        ("errors.retry.timeout", "inf"),
        ("errors.tolerance.rate.duration", -math.inf),
        ("errors.deadletterqueue.topic.replication.factor", True),
        ("errors.tolerance", ["all"]),
        ("errors.deadletterqueue.topic.name", {"name": "dlq"}),
    ],
    ids=lambda value: show_value(value)[:40],
)
def test_each_escaping_value_is_a_problem_naming_key_value_and_domain(key: str, value: Any) -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties({key: value})

    (problem,) = raised.value.problems
    assert problem.key == key
    assert problem.value is value
    assert problem.accepted.startswith("expected")
    assert f"{key}={show_value(value)}: expected" in str(raised.value)


def test_an_integer_too_long_to_print_is_described_instead() -> None:
    assert show_value(10**PAST_DIGIT_LIMIT) == f"<an integer of {(10**PAST_DIGIT_LIMIT).bit_length()} bits>"
    assert "too long to print" in show_value([10**PAST_DIGIT_LIMIT])
    assert len(show_value("x" * 100_000)) <= 1000


@pytest.mark.parametrize("errors", [["errors.tolerance", "all"], "errors.tolerance=all", 3, None])
def test_errors_that_are_not_a_mapping_are_one_problem(errors: Any) -> None:
    with pytest.raises(InvalidErrorsConfig, match=r"expected a mapping of errors\.\* keys"):
        ErrorHandlingConfig.from_properties(errors)


def test_non_string_keys_are_reported_beside_the_other_problems() -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties({1: "all", None: "x", "errors.tolerance": "ALL"})  # type: ignore[dict-item]

    assert raised.value.keys == ("1", "None", "errors.tolerance")
    assert "expected a string key such as 'errors.tolerance'" in str(raised.value)


@pytest.mark.parametrize("timeout", [-1, -2, -60_000, -(2**63)])
def test_any_negative_retry_timeout_is_accepted_as_no_deadline(timeout: int) -> None:
    """Connect defines errors.retry.timeout without a validator and treats any negative value as no deadline."""
    config = ErrorHandlingConfig.from_properties({"errors.retry.timeout": str(timeout)})
    assert config.retry_timeout_ms == timeout
    assert config.retry_enabled


@pytest.mark.parametrize("factor", [-32768, -2, -1, 0, 1, 3, 32767])
def test_the_dlq_replication_factor_accepts_every_java_short(factor: int) -> None:
    """Connect's SHORT without a validator: the broker judges it when it creates the topic."""
    config = ErrorHandlingConfig.from_properties({"errors.deadletterqueue.topic.replication.factor": factor})
    assert config.dlq_topic_replication_factor == factor
