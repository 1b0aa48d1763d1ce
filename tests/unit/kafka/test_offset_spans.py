"""A run's dead letters by offset: recorded as delivered, joined across task attempts, read back and typed by people."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.kafka.metrics_topic import ATTEMPT, INTERIM, SEQ, run_dead_letters
from airflow_kerr.kafka.offset_spans import (
    DEAD_LETTER_OFFSETS,
    DEAD_LETTER_TOPIC,
    SpanRecorder,
    count_offsets,
    in_spans,
    merge_spans,
    parse_spans_text,
    spans_from_fields,
    spans_text,
    spans_to_fields,
)


def test_deliveries_in_a_row_are_one_span_and_another_writers_gap_splits_it() -> None:
    """A DLQ partition shared with another run: this run's offsets around the other's records stay apart."""
    recorder = SpanRecorder()
    for offset in (10, 11, 12, 15, 16):  # 13 and 14 were another run's
        recorder.add(0, offset)
    recorder.add(2, 7)
    assert recorder.spans() == {0: ((10, 13), (15, 17)), 2: ((7, 8),)}
    assert recorder.as_fields("orders.dlq") == {
        DEAD_LETTER_TOPIC: "orders.dlq",
        DEAD_LETTER_OFFSETS: {"0": [[10, 13], [15, 17]], "2": [[7, 8]]},
    }
    assert SpanRecorder().as_fields("orders.dlq") == {}, "a task that wrote no dead letter adds no field"


def test_a_late_delivery_out_of_order_still_lands_in_its_place() -> None:
    recorder = SpanRecorder()
    for offset in (5, 6, 3, 4, 9):
        recorder.add(1, offset)
    assert recorder.spans() == {1: ((3, 7), (9, 10))}


@given(st.sets(st.integers(0, 300), max_size=80))
def test_spans_hold_exactly_the_offsets_added(offsets: set[int]) -> None:
    recorder = SpanRecorder()
    for offset in sorted(offsets):
        recorder.add(0, offset)
    spans = recorder.spans().get(0, ())
    assert {o for o in range(-1, 302) if in_spans(spans, o)} == offsets
    assert count_offsets(recorder.spans()) == len(offsets)
    assert parse_spans_text(spans_text(recorder.spans())) == recorder.spans()
    assert spans_from_fields(spans_to_fields(recorder.spans())) == recorder.spans()


def test_merge_joins_touching_and_overlapping_spans() -> None:
    assert merge_spans({0: [(0, 5)]}, {0: [(5, 8), (20, 21)], 1: [(3, 3)]}) == {0: ((0, 8), (20, 21))}


def test_the_text_people_read_and_type() -> None:
    """The replay form shows and takes offsets as partition:first-last, the last offset included."""
    spans = {0: ((10, 20),), 3: ((5, 6), (8, 10))}
    assert spans_text(spans) == "0:10-19, 3:5, 3:8-9"
    assert parse_spans_text(" 3:8-9;0:10-19\n3:5 ") == spans
    assert parse_spans_text("") == {}


@pytest.mark.parametrize(
    ("text", "named"),
    [("0:10-x", "'0:10-x' is not partition:first-last"), ("1:9-3", "'1:9-3': the last offset is before the first")],
)
def test_text_that_is_not_offsets_is_refused_naming_the_item(text: str, named: str) -> None:
    with pytest.raises(ValueError, match="partition:first-last") as caught:
        parse_spans_text(text)
    assert named in str(caught.value)


@pytest.mark.parametrize("value", [[1], {"x": [[1, 2]]}, {"0": [[5, 2]]}, {"0": "1-2"}, {"-1": [[0, 1]]}])
def test_fields_of_another_shape_are_not_read(value: Any) -> None:
    assert spans_from_fields(value) is None


def _task(attempt: int, seq: int, offsets: dict[str, list[list[int]]], **extra: Any) -> dict[str, Any]:
    return {
        "scope": "task",
        "pipeline": "orders_pipeline",
        "run_id": "r1",
        ATTEMPT: attempt,
        SEQ: seq,
        DEAD_LETTER_TOPIC: "orders.dlq",
        DEAD_LETTER_OFFSETS: offsets,
        **extra,
    }


def test_a_run_is_every_attempts_latest_record_joined() -> None:
    """Interim records are cumulative (the latest wins); a failed attempt's dead letters are the run's too."""
    records = [
        _task(1, 0, {"0": [[0, 3]]}, **{INTERIM: True}),
        _task(1, 1, {"0": [[0, 5]]}, state="success"),
        _task(2, 0, {"1": [[7, 9]]}, state="failed"),
        {"scope": "run", "pipeline": "orders_pipeline", "run_id": "r1"},
    ]
    written = run_dead_letters(records)
    assert (written.topic, written.spans, written.attempts) == ("orders.dlq", {0: ((0, 5),), 1: ((7, 9),)}, 2)
    nothing = run_dead_letters([])
    assert (nothing.topic, nothing.spans, nothing.attempts) == (None, {}, 0)
