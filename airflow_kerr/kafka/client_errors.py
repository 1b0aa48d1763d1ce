"""Kafka client error classification: what to do about a confluent-kafka ``KafkaError`` (KIP-691).

The replay's transactional writer and its consumer decide by these categories. The
duck-typed reading of an error (its flags and code name) is the core's
(:mod:`airflow_kerr.errors.exceptions`), which the retry executor also uses.
"""

from __future__ import annotations

from enum import StrEnum

from airflow_kerr.errors.exceptions import is_fatal_kafka_error, kafka_error_name, kafka_error_of


class KafkaErrorKind(StrEnum):
    """What to do about a Kafka client error (KIP-691's categories)."""

    #: The producer or consumer is unusable: close it and fail with the cause.
    FATAL = "fatal"
    #: The transaction must be aborted, the consumer rewound and the batch retried.
    ABORTABLE = "abortable"
    #: Retry the call.
    RETRIABLE = "retriable"
    #: A timeout inside ``commit_transaction``: retry the commit, never abort blindly.
    COMMIT_OUTCOME_UNKNOWN = "commit_outcome_unknown"
    #: A permanent error of this call that does not poison the client.
    NON_RETRIABLE = "non_retriable"


#: Fatal only when raised by a transactional call.
FATAL_IN_TRANSACTION_NAMES: frozenset[str] = frozenset({"INVALID_PRODUCER_EPOCH"})
_TIMEOUT_NAMES = frozenset({"_TIMED_OUT", "REQUEST_TIMED_OUT", "_MSG_TIMED_OUT", "_TIMED_OUT_QUEUE"})


def classify_kafka_error(error: object, *, transactional: bool = False, during_commit: bool = False) -> KafkaErrorKind:
    """Classify a confluent-kafka ``KafkaError`` (or the ``KafkaException`` wrapping it).

    Order matters: fatal beats abortable beats retriable, as librdkafka documents.
    ``transactional`` marks errors raised by transactional calls; ``during_commit`` marks
    errors from ``commit_transaction``, whose timeouts leave the outcome unknown.
    Anything that is not a Kafka client error is ``NON_RETRIABLE``.
    """
    kafka_error = kafka_error_of(error)
    if kafka_error is None:
        return KafkaErrorKind.NON_RETRIABLE
    name = kafka_error_name(kafka_error)
    if is_fatal_kafka_error(kafka_error):
        return KafkaErrorKind.FATAL
    if transactional and name in FATAL_IN_TRANSACTION_NAMES:
        return KafkaErrorKind.FATAL
    if kafka_error.txn_requires_abort():
        return KafkaErrorKind.ABORTABLE
    if during_commit and (name in _TIMEOUT_NAMES or kafka_error.retriable()):
        return KafkaErrorKind.COMMIT_OUTCOME_UNKNOWN
    if kafka_error.retriable():
        return KafkaErrorKind.RETRIABLE
    return KafkaErrorKind.NON_RETRIABLE
