"""How a replay says what went wrong: the exceptions that end a run, and the words that go with them.

A failed replay is read by someone deciding whether to run it again, so every message says
what this run committed before it failed and where the replay group stands: the next run
continues from there. Kept apart from the loop so the loop reads as the exactly-once steps,
and the wording of a failure is in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaError

from airflow_kerr.kafka.client_errors import KafkaErrorKind, classify_kafka_error
from airflow_kerr.replay.options import ReplayOptions
from airflow_kerr.replay.summary import BatchCounts, ReplaySummary
from airflow_kerr.replay.transactions import BatchAborted, BrokerUnreachable, ReplayFatalError, describe_error

#: How many dropped records the summary's notes name; the log names every one.
MAX_DROPPED_NOTES = 20


class LogLike(Protocol):
    """What the engine logs through: a stdlib logger or an Airflow task logger."""

    def info(self, msg: Any, /, *args: Any) -> Any: ...

    def warning(self, msg: Any, /, *args: Any) -> Any: ...


class ReplayRetriesExhausted(RuntimeError):
    """A batch was aborted on every allowed attempt; the replay group stays at its last committed offsets."""


def consumer_error(error: KafkaError, log: LogLike) -> None:
    """Fail the run on a fatal consumer error; log any other (the client retries it) and go on.

    The end of a partition is no error at all (the consumer is built without partition EOF
    events, so it only comes from a client that sends them anyway).
    """
    if error.code() == KafkaError._PARTITION_EOF:
        return
    if classify_kafka_error(error) is KafkaErrorKind.FATAL:
        raise ReplayFatalError(f"the replay consumer failed: {describe_error(error)}")
    log.warning("consumer error (the client retries it): %s", describe_error(error))


def fence_failed(error: BrokerUnreachable) -> BrokerUnreachable:
    """``init_transactions`` found no broker: nothing was read, so nothing was committed."""
    return BrokerUnreachable(f"{error}. Nothing was committed by this run.")


def unreachable(
    error: BrokerUnreachable,
    options: ReplayOptions,
    commits: int,
    summary: ReplaySummary,
    committed: Mapping[int, int],
) -> BrokerUnreachable:
    """The writer's account of the failure, completed with what this run committed before it (``commits``)."""
    where = f"{dict(sorted(committed.items()))} of {options.dlq_topic}"
    if commits:
        done = (
            f"Committed by this run before it: {commits} transactions with {summary.replayed} records "
            f"replayed and {summary.parked} parked ({summary.scanned} DLQ records read past); the replay group "
            f"{options.group_id} is at offsets {where}"
        )
    else:
        done = f"Nothing was committed by this run; the replay group {options.group_id} stays at offsets {where}"
    return BrokerUnreachable(f"{error}. {done}; the next run continues from there.")


def retries_exhausted(
    options: ReplayOptions, committed: Mapping[int, int], attempts: int, error: BatchAborted
) -> ReplayRetriesExhausted:
    """A batch aborted ``attempts`` times: the run fails and the replay group stays at ``committed``."""
    return ReplayRetriesExhausted(
        f"a batch of {options.dlq_topic} starting at offsets {committed} was aborted "
        f"{attempts} times; the replay group stays there. Last cause: {error}"
    )


def report_refused(options: ReplayOptions, committed: Mapping[int, int], error: BatchAborted, log: LogLike) -> None:
    """Say which records the client or the broker refused for their size: the batch is read again without them."""
    log.warning(
        "the batch of %s at offsets %s was aborted: %s; reading it again without writing %s as they were",
        options.dlq_topic,
        committed,
        "; ".join(f"{options.dlq_topic}/{r.partition}/{r.offset}: {r.detail}" for r in error.refused),
        "it" if len(error.refused) == 1 else "them",
    )


def report_dropped(counts: BatchCounts, summary: ReplaySummary, log: LogLike) -> None:
    """Log each record of a committed batch too large even to park, and name the first ones in the summary.

    Such a record is never written anywhere, so its DLQ coordinates in the log are all that is
    left to find it by; the summary's notes stop at :data:`MAX_DROPPED_NOTES`.
    """
    for what in counts.dropped_too_large:
        log.warning("dropped a record too large to write even without its value, nor to park: %s", what)
        if len(summary.notes) < MAX_DROPPED_NOTES:
            summary.notes.append(f"dropped, too large even to park: {what}")
