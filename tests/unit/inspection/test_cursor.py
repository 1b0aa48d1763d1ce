"""The summary's cursor (what the page sends back to go on) and the timeline's bucket widths."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.inspection.cursor import BUCKET_WIDTHS_MS, MAX_BUCKETS, ScanCursor, choose_bucket_ms
from airflow_kerr.inspection.selection import InvalidSelection, Selection


def test_cursor_round_trips_and_is_url_safe() -> None:
    """The page passes the cursor back in a URL and the scan resumes exactly where it stopped."""
    selection = Selection(exception_classes=frozenset({"ValueError"}))
    cursor = ScanCursor("orders.dlq", selection.fingerprint(), 60_000, 1, 2, 100, 40, {0: (10, 50), 3: (0, 60)})
    text = cursor.encode()
    assert all(c.isalnum() or c in "-_" for c in text)
    assert ScanCursor.decode(text, "orders.dlq", selection) == cursor


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not-a-cursor", "not a summary cursor"),
        ("", "not a summary cursor"),
        (base64.urlsafe_b64encode(b'{"v": 1}').decode(), "not a summary cursor"),
        (base64.urlsafe_b64encode(b"[1, 2]").decode(), "not a summary cursor"),
    ],
)
def test_a_bad_cursor_is_refused_naming_cursor(text: str, why: str) -> None:
    """A cursor typed or cut short in a URL is refused with a message naming it, not a server error."""
    with pytest.raises(InvalidSelection, match=rf"^cursor=.*{why}; expected the cursor of the previous chunk"):
        ScanCursor.decode(text, "orders.dlq", Selection())


def test_a_cursor_for_another_topic_or_selection_is_refused() -> None:
    """Counts from two different scans are never added up by mistake."""
    cursor = ScanCursor("a.dlq", Selection().fingerprint(), 1_000, None, None, 5, 0, {0: (0, 5)}).encode()
    with pytest.raises(InvalidSelection, match=r"made for topic 'a\.dlq'"):
        ScanCursor.decode(cursor, "b.dlq", Selection())
    with pytest.raises(InvalidSelection, match="another selection"):
        ScanCursor.decode(cursor, "a.dlq", Selection(stages=frozenset({"TASK_PUT"})))


def test_cursor_with_next_past_end_is_refused() -> None:
    """A hand-edited cursor cannot make the scan read outside the range it fixed."""
    raw = json.dumps({"v": 1, "t": "a", "s": Selection().fingerprint(), "b": 1000, "o": None, "n": None, "T": 1,
                      "P": 0, "p": [[0, 9, 5]]})  # fmt: skip
    text = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    with pytest.raises(InvalidSelection):
        ScanCursor.decode(text, "a", Selection())


@pytest.mark.parametrize(
    ("span_ms", "width"),
    [(0, 1_000), (59_000, 1_000), (60_000, 10_000), (3_000_000, 60_000), (86_400_000, 3_600_000)],
)
def test_bucket_width_is_round(span_ms: int, width: int) -> None:
    """The timeline uses a round width (1 s, 10 s, 1 min ... 1 day) with about 60 bars at most."""
    assert choose_bucket_ms(1_795_250_000_000, 1_795_250_000_000 + span_ms) == width


@given(st.integers(0, 2**42), st.integers(0, 2**38))
def test_bucket_width_gives_at_most_60_buckets(oldest: int, span: int) -> None:
    """Any range of timestamps gives at most 60 bars, unless it is longer than 60 of the widest buckets."""
    width = choose_bucket_ms(oldest, oldest + span)
    assert width in BUCKET_WIDTHS_MS
    buckets = (oldest + span) // width - oldest // width + 1
    assert buckets <= MAX_BUCKETS or width == BUCKET_WIDTHS_MS[-1]
    smaller = [w for w in BUCKET_WIDTHS_MS if w < width]
    if smaller:
        assert (oldest + span) // smaller[-1] - oldest // smaller[-1] + 1 > MAX_BUCKETS
