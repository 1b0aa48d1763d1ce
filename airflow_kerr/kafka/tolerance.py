"""Tolerance measured over a window: from the job's metrics records, or from DLQ growth against consumption.

Shared by :class:`~airflow_kerr.sensors.tolerance.ToleranceSensor`'s poke mode and
its trigger (which calls these in a worker thread). No Airflow imports.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any

from airflow_kerr.errors.metrics import TOTAL_RECORD_ERRORS
from airflow_kerr.kafka.dead_letters import dlq_end_offsets
from airflow_kerr.kafka.metrics_topic import (
    OUTAGE_SCOPE,
    MetricsFollower,
    count_inputs_once,
    latest_per_attempt,
    read_metrics_records,
)
from airflow_kerr.kafka.offset_spans import DEAD_LETTER_OFFSETS
from airflow_kerr.kafka.offsets import group_offsets, offset_consumer, topic_partitions
from airflow_kerr.kafka.shared_clients import SharedMetricsView

WAIT_FOR = ("breach", "recovery")
#: The metrics records a tolerance window reads: the tasks' counters and the outages they reported.
WINDOW_SCOPES = ("task", OUTAGE_SCOPE)
SOURCES = ("metrics", "dlq")


def seconds(value: timedelta | float) -> float:
    """A duration given as a ``timedelta`` or as seconds, in seconds."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def window_ms_of(window: timedelta | float) -> int:
    """A window as a DAG author gives it (a ``timedelta`` or seconds), in whole milliseconds, as the spec keeps it."""
    return int(seconds(window) * 1000)


def wait_for_problems(wait_for: str) -> list[str]:
    """What is wrong with ``wait_for`` (kept apart from the spec: an event watch flips it, the spec stays)."""
    return [] if wait_for in WAIT_FOR else [f"wait_for={wait_for!r}: expected one of {', '.join(WAIT_FOR)}"]


