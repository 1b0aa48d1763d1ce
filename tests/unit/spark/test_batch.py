"""Batch transformations: bisection isolates each bad record, and the vectorized JSON codec matches the per-record one.

No broker and no Spark. The errors.* policy is the real one (:class:`RetryWithTolerance`
with a real :class:`DeadLetterQueueReporter`); only the reporter's ``send`` callback is
replaced, by ``list.append``, so the DLQ records it builds can be inspected instead of
being produced to Kafka.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import (
    DeadLetterQueueReporter,
    ErrorHandlingConfig,
    ErrorMetrics,
    PipelineStage,
    RetriableError,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
    ToleranceExceeded,
    parse_dead_letter,
)
from airflow_kerr.errors.dead_letter import DeadLetterQueueRecord
from airflow_kerr.spark.batch import BatchContractError, BatchStageRunner, as_arrow_function
from airflow_kerr.spark.column_converters import VectorizedJsonConverter, encode_json_column, parse_json_column
from airflow_kerr.spark.columns import BatchColumns
from airflow_kerr.spark.kafka_source import _arrow_schema
from airflow_kerr.spark.spec import InvalidPipelineSpec
from airflow_kerr.spark.stages import BatchRunner, batch_transformation, decode_json, make_converter
from airflow_kerr.spark.vectorized import uses_batch_transformations

TRANSFORM = PipelineStage(Stage.TRANSFORMATION, "tests.unit.spark.test_batch.transform")
#: The per-record job's JSON value converter: its stage, ``decode_json``, and msgspec in front of it.
JSON_CONVERTER = make_converter("json", Stage.VALUE_CONVERTER)
JSON_STAGE = JSON_CONVERTER.stage
FIRST_OFFSET = 1000
INEXACT_CLASS = "airflow_kerr.spark.column_converters.InexactJsonNumber"
OFFSET_STEP = 3


def offset_of(row: int) -> int:
    """Source offsets differ from row numbers, so a test can tell a row index from an offset."""
    return FIRST_OFFSET + OFFSET_STEP * row


def source_record(row: int) -> SourceRecord:
    return SourceRecord("orders", 0, offset_of(row), key=f"k{row}".encode(), value=f"v{row}".encode())


class Policy:
    """A real RetryWithTolerance whose DLQ reporter appends the records it builds to ``dead`` (no Kafka)."""

    def __init__(self, **properties: Any) -> None:
        self.dead: list[DeadLetterQueueRecord] = []
        self.sleeps: list[float] = []
        self.now = 0.0  # a clock in epoch ms that moves only with the backoff waits (and when a test moves it)
        self.metrics = ErrorMetrics()
        config = ErrorHandlingConfig.from_properties(
            {
                "errors.deadletterqueue.topic.name": "orders.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
                **properties,
            }
        )
        reporter = DeadLetterQueueReporter(config, self.metrics, self.dead.append, group="g")
        self.retry = RetryWithTolerance(
            config,
            self.metrics,
            [reporter],
            task=TaskId("orders_pipeline", 0),
            stages=[JSON_STAGE, TRANSFORM],
            clock=lambda: self.now,
            sleep=self.wait,
        )
        self.batch_runner = BatchStageRunner(self.retry)
        self.runner = BatchRunner(self.retry)

    def wait(self, delay_ms: float) -> None:
        self.sleeps.append(delay_ms)
        self.now += delay_ms

    def dead_offsets(self) -> list[int]:
        return [offset_of_dead_letter(record) for record in self.dead]


def offset_of_dead_letter(record: DeadLetterQueueRecord) -> int:
    offset = parse_dead_letter(record.headers, record.key, record.value).source_offset
    assert offset is not None
    return offset


def header(record: DeadLetterQueueRecord, name: str) -> str:
    values = [value for key, value in record.headers if key == name]
    assert len(values) == 1, (name, record.headers)
    value = values[0]
    assert isinstance(value, bytes)
    return value.decode()


def orders_batch(count: int) -> pa.RecordBatch:
    rows = range(count)
    return pa.RecordBatch.from_pydict(
        {
            "key": [f"k{row}" for row in rows],
            "value": [{"id": f"o-{row}", "amount": float(row + 1)} for row in rows],
            "offset": pa.array([offset_of(row) for row in rows], pa.int64()),
        }
    )


def failing_on(bad_offsets: set[int], calls: list[int]) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """A vectorized function that fails its whole call when any record in it is bad, and adds a column otherwise."""
    bad = pa.array(sorted(bad_offsets), pa.int64())

    def transform(batch: pa.RecordBatch) -> pa.RecordBatch:
        calls.append(batch.num_rows)
        flagged = pc.is_in(batch.column("offset"), value_set=bad)
        if pc.any(flagged).as_py():
            first = batch.column("offset")[pc.index(flagged, True).as_py()].as_py()
            raise ValueError(f"order at offset {first} is bad")
        doubled = pc.multiply(batch.column("offset"), 2)
        return batch.append_column("doubled", doubled)

    return transform


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bisection_reports_exactly_the_bad_records_and_keeps_every_good_one(data: st.DataObject) -> None:
    count = data.draw(st.integers(1, 300), label="rows")
    bad_rows = data.draw(st.sets(st.integers(0, count - 1), max_size=min(count, 12)), label="bad rows")
    policy = Policy(**{"errors.tolerance": "all"})
    calls: list[int] = []
    batch = orders_batch(count)
    rows = list(range(count))

    output, kept = policy.batch_runner.run(
        TRANSFORM, failing_on({offset_of(r) for r in bad_rows}, calls), batch, rows, source_record
    )

    good_rows = [row for row in rows if row not in bad_rows]
    assert policy.dead_offsets() == [offset_of(row) for row in sorted(bad_rows)]
    assert all(header(record, "__connect.errors.stage") == "TRANSFORMATION" for record in policy.dead)
    assert [header(r, "__connect.errors.exception.message") for r in policy.dead] == [
        f"order at offset {offset_of(row)} is bad" for row in sorted(bad_rows)
    ]
    assert [record.key for record in policy.dead] == [f"k{row}".encode() for row in sorted(bad_rows)]
    assert kept == good_rows
    assert output.column("offset").to_pylist() == [offset_of(row) for row in good_rows]
    if good_rows:  # with none left the stage never ran successfully: an empty batch of its input comes back
        assert output.column("doubled").to_pylist() == [2 * offset_of(row) for row in good_rows]
    assert output.num_rows == len(good_rows)
    assert output.column("value").to_pylist() == [{"id": f"o-{row}", "amount": float(row + 1)} for row in good_rows]
    assert policy.metrics.total_records_skipped == len(bad_rows)
    assert policy.metrics.total_record_failures == len(bad_rows)
    assert policy.metrics.total_retries == 0
    # Each bad record costs the calls on the path from the whole batch down to it: O(bad * log n), never O(n).
    depth = math.ceil(math.log2(count)) if count > 1 else 0
    assert len(calls) <= 1 + 2 * len(bad_rows) * depth, (count, sorted(bad_rows), len(calls))


def test_one_bad_record_among_many_costs_a_logarithmic_number_of_calls() -> None:
    """The regression this guards against: falling back to one call per record (256 calls here)."""
    policy = Policy(**{"errors.tolerance": "all"})
    calls: list[int] = []

    output, kept = policy.batch_runner.run(
        TRANSFORM, failing_on({offset_of(200)}, calls), orders_batch(256), list(range(256)), source_record
    )

    assert policy.dead_offsets() == [offset_of(200)]
    assert kept == [row for row in range(256) if row != 200] and output.num_rows == 255
    assert calls[0] == 256 and calls.count(1) == 2  # the bad record alone, and its neighbour in the last split
    assert len(calls) == 1 + 2 * 8


@pytest.mark.parametrize("count", [1, 5])
def test_a_batch_in_which_every_record_fails_sends_each_to_the_dlq(count: int) -> None:
    policy = Policy(**{"errors.tolerance": "all"})
    every = {offset_of(row) for row in range(count)}

    output, kept = policy.batch_runner.run(
        TRANSFORM, failing_on(every, []), orders_batch(count), list(range(count)), source_record
    )

    assert kept == [] and output.num_rows == 0
    assert policy.dead_offsets() == sorted(every)


def test_a_retriable_error_retries_the_one_record_call_with_connects_backoff() -> None:
    """Multi-record calls that fail are only bisected; the one-record call is the first attempt, then retried."""
    policy = Policy(**{"errors.tolerance": "all", "errors.retry.timeout": "5000"})
    flaky = offset_of(5)
    single_attempts: list[int] = []

    def lookup(batch: pa.RecordBatch) -> pa.RecordBatch:
        offsets = batch.column("offset").to_pylist()
        if flaky in offsets:
            if len(offsets) == 1:
                single_attempts.append(1)
                policy.now += 10  # each attempt takes 10 ms
            if len(single_attempts) < 3:
                raise RetriableError("customer lookup timed out")
        return batch

    output, kept = policy.batch_runner.run(TRANSFORM, lookup, orders_batch(8), list(range(8)), source_record)

    assert kept == list(range(8))
    assert output.column("offset").to_pylist() == [offset_of(row) for row in range(8)]
    assert len(single_attempts) == 3
    assert policy.sleeps == [300, 600]
    assert policy.metrics.total_retries == 2
    assert policy.metrics.total_record_failures == 2  # the one-record attempts that failed, not the bisected calls
    assert policy.metrics.total_records_skipped == 0
    assert policy.dead == []


def test_a_retriable_error_that_outlasts_the_timeout_goes_to_the_dlq() -> None:
    policy = Policy(**{"errors.tolerance": "all", "errors.retry.timeout": "1000"})

    def always_down(batch: pa.RecordBatch) -> pa.RecordBatch:
        if offset_of(2) in batch.column("offset").to_pylist():
            raise RetriableError("still down")
        return batch

    _, kept = policy.batch_runner.run(TRANSFORM, always_down, orders_batch(4), list(range(4)), source_record)

    assert kept == [0, 1, 3]
    assert policy.dead_offsets() == [offset_of(2)]
    assert policy.sleeps == [300, 600, 100]  # cut to the deadline 1000 ms after the one-record call started
    assert policy.metrics.total_retries == 3


def test_tolerance_none_fails_on_the_first_bad_record() -> None:
    policy = Policy()
    calls: list[int] = []
    bad = {offset_of(row) for row in (40, 7, 90)}

    with pytest.raises(ToleranceExceeded) as raised:
        policy.batch_runner.run(TRANSFORM, failing_on(bad, calls), orders_batch(100), list(range(100)), source_record)

    context = raised.value.context
    assert context is not None and context.record is not None and context.record.offset == offset_of(7)
    assert policy.dead_offsets() == [offset_of(7)]


def test_dropping_records_on_purpose_is_not_an_error() -> None:
    policy = Policy(**{"errors.tolerance": "all"})

    def only_even_amounts(batch: pa.RecordBatch) -> pa.RecordBatch:
        amounts = pc.struct_field(batch.column("value"), "amount")
        return batch.filter(pc.equal(pc.bit_wise_and(pc.cast(amounts, pa.int64()), 1), 0))

    fn = as_arrow_function(batch_transformation(only_even_amounts), "only_even_amounts")
    output, kept = policy.batch_runner.run(TRANSFORM, fn, orders_batch(10), list(range(10)), source_record)

    assert kept == [1, 3, 5, 7, 9]  # amount = row + 1
    assert output.column("offset").to_pylist() == [offset_of(row) for row in kept]
    assert policy.dead == [] and policy.metrics.total_record_failures == 0


def test_dropping_records_without_the_offset_column_fails_the_task_not_a_record() -> None:
    policy = Policy(**{"errors.tolerance": "all"})

    def drops_and_loses_offsets(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.drop_columns(["offset"]).slice(1)

    fn = as_arrow_function(batch_transformation(drops_and_loses_offsets), "drops_and_loses_offsets")
    with pytest.raises(BatchContractError, match="returned 3 rows for 4 without an 'offset' column"):
        policy.batch_runner.run(TRANSFORM, fn, orders_batch(4), list(range(4)), source_record)
    assert policy.dead == [] and policy.metrics.total_record_failures == 0


def test_the_same_row_count_without_an_offset_column_keeps_records_by_position() -> None:
    policy = Policy(**{"errors.tolerance": "all"})
    fn = as_arrow_function(batch_transformation(lambda batch: batch.drop_columns(["offset"])), "no_offsets")

    output, kept = policy.batch_runner.run(TRANSFORM, fn, orders_batch(4), [10, 11, 12, 13], source_record)

    assert kept == [10, 11, 12, 13] and output.column("key").to_pylist() == ["k0", "k1", "k2", "k3"]


def test_an_offset_that_was_not_in_the_input_fails_the_task() -> None:
    policy = Policy(**{"errors.tolerance": "all"})

    def invents_a_record(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.set_column(2, "offset", pc.add(batch.column("offset"), 1))

    fn = as_arrow_function(batch_transformation(invents_a_record), "invents_a_record")
    with pytest.raises(BatchContractError, match=f"returned offset {offset_of(0) + 1}, which was not in its input"):
        policy.batch_runner.run(TRANSFORM, fn, orders_batch(3), [0, 1, 2], source_record)
    assert policy.dead == []


@pytest.mark.parametrize("returned", [None, [1, 2], {"offset": [1000]}])
def test_returning_something_other_than_a_batch_fails_the_task(returned: Any) -> None:
    policy = Policy(**{"errors.tolerance": "all"})
    fn = as_arrow_function(batch_transformation(lambda batch: returned), "returns_junk")

    with pytest.raises(BatchContractError, match=r"returns_junk returned .*: expected a pyarrow RecordBatch or Table"):
        policy.batch_runner.run(TRANSFORM, fn, orders_batch(3), [0, 1, 2], source_record)
    assert policy.dead == []


def test_a_pandas_frame_is_a_contract_error_for_an_arrow_function_and_vice_versa() -> None:
    policy = Policy(**{"errors.tolerance": "all"})
    pandas_fn = batch_transformation(kind="pandas")(lambda frame: frame.to_dict())

    with pytest.raises(BatchContractError, match=r"kind='pandas'.* returned dict: expected a pandas DataFrame"):
        policy.batch_runner.run(TRANSFORM, as_arrow_function(pandas_fn, "p"), orders_batch(2), [0, 1], source_record)


def test_a_returned_table_is_taken_as_its_batch() -> None:
    policy = Policy(**{"errors.tolerance": "all"})
    fn = as_arrow_function(batch_transformation(lambda batch: pa.Table.from_batches([batch])), "as_table")

    output, kept = policy.batch_runner.run(TRANSFORM, fn, orders_batch(3), [0, 1, 2], source_record)

    assert kept == [0, 1, 2] and output.column("offset").to_pylist() == [offset_of(r) for r in range(3)]


@batch_transformation(kind="pandas")
def cents_of_paid_orders(frame: Any) -> Any:
    """A pandas batch transformation: value fields as ``value.<field>`` columns; fails on an order without an id."""
    if frame["value.id"].isna().any():
        raise ValueError("an order has no id")
    frame = frame[frame["value.amount"] > 0].copy()
    frame["value.cents"] = (frame["value.amount"] * 100).round().astype("int64")
    return frame


def test_a_pandas_transformation_sees_value_fields_and_its_output_value_is_a_struct_again() -> None:
    policy = Policy(**{"errors.tolerance": "all"})
    values = [
        {"id": "o-0", "amount": 1.25},
        {"id": None, "amount": 3.0},
        {"id": "o-2", "amount": -2.0},
        {"id": "o-3", "amount": 0.5},
    ]
    batch = pa.RecordBatch.from_pydict(
        {"key": ["a", "b", "c", "d"], "value": values, "offset": pa.array([offset_of(r) for r in range(4)], pa.int64())}
    )
    fn = as_arrow_function(cents_of_paid_orders, "cents_of_paid_orders")

    output, kept = policy.batch_runner.run(TRANSFORM, fn, batch, [0, 1, 2, 3], source_record)

    assert kept == [0, 3]  # row 1 failed (no id), row 2 was dropped on purpose (amount <= 0)
    assert pa.types.is_struct(output.schema.field("value").type)
    assert output.column("value").to_pylist() == [
        {"id": "o-0", "amount": 1.25, "cents": 125},
        {"id": "o-3", "amount": 0.5, "cents": 50},
    ]
    assert output.column("key").to_pylist() == ["a", "d"]
    assert policy.dead_offsets() == [offset_of(1)]
    assert header(policy.dead[0], "__connect.errors.exception.message") == "an order has no id"


# --- the vectorized JSON converter ------------------------------------------------------------------------------

MALFORMED = [
    b'{"id": "o-9", "amount": ',  # cut short, as the orders generator writes it
    b"{not json",
    b"[1, 2",
    b"",
    b"\xff\xfe binary",
    b'{"id": "a"}{"id": "b"}',  # two values in one record
    b'{"id": "a"}\n{"id": "b"}',  # two lines in one record: must not become two records
    b'{"id": "unterminated',
    b"nul\x00l",
]


def json_objects() -> st.SearchStrategy[dict[str, Any]]:
    """Orders whose fields keep one JSON type each (a field may be null or missing), as one topic's values do."""
    text = st.text(st.characters(codec="utf-8"), max_size=12)
    return st.fixed_dictionaries(
        {"id": text},
        optional={
            "amount": st.floats(allow_nan=False, allow_infinity=False, width=64) | st.none(),
            "count": st.integers(-(2**63), 2**63 - 1) | st.none(),
            "paid": st.booleans() | st.none(),
            "note": text | st.none(),
        },
    )


