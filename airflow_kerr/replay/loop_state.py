"""What the replay loop carries from one batch to the next (:mod:`airflow_kerr.replay.engine`).

Kept apart so that the engine module holds the loop's steps only; the bookkeeping of which
offsets are read, in flight and committed is here, with the reasons each field exists.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from confluent_kafka import Consumer

from airflow_kerr.replay.background import BackgroundWriter
from airflow_kerr.replay.pacing import Progress
from airflow_kerr.replay.policy import Outgoing, ReplayPolicy
from airflow_kerr.replay.summary import BatchCounts, ReplayPlan, ReplaySummary
from airflow_kerr.replay.transactions import TransactionalWriter


class Written(Enum):
    """How the batch in flight ended."""

    COMMITTED = "committed"
    #: Aborted on an abortable error: the consumer is back at the committed offsets.
    REWOUND = "rewound"
    #: A stop came first: the transaction was aborted, or the backoff before its retry cut short.
    STOPPED = "stopped"


class InFlight(NamedTuple):
    """The batch the background writer is writing: the offsets its transaction commits and the counts it settles."""

    positions: dict[int, int]
    counts: BatchCounts


@dataclass
class Batch:
    """One polled batch, decided: the records it writes, what it counts, and the read positions after it."""

    outputs: list[Outgoing]
    counts: BatchCounts
    positions: dict[int, int]


@dataclass
class LoopState:
    """What the replay loop carries from one batch to the next, with the parts it works on.

    ``positions`` run ahead of ``committed`` while a batch is in flight, or while batches
    that wrote nothing (every record skipped or dropped) wait to ride on the next
    transaction. ``pending`` counts what was read and not yet handed to a transaction,
    ``in_flight`` is the batch being written; counts reach the summary only once their
    transaction committed. ``attempt`` counts the aborts of the batch at ``committed``.
    """

    consumer: Consumer
    writer: TransactionalWriter | None
    #: Writes one batch while the next is read and decided; None in a dry run, which writes nothing.
    background: BackgroundWriter | None
    plan: ReplayPlan
    summary: ReplaySummary
    policy: ReplayPolicy
    progress: Progress
    committed: dict[int, int]
    positions: dict[int, int]
    #: Called by the writer before each record produced, so a stop aborts the open transaction: the rate
    #: limiter's wait for a paced run (``pace``), else a check that never waits (``halted``).
    pace: Callable[[], bool] | None = None
    halted: Callable[[], bool] | None = None
    batch_size: int = 1
    pending: BatchCounts = field(default_factory=BatchCounts)
    in_flight: InFlight | None = None
    attempt: int = 0
    #: No record arrived for ``idle_timeout_s`` before the planned end.
    idle: bool = False
    last_progress: float = field(default_factory=time.monotonic)
    #: When settling last ran a young-generation pass of the cyclic collector.
    collected: float = field(default_factory=time.monotonic)
    #: Set once the loop ended: a batch still in flight (the loop failed) stops at its next record.
    abandoned: bool = False

    @property
    def ends(self) -> dict[int, int]:
        """The planned end offset of each partition."""
        return self.plan.end_offsets

    @property
    def reading(self) -> bool:
        """Whether some partition has records left before its planned end."""
        return any(self.positions[p] < self.ends[p] for p in self.plan.partitions)

    @property
    def left(self) -> int:
        """How many offsets are left to read before the planned ends."""
        return sum(self.ends[p] - self.positions[p] for p in self.plan.partitions if self.positions[p] < self.ends[p])

    @property
    def written_back(self) -> bool:
        """Whether the batch in flight has its outcome ready, so collecting it does not wait."""
        return self.in_flight is not None and self.background is not None and self.background.finished