class ToleranceSpecError(ValueError):
    """A :class:`ToleranceSpec` refused its settings: ``problems`` holds one line per problem naming key and value.

    The lines are kept apart so a door that checks more (a sensor's ``pause_on_breach``, a
    trigger's ``fire_on``) can report every problem of a DAG author's call in one error.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid tolerance settings:\n  - " + "\n  - ".join(self.problems))


@dataclass(frozen=True)
class ToleranceSpec:
    """One tolerance watch's settings: the limits, the window, and what is read; checked once, when built.

    The sensor, the guard, the asset helper and the ``kerr+tolerance`` queue take these as
    flat keyword arguments (what a DAG author writes) and build one spec at that edge; the
    triggers, the watch and the alert's limits take the spec, so the settings are checked in
    one place and travel as one value. Frozen: a spec shared by a breach and a recovery
    watch cannot drift between them.

    ``window_ms`` is whole milliseconds (:func:`window_ms_of` converts a ``timedelta`` or
    seconds). ``source="metrics"`` reads ``pipeline``'s records on ``metrics_topic``;
    ``source="dlq"`` measures ``dlq_topic``'s growth against what consumer group
    ``group_id`` consumed of ``source_topics``. Building one with bad settings raises
    :class:`ToleranceSpecError` listing every problem.
    """

    max_error_rate: float | None = None
    max_errors: int | None = None
    min_records: int = 100
    window_ms: int = 300_000
    source: str = "metrics"
    pipeline: str | None = None
    metrics_topic: str = "kerr.metrics"
    dlq_topic: str | None = None
    source_topics: tuple[str, ...] = ()
    group_id: str | None = None

    def __post_init__(self) -> None:
        # A list from a DAG file or a trigger's JSON becomes a tuple: the spec stays hashable and immutable.
        object.__setattr__(self, "source_topics", tuple(self.source_topics or ()))
        problems = self.problems()
        if problems:
            raise ToleranceSpecError(problems)

    def problems(self) -> list[str]:
        """What is wrong with these settings, one line per problem naming the key, the value and what is accepted."""
        problems = []
        if self.source not in SOURCES:
            problems.append(f"source={self.source!r}: expected one of {', '.join(SOURCES)}")
        if self.max_error_rate is None and self.max_errors is None:
            problems.append("max_error_rate=None and max_errors=None: set at least one limit")
        if self.max_error_rate is not None and not 0 <= self.max_error_rate <= 1:
            problems.append(f"max_error_rate={self.max_error_rate!r}: expected a fraction between 0 and 1")
        if self.max_errors is not None and self.max_errors < 0:
            problems.append(f"max_errors={self.max_errors!r}: expected an integer >= 0")
        if self.min_records < 0:
            problems.append(f"min_records={self.min_records!r}: expected an integer >= 0")
        if self.window_ms <= 0:
            problems.append(f"window={self.window_ms / 1000:g}: expected a positive duration")
        if self.source == "metrics" and not self.pipeline:
            problems.append("pipeline: required with source='metrics' (the pipeline name in the metrics records)")
        if self.source == "dlq" and not (self.dlq_topic and self.source_topics and self.group_id):
            problems.append("dlq_topic, source_topics and group_id: all required with source='dlq'")
        return problems

    @property
    def watched_topic(self) -> str:
        """The topic the watch reads: the metrics topic, or the DLQ in the metrics-free mode."""
        return self.metrics_topic if self.source == "metrics" else str(self.dlq_topic)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form a trigger serializes: the same keys and values the settings dict had before the spec.

        Unchanged on purpose: an asset watcher's default cursor group is a hash of this dict,
        so a watch keeps its saved state (healthy or breached) across an upgrade.
        """
        return {
            "window_ms": self.window_ms,
            "max_error_rate": self.max_error_rate,
            "max_errors": self.max_errors,
            "min_records": self.min_records,
            "source": self.source,
            "pipeline": self.pipeline,
            "metrics_topic": self.metrics_topic,
            "dlq_topic": self.dlq_topic,
            "source_topics": list(self.source_topics),
            "group_id": self.group_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToleranceSpec:
        """The spec :meth:`to_dict` wrote (a key it lacks takes its default; an unknown key is refused by name)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ToleranceSpecError([f"{key}={data[key]!r}: not a tolerance setting" for key in unknown])
        return cls(**data)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ToleranceSpec:
        """The spec of a door's flat settings, read by name: the one place DAG authors' names meet the spec's.

        Every door (the sensor, the guard, the asset helper, the ``kerr+tolerance`` queue)
        passes its own arguments (``locals()`` at its top, or a sensor's attributes after
        rendering). ``window`` (a ``timedelta`` or seconds) stands for ``window_ms``, and a
        door's ``consumer_group`` for ``group_id`` (ahead of any ``group_id`` of its own: the
        guard's is its TaskGroup's id); what is not a setting is ignored, and a
        setting left out takes the spec's default.
        """
        values = {name: settings[name] for name in _SETTING_NAMES if name in settings}
        if "window" in settings and "window_ms" not in settings:
            values["window_ms"] = window_ms_of(settings["window"])
        if "consumer_group" in settings:  # the guard's group_id is its TaskGroup's id, not the consumer group
            values["group_id"] = settings["consumer_group"]
        return cls(**values)


#: The spec's fields, by the names doors and their attributes use.
_SETTING_NAMES = tuple(f.name for f in fields(ToleranceSpec))


def reading_with_limits(reading: Mapping[str, Any], spec: ToleranceSpec, wait_for: str) -> dict[str, Any]:
    """A reading plus the limits it was judged against, for alerts and the branches downstream."""
    return {
        **reading,
        "pipeline": spec.pipeline,
        "wait_for": wait_for,
        "max_error_rate": spec.max_error_rate,
        "max_errors": spec.max_errors,
        "min_records": spec.min_records,
        "window_s": spec.window_ms / 1000,
        "dlq_topic": spec.dlq_topic,
    }


@dataclass(frozen=True)
class ToleranceReading:
    """Records in and records failed inside a window, and whether that breaches the limits."""

    records_in: int
    errors: int
    window_start_ms: int
    window_end_ms: int
    source: str
    #: The newest outage the job reported in the window (its ``scope="outage"`` record's ``outage``), if any.
    outage: dict[str, Any] | None = None
    #: The job runs (their ``run_id``) whose task records in the window say they wrote dead letters, oldest first:
    #: the alert links to each one's Dead letters tab.
    dead_letter_runs: tuple[str, ...] = ()

    @property
    def error_rate(self) -> float:
        return self.errors / self.records_in if self.records_in else 0.0

    def breaches(self, max_error_rate: float | None, max_errors: int | None, min_records: int) -> bool:
        """An outage the job reported, a count limit, or a rate limit once the window saw ``min_records``."""
        if self.outage is not None:
            return True
        if max_errors is not None and self.errors > max_errors:
            return True
        return max_error_rate is not None and self.records_in >= min_records and self.error_rate > max_error_rate

    def as_dict(self) -> dict[str, Any]:
        return {
            "records_in": self.records_in,
            "errors": self.errors,
            "error_rate": self.error_rate,
            "window_start_ms": self.window_start_ms,
            "window_end_ms": self.window_end_ms,
            "source": self.source,
        } | (
            ({"kind": "outage", "outage": self.outage} if self.outage is not None else {})
            | ({"dead_letter_runs": list(self.dead_letter_runs)} if self.dead_letter_runs else {})
        )


def metrics_window(
    kafka_config: Mapping[str, Any], metrics_topic: str, pipeline: str, window_ms: int, now_ms: int | None = None
) -> ToleranceReading:
    """Records in and records failed by ``pipeline``'s tasks whose metrics window ended inside the window.

    Each input is counted once: a run killed before its commit leaves task records
    for ranges the next run reads again, and Spark publishes one per task attempt, so
    wherever ranges overlap only one record counts, a finished task's before a failed
    attempt's, then the latest (:func:`count_inputs_once`). A running task's interim
    records count through its newest one, and its final record supersedes them
    (:func:`latest_per_attempt`). Run records (``scope="run"``) repeat their tasks' sums
    and are not read.
    An outage record (``scope="outage"``, from ``errors.outage.*``) in the window makes the reading an outage.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    start_ms = now_ms - window_ms
    records = read_metrics_records(
        kafka_config,
        metrics_topic,
        start_ms,
        lambda r: (
            r.get("scope") in WINDOW_SCOPES and r.get("pipeline") == pipeline and start_ms <= r.get("window_end_ms", 0)
        ),
    )
    return metrics_reading(records, start_ms, now_ms)


