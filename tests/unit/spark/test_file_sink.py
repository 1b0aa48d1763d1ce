"""The JSON-lines sink writes what ``json.dumps`` wrote, record for record, and a record it cannot encode fails its put.

No broker and no Spark: a real :class:`FileSink` writes real files in a temporary directory.
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
