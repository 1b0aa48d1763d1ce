"""One replay batch written exactly once, as KIP-656's transactional sink does it.

``begin → produce → send_offsets_to_transaction → commit``: the records and the replay
group's offsets commit together or not at all. Client errors are classified by
:mod:`airflow_kerr.kafka.client_errors` (KIP-691, SPEC-errors §7) and each class has one
response here:

- fatal (and a non-retriable error of a transactional call): raise :class:`ReplayFatalError`
  naming the cause; nothing is aborted, the caller closes the clients;
- abortable: abort the transaction and raise :class:`BatchAborted`; the caller rewinds the
  consumer to the last committed offsets and retries the batch with a bounded backoff;
- retriable: retry the same call, a bounded number of times;
- a timeout inside ``commit_transaction`` (commit outcome unknown): retry the commit, which
  librdkafka makes idempotent; never abort once a commit began.

One budget bounds each transaction (``transaction_timeout_s``, from ``begin_transaction``
to the commit, retries included) and ``init_transactions``: every call is given the time
left of it as its timeout, and a retriable error is retried only while time is left. When
the budget runs out the broker is taken as unreachable: the open transaction is aborted
with a short, bounded wait (:func:`abort_grace_s`; never once its commit began) and
:class:`BrokerUnreachable` raised. librdkafka ends a request that gets no answer only at
its request timeout, whatever timeout the call was given (``send_offsets_to_transaction``
waited 60 s with a 3 s timeout), so the engine also sets the producer's
``transaction.timeout.ms``, from which librdkafka derives that request timeout, to the
budget (:func:`transactional_config`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException

from airflow_kerr.errors.exceptions import kafka_error_of
from airflow_kerr.kafka.client_errors import KafkaErrorKind, classify_kafka_error
from airflow_kerr.replay.policy import HEADER_REPLAY_SOURCE, Outgoing
from airflow_kerr.replay.size import SizeRefusal, batch_size, dlq_coordinates, is_size_error, record_size

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


#: Default of the per-transaction budget: librdkafka's default ``transaction.timeout.ms``.
DEFAULT_TRANSACTION_TIMEOUT_S = 60.0
#: Kafka's bounds for ``transaction.timeout.ms`` (librdkafka's minimum; the broker's default maximum).
MIN_TRANSACTION_TIMEOUT_S = 1.0
MAX_TRANSACTION_TIMEOUT_S = 900.0
#: The longest wait for the abort that follows an exhausted budget: the broker did not answer for a
#: whole budget, so waiting long again only delays the failure (the coordinator aborts it anyway).
ABORT_GRACE_S = 5.0


def abort_grace_s(budget_s: float) -> float:
    """The abort's wait after an exhausted budget: a quarter of the budget, from 1 s up to :data:`ABORT_GRACE_S`."""
    return min(ABORT_GRACE_S, max(1.0, budget_s / 4))


def transactional_config(kafka_config: Mapping[str, Any], transactional_id: str, budget_s: float) -> dict[str, Any]:
    """The producer's settings: ``transactional.id``, and ``transaction.timeout.ms`` set to the budget.

    librdkafka derives its request and delivery timeouts from ``transaction.timeout.ms``; a
    ``socket.timeout.ms`` or ``message.timeout.ms`` set in the connection is capped so that
    librdkafka accepts the pair (it refuses either above the transaction timeout).
    """
    budget_ms = round(budget_s * 1000)
    config = {**kafka_config, "transactional.id": transactional_id, "transaction.timeout.ms": budget_ms}
    for key, cap in (("socket.timeout.ms", budget_ms - 100), ("message.timeout.ms", budget_ms)):
        if key in config and int(config[key]) > cap:
            config[key] = max(cap, 10)
    return config


class ReplayFatalError(RuntimeError):
    """The transactional producer cannot go on (fenced, unauthorized, unsupported, commit outcome unknown)."""


_FENCING = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})


def fatal_error(what: str, error: BaseException, producer: Any = None, detail: str = "") -> ReplayFatalError:
    """A ReplayFatalError naming the real cause; a fencing says so and what it means for the records.

    After a fatal error librdkafka answers produce() with a bare ``_FATAL``; the cause (a
    fencing, most often) is what a transactional call on the same producer returns, so it is
    asked for once, without waiting.
    """
    cause: Any = kafka_error_of(error)
    if cause is not None and cause.code() == KafkaError._FATAL and producer is not None:
        try:
            producer.abort_transaction(0.5)
        except Exception as real:  # the producer's stored fatal error, if it has one
            if kafka_error_of(real) is not None:
                error, cause = real, kafka_error_of(real)
    text = f"{what} failed{detail}: {describe_error(error)}"
    name = cause.name() if cause is not None else ""
    if name in _FENCING:
        text += (
            ". Another replay with the same transactional.id started and fenced this one: it stops here, and the "
            "broker aborts its open transaction, so nothing of that transaction becomes visible; the newer replay "
            "continues from the committed offsets."
        )
    return ReplayFatalError(text)