def metrics_reading(records: Sequence[dict[str, Any]], start_ms: int, end_ms: int) -> ToleranceReading:
    """The reading over task metrics ``records`` already chosen for the window from ``start_ms`` to ``end_ms``.

    Interim and final records of one task attempt count once (:func:`latest_per_attempt`),
    then overlapping inputs of different attempts or runs once (:func:`count_inputs_once`).
    """
    outages = [r["outage"] for r in records if r.get("scope") == OUTAGE_SCOPE and isinstance(r.get("outage"), dict)]
    records = [r for r in records if r.get("scope", "task") == "task"]
    runs = dict.fromkeys(str(r["run_id"]) for r in records if r.get(DEAD_LETTER_OFFSETS) and r.get("run_id"))
    records_in = errors = 0.0
    for record, share in count_inputs_once(latest_per_attempt(records)):
        records_in += share * int(record.get("records_in", 0))
        errors += share * int(record.get(TOTAL_RECORD_ERRORS, 0))
    return ToleranceReading(
        records_in=_nearest(records_in),
        errors=_nearest(errors),
        window_start_ms=start_ms,
        window_end_ms=end_ms,
        source="metrics",
        outage=outages[-1] if outages else None,
        dead_letter_runs=tuple(runs),
    )


def _nearest(count: float) -> int:
    """A count from shares of records, to the nearest whole (half up; shares of 0 and 1 stay exact)."""
    return math.floor(count + 0.5)


@dataclass(frozen=True)
class ConsumptionSample:
    """DLQ size and a group's consumption of the source topics at one moment."""

    at_ms: int
    dlq_total: int
    consumed_total: int


def consumption_sample(
    kafka_config: Mapping[str, Any], dlq_topic: str, source_topics: Sequence[str], group: str
) -> ConsumptionSample:
    """One sample for the metrics-free mode: a Kafka Connect sink that writes a DLQ is measured this way."""
    # One client for the three look-ups: it never joins the group, it only reads its offsets.
    consumer = offset_consumer({**kafka_config, "group.id": group})
    try:
        partitions = [tp for topic in source_topics for tp in topic_partitions(consumer, topic)]
        committed = group_offsets(kafka_config, group, partitions, consumer=consumer)
        dlq_ends = dlq_end_offsets(kafka_config, dlq_topic, consumer=consumer)
    finally:
        consumer.close()
    return ConsumptionSample(
        at_ms=int(time.time() * 1000),
        dlq_total=sum(dlq_ends.values()),
        consumed_total=sum(committed.values()),
    )


