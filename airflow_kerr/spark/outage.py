"""Outage or poison: the ``errors.outage.*`` breaker of one Spark task.

Poison is a few bad records among good ones: Connect's ``errors.tolerance=all`` skips them
to the DLQ and the stream goes on. An outage (a lookup service, a registry or the sink is
down) fails every record for the same reason, and dead-lettering them only moves the whole
stream into the DLQ to be replayed afterwards (kafka-connect-jdbc #1312, PostHog's "more
than half of a batch", KIP-1316's circuit breaker). With ``errors.outage.enable=true`` a
batch trips the breaker when either rule holds:

- ``errors.outage.consecutive.failures`` (N, default 100) records in a row failed with the
  same exception class at the same stage: one cause, no record getting through. Poison is
  scattered and of mixed classes, so a run of 100 is rare even at high poison rates, and a
  small stream's batches (too small for the rate rule) still trip.
- more than ``errors.outage.batch.failure.percent`` (X, default 50, PostHog's rule) of a
  batch of at least ``errors.outage.batch.min.records`` (M, default 100) records failed:
  an outage that alternates with successes (a flapping service) has no long runs.

The batch is judged before the sink is written and its DLQ records are held until then,
so a batch that trips writes nothing: not to the sink, not to the DLQ. The task stops
there, flushes what the clean batches before it wrote, and reports the offset the next run
must start from; the driver commits that and fails the run (:mod:`airflow_kerr.spark.driver`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from airflow_kerr.errors import ErrorContext, ErrorHandlingConfig
from airflow_kerr.errors.config import OUTAGE_ENABLE
from airflow_kerr.kafka.metrics_topic import OUTAGE_SCOPE


@dataclass(frozen=True)
class Outage:
    """What tripped the breaker: the cause, its rate in the batch, and where the next run starts."""

    rule: str
    exception_class: str
    stage: str
    failed: int
    records: int
    consecutive: int
    topic: str
    partition: int
    first_offset: int
    resume_offset: int

    @property
    def rate(self) -> float:
        return self.failed / self.records if self.records else 0.0

    def describe(self) -> str:
        """One line naming the class, the rate and the first coordinates, as the failed task's message."""
        return (
            f"outage: {self.exception_class} at stage {self.stage} failed {self.failed} of {self.records} records "
            f"({self.rate:.1%}) of a batch, {self.consecutive} in a row; first at {self.topic}-{self.partition}@"
            f"{self.first_offset}; rule: {self.rule}. Nothing of the batch was written (sink or DLQ); offsets are "
            f"committed up to {self.resume_offset}, so a rerun after the outage reads from there"
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Outage:
        return cls(**json.loads(text))


class OutageTripped(Exception):
    """Raised inside a task when a batch trips the breaker; the task catches it and stops cleanly."""

    def __init__(self, outage: Outage) -> None:
        super().__init__(outage.describe())
        self.outage = outage


@dataclass
class _Run:
    """A run of failed records in a row with one class at one stage."""

    last: int
    length: int


class OutageDetector:
    """An error reporter that only watches: it counts a batch's failures and judges the batch.

    Positions are the records' order in the task (records read before the batch plus the
    row), so a run goes on across batches; a record that passed the stage between two
    failures, or was dropped before it, breaks the run (fewer trips, never more).
    """

    def __init__(self, config: ErrorHandlingConfig) -> None:
        if not config.outage_enable:
            raise ValueError(f"OutageDetector needs {OUTAGE_ENABLE}=true")
        self.config = config
        self.runs: dict[tuple[str, str], _Run] = {}
        self.base = 0
        self.records = 0
        self.offsets: list[int] = []
        self.position_of: dict[int, int] | None = None
        self.failed = 0
        self.first: ErrorContext | None = None
        self.first_key: tuple[str, str] = ("", "")
        #: The batch's first failed offset per (class, stage): where a trip says its cause began.
        self.first_offsets: dict[tuple[str, str], int] = {}
        self.longest: tuple[int, tuple[str, str]] = (0, ("", ""))
        self.topic = ""
        self.partition = -1

    def begin_batch(self, offsets: list[int], topic: str, partition: int) -> None:
        """A new batch of ``offsets`` starts; the runs of the batches before it go on."""
        self.base += self.records
        self.records = len(offsets)
        self.offsets = offsets
        self.position_of = None
        self.failed = 0
        self.first = None
        self.first_offsets = {}
        self.longest = (0, ("", ""))
        self.topic, self.partition = topic, partition

    def report(self, context: ErrorContext) -> None:
        """Count one failed record (called with the log and DLQ reporters); the run that reaches N trips at once."""
        key = (_class_name(context.error), context.stage.value)
        self.failed += 1
        if self.first is None:
            self.first, self.first_key = context, key
        if key not in self.first_offsets and context.record is not None:
            self.first_offsets[key] = context.record.offset
        position = self._position(context)
        run = self.runs.get(key)
        if run is not None and position == run.last + 1:
            run.last, run.length = position, run.length + 1
        else:
            run = self.runs[key] = _Run(position, 1)
        if run.length > self.longest[0]:
            self.longest = (run.length, key)
        if run.length == self.config.outage_consecutive_failures:
            # Trip now: during an outage every further record of the batch would only wait on the same failure.
            self.judge()

    def _position(self, context: ErrorContext) -> int:
        if self.position_of is None:
            self.position_of = {offset: row for row, offset in enumerate(self.offsets)}
        record = context.record
        row = self.position_of.get(record.offset, -2) if record is not None else -2
        return self.base + row

    def judge(self) -> None:
        """Raise :class:`OutageTripped` when the batch so far breaks a rule; a clean batch passes."""
        config = self.config
        consecutive, key = self.longest
        rule = ""
        if config.outage_consecutive_failures and consecutive >= config.outage_consecutive_failures:
            rule = f"errors.outage.consecutive.failures={config.outage_consecutive_failures}"
        elif (
            self.records >= config.outage_batch_min_records
            and self.failed * 100 > config.outage_batch_failure_percent * self.records
        ):
            rule = (
                f"errors.outage.batch.failure.percent={config.outage_batch_failure_percent} of >= "
                f"errors.outage.batch.min.records={config.outage_batch_min_records}"
            )
            key = self.first_key
        if not rule:
            return
        offset = self.first_offsets.get(key, self.offsets[0])
        raise OutageTripped(
            Outage(
                rule=rule,
                exception_class=key[0],
                stage=key[1],
                failed=self.failed,
                records=self.records,
                consecutive=consecutive,
                topic=self.topic,
                partition=self.partition,
                first_offset=offset,
                resume_offset=self.offsets[0],
            )
        )

    def forget_batch(self) -> None:
        """The batch tripped: its failures will be seen again by the next run, not counted here."""
        self.records = 0


def _class_name(error: BaseException) -> str:
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def outage_record_fields(outage: Outage) -> dict[str, Any]:
    """The outage's fields as the metrics-topic record carries them (``scope="outage"``)."""
    return {"scope": OUTAGE_SCOPE, "outage": asdict(outage) | {"rate": outage.rate, "message": outage.describe()}}
