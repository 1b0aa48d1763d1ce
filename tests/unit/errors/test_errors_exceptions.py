"""Kafka client error classification (KIP-691) and what counts as retriable."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kerr.errors import KafkaErrorKind, RetriableError, classify_kafka_error, is_retriable


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


def test_fatal_beats_abortable_beats_retriable() -> None:
    everything = KafkaError(KafkaError._STATE, "all flags", fatal=True, retriable=True, txn_requires_abort=True)
    abortable = KafkaError(KafkaError._STATE, "abort", retriable=True, txn_requires_abort=True)

    assert classify_kafka_error(everything) is KafkaErrorKind.FATAL
    assert classify_kafka_error(abortable) is KafkaErrorKind.ABORTABLE


def test_anything_else_is_not_retriable() -> None:
    assert classify_kafka_error(ValueError("x")) is KafkaErrorKind.NON_RETRIABLE
    assert classify_kafka_error(None) is KafkaErrorKind.NON_RETRIABLE


def test_what_the_retry_loop_retries() -> None:
    class SchemaRegistryBusy(RetriableError):
        pass

    assert is_retriable(SchemaRegistryBusy("503"))
    assert is_retriable(KafkaException(KafkaError(KafkaError._TRANSPORT, "down", retriable=True)))
    assert not is_retriable(KafkaException(KafkaError(KafkaError.PRODUCER_FENCED, "x", fatal=True, retriable=True)))
    assert not is_retriable(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not is_retriable(TimeoutError("not a Kafka or retriable error"))