def consumption_window(samples: Sequence[ConsumptionSample], window_ms: int) -> ToleranceReading | None:
    """DLQ growth over source consumption between the oldest sample inside the window and the newest."""
    if len(samples) < 2:
        return None
    newest = samples[-1]
    inside = [s for s in samples if s.at_ms >= newest.at_ms - window_ms]
    oldest = inside[0] if len(inside) > 1 else samples[-2]
    return ToleranceReading(
        records_in=max(0, newest.consumed_total - oldest.consumed_total),
        errors=max(0, newest.dlq_total - oldest.dlq_total),
        window_start_ms=oldest.at_ms,
        window_end_ms=newest.at_ms,
        source="dlq",
    )


@dataclass
class ToleranceWatch:
    """Decides, reading after reading, whether a breach happened or recovery is complete.

    ``breach``: the window's errors or error rate pass a limit. ``recovery``: a
    window that saw at least ``min_records`` is under every limit, and (for the
    sampled DLQ mode) the samples cover the whole window. An idle pipeline is not
    taken as recovered: there is no evidence either way. The settings are ``spec``'s;
    ``wait_for`` is the watch's own, since an event watch flips it after each transition.
    """

    kafka_config: dict[str, Any]
    wait_for: str
    spec: ToleranceSpec
    samples: list[ConsumptionSample] = field(default_factory=list)
    #: The metrics mode's reader, kept from look to look: one consumer that follows the metrics topic.
    follower: MetricsFollower | None = None
    #: Instead of a follower of its own: the view of the one its cluster's asset watches share on the triggerer.
    shared_view: SharedMetricsView | None = None

    def __post_init__(self) -> None:
        problems = wait_for_problems(self.wait_for)
        if problems:
            raise ValueError(problems[0])

    def read(self, wait_s: float = 0.0) -> ToleranceReading | None:
        """The window now; in the metrics mode, after waiting up to ``wait_s`` for a new metrics record.

        The metrics mode follows the topic with one consumer (:class:`MetricsFollower`): a look
        takes only what arrived since the last, and a watch that waits sees a record the moment
        the broker has it. The DLQ mode samples and does not wait.
        """
        spec = self.spec
        if spec.source == "metrics":
            pipeline = spec.pipeline
            assert pipeline is not None
            if self.shared_view is not None:
                records = self.shared_view.read()
                now_ms = int(time.time() * 1000)
                return metrics_reading(records, now_ms - spec.window_ms, now_ms)
            if self.follower is None:
                self.follower = MetricsFollower(
                    self.kafka_config,
                    spec.metrics_topic,
                    lambda r: r.get("scope") in WINDOW_SCOPES and r.get("pipeline") == pipeline,
                    spec.window_ms,
                )
            records = self.follower.read(wait_s=wait_s)
            now_ms = int(time.time() * 1000)
            return metrics_reading(records, now_ms - spec.window_ms, now_ms)
        assert spec.dlq_topic is not None and spec.group_id is not None
        sample = consumption_sample(self.kafka_config, spec.dlq_topic, spec.source_topics, spec.group_id)
        self.samples = [s for s in self.samples if s.at_ms >= sample.at_ms - 2 * spec.window_ms] + [sample]
        return consumption_window(self.samples, spec.window_ms)

    def close(self) -> None:
        """Let the metrics topic's consumer go (a watch that is read again opens a new one)."""
        if self.follower is not None:
            self.follower.close()

    def check(self, wait_s: float = 0.0) -> tuple[bool, ToleranceReading | None]:
        """One reading (after waiting up to ``wait_s`` for news, see :meth:`read`), and whether the condition holds."""
        reading = self.read(wait_s)
        if reading is None:
            return False, None
        spec = self.spec
        breached = reading.breaches(spec.max_error_rate, spec.max_errors, spec.min_records)
        if self.wait_for == "breach":
            return breached, reading
        covered = spec.source == "metrics" or reading.window_end_ms - reading.window_start_ms >= spec.window_ms
        return (not breached and covered and reading.records_in >= spec.min_records), reading

    def describe(self, reading: ToleranceReading | None) -> str:
        if reading is None:
            return "no reading yet (the DLQ mode needs two samples)"
        if reading.outage is not None:
            return f"the job reported an {reading.outage.get('message') or 'outage'}"
        spec = self.spec
        limits = []
        if spec.max_error_rate is not None:
            limits.append(f"rate {reading.error_rate:.2%} vs max {spec.max_error_rate:.2%}")
        if spec.max_errors is not None:
            limits.append(f"errors {reading.errors} vs max {spec.max_errors}")
        return f"{', '.join(limits)}; {reading.records_in} records in the last {spec.window_ms // 1000} s"
