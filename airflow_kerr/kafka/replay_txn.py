"""One replay batch written exactly once, as KIP-656's transactional sink does it.

``begin → produce → send_offsets_to_transaction → commit``: the records and the replay
group's offsets commit together or not at all. Client errors are classified by the core
(KIP-691, SPEC-errors §7) and each class has one response here:

- fatal (and a non-retriable error of a transactional call): raise :class:`ReplayFatalError`
  naming the cause; nothing is aborted, the caller closes the clients;
- abortable: abort the transaction and raise :class:`BatchAborted`; the caller rewinds the
  consumer to the last committed offsets and retries the batch with a bounded backoff;
- retriable: retry the same call, a bounded number of times;
- a timeout inside ``commit_transaction`` (commit outcome unknown): retry the commit, which
  librdkafka makes idempotent; never abort once a commit began.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from airflow_kerr.errors import KafkaErrorKind, classify_kafka_error
from airflow_kerr.errors.exceptions import kafka_error_of
from airflow_kerr.kafka.replay_select import ReplayRecord

log = logging.getLogger(__name__)


class ProducerLike(Protocol):
    """The transactional part of confluent-kafka's ``Producer`` used here (tests wrap it to inject faults)."""

    def init_transactions(self, timeout: float = ...) -> None: ...

    def begin_transaction(self) -> None: ...

    def produce(self, topic: str, value: Any = ..., key: Any = ..., **kwargs: Any) -> None: ...

    def poll(self, timeout: float = ...) -> int: ...

    def send_offsets_to_transaction(self, positions: Any, group_metadata: Any, timeout: float = ...) -> None: ...

    def commit_transaction(self, timeout: float = ...) -> None: ...

    def abort_transaction(self, timeout: float = ...) -> None: ...


class ReplayFatalError(RuntimeError):
    """The transactional producer cannot go on (fenced, unauthorized, unsupported, commit outcome unknown)."""


class BatchAborted(RuntimeError):
    """The batch's transaction hit an abortable error and was aborted; rewind and retry the batch."""


class _AbortRequired(Exception):
    def __init__(self, call: str, error: BaseException) -> None:
        super().__init__(call)
        self.call = call
        self.error = error


def describe_error(error: object) -> str:
    """``NAME: reason`` of a Kafka client error (with its flags), or ``Class: message`` of anything else."""
    kafka_error = kafka_error_of(error)
    if kafka_error is None:
        return f"{type(error).__name__}: {error}"
    name = getattr(kafka_error, "name", lambda: "KafkaError")()
    reason = getattr(kafka_error, "str", lambda: str(kafka_error))()
    flags = [
        flag
        for flag, on in (
            ("fatal", kafka_error.fatal()),
            ("abortable", kafka_error.txn_requires_abort()),
            ("retriable", kafka_error.retriable()),
        )
        if on
    ]
    return f"{name}: {reason}" + (f" [{', '.join(flags)}]" if flags else "")


def _send(produce: Callable[..., Any], record: ReplayRecord) -> None:
    if record.timestamp is None:
        produce(record.topic, record.value, record.key, headers=record.headers)
    else:
        produce(record.topic, record.value, record.key, headers=record.headers, timestamp=record.timestamp)


