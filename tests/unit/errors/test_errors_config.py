"""ErrorHandlingConfig: every key, its defaults, its domain, and how bad input is reported."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import (
    MASK,
    ErrorHandlingConfig,
    HeaderFormat,
    InvalidErrorsConfig,
    ToleranceType,
    is_sensitive_key,
    mask_credentials,
)


def test_defaults_are_connects_fail_fast_defaults() -> None:
    config = ErrorHandlingConfig.from_properties({})

    assert config.retry_timeout_ms == 0
    assert config.retry_delay_max_ms == 60_000
    assert config.tolerance is ToleranceType.NONE
    assert config.log_enable is False
    assert config.log_include_messages is False
    assert config.dlq_topic_name == ""
    assert config.dlq_topic_replication_factor == 3
    assert config.dlq_context_headers_enable is False
    assert config.tolerance_limit == -1
    assert config.tolerance_rate_limit == -1
    assert config.tolerance_rate_duration_ms == 60_000
    assert config.log_include_configs is False
    assert config.dlq_topic_partitions == 1
    assert config.dlq_header_format is HeaderFormat.CONNECT
    assert config.dlq_copy_record_enable is True
    assert config.dlq_topic_name_prefix == ""
    assert config.dlq_auto_create_topics_enable is True
    assert config.outage_enable is False
    assert (config.outage_consecutive_failures, config.outage_batch_failure_percent) == (100, 50)
    assert config.outage_batch_min_records == 100
    assert not config.dlq_enabled
    assert not config.retry_enabled
    assert config == ErrorHandlingConfig()


# key, Java-properties string, native value, parsed attribute value
VALID = [
    ("errors.retry.timeout", "3000", 3000, "retry_timeout_ms", 3000),
    ("errors.retry.timeout", "-1", -1, "retry_timeout_ms", -1),
    ("errors.retry.timeout", "-2", -2, "retry_timeout_ms", -2),
    ("errors.retry.timeout", str(-(2**63)), -(2**63), "retry_timeout_ms", -(2**63)),
    ("errors.retry.delay.max.ms", "1", 1, "retry_delay_max_ms", 1),
    ("errors.tolerance", "all", "all", "tolerance", ToleranceType.ALL),
    ("errors.tolerance", " none ", "none", "tolerance", ToleranceType.NONE),
    ("errors.log.enable", "TRUE", True, "log_enable", True),
    ("errors.log.include.messages", "true", True, "log_include_messages", True),
    ("errors.deadletterqueue.topic.name", "orders.dlq", "orders.dlq", "dlq_topic_name", "orders.dlq"),
    ("errors.deadletterqueue.topic.replication.factor", "1", 1, "dlq_topic_replication_factor", 1),
    ("errors.deadletterqueue.topic.replication.factor", "-1", -1, "dlq_topic_replication_factor", -1),
    ("errors.deadletterqueue.topic.replication.factor", "0", 0, "dlq_topic_replication_factor", 0),
    ("errors.deadletterqueue.topic.replication.factor", "-32768", -32768, "dlq_topic_replication_factor", -32768),
    ("errors.deadletterqueue.topic.replication.factor", "32767", 32767, "dlq_topic_replication_factor", 32767),
    ("errors.deadletterqueue.context.headers.enable", "true", True, "dlq_context_headers_enable", True),
    ("errors.tolerance.limit", "0", 0, "tolerance_limit", 0),
    ("errors.tolerance.limit", "100", 100, "tolerance_limit", 100),
    ("errors.tolerance.rate.limit", "25", 25, "tolerance_rate_limit", 25),
    ("errors.tolerance.rate.duration", "hour", "hour", "tolerance_rate_duration_ms", 3_600_000),
    ("errors.tolerance.rate.duration", "day", "day", "tolerance_rate_duration_ms", 86_400_000),
    ("errors.tolerance.rate.duration", "90000", 90_000, "tolerance_rate_duration_ms", 90_000),
    ("errors.log.include.configs", "true", True, "log_include_configs", True),
    ("errors.deadletterqueue.topic.partitions", "6", 6, "dlq_topic_partitions", 6),
    ("errors.deadletterqueue.header.format", "dlq", "dlq", "dlq_header_format", HeaderFormat.DLQ),
    ("errors.deadletterqueue.copy.record.enable", "false", False, "dlq_copy_record_enable", False),
    ("errors.deadletterqueue.topic.name.prefix", "dlq.", "dlq.", "dlq_topic_name_prefix", "dlq."),
    ("errors.deadletterqueue.auto.create.topics.enable", "false", False, "dlq_auto_create_topics_enable", False),
    ("errors.outage.enable", "true", True, "outage_enable", True),
    ("errors.outage.consecutive.failures", "20", 20, "outage_consecutive_failures", 20),
    ("errors.outage.consecutive.failures", "0", 0, "outage_consecutive_failures", 0),
    ("errors.outage.batch.failure.percent", "90", 90, "outage_batch_failure_percent", 90),
    ("errors.outage.batch.min.records", "1", 1, "outage_batch_min_records", 1),
]

# Settings some keys need so the value under test is legal on its own.
COMPANIONS: dict[str, dict[str, Any]] = {
    "errors.deadletterqueue.copy.record.enable": {"errors.deadletterqueue.context.headers.enable": "true"},
    "errors.outage.enable": {"errors.tolerance": "all"},
}


@pytest.mark.parametrize(("key", "text", "native", "attr", "expected"), VALID)
def test_every_key_accepts_properties_strings_and_native_values(
    key: str, text: str, native: object, attr: str, expected: object
) -> None:
    companions = COMPANIONS.get(key, {})
    from_text = ErrorHandlingConfig.from_properties({key: text, **companions})
    from_native = ErrorHandlingConfig.from_properties({key: native, **companions})

    assert getattr(from_text, attr) == expected
    assert getattr(from_native, attr) == expected


def test_every_key_is_covered_by_the_valid_value_table() -> None:
    assert {row[0] for row in VALID} == set(ErrorHandlingConfig.KEYS)
    assert len(ErrorHandlingConfig.KEYS) == 21


# key, bad value, words the message must contain to say what is accepted
INVALID = [
    ("errors.retry.timeout", "3s", "0 (no retry), a positive number of milliseconds (the retry budget)"),
    ("errors.retry.timeout", 2**63, "or a negative one such as -1 (retry forever)"),
    ("errors.retry.timeout", str(-(2**63) - 1), "within -9223372036854775808..9223372036854775807"),
    ("errors.retry.timeout", 3000.0, "expected an integer"),
    ("errors.retry.timeout", True, "expected an integer"),
    ("errors.retry.delay.max.ms", 0, "milliseconds >= 1"),
    ("errors.retry.delay.max.ms", "-5", "milliseconds >= 1"),
    ("errors.tolerance", "ALL", "expected one of 'none', 'all' (case-sensitive)"),
    ("errors.tolerance", "some", "expected one of 'none', 'all' (case-sensitive)"),
    ("errors.tolerance", 1, "expected one of 'none', 'all'"),
    ("errors.log.enable", "yes", "expected a boolean: true or false"),
    ("errors.log.enable", 1, "expected a boolean: true or false"),
    ("errors.log.include.messages", "on", "expected a boolean"),
    ("errors.deadletterqueue.topic.name", "__orders_dlq", "not starting with '__'"),
    ("errors.deadletterqueue.topic.name", "orders dlq", "ASCII letters, digits, '.', '_' and '-'"),
    ("errors.deadletterqueue.topic.name", "..", "not '.' or '..'"),
    ("errors.deadletterqueue.topic.name", "x" * 250, "at most 249 characters"),
    ("errors.deadletterqueue.topic.name", 42, "expected a string"),
    ("errors.deadletterqueue.topic.replication.factor", 40000, "-32768..32767 (Java's short)"),
    ("errors.deadletterqueue.topic.replication.factor", "-32769", "-32768..32767 (Java's short)"),
    ("errors.deadletterqueue.topic.replication.factor", 3.0, "-1 takes the broker's default.replication.factor"),
    ("errors.deadletterqueue.context.headers.enable", "1", "expected a boolean"),
    ("errors.tolerance.limit", -3, "-1 (no limit) or a number of records >= 0"),
    ("errors.tolerance.limit", "ten", "-1 (no limit) or a number of records >= 0"),
    ("errors.tolerance.rate.limit", -2, "-1 (no limit) or a number of records >= 0"),
    ("errors.tolerance.rate.duration", "week", "'minute', 'hour', 'day' (case-sensitive) or a positive number of ms"),
    ("errors.tolerance.rate.duration", "Minute", "'minute', 'hour', 'day' (case-sensitive)"),
    ("errors.tolerance.rate.duration", 0, "a positive number of ms"),
    ("errors.log.include.configs", "maybe", "expected a boolean"),
    ("errors.deadletterqueue.topic.partitions", 0, "-1 (broker default) or a positive number of partitions"),
    ("errors.deadletterqueue.header.format", "streams", "expected one of 'connect', 'dlq' (case-sensitive)"),
    ("errors.deadletterqueue.copy.record.enable", "nope", "expected a boolean"),
    ("errors.deadletterqueue.topic.name.prefix", "__dlq.", "prefix not starting with '__'"),
    ("errors.deadletterqueue.auto.create.topics.enable", "y", "expected a boolean"),
    ("errors.outage.enable", "on", "expected a boolean"),
    ("errors.outage.consecutive.failures", -1, "0 (rule off) or a number of failed records in a row >= 1"),
    ("errors.outage.batch.failure.percent", "150", "0..100: a batch trips when more than this percent"),
    ("errors.outage.batch.min.records", 0, "a number of records >= 1"),
]


@pytest.mark.parametrize(("key", "value", "accepted"), INVALID)
def test_every_bad_value_names_key_value_and_accepted_domain(key: str, value: object, accepted: str) -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties({key: value})

    assert raised.value.keys == (key,)
    problem = raised.value.problems[0]
    assert problem.value == value
    assert accepted in problem.accepted
    assert f"{key}={value!r}: " in str(raised.value)


def test_every_key_has_a_bad_value_test() -> None:
    assert {row[0] for row in INVALID} == set(ErrorHandlingConfig.KEYS)


def test_the_exact_message_for_a_wrong_case_tolerance() -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties({"errors.tolerance": "ALL"})

    assert str(raised.value.problems[0]) == "errors.tolerance='ALL': expected one of 'none', 'all' (case-sensitive)"


def test_several_bad_keys_are_reported_together_in_one_error() -> None:
    properties = {
        "errors.tolerance": "ALL",
        "errors.retry.timeout": "soon",
        "errors.log.enable": "yes",
        "errors.tolerence": "all",
        "errors.deadletterqueue.topic.name": "__dlq",
        "errors.deadletterqueue.header.format": "json",
        "errors.retry.delay.max.ms": 0,
    }

    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties(properties)

    assert set(raised.value.keys) == set(properties)
    assert str(raised.value).startswith("invalid errors.* configuration (7 problems):")
    for key in properties:
        assert f"  - {key}=" in str(raised.value)


def test_unknown_key_suggests_the_closest_known_key() -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties({"errors.retry.timout": "10"})

    assert str(raised.value.problems[0]) == (
        "errors.retry.timout='10': unknown errors.* key; did you mean 'errors.retry.timeout'?"
    )


def test_unknown_key_without_a_near_match_lists_the_accepted_keys() -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties({"errors.colour": "blue"})

    accepted = raised.value.problems[0].accepted
    for key in ErrorHandlingConfig.KEYS:
        assert key in accepted


def test_keys_outside_errors_namespace_are_ignored_and_none_means_default() -> None:
    config = ErrorHandlingConfig.from_properties(
        {"bootstrap.servers": "b:9092", "topics": "orders", "errors.tolerance": None, "errors.retry.timeout": 5}
    )

    assert config.tolerance is ToleranceType.NONE
    assert config.retry_timeout_ms == 5


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig(tolerance="ALL", retry_delay_max_ms=0)  # type: ignore[arg-type]

    assert set(raised.value.keys) == {"errors.tolerance", "errors.retry.delay.max.ms"}


def test_dlq_topic_must_start_with_the_configured_prefix() -> None:
    good = ErrorHandlingConfig.from_properties(
        {"errors.deadletterqueue.topic.name": "dlq.orders", "errors.deadletterqueue.topic.name.prefix": "dlq."}
    )
    assert good.dlq_topic_name == "dlq.orders"

    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties(
            {"errors.deadletterqueue.topic.name": "orders-dlq", "errors.deadletterqueue.topic.name.prefix": "dlq."}
        )
    assert str(raised.value.problems[0]) == (
        "errors.deadletterqueue.topic.name='orders-dlq': expected a name starting with "
        "errors.deadletterqueue.topic.name.prefix='dlq.'"
    )


def test_dlq_topic_must_not_be_a_source_topic() -> None:
    properties = {"errors.deadletterqueue.topic.name": "orders"}

    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties(properties, source_topics=["payments", "orders"])
    assert raised.value.keys == ("errors.deadletterqueue.topic.name",)
    assert "not one of the job's source topics (orders, payments)" in str(raised.value)

    config = ErrorHandlingConfig.from_properties(properties)
    with pytest.raises(InvalidErrorsConfig):
        config.validate_against_sources({"orders"})
    with pytest.raises(InvalidErrorsConfig):
        config.validate_against_sources("orders")
    config.validate_against_sources({"payments"})


def test_cross_key_problems_are_collected_with_per_key_problems() -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties(
            {
                "errors.tolerance": "ALL",
                "errors.deadletterqueue.topic.name": "orders",
                "errors.deadletterqueue.topic.name.prefix": "dlq.",
            },
            source_topics=["orders"],
        )

    assert raised.value.keys == (
        "errors.tolerance",
        "errors.deadletterqueue.topic.name",
        "errors.deadletterqueue.topic.name",
    )


def test_headers_only_dlq_record_requires_context_headers() -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties(
            {"errors.deadletterqueue.topic.name": "dlq.orders", "errors.deadletterqueue.copy.record.enable": "false"}
        )
    assert raised.value.keys == ("errors.deadletterqueue.copy.record.enable",)
    assert "errors.deadletterqueue.context.headers.enable=true" in str(raised.value)


def test_the_outage_breaker_needs_tolerance_all_and_a_rule() -> None:
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties({"errors.outage.enable": "true"})
    assert str(raised.value.problems[0]) == (
        "errors.outage.enable=True: expected false unless errors.tolerance='all': with 'none' the first failed "
        "record fails the task already"
    )

    both_off = {"errors.outage.consecutive.failures": 0, "errors.outage.batch.failure.percent": 100}
    with pytest.raises(InvalidErrorsConfig) as raised:
        ErrorHandlingConfig.from_properties({"errors.tolerance": "all", "errors.outage.enable": True, **both_off})
    assert raised.value.keys == ("errors.outage.enable",)
    assert "nothing could trip" in str(raised.value)
    assert ErrorHandlingConfig.from_properties(both_off).outage_enable is False


def test_to_properties_writes_java_properties_strings() -> None:
    config = ErrorHandlingConfig.from_properties(
        {"errors.tolerance": "all", "errors.log.enable": True, "errors.tolerance.rate.duration": 3_600_000}
    )

    properties = config.to_properties()

    assert properties["errors.tolerance"] == "all"
    assert properties["errors.log.enable"] == "true"
    assert properties["errors.retry.timeout"] == "0"
    assert properties["errors.tolerance.rate.duration"] == "hour"
    assert properties["errors.deadletterqueue.header.format"] == "connect"
    assert set(properties) == set(ErrorHandlingConfig.KEYS)
    assert all(isinstance(value, str) for value in properties.values())


def test_spark_conf_uses_the_spark_kerr_prefix_and_ignores_other_entries() -> None:
    config = ErrorHandlingConfig.from_properties({"errors.tolerance": "all"})

    conf = config.to_spark_conf()
    conf["spark.executor.memory"] = "2g"
    conf["spark.kerr.pipeline.name"] = "orders"

    assert conf["spark.kerr.errors.tolerance"] == "all"
    assert ErrorHandlingConfig.from_spark_conf(conf) == config


configs = st.builds(
    lambda **kwargs: ErrorHandlingConfig(**kwargs),
    retry_timeout_ms=st.integers(-(2**63), 2**63 - 1),
    retry_delay_max_ms=st.integers(1, 10**9),
    tolerance=st.sampled_from(list(ToleranceType)),
    log_enable=st.booleans(),
    log_include_messages=st.booleans(),
    dlq_topic_name=st.sampled_from(["", "dlq.orders", "orders-errors"]),
    dlq_topic_replication_factor=st.integers(-(2**15), 2**15 - 1),
    dlq_context_headers_enable=st.just(True),
    tolerance_limit=st.integers(-1, 10**6),
    tolerance_rate_limit=st.integers(-1, 10**6),
    tolerance_rate_duration_ms=st.one_of(st.sampled_from([60_000, 3_600_000, 86_400_000]), st.integers(1, 10**9)),
    log_include_configs=st.booleans(),
    dlq_topic_partitions=st.one_of(st.just(-1), st.integers(1, 1000)),
    dlq_header_format=st.sampled_from(list(HeaderFormat)),
    dlq_copy_record_enable=st.booleans(),
    dlq_topic_name_prefix=st.just(""),
    dlq_auto_create_topics_enable=st.booleans(),
    outage_consecutive_failures=st.integers(0, 10**6),
    outage_batch_failure_percent=st.integers(0, 100),
    outage_batch_min_records=st.integers(1, 10**6),
)


@given(configs)
def test_properties_and_spark_conf_round_trip(config: ErrorHandlingConfig) -> None:
    assert ErrorHandlingConfig.from_properties(config.to_properties()) == config
    assert ErrorHandlingConfig.from_spark_conf(config.to_spark_conf()) == config


@pytest.mark.parametrize(
    "key",
    [
        "sasl.password",
        "ssl.key.password",
        "basic.auth.user.info.secret",
        "oauth.token",
        "sasl.jaas.config",
        "ssl.keystore.key",
        "SASL.JAAS.CONFIG",
    ],
)
def test_credential_keys_are_masked(key: str) -> None:
    assert is_sensitive_key(key)
    assert mask_credentials({key: "hunter2", "topic": "orders"}) == {key: MASK, "topic": "orders"}


def test_masking_reaches_nested_mappings_and_keeps_plain_keys() -> None:
    masked = mask_credentials({"producer": {"sasl.password": "p", "acks": "all"}, "key.converter": "String"})

    assert masked == {"producer": {"sasl.password": MASK, "acks": "all"}, "key.converter": "String"}
    assert not is_sensitive_key("key.converter")
    assert not is_sensitive_key("errors.tolerance")