def json_value() -> st.SearchStrategy[tuple[str, Any]]:
    compact = json_objects().map(lambda value: ("good", json.dumps(value).encode()))
    pretty = json_objects().map(lambda value: ("good", json.dumps(value, indent=2, ensure_ascii=False).encode()))
    tombstone = st.just(("good", None))
    malformed = st.sampled_from(MALFORMED).map(lambda raw: ("malformed", raw))
    return st.one_of(compact, pretty, tombstone, malformed)


def as_struct_rows(values: list[Any]) -> list[Any]:
    """What a struct column gives back for JSON objects: every field in every row, a missing one as None."""
    names = [name for name in ("id", "amount", "count", "paid", "note") if any(name in v for v in values if v)]
    return [None if value is None else {name: value.get(name) for name in names} for value in values]


def convert_both_ways(raw: Sequence[bytes | None]) -> tuple[Policy, Policy, Any, list[int], list[Any], list[int]]:
    """The vectorized converter and the per-record one over the same values, each with its own policy and DLQ."""
    rows = list(range(len(raw)))
    vectorized, per_record = Policy(**{"errors.tolerance": "all"}), Policy(**{"errors.tolerance": "all"})
    converter = VectorizedJsonConverter(JSON_STAGE, vectorized.runner, vectorized.batch_runner)
    column, kept = converter.convert(pa.array(raw, pa.binary()), rows, source_record)
    expected, expected_rows = per_record.runner.run(
        JSON_STAGE, decode_json, raw, rows, source_record, fast=JSON_CONVERTER.fast
    )
    return vectorized, per_record, column, kept, expected, expected_rows


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(json_value(), min_size=1, max_size=60))
# Found by Hypothesis: a blank value and one holding two objects parsed to as many rows as values.
@example([("malformed", b""), ("malformed", b'{"id": "a"}{"id": "b"}'), ("good", b'{"id": ""}')])
def test_the_vectorized_json_converter_decodes_and_reports_as_the_per_record_one(
    values: list[tuple[str, bytes | None]],
) -> None:
    # A batch of nothing but malformed values is test_a_batch_of_only_malformed_values_....
    assume(any(kind == "good" for kind, _ in values))
    raw = [value for _, value in values]

    vectorized, per_record, column, kept, expected, expected_rows = convert_both_ways(raw)

    assert kept == expected_rows == [row for row, (kind, _) in enumerate(values) if kind == "good"]
    assert column.to_pylist() == as_struct_rows(expected)
    # The malformed values went through json.loads: same DLQ records, stack traces included, to the byte.
    assert vectorized.dead == per_record.dead
    assert vectorized.dead_offsets() == [offset_of(row) for row, (kind, _) in enumerate(values) if kind == "malformed"]
    assert vectorized.metrics.as_connect_metrics() == per_record.metrics.as_connect_metrics()


