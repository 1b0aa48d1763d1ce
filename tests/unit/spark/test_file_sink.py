"""The JSON-lines sink: its lines hold the values ``json.dumps`` wrote, and a record it cannot encode fails its put.

A record put one by one is written as ``json.dumps`` writes it; a batch from built-in
converters is written by msgspec (:meth:`FileSink.put_columns`), whose lines parse to the
same values. No broker and no Spark: a real :class:`FileSink` writes real files in a
temporary directory.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_kerr.spark.sinks import FileSink, json_line_encoder
from airflow_kerr.spark.stages import PipelineRecord

#: What a value can hold after the json converter (NaN and infinities included: ``json.loads`` takes them),
#: with non-ASCII and control characters, and integers beyond 64 bits.
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_a_line_is_what_json_dumps_writes(value: Any) -> None:
    assert json_line_encoder()(value) == json.dumps(value, separators=(",", ":"))


def test_the_file_holds_one_dumps_line_per_record_in_order(tmp_path: Path) -> None:
    sink = FileSink(str(tmp_path), "jsonl", "part-0")
    records = [
        PipelineRecord(b"k-1", {"amount": 1.5, "note": "caf\u00e9"}, "orders", 0, 7, 1700000000000),
        PipelineRecord("k-2", {"amount": math.nan, "big": 2**70}, "orders", 0, 8, None),
        PipelineRecord(None, ["a", None], "orders", 1, 9, 1),
    ]
    for record in records:
        sink.put(record)
    sink.flush()
    expected = [
        json.dumps(
            {
                "key": r.key.decode() if isinstance(r.key, bytes) else r.key,
                "value": r.value,
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
            },
            separators=(",", ":"),
        )
        for r in records
    ]
    assert (tmp_path / "part-0.jsonl").read_text(encoding="utf-8") == "\n".join(expected) + "\n"


def test_a_value_json_cannot_encode_fails_its_own_put_and_spares_the_others(tmp_path: Path) -> None:
    sink = FileSink(str(tmp_path), "jsonl", "part-0")
    looped: dict[str, Any] = {}
    looped["self"] = looped
    sink.put(PipelineRecord("k-1", {"ok": 1}, "orders", 0, 1, None))
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        sink.put(PipelineRecord("k-2", {1, 2}, "orders", 0, 2, None))
    with pytest.raises(ValueError, match="Circular reference detected"):
        sink.put(PipelineRecord("k-3", looped, "orders", 0, 3, None))
    sink.put(PipelineRecord("k-4", {"ok": 4}, "orders", 0, 4, None))
    sink.flush()
    lines = (tmp_path / "part-0.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["offset"] for line in lines] == [1, 4]


#: A key as the built-in converters make it: text or null (``string``), or any JSON value (``json``).
KEYS = st.none() | st.text() | JSON_VALUES


def put_one_by_one_and_by_columns(tmp_path: Path, records: list[PipelineRecord]) -> tuple[list[str], list[str]]:
    """The file's lines when ``records`` are put one by one, and when they are put as one batch of columns."""
    single, batch = FileSink(str(tmp_path), "jsonl", "single"), FileSink(str(tmp_path), "jsonl", "batch")
    for record in records:
        single.put(record)
    keys, values = [r.key for r in records], [r.value for r in records]
    topics, partitions = [r.topic for r in records], [r.partition for r in records]
    offsets, timestamps = [r.offset for r in records], [r.timestamp for r in records]
    assert batch.put_columns(keys, values, topics, partitions, offsets, timestamps)
    single.flush()
    batch.flush()
    read = [(tmp_path / f"{name}.jsonl").read_bytes().decode("utf-8").splitlines() for name in ("single", "batch")]
    return read[0], read[1]


def same_values(line: str) -> str:
    """The values a JSON reader gets from ``line``, as comparable text (``NaN`` equals ``NaN`` here)."""
    return json.dumps(json.loads(line))


@given(st.lists(st.tuples(KEYS, JSON_VALUES, st.one_of(st.none(), st.integers(0, 2**62))), min_size=1, max_size=5))
def test_a_batch_of_lines_parses_to_the_values_of_the_lines_put_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[Any, Any, int | None]]
) -> None:
    records = [PipelineRecord(key, value, "orders", 1, 10 + i, stamp) for i, (key, value, stamp) in enumerate(rows)]
    single, batch = put_one_by_one_and_by_columns(tmp_path_factory.mktemp("lines"), records)
    assert len(batch) == len(records)
    assert list(map(same_values, batch)) == list(map(same_values, single))


def test_non_ascii_is_utf_8_and_a_non_finite_float_stays_what_json_dumps_writes(tmp_path: Path) -> None:
    records = [
        PipelineRecord("k-1", {"note": "caf\u00e9 \u2603", "gone": None}, "orders", 0, 1, 1),
        PipelineRecord("k-2", {"amount": math.nan, "cap": [math.inf, -math.inf]}, "orders", 0, 2, None),
        PipelineRecord(None, {"amount": 2.5, "memo": "a\u2028b"}, "orders", 0, 3, 3),
    ]
    single, batch = put_one_by_one_and_by_columns(tmp_path, records)
    assert batch[0] == '{"key":"k-1","value":{"note":"caf\u00e9 \u2603","gone":null},"topic":"orders",' + (
        '"partition":0,"offset":1,"timestamp":1}'
    )
    # Never null for NaN: the record holding one is written as json.dumps writes it, and read back as NaN.
    assert batch[1] == single[1]
    assert '"amount":NaN' in batch[1] and "[Infinity,-Infinity]" in batch[1]
    # U+2028 is escaped, as json.dumps escapes it: str.splitlines would break the line there.
    assert batch[2] == '{"key":null,"value":{"amount":2.5,"memo":"a\\u2028b"},"topic":"orders",' + (
        '"partition":0,"offset":3,"timestamp":3}'
    )


def test_a_batch_msgspec_refuses_is_not_written_so_its_records_can_be_put_one_by_one(tmp_path: Path) -> None:
    """A lone surrogate (``json.loads`` reads ``"\\ud800"``) cannot be UTF-8: the batch is refused, none written."""
    sink = FileSink(str(tmp_path), "jsonl", "part-0")
    assert sink.put_columns(["k-1", "k-2"], [{"ok": 1}, {"ok": 2}], ["t", "t"], [0, 0], [1, 2], [None, None])
    assert not sink.put_columns(["k-3", "k-4"], [{"ok": 3}, "\ud800"], ["t", "t"], [0, 0], [3, 4], [None, None])
    sink.put(PipelineRecord("k-3", {"ok": 3}, "t", 0, 3, None))
    sink.put(PipelineRecord("k-4", "\ud800", "t", 0, 4, None))
    sink.flush()
    lines = (tmp_path / "part-0.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["offset"] for line in lines] == [1, 2, 3, 4]
    assert json.loads(lines[3])["value"] == "\ud800"


def test_an_empty_batch_writes_no_file(tmp_path: Path) -> None:
    sink = FileSink(str(tmp_path), "jsonl", "part-0")
    assert sink.put_columns([], [], [], [], [], [])
    sink.flush()
    assert list(tmp_path.iterdir()) == []
