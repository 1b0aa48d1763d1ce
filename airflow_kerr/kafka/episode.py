"""A breach episode: from the pause to the resume, one key and one set of figures.

An alert about a breach (or, later, an outage) belongs to an *episode*: the span in which
the sink is paused because of it. Everything the on-call person is sent about it (the
alert, reminders, the "resolved" message) carries the same :func:`episode_key`, so a
notifier that deduplicates (a PagerDuty dedup key, a Slack thread) groups them, and the
"resolved" message quotes :func:`episode_figures`: how long it lasted, how many records
failed in it and the peak error rate, read from the job's metrics topic.

No Airflow here: the key and the figures are plain functions of names, times and records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_kerr.kafka.metrics_topic import read_metrics_records
from airflow_kerr.kafka.tolerance import ToleranceSpec, metrics_reading

#: What an episode is about. "breach": the error rate or count passed its limit (the tolerance guard);
#: "outage": the job saw failures that look like a dependency being down (issue #43, point 3).
EPISODE_KINDS = ("breach", "outage")
#: The messages of one episode, in the order they can be sent.
EPISODE_EVENTS = ("opened", "reminder", "resolved")


def episode_key(
    kind: str, pipeline: str | None, connectors: Sequence[str], dag_id: str | None, run_id: str | None
) -> str:
    """A stable key for one episode: the same for its alert, its reminders and its "resolved" message.

    One guard run handles one episode, so the run names it; the kind, pipeline and
    connectors are in it so two guards of one DAG run (two TaskGroups) never share a key.
    Readable prefix, then a short digest (PagerDuty takes up to 255 characters).
    """
    if kind not in EPISODE_KINDS:
        raise ValueError(f"episode kind={kind!r}; accepted: {', '.join(EPISODE_KINDS)}")
    names = ",".join(sorted(connectors))
    digest = hashlib.sha256(f"{kind}|{pipeline}|{names}|{dag_id}|{run_id}".encode()).hexdigest()[:16]
    return f"kerr-{kind}-{pipeline or 'pipeline'}-{digest}"


def episode_figures(
    kafka_config: Mapping[str, Any], spec: ToleranceSpec, started_ms: int, ended_ms: int
) -> dict[str, Any]:
    """The episode's figures from the metrics topic: duration, records in and failed, the peak windowed rate.

    ``records_failed`` counts each input once over the breach window before the episode
    and the episode itself (:func:`~airflow_kerr.kafka.tolerance.metrics_reading`). The peak is the
    highest rate of the spec's window ending at any task record of the episode, among
    windows holding at least ``min_records`` records (a tiny first task would read as 100 %).
    With ``source="dlq"`` only the duration is known; the other figures are None.
    """
    figures: dict[str, Any] = {
        "started_at_ms": started_ms,
        "ended_at_ms": ended_ms,
        "duration_s": round(max(0, ended_ms - started_ms) / 1000, 1),
        "records_in": None,
        "records_failed": None,
        "peak_error_rate": None,
        "peak_at_ms": None,
    }
    if spec.source != "metrics" or not spec.pipeline:
        return figures
    since_ms = started_ms - spec.window_ms
    records = read_metrics_records(
        kafka_config,
        spec.metrics_topic,
        since_ms,
        lambda r: (
            r.get("scope") == "task" and r.get("pipeline") == spec.pipeline and since_ms <= r.get("window_end_ms", 0)
        ),
    )
    whole = metrics_reading(records, since_ms, ended_ms)
    figures.update(records_in=whole.records_in, records_failed=whole.errors)
    peak: tuple[float, int] | None = None
    for end in sorted({int(r.get("window_end_ms", 0)) for r in records}):
        if end < started_ms - spec.window_ms or end > ended_ms:
            continue
        inside = [r for r in records if end - spec.window_ms <= int(r.get("window_end_ms", 0)) <= end]
        reading = metrics_reading(inside, end - spec.window_ms, end)
        if reading.records_in >= spec.min_records and (peak is None or reading.error_rate > peak[0]):
            peak = (reading.error_rate, end)
    if peak is not None:
        figures.update(peak_error_rate=peak[0], peak_at_ms=peak[1])
    return figures