def test_a_malformed_value_fails_with_json_loads_own_exception() -> None:
    raw = [b'{"id": "o-1"}', b'{"id": "o-2", "amount": ', b'{"id": "o-3"}']

    vectorized, _, column, kept, _, _ = convert_both_ways(raw)

    with pytest.raises(json.JSONDecodeError) as raised:
        json.loads(raw[1])
    (record,) = vectorized.dead
    assert header(record, "__connect.errors.exception.class.name") == "json.decoder.JSONDecodeError"
    assert header(record, "__connect.errors.exception.message") == str(raised.value)
    assert header(record, "__connect.errors.class.name") == "airflow_kerr.spark.stages.JsonConverter"
    assert kept == [0, 2] and column.to_pylist() == [{"id": "o-1"}, {"id": "o-3"}]


def test_pretty_printed_values_and_tombstones_decode_one_per_record() -> None:
    values: list[Any] = [{"id": "a", "n": 1}, None, {"id": "b\nc", "n": 2}, None, {"id": "d", "n": None}]
    raw = [None if v is None else json.dumps(v, indent=4).encode() for v in values]

    assert parse_json_column(pa.array(raw, pa.binary())).to_pylist() == values
    assert parse_json_column(pa.array([None, None], pa.binary())).to_pylist() == [None, None]


