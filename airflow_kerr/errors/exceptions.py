"""Exception types, and the duck-typed reading of a Kafka client error.

Connect decides retry and tolerance by exception type: ``RetriableException`` is retried,
everything else is not, and a failure the handler will not tolerate surfaces as a
``ConnectException``. These are the Python equivalents. A confluent-kafka ``KafkaError``
takes part in the same decision through its flags (:func:`is_retriable`), read by duck
typing so this package never imports confluent-kafka; the full KIP-691 classification
the replay needs is :mod:`airflow_kerr.kafka.client_errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeGuard, runtime_checkable

from airflow_kerr.errors.stacktrace import exception_class_name, exception_message

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
    """The part of confluent-kafka's ``KafkaError`` read here and by the client-error classifier."""

    def fatal(self) -> bool: ...

    def retriable(self) -> bool: ...

    def txn_requires_abort(self) -> bool: ...


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


def is_kafka_error_like(value: object) -> TypeGuard[KafkaErrorLike]:
    """``isinstance(value, KafkaErrorLike)``, answered without typing's per-call walk of the protocol's members.

    Python 3.11 collects a runtime protocol's members afresh on every ``isinstance``, which
    cost about 20 µs per failed record on the retry path. This asks typing's questions for
    a protocol that declares only methods: a subclass by its methods (ABC caches that
    answer), each method present and not blocked by ``None``, and ABC's check of the real
    type when ``__class__`` says otherwise.
    """
    cls = value.__class__
    if issubclass(cls, KafkaErrorLike):
        return True
    if (
        getattr(value, "fatal", None) is not None
        and getattr(value, "retriable", None) is not None
        and getattr(value, "txn_requires_abort", None) is not None
    ):
        return True
    real = type(value)
    return real is not cls and issubclass(real, KafkaErrorLike)


def kafka_error_of(error: object) -> KafkaErrorLike | None:
    """Return the ``KafkaError`` itself, or the one a ``KafkaException`` wraps, else ``None``."""
    if is_kafka_error_like(error):
        return error
    if isinstance(error, BaseException) and error.args and is_kafka_error_like(error.args[0]):
        return error.args[0]
    return None


def kafka_error_name(error: KafkaErrorLike) -> str:
    """The error's code name (``PRODUCER_FENCED``, ``_TIMED_OUT``), or ``""`` when it has none."""
    name = getattr(error, "name", None)
    return str(name()) if callable(name) else ""


def is_fatal_kafka_error(error: KafkaErrorLike) -> bool:
    """Fatal by librdkafka's flag or by name (:data:`FATAL_ERROR_NAMES`): the client is unusable."""
    return error.fatal() or kafka_error_name(error) in FATAL_ERROR_NAMES


def is_retriable(error: BaseException) -> bool:
    """True for a ``RetriableError`` or a Kafka client error whose ``retriable()`` flag is set.

    A client error that is fatal or requires aborting a transaction is never retriable,
    whatever its flag says (fatal beats abortable beats retriable, as librdkafka documents).
    """
    if isinstance(error, RetriableError):
        return True
    kafka_error = kafka_error_of(error)
    return (
        kafka_error is not None
        and not is_fatal_kafka_error(kafka_error)
        and not kafka_error.txn_requires_abort()
        and kafka_error.retriable()
    )


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
        return f"KafkaError {kafka_error_name(kafka_error) or 'UNKNOWN'}: {detail}"
    if not isinstance(error, BaseException):
        return str(error)
    message = exception_message(error)
    name = exception_class_name(error)
    return name if message is None else f"{name}: {message}"