class BrokerUnreachable(ReplayFatalError):
    """A transactional call got no answer within the transaction budget: the run fails, saying what was committed."""


class BatchAborted(RuntimeError):
    """The batch's transaction hit an abortable error and was aborted; rewind and retry the batch.

    ``refused`` names the records the client or the broker refused for their size (by the DLQ
    coordinates in their lineage header), so the retry writes them differently instead of
    being refused the same way again.
    """

    def __init__(self, message: str, refused: Sequence[SizeRefusal] = ()) -> None:
        super().__init__(message)
        self.refused = list(refused)


class _AbortRequired(Exception):
    def __init__(self, call: str, error: BaseException) -> None:
        super().__init__(call)
        self.call = call
        self.error = error


class _OutOfTime(Exception):
    """The budget ran out in ``call``; ``error`` is the last retriable error seen, if any."""

    def __init__(self, call: str, error: BaseException | None) -> None:
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


def _send(produce: Callable[..., Any], record: Outgoing) -> None:
    topic, value, key, headers, timestamp = record
    if timestamp is None:
        produce(topic, value, key, headers=headers)
    else:
        produce(topic, value, key, headers=headers, timestamp=timestamp)


class TransactionalWriter:
    """Writes batches in transactions that also commit the consumer group's offsets.

    ``transaction_timeout_s`` is the budget of one transaction (and of ``init_transactions``);
    ``call_attempts`` bounds retries of a retriable call and ``commit_attempts`` retries of
    a commit whose outcome is unknown, both within the budget; ``retry_wait_s`` is the pause
    between them.
    """

    def __init__(
        self,
        producer: ProducerLike,
        *,
        transaction_timeout_s: float = DEFAULT_TRANSACTION_TIMEOUT_S,
        call_attempts: int = 5,
        commit_attempts: int = 5,
        retry_wait_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.producer = producer
        self.transaction_timeout_s = transaction_timeout_s
        self.call_attempts = call_attempts
        self.commit_attempts = commit_attempts
        self.retry_wait_s = retry_wait_s
        self._sleep = sleep
        self._clock = clock
        self._deadline = math.inf
        self.in_transaction = False
        self.commits = 0
        self.aborts = 0
        self.commit_retries = 0
        #: Set once a call ran out of budget: the producer may still hold an unfinished transaction.
        self.unreachable = False
        #: Records of the open transaction refused for their size, from produce() or a delivery report.
        self.refused: list[SizeRefusal] = []
        self._refusal: KafkaError | None = None
        #: The batch being written, to find a refused record in (delivery reports carry no headers).
        self._batch: Sequence[Outgoing] = ()

    def delivered(self, error: KafkaError | None, message: Any) -> None:
        """The producer's ``on_delivery`` (with ``delivery.report.only.error``): keep the records refused for size.

        The broker's MESSAGE_TOO_LARGE reaches the writer only here (and as the commit's abortable
        error, which does not say which record): the record's lineage header says where in the
        DLQ it was read. Called by librdkafka from the writer's own produce, commit or abort.
        """
        if error is None or not is_size_error(error):
            return
        self._refusal = error
        # A delivery report carries no headers: the refused record is found in the batch by topic,
        # key and value length (the first one not yet named, should two look alike).
        topic, key, length = message.topic(), message.key(), len(message.value() or b"")
        named = {(r.partition, r.offset) for r in self.refused}
        for record in self._batch:
            if record[0] != topic or record[2] != key or len(record[1] or b"") != length:
                continue
            where = dlq_coordinates(record[3], HEADER_REPLAY_SOURCE)
            if where is not None and where not in named:
                size = batch_size(record[2], record[1], record[3])
                detail = f"{size:,} bytes refused by the broker ({describe_error(error)})"
                self.refused.append(SizeRefusal(where[0], where[1], topic, detail))
                return

    def close(self) -> None:
        """Close the producer; after an unreachable broker, purge it and leave it to be freed instead.

        ``Producer.close`` aborts an open transaction and flushes, waiting without limit: with the
        broker gone it would hang the failing task. Freeing the client (``rd_kafka_destroy``) does
        not wait; the coordinator aborts the transaction after ``transaction.timeout.ms``.
        """
        if self.unreachable:
            purge = getattr(self.producer, "purge", None)
            if purge is not None:
                purge(blocking=False)
            return
        close = getattr(self.producer, "close", None)
        if close is not None:
            try:
                close()
            except Exception as error:  # a producer that failed fatally raises that error again on close
                if kafka_error_of(error) is None:
                    raise
                log.warning("closing the transactional producer: %s", describe_error(error))

    def init(self) -> None:
        """``init_transactions``: fences an older producer with the same ``transactional.id``."""
        self._deadline = self._clock() + self.transaction_timeout_s
        try:
            self._call("init_transactions", self.producer.init_transactions)
        except _OutOfTime as out:
            raise self._unreachable(out, "nothing was written") from out.error

    def write(
        self,
        records: Iterable[Outgoing],
        offsets: Sequence[Any],
        group_metadata: Any,
        pace: Callable[[], bool] | None = None,
        halted: Callable[[], bool] | None = None,
    ) -> bool:
        """Write one batch and commit ``offsets`` for the group in the same transaction, within the budget.

        ``pace`` is called before each record and returns False to stop: the open
        transaction is then aborted and False returned, so nothing is half-committed. Its
        waits do not count against the budget. ``halted``, for a writer that is not paced,
        is asked before each record instead and returns True to stop the same way; it never
        waits, so no clock is read around it (two clock readings per record were a tenth of
        the writer's time).
        Raises :class:`BatchAborted` after aborting on an abortable error,
        :class:`BrokerUnreachable` when the budget ran out, and :class:`ReplayFatalError`
        on a fatal error.
        """
        self._deadline = self._clock() + self.transaction_timeout_s
        committing = False
        self.refused, self._refusal = [], None
        records = self._batch = records if isinstance(records, Sequence) else list(records)
        try:
            self._call("begin_transaction", self.producer.begin_transaction, timed=False)
            self.in_transaction = True
            produce = self.producer.produce
            for record in records:
                if halted is not None and halted():
                    self.abort()
                    return False
                if pace is not None:
                    # Waiting for the rate limiter is not waiting for the broker: it does not use up the budget.
                    paced = self._clock()
                    carry_on = pace()
                    self._deadline += self._clock() - paced
                    if not carry_on:
                        self.abort()
                        return False
                topic, value, key, headers, timestamp = record
                try:
                    if timestamp is None:
                        produce(topic, value, key, headers=headers)
                    else:
                        produce(topic, value, key, headers=headers, timestamp=timestamp)
                except Exception as error:
                    self._produce_failed(record, error)
            self._call(
                "send_offsets_to_transaction", self.producer.send_offsets_to_transaction, list(offsets), group_metadata
            )
            self._await_deliveries()
            committing = True
            self._commit()
        except _AbortRequired as required:
            cause = f"{required.call} failed with an abortable error: {describe_error(required.error)}"
            log.warning("%s; aborting the transaction", cause)
            self.abort()
            raise BatchAborted(cause, self.refused) from required.error
        except _OutOfTime as out:
            if committing:
                raise self._unreachable(
                    out,
                    "the outcome of this batch's commit is unknown; it was not aborted: the next run's "
                    "init_transactions settles it",
                ) from out.error
            raise self._unreachable(out, self._abort_in_grace()) from out.error
        return True

    def abort(self) -> None:
        """Abort the open transaction, if any, within the time left (retrying a retriable failure of the abort)."""
        if not self.in_transaction:
            return
        self._deadline = max(self._deadline, self._clock() + abort_grace_s(self.transaction_timeout_s))
        try:
            self._call("abort_transaction", self.producer.abort_transaction, abortable_is_fatal=True)
        except _OutOfTime as out:
            raise self._unreachable(out, "the open transaction could not be aborted either") from out.error
        self.in_transaction = False
        self.aborts += 1

    def _abort_in_grace(self) -> str:
        """After the budget ran out: one abort bounded by :func:`abort_grace_s`; what became of the transaction."""
        grace = abort_grace_s(self.transaction_timeout_s)
        try:
            self.producer.abort_transaction(grace)
        except Exception as error:
            self.in_transaction = False  # nothing more can be done with it; closing the producer ends it
            return (
                f"the open transaction could not be aborted within {grace:g} s ({describe_error(error)}); the "
                "broker aborts it after transaction.timeout.ms, and the next run's init_transactions fences it"
            )
        self.in_transaction = False
        self.aborts += 1
        return "the open transaction was aborted"

    def _unreachable(self, out: _OutOfTime, outcome: str) -> BrokerUnreachable:
        self.unreachable = True
        last = f" (last error: {describe_error(out.error)})" if out.error is not None else ""
        return BrokerUnreachable(
            f"the broker was unreachable: {out.call} did not complete within the transaction budget of "
            f"{self.transaction_timeout_s:g} s (transaction_timeout_s){last}; {outcome}"
        )

    def _time_left(self) -> float:
        return self._deadline - self._clock()

    def _produce_failed(self, record: Outgoing, error: Exception) -> None:
        """Drain a full queue (within the budget) and produce the record again; classify a client error."""
        topic = record[0]
        while isinstance(error, BufferError):
            if self._time_left() <= 0:
                raise _OutOfTime(f"produce to {topic!r} (the local queue stayed full)", None)
            self.producer.poll(min(0.05, max(self._time_left(), 0.0)))
            try:
                _send(self.producer.produce, record)
                return
            except Exception as again:
                error = again
        if kafka_error_of(error) is None:
            raise error
        if classify_kafka_error(error, transactional=True) is KafkaErrorKind.FATAL:
            raise fatal_error(f"produce to {topic!r}", error, self.producer) from error
        if is_size_error(error):
            # The engine checks sizes before producing; this is a record it could not judge (the
            # client's limit is lower than it knew). Named, so the retry parks it instead.
            _, value, key, headers, _ = record
            where = dlq_coordinates(headers, HEADER_REPLAY_SOURCE)
            if where is not None:
                detail = f"{record_size(key, value, headers):,} bytes refused by the client ({describe_error(error)})"
                self.refused.append(SizeRefusal(where[0], where[1], topic, detail))
        # A record the broker or client refuses (too large, unknown topic) fails the batch, as
        # a failed delivery would at commit: abort, and let the bounded retry decide.
        raise _AbortRequired(f"produce to {topic!r}", error) from error

    def _call(
        self, name: str, call: Callable[..., Any], *args: Any, timed: bool = True, abortable_is_fatal: bool = False
    ) -> Any:
        """``call(*args, timeout=<time left>)``, retrying a retriable error while attempts and budget last."""
        last: BaseException | None = None
        for attempt in range(1, self.call_attempts + 1):
            left = self._time_left()
            if left <= 0:
                raise _OutOfTime(name, last)
            try:
                return call(*args, left) if timed else call(*args)
            except Exception as error:
                if kafka_error_of(error) is None:
                    raise
                kind = classify_kafka_error(error, transactional=True)
                if kind is KafkaErrorKind.ABORTABLE and not abortable_is_fatal:
                    raise _AbortRequired(name, error) from error
                if kind is KafkaErrorKind.RETRIABLE and self._time_left() <= 0:
                    raise _OutOfTime(name, error) from error
                if kind is not KafkaErrorKind.RETRIABLE or attempt == self.call_attempts:
                    tried = f" after {attempt} attempts" if kind is KafkaErrorKind.RETRIABLE else ""
                    raise fatal_error(name, error, self.producer, f"{tried} ({kind})") from error
                log.warning("%s failed with a retriable error, retrying: %s", name, describe_error(error))
                last = error
                self._sleep(min(self.retry_wait_s, max(self._time_left(), 0.0)))
        raise AssertionError("unreachable")

    def _await_deliveries(self) -> None:
        """Wait for the batch's deliveries in short steps, so a record the broker refused aborts the batch at once.

        Left to ``commit_transaction``, a refused record (the broker's MESSAGE_TOO_LARGE) made
        librdkafka's flush wait out the whole budget for the records queued behind it, and end
        in a timeout that reads as "commit outcome unknown". Delivered batches return at once.
        """
        flush = getattr(self.producer, "flush", None)
        if flush is None:
            return
        while flush(min(0.1, max(self._time_left(), 0.0))) > 0 and self._refusal is None and self._time_left() > 0:
            pass
        if self._refusal is not None:
            raise _AbortRequired("produce", KafkaException(self._refusal))

    def _commit(self) -> None:
        last: BaseException | None = None
        for attempt in range(1, self.commit_attempts + 1):
            left = self._time_left()
            if left <= 0:
                raise _OutOfTime("commit_transaction", last)
            try:
                self.producer.commit_transaction(left)
            except Exception as error:
                if kafka_error_of(error) is None:
                    raise
                kind = classify_kafka_error(error, transactional=True, during_commit=True)
                if kind is KafkaErrorKind.ABORTABLE or self._refusal is not None:  # a refused record: never commits
                    raise _AbortRequired("commit_transaction", error) from error
                if kind is not KafkaErrorKind.COMMIT_OUTCOME_UNKNOWN:
                    raise fatal_error("commit_transaction", error, self.producer, f" ({kind})") from error
                if self._time_left() <= 0:
                    raise _OutOfTime("commit_transaction", error) from error
                if attempt == self.commit_attempts:
                    raise ReplayFatalError(
                        f"commit_transaction outcome still unknown after {attempt} attempts: "
                        f"{describe_error(error)}. The transaction was not aborted: the next run's "
                        "init_transactions settles it. A timeout that does not clear often means another "
                        "replay with the same transactional.id fenced this one."
                    ) from error
                self.commit_retries += 1
                last = error
                log.warning("commit_transaction outcome unknown, retrying the commit: %s", describe_error(error))
                self._sleep(min(self.retry_wait_s, max(self._time_left(), 0.0)))
            else:
                self.in_transaction = False
                self.commits += 1
                return