@pytest.mark.parametrize(
    "smuggled",
    [b'{"id": "x"}\n{"id": "y"}', b'{"id": "x", "n": "\n{"r":1,"v":{"id":"forged"}}', b'{"id": '],
)
def test_a_value_that_spans_lines_never_shifts_values_between_records(smuggled: bytes) -> None:
    raw = pa.array([b'{"id": "a"}', smuggled, b'{"id": "c"}'], pa.binary())

    with pytest.raises(pa.ArrowInvalid):
        parse_json_column(raw)


def test_a_nan_value_in_a_batch_with_a_malformed_one_is_not_lost() -> None:
    raw = [b'{"id": "a", "amount": 1.5}', b'{"id": "b", "amount": NaN}', b'{"id": "c", "amount": ', b'{"id": "d"}']

    vectorized, _, column, kept, _, expected_rows = convert_both_ways(raw)

    assert vectorized.dead_offsets() == [offset_of(2)]
    assert kept == expected_rows == [0, 1, 3], "the NaN record reached neither the output nor the DLQ"
    assert math.isnan(column.to_pylist()[1]["amount"])


@pytest.mark.parametrize(
    "accepted_by_json_loads_only",
    [
        b'{"id": "b", "id": "b2"}',  # a duplicate key (json.loads keeps the last; msgspec accepts it too)
        pytest.param(b'{"id": "b", "amount": "\\ud800"}', id="lone-surrogate"),
        pytest.param(b'{"id": "b", "amount": 1e400}', id="1e400"),  # json.loads gives inf
        pytest.param('{"id": "b"}'.encode("utf-16"), id="utf-16-bom"),
    ],
)
def test_a_value_json_loads_accepts_but_pyarrow_rejects_fails_with_pyarrow_error(
    accepted_by_json_loads_only: bytes,
) -> None:
    raw = [b'{"id": "a", "amount": 1.5}', accepted_by_json_loads_only, b'{"id": "c", "amount": 2.5}']
    json.loads(accepted_by_json_loads_only)

    vectorized, _, column, kept, _, _ = convert_both_ways(raw)

    assert len(kept) + len(vectorized.dead) == 3, f"a record was lost: kept {kept}, nothing in the DLQ"
    (record,) = vectorized.dead
    assert offset_of_dead_letter(record) == offset_of(1)
    assert header(record, "__connect.errors.exception.class.name") == "pyarrow.lib.ArrowInvalid"
    assert header(record, "__connect.errors.stage") == "VALUE_CONVERTER"
    assert kept == [0, 2]
    assert column.to_pylist() == [{"id": "a", "amount": 1.5}, {"id": "c", "amount": 2.5}]


