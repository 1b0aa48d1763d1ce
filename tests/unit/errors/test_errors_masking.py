"""Credentials are never printed: the masking rule walks librdkafka's whole property list (issue #12, point 2).

``data/librdkafka-properties.txt`` lists every property of the librdkafka that
confluent-kafka bundles, with librdkafka's own verdict on whether it is sensitive (it
redacts those in its configuration dump); ``data/dump_librdkafka_properties.py``
regenerates it. ``data/kafka-java-password-configs.txt`` lists the Java clients'
PASSWORD-typed settings, which reach Spark's Java Kafka source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import (
    MASK,
    DeadLetterQueueReporter,
    ErrorContext,
    ErrorHandlingConfig,
    ErrorMetrics,
    LogReporter,
    PipelineStage,
    SourceRecord,
    Stage,
    TaskId,
    is_sensitive_key,
    mask_credentials,
)

DATA = Path(__file__).parent / "data"
SECRET = "s3cr3t-VALUE-never-printed"


def librdkafka_properties() -> dict[str, bool]:
    """Property name -> librdkafka flags it sensitive."""
    rows = [line.split("\t") for line in (DATA / "librdkafka-properties.txt").read_text().splitlines()]
    return {row[0]: row[2].startswith("yes") for row in rows if row[0] and not row[0].startswith("#")}


def java_password_configs() -> list[str]:
    lines = (DATA / "kafka-java-password-configs.txt").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


PROPERTIES = librdkafka_properties()
SENSITIVE = sorted(name for name, sensitive in PROPERTIES.items() if sensitive)
#: Not flagged by librdkafka, masked by our rule anyway, and why that is acceptable.
MASKED_ALTHOUGH_PUBLIC = {
    "ssl.certificate.pem": "a PEM value is hidden whatever it holds: the rule reads keys, not values",
    "https.ca.pem": "a PEM value is hidden whatever it holds: the rule reads keys, not values",
    "sasl.oauthbearer.token.endpoint.url": "the contract (SPEC-errors section 4) masks every key naming a token",
    "oauthbearer_token_refresh_cb": "the contract (SPEC-errors section 4) masks every key naming a token",
}
PUBLIC = sorted(name for name, sensitive in PROPERTIES.items() if not sensitive and name not in MASKED_ALTHOUGH_PUBLIC)
PREFIXES = ("", "kafka.", "producer.override.", "spark.kerr.kafka.")


def test_the_property_list_is_librdkafkas_and_holds_the_known_secrets() -> None:
    """Guards the data file: a truncated or foreign list would make the walk below prove nothing."""
    assert len(PROPERTIES) > 150
    for name in ("ssl.key.pem", "ssl.key.password", "sasl.password", "sasl.oauthbearer.config", "ssl_key"):
        assert PROPERTIES[name], name
    for name in ("bootstrap.servers", "sasl.mechanism", "security.protocol", "client.id"):
        assert not PROPERTIES[name], name
    assert set(MASKED_ALTHOUGH_PUBLIC) <= set(PROPERTIES)


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("name", SENSITIVE + java_password_configs())
def test_every_secret_bearing_property_is_masked(name: str, prefix: str) -> None:
    key = prefix + name
    assert is_sensitive_key(key)
    assert is_sensitive_key(key.upper())
    assert mask_credentials({key: SECRET}) == {key: MASK}


@pytest.mark.parametrize("name", PUBLIC)
def test_no_other_librdkafka_property_is_masked(name: str) -> None:
    assert not is_sensitive_key(name)
    assert not is_sensitive_key("kafka." + name)


@pytest.mark.parametrize(
    "name", ["bootstrap.servers", "sasl.mechanism", "sasl.mechanisms", "security.protocol", "client.id"]
)
def test_obviously_public_settings_stay_readable(name: str) -> None:
    assert mask_credentials({name: "value"}) == {name: "value"}


@pytest.mark.parametrize(
    "key",
    ["key.converter", "kafka.key.serializer", "key.deserializer", "errors.tolerance", "ssl.keystore.location", "key"],
)
def test_record_key_settings_and_locations_are_not_credentials(key: str) -> None:
    assert not is_sensitive_key(key)


def test_masking_reaches_nested_mappings_and_lists_of_them() -> None:
    config: dict[str, Any] = {
        "producer": {"sasl.password": SECRET, "acks": "all", "inner": {"ssl.key.pem": SECRET}},
        "clients": [{"sasl.oauthbearer.config": SECRET, "client.id": "a"}, "plain"],
    }

    masked = mask_credentials(config)

    assert SECRET not in json.dumps(masked)
    assert masked["producer"]["acks"] == "all"
    assert masked["clients"][0]["client.id"] == "a"
    assert masked["clients"][1] == "plain"
    assert config["producer"]["sasl.password"] == SECRET  # the caller's dict is untouched


SECRET_CONFIG: dict[str, Any] = {
    "bootstrap.servers": "broker:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "OAUTHBEARER",
    **{name: SECRET for name in SENSITIVE},
}


def failed_context() -> ErrorContext:
    stages = (
        PipelineStage(Stage.VALUE_CONVERTER, "conv"),
        PipelineStage(Stage.TASK_PUT, "sink", {"topic": "out", "producer": dict(SECRET_CONFIG)}),
    )
    record = SourceRecord(topic="orders", partition=0, offset=7, key=b"k", value=b"v")
    return ErrorContext(
        task=TaskId("p", 0),
        stage=Stage.TASK_PUT,
        executing_class="sink",
        error=ValueError("boom"),
        record=record,
        stages=stages,
        index=1,
    )


def test_the_logged_job_and_stage_configs_print_no_credential() -> None:
    """The issue's example: with errors.log.include.configs on, ssl.key.pem was printed in clear."""
    config = ErrorHandlingConfig.from_properties({"errors.log.enable": "true", "errors.log.include.configs": "true"})
    reporter = LogReporter(config, ErrorMetrics(), job_config=SECRET_CONFIG)

    line = reporter.message(failed_context())

    assert "Job config:" in line and "Stage config:" in line
    assert SECRET not in line
    assert '"bootstrap.servers": "broker:9093"' in line and '"sasl.mechanism": "OAUTHBEARER"' in line


def test_the_error_context_json_and_the_dlq_headers_print_no_credential() -> None:
    context = failed_context()
    assert SECRET not in context.to_json()

    config = ErrorHandlingConfig.from_properties(
        {"errors.deadletterqueue.topic.name": "dlq", "errors.deadletterqueue.context.headers.enable": "true"}
    )
    sent: list[Any] = []
    DeadLetterQueueReporter(config, ErrorMetrics(), sent.append).report(context)
    assert all(SECRET.encode() not in (value or b"") for _, value in sent[0].headers)


@given(
    st.lists(st.sampled_from(SENSITIVE), min_size=1, max_size=5),
    st.sampled_from(PREFIXES),
    st.recursive(st.text(max_size=5), lambda inner: st.dictionaries(st.text(max_size=5), inner, max_size=3)),
)
def test_a_secret_is_hidden_at_any_depth(names: list[str], prefix: str, filler: Any) -> None:
    config: dict[str, Any] = {"filler": filler}
    level = config
    for name in names:
        level[prefix + name] = SECRET
        level["nested"] = {}
        level = level["nested"]

    assert SECRET not in json.dumps(mask_credentials(config))
