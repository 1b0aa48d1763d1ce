"""A run's own dead letters, against a real broker: recorded as delivered, then counted, shown and replayed exactly.

Two runs write dead letters into one DLQ at the same time, in turns, on both partitions,
through the job's own producer channel (:class:`~airflow_kerr.spark.sinks.ProducerChannel`).
The offsets run A's delivery reports name must select exactly A's records in the view's
count and samples and in a replay, with B's records between them left out: what the
Dead letters tab of a run relies on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from airflow_kerr.errors import ErrorContext, SourceRecord, Stage, TaskId, build_dead_letter_record
from airflow_kerr.inspection.samples import sample_dead_letters
from airflow_kerr.inspection.selection import Selection
from airflow_kerr.inspection.summary import summarize
from airflow_kerr.kafka.offset_spans import count_offsets, spans_text
from airflow_kerr.replay.engine import DlqReplay
from airflow_kerr.replay.options import ReplayOptions
from airflow_kerr.spark.sinks import ProducerChannel
from tests.clock import RECENT_MS

pytestmark = pytest.mark.timeout(300)

#: Bursts each run writes, in turns, and records per burst per partition.
BURSTS = 4
PER_BURST = 3


def _send(channel: ProducerChannel, dlq: str, source: str, run: str, error: type[Exception], n: int) -> None:
    """One burst: ``PER_BURST`` dead letters of ``run`` on each of the DLQ's two partitions, then flush."""
    for partition in (0, 1):
        for i in range(PER_BURST):
            record = SourceRecord(source, 0, n + i, RECENT_MS + n + i, key=b"k", value=b'{"id": 1}')
            context = ErrorContext(TaskId("orders_pipeline", 0), Stage.TRANSFORMATION, "x.v", error(run), record)
            letter = build_dead_letter_record(context, topic=dlq)
            letter.partition = partition
            channel.send_dead_letter(letter)
    channel.flush()


def test_a_runs_recorded_offsets_select_exactly_its_dead_letters(
    kafka_config: dict[str, Any], create_topic: Callable[..., str], unique_topic: str
) -> None:
    source, dlq = create_topic(unique_topic, 1), create_topic(f"{unique_topic}.dlq", 2)
    run_a, run_b = ProducerChannel(kafka_config), ProducerChannel(kafka_config)
    for burst in range(BURSTS):
        _send(run_a, dlq, source, "run-a", ValueError, burst * 100)
        _send(run_b, dlq, source, "run-b", KeyError, burst * 100 + 50)
    spans = run_a.dead_letter_spans.spans()
    expected = BURSTS * PER_BURST * 2
    assert count_offsets(spans) == expected
    assert all(len(spans[p]) == BURSTS for p in (0, 1)), f"run B's bursts split run A's offsets: {spans}"

    selection = Selection(dlq_offsets=spans)
    chunk = summarize(kafka_config, dlq, selection=selection, max_records=1_000, max_seconds=2.0)
    chunks = [chunk]
    while not chunks[-1].complete:
        assert len(chunks) < 50
        chunks.append(summarize(kafka_config, dlq, selection=selection, cursor=chunks[-1].cursor, max_seconds=2.0))
    assert sum(c.matched for c in chunks) == expected
    assert {k for c in chunks for k in c.counts["exception_class"]} == {"ValueError"}
    # Run B's records inside run A's span were read past, not counted: the read covers the span, not more.
    assert chunks[0].total == sum(spans[p][-1][1] - spans[p][0][0] for p in (0, 1)) < 2 * expected

    sample = sample_dead_letters(kafka_config, dlq, selection=selection, limit=100)
    assert len(sample.records) == expected
    assert {r.exception_message for r in sample.records} == {"run-a"}
    assert {(r.partition, r.offset) for r in sample.records} == {
        (p, o) for p, items in spans.items() for start, end in items for o in range(start, end)
    }

    replayed = DlqReplay(
        kafka_config,
        ReplayOptions.build(dlq_topic=dlq, dlq_offsets=spans_text(spans), dry_run=True, replay_group=f"{dlq}.a"),
        run_id="replay-run-a",
        idle_timeout_s=10,
    ).run()
    assert replayed.selected == expected and replayed.would_replay == expected, replayed.to_dict()