def test_nan_and_infinity_decode_as_json_loads_decodes_them() -> None:
    """The module docstring names NaN as a value only pyarrow rejects; this pyarrow parses it as json.loads does."""
    raw = [b'{"id": "a", "amount": NaN}', b'{"id": "b", "amount": Infinity}', b'{"id": "c", "amount": -Infinity}']

    vectorized, _, column, kept, _, _ = convert_both_ways(raw)

    decoded = column.to_pylist()
    assert vectorized.dead == [] and kept == [0, 1, 2]
    assert math.isnan(decoded[0]["amount"]) and decoded[1:] == [json.loads(raw[1]), json.loads(raw[2])]


@pytest.mark.parametrize(
    "raw, field",
    [
        # Beyond int64: pyarrow reads the whole field as doubles.
        ([b'{"id": "a", "n": 1}', b'{"id": "b", "n": 123456789012345678901234567890}'], "value.n"),
        # Within int64 but beyond 2**53, in a field that is a double because another record holds a fraction.
        ([b'{"id": "a", "n": 1.5}', b'{"id": "b", "n": 9007199254740993}'], "value.n"),
        # Nested in a list in a struct.
        ([b'{"id": "a", "o": {"xs": [0.5]}}', b'{"id": "b", "o": {"xs": [1, 18014398509481985]}}'], "value.o.xs[1]"),
    ],
)
def test_an_integer_its_column_cannot_hold_exactly_fails_on_its_own(raw: list[bytes], field: str) -> None:
    vectorized, per_record, column, kept, expected, _ = convert_both_ways(raw)

    assert per_record.dead == [] and expected[1] == json.loads(raw[1])  # json.loads keeps it exactly
    assert kept == [0] and column.to_pylist()[0]["id"] == "a"
    (record,) = vectorized.dead
    assert offset_of_dead_letter(record) == offset_of(1)
    assert header(record, "__connect.errors.exception.class.name") == INEXACT_CLASS
    assert header(record, "__connect.errors.stage") == "VALUE_CONVERTER"
    assert header(record, "__connect.errors.exception.message").startswith(f"{field} is the integer ")


