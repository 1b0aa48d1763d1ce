"""What a replay run plans, counts and reports: pure data, shared by the engine, the operator and the tests.

Counts are kept per batch and added to the summary only once the batch is committed (or,
in a dry run, once it is read), so a batch that is aborted and retried is counted once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_kerr.errors import DeadLetterRecord
from airflow_kerr.replay.policy import Action, BreakdownKey, Decision

#: Parked records a summary describes one by one (``dlq/partition/offset: reason: detail``); the rest are counted.
MAX_PARK_EXAMPLES = 10


@dataclass
class ReplayPlan:
    """What a run will read, decided before any record is read."""

    partitions: list[int]
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    transactional_id: str
    create_parking_topic: bool = False
    #: Per partition, dead letters the DLQ's retention deleted before this group read them:
    #: the group's committed offset lies below the partition's log start offset.
    expired: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(max(0, self.end_offsets[p] - self.start_offsets[p]) for p in self.partitions)


#: The reported counts of each action: what a real run did, and what a dry run would do.
DONE = {Action.REPLAY: "replayed", Action.PARK: "parked", Action.DROP: "dropped"}
WOULD = {Action.REPLAY: "would_replay", Action.PARK: "would_park", Action.DROP: "would_drop"}


@dataclass
class ReplaySummary:
    """What a run did (or, in a dry run, would do), for the log and XCom.

    On this object ``replayed``, ``parked`` and ``dropped`` count the records decided for
    each action as they settle (the engine's progress line reads them, in a dry run too);
    only a real run carries the decisions out. What is reported (:meth:`to_dict`, the
    XCom, the operator's log) never says a dry run replayed anything: there the decided
    counts are ``would_replay``, ``would_park`` and ``would_drop``, and ``replayed``,
    ``parked`` and ``dropped`` are 0. Both shapes carry every key, so a reader needs no
    branch to find a count.
    """

    run_id: str
    dlq_topic: str
    group_id: str
    transactional_id: str
    dry_run: bool
    status: str = "completed"
    total: int = 0
    scanned: int = 0
    selected: int = 0
    replayed: int = 0
    parked: int = 0
    dropped: int = 0
    #: Records too large even to park without their value: not written anywhere, logged with their DLQ coordinates.
    dropped_too_large: int = 0
    #: Dead letters retention deleted from the DLQ after the group's last run and before this one read them.
    expired: int = 0
    skipped: int = 0
    transactions: int = 0
    aborted_batches: int = 0
    commit_retries: int = 0
    seconds: float = 0.0
    start_offsets: dict[int, int] = field(default_factory=dict)
    end_offsets: dict[int, int] = field(default_factory=dict)
    committed_offsets: dict[int, int] = field(default_factory=dict)
    breakdown: Counter[BreakdownKey] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    #: The first parked records (or, in a dry run, those that would be parked) with why, for the log and XCom.
    park_examples: list[str] = field(default_factory=list)

    def add(self, counts: BatchCounts) -> None:
        self.park_examples.extend(counts.park_examples[: MAX_PARK_EXAMPLES - len(self.park_examples)])
        self.scanned += counts.scanned
        self.skipped += counts.scanned - counts.selected
        self.selected += counts.selected
        self.dropped_too_large += len(counts.dropped_too_large)
        for key, n in counts.breakdown.items():
            if key[0] is Action.REPLAY:
                self.replayed += n
            elif key[0] is Action.PARK:
                self.parked += n
            else:
                self.dropped += n
        self.breakdown.update(counts.breakdown)

    def decided(self, action: Action) -> int:
        """Records decided for ``action`` so far (carried out only in a real run)."""
        return {Action.REPLAY: self.replayed, Action.PARK: self.parked, Action.DROP: self.dropped}[action]

    @property
    def would_replay(self) -> int:
        """Records a dry run would replay; 0 in a real run."""
        return self.replayed if self.dry_run else 0

    @property
    def would_park(self) -> int:
        """Records a dry run would park; 0 in a real run."""
        return self.parked if self.dry_run else 0

    @property
    def would_drop(self) -> int:
        """Records a dry run would drop; 0 in a real run."""
        return self.dropped if self.dry_run else 0

    def outcome(self) -> dict[str, int]:
        """The reported counts: ``replayed``/``parked``/``dropped`` and ``would_*``, one set 0 as the mode says."""
        done = {name: 0 if self.dry_run else self.decided(action) for action, name in DONE.items()}
        would = {name: self.decided(action) if self.dry_run else 0 for action, name in WOULD.items()}
        return {**done, **would}

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (the XCom); ``breakdown`` rows count records by action, target, stage, exception
        and reason.

        A row's ``action`` is the decision (``replay``, ``park``, ``drop``) in both modes;
        ``dry_run`` says whether it was carried out. The counts of :meth:`outcome` replace
        the object's decided counts, so a dry run reports ``replayed: 0`` and ``would_replay``.
        """
        counts: Counter[tuple[str, ...]] = Counter()
        for parts, n in self.breakdown.items():
            counts[tuple("" if part is None else str(part) for part in parts)] += n
        rows = [
            {"action": a, "topic": t, "stage": s, "exception_class": e, "reason": r, "count": n}
            for (a, t, s, e, r), n in sorted(counts.items(), key=lambda item: (item[0][0], -item[1], item[0]))
        ]
        rate = self.scanned / self.seconds if self.seconds > 0 else 0.0
        outcome = self.outcome()
        data: dict[str, Any] = {}
        for name, value in vars(self).items():
            if name == "breakdown":
                continue
            data[name] = outcome.get(name, value)
            if name == "dropped":  # the would_* counts beside the done ones
                data.update({key: outcome[key] for key in WOULD.values()})
        for name in ("start_offsets", "end_offsets", "committed_offsets"):
            data[name] = {str(p): o for p, o in sorted(data[name].items())}
        return {**data, "records_per_second": round(rate, 1), "breakdown": rows}


@dataclass
class BatchCounts:
    """Counts of one batch, added to the summary only once the batch committed (or in a dry run)."""

    scanned: int = 0
    selected: int = 0
    breakdown: Counter[BreakdownKey] = field(default_factory=Counter)
    park_examples: list[str] = field(default_factory=list)
    #: Records too large even to park without their value (``dlq/partition/offset: why``): counted, not written.
    dropped_too_large: list[str] = field(default_factory=list)

    def merge(self, other: BatchCounts) -> None:
        self.scanned += other.scanned
        self.selected += other.selected
        self.dropped_too_large.extend(other.dropped_too_large)
        self.breakdown.update(other.breakdown)
        self.park_examples.extend(other.park_examples[: MAX_PARK_EXAMPLES - len(self.park_examples)])

    def clear(self) -> None:
        self.scanned = self.selected = 0
        self.dropped_too_large.clear()
        self.breakdown.clear()
        self.park_examples.clear()

    def count(self, decision: Decision, letter: DeadLetterRecord) -> None:
        """Count one selected record (``selected`` and ``scanned`` are set by the caller's loop)."""
        topic = decision.record.topic if decision.record is not None else None
        self.breakdown[(decision.action, topic, letter.stage, letter.exception_class, decision.reason)] += 1
        if decision.action is Action.PARK and len(self.park_examples) < MAX_PARK_EXAMPLES:
            where = f"{letter.topic}/{letter.partition}/{letter.offset}"
            self.park_examples.append(f"{where}: {decision.reason}: {decision.detail}")


def partition_ranges(partitions: Sequence[int]) -> str:
    """``0-3,7`` for partitions 0, 1, 2, 3 and 7: a short, stable name of a partition set."""
    parts: list[str] = []
    ordered = sorted(partitions)
    start = prev = ordered[0]
    for p in [*ordered[1:], None]:
        if p is not None and p == prev + 1:
            prev = p
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if p is not None:
            start = prev = p
    return ",".join(parts)
