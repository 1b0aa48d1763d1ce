"""The one selection of dead letters: read from a page's query for the view, and checked the same way for the replay."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.errors import DeadLetterRecord, parse_dead_letter
from airflow_kerr.inspection.selection import NONE_KEY, InvalidSelection, Selection, epoch_ms, in_window, parse_time
from tests.unit.inspection.connect_records import connect_headers


def test_empty_query_selects_everything() -> None:
    """A page opened without filters shows every dead letter."""
    selection = Selection.from_query({"exception_class": "", "stage": None, "start": "  ", "cursor": "x"})
    assert selection == Selection()
    assert selection.everything and not selection.by_values
    letter = parse_dead_letter(connect_headers(), b"k", b"v")
    assert selection.matches(letter)
    assert set(selection.to_dict().values()) == {None}


def test_query_values_are_read_and_times_accept_epoch_ms_and_iso() -> None:
    """A user can type a time as epoch milliseconds or as an ISO time, and a stage in lower case."""
    selection = Selection.from_query(
        {
            "exception_class": " ValueError ",
            "stage": "transformation",
            "source_topic": "orders",
            "pipeline": "orders_pipeline",
            "start": "2026-11-23T10:00:00Z",
            "end_ms": "1795500000000",
        }
    )
    assert selection.exception_classes == {"ValueError"}
    assert selection.stages == {"TRANSFORMATION"}
    assert selection.source_topics == {"orders"} and selection.pipelines == {"orders_pipeline"}
    assert selection.start_ms == 1_795_428_000_000
    assert selection.end_ms == 1_795_500_000_000
    assert Selection.from_query({"start": "2026-11-23T10:00:00"}).start_ms == 1_795_428_000_000  # naive = UTC
    assert Selection.from_query({"start": "2026-11-23T11:00:00+01:00"}).start_ms == 1_795_428_000_000


def test_every_bad_value_is_named_with_what_is_accepted() -> None:
    """A wrong filter gets one line per mistake naming the key, the value given and what works."""
    with pytest.raises(InvalidSelection) as caught:
        Selection.from_query({"stage": "PUT", "start": "yesterday", "end": "-5"})
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("stage='PUT': expected one of KEY_CONVERTER")
    assert "TASK_PUT" in lines[0] and NONE_KEY in lines[0]
    assert lines[1].startswith("start='yesterday': expected epoch milliseconds")
    assert "ISO-8601" in lines[1]
    assert lines[2].startswith("end='-5': expected epoch milliseconds")
    assert [p.key for p in caught.value.problems] == ["stage", "start", "end"]


def test_start_must_come_before_end() -> None:
    """An empty time window is refused rather than silently showing nothing."""
    with pytest.raises(InvalidSelection, match=r"end='1000': expected a time after start \(2000 ms\)"):
        Selection.from_query({"start": "2000", "end": "1000"})


def test_selection_matches_fields_none_key_and_time_bounds() -> None:
    """Filtering by class, stage, topic, pipeline and a half-open time window picks exactly those records."""
    letter = dated(parse_dead_letter(connect_headers(KeyError("customer")), b"k", b"v"), 10)
    assert Selection(exception_classes=frozenset({"KeyError"}), stages=frozenset({"TRANSFORMATION"})).matches(letter)
    assert not Selection(exception_classes=frozenset({"ValueError"})).matches(letter)
    assert Selection(exception_classes=frozenset({"ValueError", "KeyError"})).matches(letter)  # any member
    assert Selection(source_topics=frozenset({"orders"}), pipelines=frozenset({"orders_pipeline"})).matches(letter)
    assert Selection(start_ms=10, end_ms=11).matches(letter)
    assert not Selection(start_ms=10, end_ms=11).matches(dated(letter, 11))
    assert not Selection(start_ms=10).matches(dated(letter, None))
    assert not Selection(start_ms=0).matches(dated(letter, -1))  # Kafka's "no timestamp"
    plain = dated(parse_dead_letter([("a", b"b")], b"k", b"v"), 1)
    assert Selection(exception_classes=frozenset({NONE_KEY}), stages=frozenset({NONE_KEY})).matches(plain)
    assert not Selection(exception_classes=frozenset({NONE_KEY})).matches(letter)


def test_the_replay_criteria_are_the_same_selection() -> None:
    """A pattern, offsets and headers narrow the same selection the view uses; the view's reads refuse headers."""
    letter = dated(parse_dead_letter(connect_headers(KeyError("customer")), b"k", b"v", offset=7), 10)
    assert Selection(exception_pattern=re.compile("Key")).matches(letter)
    assert not Selection(exception_pattern=re.compile("^Value")).matches(letter)
    assert Selection(start_offset=7, end_offset=8).matches(letter)
    assert not Selection(start_offset=8).matches(letter) and not Selection(end_offset=7).matches(letter)
    stage_header = {"__connect.errors.stage": "TRANSFORMATION"}
    assert Selection(headers=stage_header).matches(letter)
    assert not Selection(headers={"__connect.errors.stage": "TASK_PUT"}).matches(letter)
    assert not Selection(start_offset=1).everything and Selection(exception_pattern=re.compile("x")).by_values
    assert Selection(start_offset=5, end_offset=9).offset_window(0, 7) == (5, 7)
    assert Selection(start_offset=9).offset_window(0, 7) == (9, 9)  # empty, never inverted
    with pytest.raises(InvalidSelection, match=r"^headers=.*reads only the error headers") as caught:
        Selection(headers=stage_header).refuse_headers("the DLQ count")
    assert [p.key for p in caught.value.problems] == ["headers"]
    Selection(start_offset=1).refuse_headers("the DLQ count")  # nothing to refuse: returns