class TransactionalWriter:
    """Writes batches in transactions that also commit the consumer group's offsets.

    ``call_attempts`` bounds retries of a retriable call and ``commit_attempts`` retries of
    a commit whose outcome is unknown; ``retry_wait_s`` is the pause between them.
    """

    def __init__(
        self,
        producer: ProducerLike,
        *,
        timeout_s: float = 30.0,
        call_attempts: int = 5,
        commit_attempts: int = 5,
        retry_wait_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.producer = producer
        self.timeout_s = timeout_s
        self.call_attempts = call_attempts
        self.commit_attempts = commit_attempts
        self.retry_wait_s = retry_wait_s
        self._sleep = sleep
        self.in_transaction = False
        self.commits = 0
        self.aborts = 0
        self.commit_retries = 0

    def init(self) -> None:
        """``init_transactions``: fences an older producer with the same ``transactional.id``."""
        self._call("init_transactions", self.producer.init_transactions, self.timeout_s)

    def write(
        self,
        records: Iterable[ReplayRecord],
        offsets: Sequence[Any],
        group_metadata: Any,
        pace: Callable[[], bool] | None = None,
    ) -> bool:
        """Write one batch and commit ``offsets`` for the group in the same transaction.

        ``pace`` is called before each record and returns False to stop: the open
        transaction is then aborted and False returned, so nothing is half-committed.
        Raises :class:`BatchAborted` after aborting on an abortable error, and
        :class:`ReplayFatalError` on a fatal one.
        """
        try:
            self._call("begin_transaction", self.producer.begin_transaction)
            self.in_transaction = True
            produce = self.producer.produce
            for record in records:
                if pace is not None and not pace():
                    self.abort()
                    return False
                try:
                    if record.timestamp is None:
                        produce(record.topic, record.value, record.key, headers=record.headers)
                    else:
                        _send(produce, record)
                except Exception as error:
                    self._produce_failed(record, error)
            self._call(
                "send_offsets_to_transaction",
                self.producer.send_offsets_to_transaction,
                list(offsets),
                group_metadata,
                self.timeout_s,
            )
            self._commit()
        except _AbortRequired as required:
            cause = f"{required.call} failed with an abortable error: {describe_error(required.error)}"
            log.warning("%s; aborting the transaction", cause)
            self.abort()
            raise BatchAborted(cause) from required.error
        return True

    def abort(self) -> None:
        """Abort the open transaction, if any (retrying a retriable failure of the abort itself)."""
        if not self.in_transaction:
            return
        self._call("abort_transaction", self.producer.abort_transaction, self.timeout_s, abortable_is_fatal=True)
        self.in_transaction = False
        self.aborts += 1

    def _produce_failed(self, record: ReplayRecord, error: Exception) -> None:
        """A full queue is drained and the record produced again; a client error is classified."""
        while isinstance(error, BufferError):
            self.producer.poll(0.05)
            try:
                _send(self.producer.produce, record)
                return
            except Exception as again:
                error = again
        if kafka_error_of(error) is None:
            raise error
        if classify_kafka_error(error, transactional=True) is KafkaErrorKind.FATAL:
            raise ReplayFatalError(f"produce to {record.topic!r} failed: {describe_error(error)}") from error
        # A record the broker or client refuses (too large, unknown topic) fails the batch, as
        # a failed delivery would at commit: abort, and let the bounded retry decide.
        raise _AbortRequired(f"produce to {record.topic!r}", error) from error

    def _call(self, name: str, call: Callable[..., Any], *args: Any, abortable_is_fatal: bool = False) -> Any:
        for attempt in range(1, self.call_attempts + 1):
            try:
                return call(*args)
            except Exception as error:
                if kafka_error_of(error) is None:
                    raise
                kind = classify_kafka_error(error, transactional=True)
                if kind is KafkaErrorKind.ABORTABLE and not abortable_is_fatal:
                    raise _AbortRequired(name, error) from error
                if kind is not KafkaErrorKind.RETRIABLE or attempt == self.call_attempts:
                    tried = f" after {attempt} attempts" if kind is KafkaErrorKind.RETRIABLE else ""
                    raise ReplayFatalError(f"{name} failed{tried} ({kind}): {describe_error(error)}") from error
                log.warning("%s failed with a retriable error, retrying: %s", name, describe_error(error))
                self._sleep(self.retry_wait_s)
        raise AssertionError("unreachable")

    def _commit(self) -> None:
        for attempt in range(1, self.commit_attempts + 1):
            try:
                self.producer.commit_transaction(self.timeout_s)
            except Exception as error:
                if kafka_error_of(error) is None:
                    raise
                kind = classify_kafka_error(error, transactional=True, during_commit=True)
                if kind is KafkaErrorKind.ABORTABLE:
                    raise _AbortRequired("commit_transaction", error) from error
                if kind is not KafkaErrorKind.COMMIT_OUTCOME_UNKNOWN:
                    raise ReplayFatalError(f"commit_transaction failed ({kind}): {describe_error(error)}") from error
                if attempt == self.commit_attempts:
                    raise ReplayFatalError(
                        f"commit_transaction outcome still unknown after {attempt} attempts: "
                        f"{describe_error(error)}. The transaction was not aborted: the next run's "
                        "init_transactions settles it. A timeout that does not clear often means another "
                        "replay with the same transactional.id fenced this one."
                    ) from error
                self.commit_retries += 1
                log.warning("commit_transaction outcome unknown, retrying the commit: %s", describe_error(error))
                self._sleep(self.retry_wait_s)
            else:
                self.in_transaction = False
                self.commits += 1
                return


class BackgroundWriter:
    """Writes one batch at a time in a worker thread, so the caller reads and decides the next meanwhile.

    A transaction ends in round trips (flush, ``send_offsets_to_transaction``, commit) that
    leave a single-threaded replay idle; with one batch in flight they overlap the next
    batch's parsing. Never more than one: transactions commit in batch order, and an abort
    is known before the next batch is handed over, so the caller can rewind and discard it.
    """

    def __init__(self, writer: TransactionalWriter) -> None:
        self.writer = writer
        self._executor: ThreadPoolExecutor | None = None
        self._future: Future[bool] | None = None

    @property
    def busy(self) -> bool:
        """Whether a batch was handed over and its outcome not yet collected with :meth:`result`."""
        return self._future is not None

    def submit(
        self,
        records: Sequence[ReplayRecord],
        offsets: Sequence[Any],
        group_metadata: Any,
        pace: Callable[[], bool] | None = None,
    ) -> None:
        """Start :meth:`TransactionalWriter.write` of one batch; collect its outcome with :meth:`result` first."""
        if self._future is not None:
            raise RuntimeError("a batch is still in flight; collect its result first")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="kerr-replay-writer")
        self._future = self._executor.submit(self.writer.write, records, offsets, group_metadata, pace)

    def result(self) -> bool:
        """Wait for the batch in flight: what ``write`` returned, or the exception it raised."""
        if self._future is None:
            raise RuntimeError("no batch is in flight")
        future, self._future = self._future, None
        return future.result()

    def close(self) -> None:
        """Wait for the batch in flight, if any, ignoring its outcome, and end the worker thread."""
        if self._future is not None:
            self._future.exception()
            self._future = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
