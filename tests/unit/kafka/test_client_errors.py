"""Kafka client error classification (KIP-691)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kerr.errors import is_retriable
from airflow_kerr.kafka.client_errors import KafkaErrorKind, classify_kafka_error


@pytest.mark.parametrize(
    ("error", "kwargs", "expected"),
    [
        (KafkaError(KafkaError._FATAL, "fatal", fatal=True), {}, KafkaErrorKind.FATAL),
        (KafkaError(KafkaError.PRODUCER_FENCED, "fenced"), {}, KafkaErrorKind.FATAL),
        (KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), {}, KafkaErrorKind.FATAL),
        (KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED), {}, KafkaErrorKind.FATAL),
        (KafkaError(KafkaError.UNSUPPORTED_VERSION), {}, KafkaErrorKind.FATAL),
        (KafkaError(KafkaError.INVALID_TXN_STATE), {}, KafkaErrorKind.FATAL),
        (KafkaError(KafkaError.INVALID_PRODUCER_EPOCH), {"transactional": True}, KafkaErrorKind.FATAL),
        (KafkaError(KafkaError.INVALID_PRODUCER_EPOCH), {}, KafkaErrorKind.NON_RETRIABLE),
        (
            KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large", txn_requires_abort=True),
            {"transactional": True},
            KafkaErrorKind.ABORTABLE,
        ),
        (
            KafkaError(KafkaError._TIMED_OUT, "commit timed out", retriable=True),
            {"transactional": True, "during_commit": True},
            KafkaErrorKind.COMMIT_OUTCOME_UNKNOWN,
        ),
        (KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True), {}, KafkaErrorKind.RETRIABLE),
        (KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "replicas", retriable=True), {}, KafkaErrorKind.RETRIABLE),
        (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), {}, KafkaErrorKind.NON_RETRIABLE),
    ],
)
def test_classify_kafka_error(error: KafkaError, kwargs: dict[str, bool], expected: KafkaErrorKind) -> None:
    assert classify_kafka_error(error, **kwargs) is expected
    assert classify_kafka_error(KafkaException(error), **kwargs) is expected


@pytest.mark.parametrize("fatal", [False, True])
@pytest.mark.parametrize("abortable", [False, True])
@pytest.mark.parametrize("retriable", [False, True])
@pytest.mark.parametrize(
    "code", [KafkaError._TIMED_OUT, KafkaError.PRODUCER_FENCED, KafkaError._FATAL, KafkaError._STATE]
)
def test_the_cores_is_retriable_agrees_with_the_classifier(
    code: int, fatal: bool, abortable: bool, retriable: bool
) -> None:
    """errors.is_retriable reads the flags by itself (errors/ imports nothing of kafka/): same answer."""
    error = KafkaException(KafkaError(code, "x", fatal=fatal, retriable=retriable, txn_requires_abort=abortable))
    assert is_retriable(error) is (classify_kafka_error(error) is KafkaErrorKind.RETRIABLE)


def test_fatal_beats_abortable_beats_retriable() -> None:
    everything = KafkaError(KafkaError._STATE, "all flags", fatal=True, retriable=True, txn_requires_abort=True)
    abortable = KafkaError(KafkaError._STATE, "abort", retriable=True, txn_requires_abort=True)

    assert classify_kafka_error(everything) is KafkaErrorKind.FATAL
    assert classify_kafka_error(abortable) is KafkaErrorKind.ABORTABLE


def test_anything_else_is_not_retriable() -> None:
    assert classify_kafka_error(ValueError("x")) is KafkaErrorKind.NON_RETRIABLE
    assert classify_kafka_error(None) is KafkaErrorKind.NON_RETRIABLE