def test_the_fingerprint_changes_with_any_criterion() -> None:
    """A cursor made for one selection is refused for another, whichever criterion differs."""
    prints = {
        Selection().fingerprint(),
        Selection(exception_classes=frozenset({"KeyError"})).fingerprint(),
        Selection(exception_pattern=re.compile("KeyError")).fingerprint(),
        Selection(start_offset=3).fingerprint(),
        Selection(headers={"a": "b"}).fingerprint(),
    }
    assert len(prints) == 5
    assert (
        Selection(stages=frozenset({"A", "B"})).fingerprint() == Selection(stages=frozenset({"B", "A"})).fingerprint()
    )


def dated(letter: DeadLetterRecord, timestamp_ms: int | None) -> DeadLetterRecord:
    """The dead letter as if the DLQ had stamped it ``timestamp_ms``."""
    return dataclasses.replace(letter, timestamp=timestamp_ms)


# ------------------------------------------------------------------------------------------- shared time rules


def test_a_time_is_digits_or_iso_8601_and_naive_means_utc() -> None:
    """Both selections read a typed time the same way: epoch milliseconds, or an ISO time (UTC unless zoned)."""
    assert parse_time(" 1795428000000 ") == 1_795_428_000_000
    assert parse_time("2026-11-23T10:00:00Z") == parse_time("2026-11-23T10:00:00") == 1_795_428_000_000
    assert parse_time("2026-11-23T11:00:00+01:00") == 1_795_428_000_000
    assert parse_time("yesterday") is None and parse_time("-5") is None and parse_time("") is None


@given(st.datetimes(min_value=datetime(1970, 1, 1), timezones=st.just(UTC)))
def test_epoch_ms_is_exact(moment: datetime) -> None:
    """No float rounding: the milliseconds are the moment's, truncated, for any moment with microseconds."""
    expected = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)
    assert epoch_ms(moment) == expected
    assert epoch_ms(moment.replace(tzinfo=None)) == expected
    assert epoch_ms(moment.astimezone(timezone(timedelta(hours=5)))) == expected


def test_a_window_is_half_open_and_takes_no_undated_record_once_bounded() -> None:
    """``[start, end)``: the start is in, the end is out; a record without a timestamp is only in an open window."""
    assert in_window(None, None, None) and in_window(5, None, None)
    assert in_window(10, 10, 11) and not in_window(11, 10, 11)
    assert not in_window(None, 0, None) and not in_window(None, None, 1)
    assert in_window(0, None, 1) and not in_window(9, 10, None)


def test_a_runs_offsets_narrow_each_partition_to_what_it_wrote() -> None:
    """The run tab: each partition is read only across the run's own offsets, and nothing of an unlisted one."""
    selection = dataclasses.replace(Selection(), dlq_offsets={0: ((10, 13), (20, 22))})
    assert not selection.everything
    assert selection.offset_window(0, 100, 0) == (10, 22)
    assert selection.offset_window(15, 21, 0) == (15, 21)
    assert selection.offset_window(0, 100, 1) == (0, 0)
    assert [selection.matches_offset(o, 0) for o in (9, 10, 12, 13, 19, 21, 22)] == [
        False,
        True,
        True,
        False,
        False,
        True,
        False,
    ]
    assert not selection.matches_offset(10, 1)
    assert selection.to_dict()["dlq_offsets"] == {"0": [[10, 13], [20, 22]]}
    assert selection.fingerprint() != Selection().fingerprint()
