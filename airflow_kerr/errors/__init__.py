"""Kafka Connect's errors.* contract in pure Python: config, retry/tolerance, error context, DLQ records, metrics."""

# The Spark job, the replay and the sensors share these pieces. Nothing here imports Airflow,
# Spark, confluent-kafka or any other room of ours: this package runs on Spark executors.

from airflow_kerr.errors.config import (
    RATE_DURATIONS_MS,
    SPARK_CONF_PREFIX,
    ConfigProblem,
    ErrorHandlingConfig,
    HeaderFormat,
    InvalidErrorsConfig,
    ToleranceType,
)
from airflow_kerr.errors.context import NOT_CONVERTED, ErrorContext, TaskId
from airflow_kerr.errors.dead_letter import (
    DeadLetterQueueRecord,
    DeadLetterRecord,
    HeaderSet,
    build_dead_letter_record,
    connect_context_headers,
    dlq_context_headers,
    parse_dead_letter,
    streams_context_headers,
)
from airflow_kerr.errors.exceptions import (
    ConnectError,
    DeadLetterQueueError,
    RetriableError,
    ToleranceExceeded,
    UnhandledError,
    describe_error,
    is_retriable,
)
from airflow_kerr.errors.masking import MASK, is_sensitive_key, mask_credentials, mask_secrets, mask_text
from airflow_kerr.errors.metrics import CONNECT_METRIC_NAMES, ErrorMetrics
from airflow_kerr.errors.record import Header, SourceRecord, TimestampType
from airflow_kerr.errors.reporters import DeadLetterQueueReporter, ErrorReporter, LogReporter, SendFn
from airflow_kerr.errors.retry import (
    RETRIES_DELAY_MIN_MS,
    SKIPPED,
    RetryWithTolerance,
    Skipped,
    backoff_delay_ms,
    wall_clock_ms,
)
from airflow_kerr.errors.stacktrace import exception_class_name, exception_message, format_stacktrace
from airflow_kerr.errors.stage import TOLERATES_ANY_EXCEPTION, PipelineStage, Stage

__all__ = [
    "CONNECT_METRIC_NAMES",
    "MASK",
    "NOT_CONVERTED",
    "RATE_DURATIONS_MS",
    "RETRIES_DELAY_MIN_MS",
    "SKIPPED",
    "SPARK_CONF_PREFIX",
    "TOLERATES_ANY_EXCEPTION",
    "ConfigProblem",
    "ConnectError",
    "DeadLetterQueueError",
    "DeadLetterQueueRecord",
    "DeadLetterQueueReporter",
    "DeadLetterRecord",
    "ErrorContext",
    "ErrorHandlingConfig",
    "ErrorMetrics",
    "ErrorReporter",
    "Header",
    "HeaderFormat",
    "HeaderSet",
    "InvalidErrorsConfig",
    "LogReporter",
    "PipelineStage",
    "RetriableError",
    "RetryWithTolerance",
    "SendFn",
    "Skipped",
    "SourceRecord",
    "Stage",
    "TaskId",
    "TimestampType",
    "ToleranceExceeded",
    "ToleranceType",
    "UnhandledError",
    "backoff_delay_ms",
    "build_dead_letter_record",
    "connect_context_headers",
    "describe_error",
    "dlq_context_headers",
    "exception_class_name",
    "exception_message",
    "format_stacktrace",
    "is_retriable",
    "is_sensitive_key",
    "mask_credentials",
    "mask_secrets",
    "mask_text",
    "parse_dead_letter",
    "streams_context_headers",
    "wall_clock_ms",
]
