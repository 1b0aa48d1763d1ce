"""Reporters: the log reporter's switches and the DLQ reporter's never-silent failure policy."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from airflow_kerr.errors import (
    DeadLetterQueueError,
    DeadLetterQueueRecord,
    DeadLetterQueueReporter,
    ErrorContext,
    ErrorHandlingConfig,
    ErrorMetrics,
    ErrorReporter,
    LogReporter,
    SourceRecord,
    Stage,
    TaskId,
    parse_dead_letter,
)

RECORD = SourceRecord("orders", 1, 10, 1_700_000_000_000, key=b"k", value=b"v")


def failure(record: SourceRecord | None = RECORD) -> ErrorContext:
    try:
        raise ValueError("bad value")
    except ValueError as error:
        return ErrorContext(TaskId("orders_pipeline", 2), Stage.VALUE_CONVERTER, "conv.Json", error, record)


def config(**properties: Any) -> ErrorHandlingConfig:
    return ErrorHandlingConfig.from_properties({key.replace("_", "."): value for key, value in properties.items()})


def test_reporters_satisfy_the_protocol() -> None:
    metrics = ErrorMetrics()
    assert isinstance(LogReporter(config(), metrics), ErrorReporter)
    assert isinstance(DeadLetterQueueReporter(config(), metrics, print), ErrorReporter)


def test_log_reporter_is_silent_unless_enabled(caplog: pytest.LogCaptureFixture) -> None:
    metrics = ErrorMetrics()

    LogReporter(config(), metrics).report(failure())

    assert caplog.records == []
    assert metrics.total_errors_logged == 0


def test_log_reporter_logs_connects_line_with_the_exception(caplog: pytest.LogCaptureFixture) -> None:
    metrics = ErrorMetrics()
    reporter = LogReporter(config(errors_log_enable="true"), metrics)

    with caplog.at_level(logging.ERROR):
        reporter.report(failure())

    [entry] = caplog.records
    assert entry.levelno == logging.ERROR
    assert entry.getMessage() == (
        "Error encountered in task orders_pipeline-2. Executing stage 'VALUE_CONVERTER' with class 'conv.Json', "
        "where consumed record is {topic='orders', partition=1, offset=10}."
    )
    assert entry.exc_info is not None
    assert isinstance(entry.exc_info[1], ValueError)
    assert metrics.total_errors_logged == 1


def test_log_reporter_honours_include_messages_and_masks_configs(caplog: pytest.LogCaptureFixture) -> None:
    reporter = LogReporter(
        config(errors_log_enable=True, errors_log_include_messages=True, errors_log_include_configs=True),
        ErrorMetrics(),
        job_config={"sasl.jaas.config": "org.apache.kafka...PlainLoginModule password='s3cr3t';"},
    )

    with caplog.at_level(logging.ERROR):
        reporter.report(failure())

    text = caplog.records[0].getMessage()
    assert "timestamp=1700000000000, timestampType=CreateTime" in text
    assert 'value={"schema": "BYTES", "object": "dg=="}' in text
    assert "s3cr3t" not in text
    assert '"sasl.jaas.config": "[hidden]"' in text


def dlq_config(**extra: Any) -> ErrorHandlingConfig:
    return config(
        errors_tolerance="all",
        errors_deadletterqueue_topic_name="dlq.orders",
        errors_deadletterqueue_context_headers_enable="true",
        **extra,
    )


def test_dlq_reporter_does_nothing_without_a_topic() -> None:
    sent: list[DeadLetterQueueRecord] = []
    metrics = ErrorMetrics()

    DeadLetterQueueReporter(config(), metrics, sent.append).report(failure())

    assert sent == []
    assert metrics.deadletterqueue_produce_requests == 0


def test_dlq_reporter_hands_the_built_record_to_send() -> None:
    sent: list[DeadLetterQueueRecord] = []
    metrics = ErrorMetrics()

    DeadLetterQueueReporter(dlq_config(), metrics, sent.append).report(failure())

    [record] = sent
    assert record.topic == "dlq.orders"
    assert (record.key, record.value, record.partition) == (b"k", b"v", None)
    parsed = parse_dead_letter(record.headers, record.key, record.value)
    assert (parsed.source_topic, parsed.source_offset, parsed.task_id) == ("orders", 10, 2)
    assert metrics.deadletterqueue_produce_requests == 1
    assert metrics.deadletterqueue_produce_failures == 0


def test_dlq_reporter_uses_the_kip1191_set_and_group_when_configured() -> None:
    sent: list[DeadLetterQueueRecord] = []

    DeadLetterQueueReporter(
        dlq_config(
            errors_deadletterqueue_header_format="dlq",
            errors_deadletterqueue_copy_record_enable="false",
        ),
        ErrorMetrics(),
        sent.append,
        group="orders-group",
    ).report(failure())

    record = sent[0]
    assert record.key is None and record.value is None
    assert dict(record.headers)["__dlq.errors.group"] == b"orders-group"


def test_a_failing_send_fails_the_work_and_is_counted() -> None:
    metrics = ErrorMetrics()

    def broken(record: DeadLetterQueueRecord) -> None:
        raise BufferError("queue full")

    with pytest.raises(DeadLetterQueueError) as raised:
        DeadLetterQueueReporter(dlq_config(), metrics, broken).report(failure())

    assert str(raised.value) == (
        "Could not produce message to dead letter queue. topic=dlq.orders: BufferError: queue full"
    )
    assert isinstance(raised.value.__cause__, BufferError)
    assert raised.value.context is not None
    assert metrics.deadletterqueue_produce_requests == 1
    assert metrics.deadletterqueue_produce_failures == 1


def test_losing_a_record_needs_the_explicit_opt_in_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    metrics = ErrorMetrics()

    def broken(record: DeadLetterQueueRecord) -> None:
        raise BufferError("queue full")

    reporter = DeadLetterQueueReporter(dlq_config(), metrics, broken, lose_records_on_send_failure=True)
    with caplog.at_level(logging.ERROR):
        reporter.report(failure())

    assert metrics.deadletterqueue_produce_failures == 1
    assert caplog.records[0].getMessage() == (
        "Could not produce message to dead letter queue. topic=dlq.orders: BufferError: queue full"
    )


def test_an_asynchronous_delivery_failure_fails_the_work() -> None:
    metrics = ErrorMetrics()
    reporter = DeadLetterQueueReporter(dlq_config(), metrics, lambda record: None)

    with pytest.raises(DeadLetterQueueError):
        reporter.delivery_failed(RuntimeError("broker rejected"))
    assert metrics.deadletterqueue_produce_failures == 1


def test_a_failure_without_its_record_cannot_be_written_and_says_so() -> None:
    sent: list[DeadLetterQueueRecord] = []
    metrics = ErrorMetrics()

    with pytest.raises(DeadLetterQueueError) as raised:
        DeadLetterQueueReporter(dlq_config(), metrics, sent.append).report(failure(record=None))

    assert sent == []
    assert "not known" in str(raised.value.__cause__)
    assert metrics.deadletterqueue_produce_failures == 1


@pytest.mark.parametrize("lose", [False, True])
def test_a_kafka_error_is_named_by_its_code_in_the_message_and_the_log(
    lose: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A DLQ write Kafka refuses used to fail the run without the Kafka error appearing anywhere in the log."""

    def too_large(record: DeadLetterQueueRecord) -> None:
        raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))

    reporter = DeadLetterQueueReporter(dlq_config(), ErrorMetrics(), too_large, lose_records_on_send_failure=lose)
    expected = (
        "Could not produce message to dead letter queue. topic=dlq.orders: "
        "KafkaError MSG_SIZE_TOO_LARGE: Broker: Message size too large"
    )
    with caplog.at_level(logging.ERROR):
        if lose:
            reporter.report(failure())
        else:
            with pytest.raises(DeadLetterQueueError, match=re.escape(expected)):
                reporter.report(failure())

    assert [record.getMessage() for record in caplog.records] == [expected]


def test_an_asynchronous_delivery_error_is_named_too() -> None:
    reporter = DeadLetterQueueReporter(dlq_config(), ErrorMetrics(), lambda record: None)

    with pytest.raises(DeadLetterQueueError, match="KafkaError TOPIC_AUTHORIZATION_FAILED: "):
        reporter.delivery_failed(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