def test_an_inexact_integer_beside_a_malformed_value_fails_on_its_own_too() -> None:
    """The batch is sieved first (a malformed value), and the parse of what is left is checked as well."""
    raw = [b'{"id": "a", "n": 0.5}', b'{"id": "b", "n": ', b'{"id": "c", "n": 123456789012345678901}', b'{"id": "d"}']

    vectorized, _, column, kept, _, _ = convert_both_ways(raw)

    assert kept == [0, 3] and [value["id"] for value in column.to_pylist()] == ["a", "d"]
    assert vectorized.dead_offsets() == [offset_of(1), offset_of(2)]
    exceptions = [header(record, "__connect.errors.exception.class.name") for record in vectorized.dead]
    assert exceptions == ["json.decoder.JSONDecodeError", INEXACT_CLASS]


def test_long_digit_runs_that_the_column_holds_exactly_are_kept() -> None:
    """A 16-digit run in a string, and a long integer in an int64 field, lose nothing: no record fails."""
    raw = [
        b'{"id": "1234567890123456789012", "n": 9007199254740993, "x": 0.5}',
        b'{"id": "b", "n": 2, "x": 1}',
    ]

    vectorized, _, column, kept, expected, _ = convert_both_ways(raw)

    assert vectorized.dead == [] and kept == [0, 1]
    assert column.to_pylist() == expected  # 1 == 1.0: the same value in a double field
    assert column.to_pylist()[0]["n"] == 9007199254740993


