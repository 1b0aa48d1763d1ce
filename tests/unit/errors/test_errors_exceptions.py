"""What the retry executor counts as retriable: ``RetriableError`` and Kafka client errors by their flags."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from airflow_kerr.errors import RetriableError, is_retriable


def test_what_the_retry_loop_retries() -> None:
    class SchemaRegistryBusy(RetriableError):
        pass

    assert is_retriable(SchemaRegistryBusy("503"))
    assert is_retriable(KafkaException(KafkaError(KafkaError._TRANSPORT, "down", retriable=True)))
    assert not is_retriable(KafkaException(KafkaError(KafkaError.PRODUCER_FENCED, "x", fatal=True, retriable=True)))
    assert not is_retriable(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not is_retriable(TimeoutError("not a Kafka or retriable error"))
