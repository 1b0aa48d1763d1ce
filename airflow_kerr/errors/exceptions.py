"""Exception types, the duck-typed reading of a Kafka client error, and Java-like exception rendering.

Connect decides retry and tolerance by exception type: ``RetriableException`` is retried,
everything else is not, and a failure the handler will not tolerate surfaces as a
``ConnectException``. These are the Python equivalents. A confluent-kafka ``KafkaError``
takes part in the same decision through its flags (:func:`is_retriable`), read by duck
typing so this package never imports confluent-kafka; the full KIP-691 classification
the replay needs is :mod:`airflow_kerr.kafka.client_errors`.
"""

from __future__ import annotations

import linecache
import traceback
from dataclasses import dataclass
from types import CodeType, TracebackType
from typing import TYPE_CHECKING, Final, Protocol, TypeGuard, runtime_checkable

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


def format_stacktrace(error: BaseException, *, class_name: str | None = None, message: str | None = None) -> str:
    """Render like Java's ``printStackTrace``: ``class: message`` first, then the Python traceback.

    Tools that show only the first line of Connect's stacktrace header still get the class
    and message; the full Python traceback (with chained causes) follows. A caller that
    already has :func:`exception_class_name` and :func:`exception_message` of ``error``
    passes both, so they are not worked out twice (a ``message`` without ``class_name`` is
    ignored).
    """
    if class_name is None:
        class_name, message = exception_class_name(error), exception_message(error)
    head = class_name if message is None else f"{class_name}: {message}"
    tb, cause, context = error.__traceback__, error.__cause__, error.__context__
    if tb is None and cause is None and context is None:
        return head
    if cause is None and (context is None or error.__suppress_context__):
        # Nothing chained to print: the frames, then the last line from what is known already.
        frames = "" if tb is None else _frames_text(tb)
        return f"{head}\n{frames}{_exception_only_text(error, class_name, message)}"
    return head + "\n" + "".join(_traceback_lines(error, set()))


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
_TRACEBACK_HEADER = "Traceback (most recent call last):\n"
#: Formatted frame blocks kept at most; past it the cache starts over (tracebacks of a job repeat a few shapes).
FRAMES_CACHE_SIZE: Final = 512


@dataclass(frozen=True, slots=True)
class _FramesText:
    """A formatted frame block and what it was made from, for :func:`_frames_text`'s cache.

    ``codes`` keeps the frames' code objects alive, so the ids in the cache key cannot be
    reused by other code objects while the entry exists. ``sources`` pairs each file read
    with the linecache entry its source lines came from.
    """

    text: str
    codes: tuple[CodeType, ...]
    sources: tuple[tuple[str, object], ...]

    def is_current(self) -> bool:
        """Whether linecache still holds the very entries the text was read from."""
        entries = linecache.cache
        for filename, entry in self.sources:  # noqa: SIM110 - a loop, as a generator costs more than the lookups
            if entries.get(filename) is not entry:
                return False
        return True


# Frame blocks by their frames' (code object id, instruction offset) pairs.
_frames_cache: dict[tuple[int, ...], _FramesText] = {}


def _traceback_lines(error: BaseException, seen: set[int]) -> list[str]:
    """The text of ``traceback.format_exception``, chained causes included, without the ``^^^`` markers.

    The standard formatter parses every frame's source line to place those markers,
    which made one failed record cost over 100 microseconds; a frame walk over
    linecache gives the same frames and source lines for a fraction of that, and the
    frames of a traceback seen before are not formatted again (:func:`_frames_text`).
    """
    seen.add(id(error))
    lines: list[str] = []
    cause, context = error.__cause__, error.__context__
    if cause is not None and id(cause) not in seen:
        lines += [*_traceback_lines(cause, seen), _CAUSE]
    elif context is not None and not error.__suppress_context__ and id(context) not in seen:
        lines += [*_traceback_lines(context, seen), _CONTEXT]
    if error.__traceback__ is not None:
        lines.append(_frames_text(error.__traceback__))
    try:
        message = exception_message(error)
    except Exception:
        lines += traceback.format_exception_only(type(error), error)
    else:
        lines.append(_exception_only_text(error, exception_class_name(error), message))
    return lines


def _frames_text(tb: TracebackType) -> str:
    """``Traceback (most recent call last):`` and the frames of ``tb`` with their source lines, as one text.

    A job fails the same way many times, so the text is cached by what it is made of: each
    frame's code object (its file and function) and instruction offset (its line), plus the
    source lines linecache holds. The key is cheap to build on purpose: code object ids, as
    a code object's hash walks its constants (the entry keeps the code objects alive, so
    their ids stay theirs), and offsets, as ``tb_lineno`` scans the line table. A hit is
    used only while linecache still holds the entries the text was read from, and a
    traceback through a file linecache has no source for is never cached (linecache may
    find it later).
    """
    key: list[int] = []
    frame_tb: TracebackType | None = tb
    while frame_tb is not None:
        key += (id(frame_tb.tb_frame.f_code), frame_tb.tb_lasti)
        frame_tb = frame_tb.tb_next
    frozen = tuple(key)
    cached = _frames_cache.get(frozen)
    if cached is not None and cached.is_current():
        return cached.text
    text = _format_frames(tb)
    codes = tuple(frame.f_code for frame, _ in traceback.walk_tb(tb))
    files = dict.fromkeys(code.co_filename for code in codes)
    sources = tuple((filename, linecache.cache.get(filename)) for filename in files)
    if all(entry is not None and len(entry) > 1 for _, entry in sources):
        if len(_frames_cache) >= FRAMES_CACHE_SIZE:
            _frames_cache.clear()
        _frames_cache[frozen] = _FramesText(text, codes, sources)
    return text


def _format_frames(tb: TracebackType) -> str:
    """The frame block of ``tb`` as ``traceback.format_exception`` writes it, less the ``^^^`` lines."""
    lines = [_TRACEBACK_HEADER]
    for frame, lineno in traceback.walk_tb(tb):
        code = frame.f_code
        lines.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}\n')
        source = linecache.getline(code.co_filename, lineno, frame.f_globals).strip()
        if source:
            lines.append(f"    {source}\n")
    return "".join(lines)


def _exception_only_text(error: BaseException, class_name: str, message: str | None) -> str:
    """``traceback.format_exception_only(type(error), error)`` joined, written directly in the common case.

    ``class_name`` and ``message`` are :func:`exception_class_name` and
    :func:`exception_message` of ``error``. The standard function builds a
    ``TracebackException`` (walking the exception's chain) only to print ``class: message``;
    exceptions that print more than that line (a ``SyntaxError``, one with ``__notes__``)
    or whose class has a module that is not a string still go through it.
    """
    cls = type(error)
    if issubclass(cls, SyntaxError) or not isinstance(cls.__module__, str) or hasattr(error, "__notes__"):
        return "".join(traceback.format_exception_only(cls, error))
    return f"{class_name}: {message}\n" if message else f"{class_name}\n"
