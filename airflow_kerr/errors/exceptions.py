"""Exception types, Kafka client error classification and Java-like exception rendering.

Connect decides retry and tolerance by exception type: ``RetriableException`` is retried,
everything else is not, and a failure the handler will not tolerate surfaces as a
``ConnectException``. These are the Python equivalents, plus a classifier for
confluent-kafka's ``KafkaError`` flags so client errors take part in the same decision.
"""

from __future__ import annotations

import linecache
import traceback
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from airflow_kerr.errors.context import ErrorContext


class RetriableError(Exception):
    """A transient failure worth retrying (Connect's ``RetriableException``).

    Raise it, or subclass it, from a stage to ask for retries within ``errors.retry.timeout``.
    """


class ConnectError(Exception):
    """The error handler refuses a failure: the task must fail (Connect's ``ConnectException``).

    ``context`` carries the error context of the failed record when there is one; the
    original exception is the ``__cause__``.
    """

    def __init__(self, message: str, *, context: ErrorContext | None = None) -> None:
        super().__init__(message)
        self.context = context


class ToleranceExceeded(ConnectError):
    """A failure arrived after the configured tolerance was used up.

    ``limit`` names the setting that tripped: ``errors.tolerance`` (tolerance ``none``),
    ``errors.tolerance.limit`` or ``errors.tolerance.rate.limit``.
    """

    def __init__(self, message: str, *, limit: str, context: ErrorContext | None = None) -> None:
        super().__init__(message, context=context)
        self.limit = limit


class UnhandledError(ConnectError):
    """A stage raised an exception its stage never tolerates (a non-retriable error in a task stage)."""


class DeadLetterQueueError(ConnectError):
    """A failed record could not be written to the dead letter queue; nothing past it may be committed."""


@runtime_checkable
class KafkaErrorLike(Protocol):
    """The part of confluent-kafka's ``KafkaError`` the classifier reads."""

    def fatal(self) -> bool: ...

    def retriable(self) -> bool: ...

    def txn_requires_abort(self) -> bool: ...


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


#: Error names treated as fatal whatever their flags say (KIP-691's fatal list).
FATAL_ERROR_NAMES: frozenset[str] = frozenset(
    {
        "PRODUCER_FENCED",
        "_FENCED",
        # librdkafka's "the client raised a fatal error earlier" (produce() after a fencing, for one).
        "_FATAL",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "UNSUPPORTED_VERSION",
        "INVALID_TXN_STATE",
    }
)
#: Fatal only when raised by a transactional call.
FATAL_IN_TRANSACTION_NAMES: frozenset[str] = frozenset({"INVALID_PRODUCER_EPOCH"})
_TIMEOUT_NAMES = frozenset({"_TIMED_OUT", "REQUEST_TIMED_OUT", "_MSG_TIMED_OUT", "_TIMED_OUT_QUEUE"})


def kafka_error_of(error: object) -> KafkaErrorLike | None:
    """Return the ``KafkaError`` itself, or the one a ``KafkaException`` wraps, else ``None``."""
    if isinstance(error, KafkaErrorLike):
        return error
    if isinstance(error, BaseException) and error.args and isinstance(error.args[0], KafkaErrorLike):
        return error.args[0]
    return None


def _error_name(error: KafkaErrorLike) -> str:
    name = getattr(error, "name", None)
    return str(name()) if callable(name) else ""


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
    name = _error_name(kafka_error)
    if kafka_error.fatal() or name in FATAL_ERROR_NAMES:
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


def is_retriable(error: BaseException) -> bool:
    """True for a ``RetriableError`` or a Kafka client error whose ``retriable()`` flag is set."""
    return isinstance(error, RetriableError) or classify_kafka_error(error) is KafkaErrorKind.RETRIABLE


def describe_error(error: object) -> str:
    """One line naming what went wrong: a Kafka client error by its code name and text, else class and message.

    ``KafkaError MSG_SIZE_TOO_LARGE: Broker: Message size too large``; ``ValueError: bad``.
    Used where an error is reported in a message of our own, so its cause is never lost
    (Spark, for one, shows only the last exception of a chain).
    """
    kafka_error = kafka_error_of(error)
    if kafka_error is not None:
        text = getattr(kafka_error, "str", None)
        detail = str(text()) if callable(text) else str(kafka_error)
        return f"KafkaError {_error_name(kafka_error) or 'UNKNOWN'}: {detail}"
    if not isinstance(error, BaseException):
        return str(error)
    message = exception_message(error)
    name = exception_class_name(error)
    return name if message is None else f"{name}: {message}"


def exception_class_name(error: BaseException) -> str:
    """The class name as Python's traceback prints it: ``ValueError``, ``json.decoder.JSONDecodeError``."""
    cls = type(error)
    module = cls.__module__
    if module in ("builtins", "__main__"):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def exception_message(error: BaseException) -> str | None:
    """The message, or ``None`` for an exception raised without one (Java's null ``getMessage()``)."""
    message = str(error)
    if not error.args and message == "":
        return None
    return message


def format_stacktrace(error: BaseException) -> str:
    """Render like Java's ``printStackTrace``: ``class: message`` first, then the Python traceback.

    Tools that show only the first line of Connect's stacktrace header still get the class
    and message; the full Python traceback (with chained causes) follows.
    """
    message = exception_message(error)
    name = exception_class_name(error)
    head = name if message is None else f"{name}: {message}"
    if error.__traceback__ is None and error.__cause__ is None and error.__context__ is None:
        return head
    return head + "\n" + "".join(_traceback_lines(error, set()))


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def _traceback_lines(error: BaseException, seen: set[int]) -> list[str]:
    """The text of ``traceback.format_exception``, chained causes included, without the ``^^^`` markers.

    The standard formatter parses every frame's source line to place those markers,
    which made one failed record cost over 100 microseconds; a frame walk over
    linecache gives the same frames and source lines for a fraction of that.
    """
    seen.add(id(error))
    lines: list[str] = []
    cause, context = error.__cause__, error.__context__
    if cause is not None and id(cause) not in seen:
        lines += [*_traceback_lines(cause, seen), _CAUSE]
    elif context is not None and not error.__suppress_context__ and id(context) not in seen:
        lines += [*_traceback_lines(context, seen), _CONTEXT]
    if error.__traceback__ is not None:
        lines.append("Traceback (most recent call last):\n")
        for frame, lineno in traceback.walk_tb(error.__traceback__):
            code = frame.f_code
            lines.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n')
            source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
            if source:
                lines.append(f"    {source}\n")
    lines += traceback.format_exception_only(type(error), error)
    return lines