def test_a_batch_of_only_malformed_values_sends_each_to_the_dlq() -> None:
    raw = [b'{"id": "o-9", "amount": ', b"{not json"]

    vectorized, per_record, column, kept, _, _ = convert_both_ways(raw)

    assert kept == [] and len(column) == 0
    assert vectorized.dead == per_record.dead and vectorized.dead_offsets() == [offset_of(0), offset_of(1)]


def test_values_whose_types_clash_across_records_do_not_fail_the_task() -> None:
    raw = [b'{"id": "a", "amount": 1}', b'{"id": "b", "amount": "2"}']

    vectorized, per_record, _, kept, expected, _ = convert_both_ways(raw)

    assert per_record.dead == [] and expected == [{"id": "a", "amount": 1}, {"id": "b", "amount": "2"}]
    assert len(kept) + len(vectorized.dead) == 2


# --- encoding struct columns for the Kafka sink --------------------------------------------------------------------

FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    # DEL (\x7f) is test_del_is_escaped_....
    "text": st.text(st.characters(codec="utf-8", exclude_characters="\x7f"), max_size=10)
    | st.sampled_from(['"', "\\", '\\"', "a\"b\\c'", "\n\t\x00", "é", "€", "~", "/"]),
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(width=64) | st.sampled_from([0.1, 1e-4, 9.99e9, 1e10, 2.0, -0.0, 1e-5, 123.456]),
    "bool": st.booleans(),
    "null": st.none(),
}
ARROW_TYPES = {"text": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "null": pa.null()}


@st.composite
def flat_struct_rows(draw: st.DrawFn) -> tuple[pa.StructType, list[dict[str, Any] | None]]:
    names = draw(
        # At least one field: a struct without fields is test_an_empty_struct_....
        st.lists(st.text(st.characters(codec="utf-8"), max_size=6), unique=True, min_size=1, max_size=5)
        | st.just(["id", 'quo"te', "back\\slash", "ünï"])
    )
    kinds = [draw(st.sampled_from(sorted(FIELD_VALUES))) for _ in names]
    row = st.tuples(*(FIELD_VALUES[kind] | st.none() for kind in kinds)).map(
        lambda values: dict(zip(names, values, strict=True))  # the struct's field order, as json.dumps sees it
    )
    rows = draw(st.lists(row | st.none(), min_size=1, max_size=25))
    kind = pa.struct([pa.field(name, ARROW_TYPES[k]) for name, k in zip(names, kinds, strict=True)])
    return kind, rows


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(flat_struct_rows())
def test_a_struct_column_is_encoded_as_json_dumps_writes_each_value(
    drawn: tuple[pa.StructType, list[dict[str, Any] | None]],
) -> None:
    kind, rows = drawn
    column = pa.array(rows, kind)

    encoded = encode_json_column(column)

    assert encoded == [None if row is None else json.dumps(row, separators=(",", ":")).encode() for row in rows]


def test_an_empty_struct_is_encoded_as_an_empty_object() -> None:
    assert encode_json_column(pa.array([{}, {}], pa.struct([]))) == [b"{}", b"{}"]


def test_del_is_escaped_as_json_dumps_escapes_it() -> None:
    assert encode_json_column(pa.array([{"note": "a\x7fb"}])) == [b'{"note":"a\\u007fb"}']


def test_text_and_binary_columns_are_written_as_their_bytes() -> None:
    assert encode_json_column(pa.array(["a", None, "é"])) == [b"a", None, "é".encode()]
    assert encode_json_column(pa.array([b"\xff", None], pa.binary())) == [b"\xff", None]


def test_nested_values_are_encoded_as_json_dumps_writes_them() -> None:
    rows: list[Any] = [{"id": "a", "items": [1, 2], "meta": {"x": 1.0}}, None, {"id": "b", "items": [], "meta": None}]

    assert encode_json_column(pa.array(rows)) == [
        None if row is None else json.dumps(row, separators=(",", ":")).encode() for row in rows
    ]


# --- one pipeline, one kind of transformation --------------------------------------------------------------------


def per_record(record: Any) -> Any:
    return record


@batch_transformation
def vectorized(batch: Any) -> Any:
    return batch


