"""Error reporters: where a failed record's context goes (the log, the dead letter queue).

As in Connect, a reporter only reports; retry and tolerance decisions belong to
``RetryWithTolerance``. One difference, on purpose: Connect only logs a failed DLQ
write, while here it fails the work unless the caller explicitly accepts losing it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from airflow_kerr.errors.config import ErrorHandlingConfig
from airflow_kerr.errors.context import ErrorContext
from airflow_kerr.errors.dead_letter import DeadLetterQueueRecord, build_dead_letter_record
from airflow_kerr.errors.exceptions import DeadLetterQueueError, describe_error
from airflow_kerr.errors.metrics import ErrorMetrics

_LOG = logging.getLogger(__name__)

#: Hands a DLQ record to a producer. It must raise if the record cannot be written.
SendFn = Callable[[DeadLetterQueueRecord], object]


@runtime_checkable
class ErrorReporter(Protocol):
    """Receives the context of every record the error handler gives up on."""

    def report(self, context: ErrorContext) -> None:
        """Report one failed record; raising fails the work."""
        ...


class LogReporter:
    """Writes the error context to the application log (``errors.log.*``).

    The line is Connect's ``Error encountered in task ...``; the exception goes with it as
    ``exc_info``. Credentials in the logged configuration are masked.
    """

    def __init__(
        self,
        config: ErrorHandlingConfig,
        metrics: ErrorMetrics,
        *,
        logger: logging.Logger | None = None,
        job_config: Mapping[str, object] | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._logger = logger or _LOG
        self._job_config = dict(job_config or {})

    def message(self, context: ErrorContext) -> str:
        """The text this reporter logs for ``context``."""
        return context.log_message(
            include_messages=self._config.log_include_messages,
            include_configs=self._config.log_include_configs,
            job_config=self._job_config,
        )

    def report(self, context: ErrorContext) -> None:
        """Log the failure when ``errors.log.enable`` is true and count it in ``total-errors-logged``."""
        if not self._config.log_enable:
            return
        error = context.error
        self._logger.error(self.message(context), exc_info=(type(error), error, error.__traceback__))
        self._metrics.record_error_logged()


class DeadLetterQueueReporter:
    """Builds the DLQ record for a failed record and hands it to ``send``.

    This class never talks to Kafka: ``send`` (a producer wrapper supplied by the job) does.
    A ``send`` that raises counts in ``deadletterqueue-produce-failures`` and raises
    :class:`DeadLetterQueueError`, so the work fails and nothing past the record is
    committed. ``lose_records_on_send_failure=True`` is the explicit opt-in to log the
    failure and carry on instead, accepting that the record is lost.
    """

    def __init__(
        self,
        config: ErrorHandlingConfig,
        metrics: ErrorMetrics,
        send: SendFn,
        *,
        group: str | None = None,
        lose_records_on_send_failure: bool = False,
        logger: logging.Logger | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._send = send
        self._group = group
        self._lose = lose_records_on_send_failure
        self._logger = logger or _LOG
        # Read once: the configuration is frozen, and these are read for every failed record.
        self._topic = config.dlq_topic_name
        self._header_format = config.dlq_header_format
        self._context_headers = config.dlq_context_headers_enable
        self._copy_record = config.dlq_copy_record_enable

    @property
    def topic(self) -> str:
        """The DLQ topic; empty when the DLQ is disabled."""
        return self._topic

    def build(self, context: ErrorContext) -> DeadLetterQueueRecord:
        """The DLQ record for ``context`` as this configuration shapes it."""
        return build_dead_letter_record(
            context,
            topic=self._topic,
            header_format=self._header_format,
            context_headers=self._context_headers,
            copy_record=self._copy_record,
            group=self._group,
        )

    def report(self, context: ErrorContext) -> None:
        """Send the failed record to the DLQ (no-op when no DLQ topic is configured)."""
        if not self._topic:
            return
        self._metrics.record_dlq_produce_request()
        if context.record is None:
            self._failed(
                ValueError("the failed record is not known, so there is nothing to write"),
                context,
            )
            return
        try:
            self._send(self.build(context))
        except Exception as error:
            self._failed(error, context)

    def delivery_failed(self, error: BaseException, context: ErrorContext | None = None) -> None:
        """Report a DLQ write that failed after ``send`` returned (an asynchronous delivery report)."""
        self._failed(error, context)

    def _failed(self, error: BaseException, context: ErrorContext | None) -> None:
        """Count and log the failed write as Connect does, then fail the work unless losing records is accepted.

        The message names the Kafka error itself (``MSG_SIZE_TOO_LARGE: ...``): whoever reads
        only the message, or a log that drops the exception chain, still sees why.
        """
        self._metrics.record_dlq_produce_failed()
        message = f"Could not produce message to dead letter queue. topic={self.topic}: {describe_error(error)}"
        self._logger.error(message, exc_info=(type(error), error, error.__traceback__))
        if self._lose:
            return
        raise DeadLetterQueueError(message, context=context) from error