def test_a_pipeline_mixing_batch_and_per_record_transformations_is_refused_naming_both() -> None:
    batch_stage = PipelineStage(Stage.TRANSFORMATION, "my.module.vectorized")
    record_stage = PipelineStage(Stage.TRANSFORMATION, "my.module.per_record")

    with pytest.raises(InvalidPipelineSpec) as raised:
        uses_batch_transformations([(batch_stage, vectorized), (record_stage, per_record)])

    message = str(raised.value)
    assert "my.module.vectorized" in message and "my.module.per_record" in message
    assert uses_batch_transformations([(batch_stage, vectorized), (batch_stage, vectorized)]) is True
    assert uses_batch_transformations([(record_stage, per_record)]) is False
    assert uses_batch_transformations([]) is False


def test_batch_transformation_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="kind='polars'"):
        batch_transformation(kind="polars")


def kafka_batch(values: list[bytes | None], first_offset: int) -> pa.RecordBatch:
    """Records as the ``kerr_kafka`` source hands them to a task: its schema, a header on every third record."""
    count = len(values)
    header = [("trace", b"t-%d" % (first_offset + row)) for row in range(count)]
    return pa.RecordBatch.from_pydict(
        {
            "key": [b"k%d" % (first_offset + row) for row in range(count)],
            "value": values,
            "topic": ["orders"] * count,
            "partition": [1] * count,
            "offset": [first_offset + row for row in range(count)],
            "timestamp": [1_700_000_000_000_000 + 1000 * (first_offset + row) for row in range(count)],
            "timestamp_type": [0] * count,
            "headers": [[header[row]] if row % 3 == 0 else [] for row in range(count)],
        },
        schema=_arrow_schema(),
    )


def good_values(count: int, first: int) -> list[bytes | None]:
    return [b'{"id": "o-%d", "amount": %d.5}' % (first + row, row) for row in range(count)]


def with_values(values: list[bytes | None], placed: dict[int, bytes | None]) -> list[bytes | None]:
    return [placed.get(row, value) for row, value in enumerate(values)]


#: Batches of one task, in order: each says what the sieve meets in it.
STREAM = [
    # Cut short, not JSON, a tombstone: the whole-batch parse fails, the shape sieve finds both bad values.
    with_values(good_values(48, 0), {5: b'{"id": "o-5", "amount": ', 20: b"{not json", 33: None}),
    # Sieved first now; an object with a trailing space is a suspect json.loads takes, so it stays.
    with_values(good_values(48, 48), {3: b'{"id": "o-51", "amount": ', 10: b'{"id": "o-58", "amount": 1.5} '}),
    # Two objects in one value look like one object: the rest fails to parse, the full sieve finds both, in order.
    with_values(good_values(48, 96), {7: b'{"id": "a"}{"id": "b"}', 30: b'{"id": "o-126", "amount": '}),
    # The shape sieve is given up for this task: the full sieve from the start.
    with_values(good_values(48, 144), {2: b'{"id": "o-146"'}),
]


def test_a_task_s_batches_are_sieved_as_the_per_record_converter_fails_their_values() -> None:
    """One converter over a task's batches, each value's fate, DLQ record and order as the per-record path's.

    The failed records' source records come from the batch's own columns, each from a take of
    the suspects' rows (a few per batch), and must equal what the whole columns give.
    """
    vectorized, per_record = Policy(**{"errors.tolerance": "all"}), Policy(**{"errors.tolerance": "all"})
    converter = VectorizedJsonConverter(JSON_STAGE, vectorized.runner, vectorized.batch_runner)
    first_offset = 0
    for values in STREAM:
        batch = kafka_batch(values, first_offset)
        columns, rows = BatchColumns(batch), list(range(len(values)))

        column, kept = converter.convert(batch.column("value"), rows, columns.source_record, columns)

        expected, expected_rows = per_record.runner.run(
            JSON_STAGE, decode_json, values, rows, BatchColumns(batch).source_record, fast=JSON_CONVERTER.fast
        )
        assert kept == expected_rows
        assert column.to_pylist() == as_struct_rows(expected)
        first_offset += len(values)
    assert [record.source for record in vectorized.dead] == [
        "orders/1/5", "orders/1/20", "orders/1/51", "orders/1/103", "orders/1/126", "orders/1/146",
    ]  # fmt: skip
    assert vectorized.dead == per_record.dead
    assert converter.sieve_first and not converter.shape_first


def test_the_source_records_of_a_few_rows_equal_those_of_the_whole_columns() -> None:
    batch = kafka_batch(good_values(64, 500), 500)
    rows = [0, 3, 31, 63]

    few = BatchColumns(batch).source_records_of(rows)

    assert [few(row) for row in rows] == [BatchColumns(batch).source_record(row) for row in rows]
