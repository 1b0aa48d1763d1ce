"""The Avro column decoder (``airflow_kerr.spark.avro_columns``) against the per-record path, batch for batch.

Both paths run through :meth:`VectorizedStages.convert` over the same Arrow batch: once as
the job runs it (the column decoder, suspects through the per-record converter) and once
with the column decoder left out (every value through the per-record converter, the column
built from its dicts). The column, the rows kept, the DLQ records (stack traces included),
the metrics and the registry requests must be the same. The registry is the loopback
server of ``conftest.py``; the errors.* policy is the real one, its DLQ reporter's ``send``
an ``list.append`` (no broker) and its clock a counter (so ``last-error-timestamp`` compares).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import (
    DeadLetterQueueReporter,
    ErrorHandlingConfig,
    ErrorMetrics,
    RetryWithTolerance,
    Stage,
    TaskId,
)
from airflow_kerr.errors.dead_letter import DeadLetterQueueRecord
from airflow_kerr.formats import RegistryClient, RegistryDeserializer, RegistrySettings
from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.spark.avro_columns import column_plan
from airflow_kerr.spark.columns import BatchColumns
from airflow_kerr.spark.kafka_source import _arrow_schema
from airflow_kerr.spark.stages import BatchRunner, Converter, make_converter
from airflow_kerr.spark.vectorized import VectorizedStages
from tests.unit.formats.conftest import RegistryState, registry_server

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "customer", "type": "string"},
        {"name": "digest", "type": "bytes"},
        {"name": "amount", "type": "double"},
        {"name": "rate", "type": "float"},
        {"name": "paid", "type": "boolean"},
        {"name": "nothing", "type": "null"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SENT"]}},
        {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 3}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "count", "type": ["long", "null"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "line",
            "type": {"type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}]},
        },
        {"name": "again", "type": ["null", "Status"]},
    ],
}
#: The next version of the schema: one more field.
ORDER_V2 = {**ORDER, "fields": [*ORDER["fields"], {"name": "channel", "type": "string", "default": "web"}]}
UNKNOWN_ID = 424242
#: The ids the loopback registry gives ORDER and ORDER_V2 (it numbers schemas from 1).
FIRST, SECOND = 1, 2
STAGE = make_converter("avro", Stage.VALUE_CONVERTER, RegistrySettings.from_mapping({"url": "http://unused"})).stage


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, RegistryState]]:
    with registry_server() as (url, state):
        assert (state.add(json.dumps(ORDER)), state.add(json.dumps(ORDER_V2))) == (FIRST, SECOND)
        yield url, state


GOOD_ORDER = {
    "id": 7,
    "qty": -2,
    "customer": "ada",
    "digest": b"\x01",
    "amount": 12.5,
    "rate": 0.5,
    "paid": True,
    "nothing": None,
    "status": "PAID",
    "code": b"abc",
    "note": None,
    "count": 3,
    "at": 1_764_000_000_000,
    "line": {"sku": "s-1"},
    "again": None,
}


class Run:
    """One path's converter, policy and DLQ: a real RetryWithTolerance whose reporter appends to ``dead``."""

    def __init__(self, url: str, columns: bool) -> None:
        self.dead: list[DeadLetterQueueRecord] = []
        self.metrics = ErrorMetrics()
        self.now = 0.0
        config = ErrorHandlingConfig.from_properties(
            {
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": "orders.dlq",
                "errors.deadletterqueue.context.headers.enable": "true",
            }
        )
        reporter = DeadLetterQueueReporter(config, self.metrics, self.dead.append, group="g")
        retry = RetryWithTolerance(
            config, self.metrics, [reporter], task=TaskId("orders_pipeline", 0), stages=[STAGE], clock=self.tick
        )
        self.client = RegistryClient(RegistrySettings.from_mapping({"url": url}))
        deserializer = RegistryDeserializer("avro", self.client, is_key=False)
        deserializer.topic = "orders"
        deserializer(framed(FIRST, AvroCodec(ORDER).encode(GOOD_ORDER)))  # a task's earlier batch loaded ORDER
        converter = Converter(STAGE, deserializer, deserializer.fast)
        processor = SimpleNamespace(
            retry=retry,
            runner=BatchRunner(retry),
            key_converter=Converter(make_converter("bytes", Stage.KEY_CONVERTER).stage, None),
            value_converter=converter,
            transformations=[],
            sink=None,
        )
        self.stages = VectorizedStages(processor)
        if not columns:
            self.stages.avro_converters.clear()
        self.converter = converter

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def convert(self, batch: pa.RecordBatch) -> tuple[pa.Array, list[int]]:
        """The value column of ``batch`` as the job's vectorized stages convert it."""
        columns = BatchColumns(batch)
        rows = list(range(batch.num_rows))
        return self.stages.convert(self.converter, batch.column("value"), rows, columns)


def batch_of(values: Sequence[bytes | None]) -> pa.RecordBatch:
    count = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": [b"k%d" % row for row in range(count)],
            "value": values,
            "topic": ["orders"] * count,
            "partition": [0] * count,
            "offset": [1000 + 3 * row for row in range(count)],
            "timestamp": [1_764_000_000_000_000] * count,
            "timestamp_type": [0] * count,
            "headers": [[] for _ in range(count)],
        },
        schema=_arrow_schema(),
    )


def orders() -> st.SearchStrategy[dict[str, Any]]:
    text = st.text(max_size=6)
    return st.fixed_dictionaries(
        {
            "id": st.integers(-(2**63), 2**63 - 1),
            "qty": st.integers(-(2**31), 2**31 - 1),
            "customer": text,
            "digest": st.binary(max_size=5),
            "amount": st.floats(allow_nan=False),
            "rate": st.floats(width=32, allow_nan=False),
            "paid": st.booleans(),
            "nothing": st.none(),
            "status": st.sampled_from(["NEW", "PAID", "SENT"]),
            "code": st.binary(min_size=3, max_size=3),
            "note": st.none() | text,
            "count": st.none() | st.integers(-(2**63), 2**63 - 1),
            "at": st.integers(0, 2**45),
            "line": st.fixed_dictionaries({"sku": text}),
            "again": st.none() | st.sampled_from(["NEW", "SENT"]),
        }
    )


def framed(schema_id: int, body: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + body


@st.composite
def avro_values(draw: Any) -> bytes | None:
    """One value as a topic may hold it: mostly good ones, and each way a value can be bad or of another schema."""
    order = draw(orders())
    body = AvroCodec(ORDER).encode(order)
    # Another schema version and a tombstone are rare: each sends its whole batch the per-record way.
    kind = draw(st.sampled_from(["good"] * 10 + ["truncated"] * 3 + ["noise"] * 3 + ["json", "unknown", "short"]))
    kind = draw(st.sampled_from([kind] * 30 + ["v2", "tombstone"]))
    if kind == "good":
        return framed(FIRST, body)
    if kind == "truncated":
        return framed(FIRST, body[: draw(st.integers(0, len(body) - 1))])
    if kind == "json":
        return json.dumps(order, default=str).encode()
    if kind == "unknown":
        return framed(UNKNOWN_ID, body)
    if kind == "v2":
        return framed(SECOND, AvroCodec(ORDER_V2).encode({**order, "channel": draw(st.text(max_size=3))}))
    if kind == "tombstone":
        return None
    if kind == "short":
        return draw(st.sampled_from([b"", b"\x00", b"\x00\x00\x00\x00"]))
    # Noise: a byte of a good value changed, which may or may not still read (the per-record decoder decides).
    position = draw(st.integers(0, len(body) - 1))
    return framed(FIRST, body[:position] + bytes([draw(st.integers(0, 255))]) + body[position + 1 :])


def convert_both_ways(url: str, values: Sequence[bytes | None]) -> tuple[Run, Run, Any, Any]:
    """The same batch through the column decoder and through the per-record converter alone."""
    batch = batch_of(values)
    column_run, per_record_run = Run(url, columns=True), Run(url, columns=False)
    return column_run, per_record_run, column_run.convert(batch), per_record_run.convert(batch)


def assert_same(column_run: Run, per_record_run: Run, by_columns: Any, per_record: Any) -> None:
    (column, kept), (expected, expected_kept) = by_columns, per_record
    assert kept == expected_kept
    assert column.type == expected.type
    assert column.to_pylist() == expected.to_pylist()
    assert column.equals(expected)
    assert column_run.dead == per_record_run.dead  # headers, stack traces included, to the byte
    assert column_run.metrics == per_record_run.metrics
    assert column_run.client.requests == per_record_run.client.requests


def good(schema_id: int = FIRST, **changes: Any) -> bytes:
    return framed(schema_id, AvroCodec(ORDER).encode({**GOOD_ORDER, **changes}))


GOOD_BODY = AvroCodec(ORDER).encode(GOOD_ORDER)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(avro_values(), min_size=1, max_size=40))
# A body cut short between good ones: the values after it keep their own fields.
@example([good(id=1), framed(FIRST, GOOD_BODY[:-4]), good(id=3), framed(FIRST, GOOD_BODY[:6]), good(id=5)])
# Only bad values; a tombstone and another schema version among good ones.
@example([b"{}", framed(UNKNOWN_ID, GOOD_BODY), b"\x00"])
@example([good(id=1), None, framed(SECOND, AvroCodec(ORDER_V2).encode({**GOOD_ORDER, "channel": "app"})), good()])
def test_the_column_decoder_decodes_and_reports_as_the_per_record_path(
    served: tuple[str, RegistryState], values: list[bytes | None]
) -> None:
    assert_same(*convert_both_ways(served[0], values))


# Bodies cut short among good ones (the JSON fast path once shifted values between records this way): each
# cut value fails alone, the values after it keep their own fields.
@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(lambda body: body[:-4], id="last-4-bytes"),
        pytest.param(lambda body: body[:6], id="inside-a-string"),
        pytest.param(lambda body: body[:1], id="inside-the-first-varint"),
    ],
)
def test_a_truncated_body_inside_a_batch_fails_alone_and_shifts_nothing(
    served: tuple[str, RegistryState], cut: Any
) -> None:
    url, first = served[0], FIRST
    body = AvroCodec(ORDER).encode(GOOD_ORDER)
    values = [good(first, id=1), framed(first, cut(body)), good(first, id=3, customer="bob"), good(first, id=4)]

    column_run, per_record_run, by_columns, per_record = convert_both_ways(url, values)

    column, kept = by_columns
    assert kept == [0, 2, 3]
    assert [(order["id"], order["customer"]) for order in column.to_pylist()] == [(1, "ada"), (3, "bob"), (4, "ada")]
    assert len(column_run.dead) == 1
    assert_same(column_run, per_record_run, by_columns, per_record)


def test_a_string_length_reaching_into_the_next_value_is_an_eof_not_the_next_records_bytes(
    served: tuple[str, RegistryState],
) -> None:
    url, first = served[0], FIRST
    body = bytearray(AvroCodec(ORDER).encode(GOOD_ORDER))
    # id (1 byte), qty (1 byte), then the customer's length: 3 ("ada") made 60, past this value's end.
    assert body[2] == 6
    body[2] = 120
    values = [good(first, id=1), framed(first, bytes(body)), good(first, id=3)]

    column_run, per_record_run, by_columns, per_record = convert_both_ways(url, values)

    assert by_columns[1] == [0, 2]
    assert [order["id"] for order in by_columns[0].to_pylist()] == [1, 3]
    assert_same(column_run, per_record_run, by_columns, per_record)


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(lambda first, second: None, id="tombstone"),
        pytest.param(
            lambda first, second: framed(second, AvroCodec(ORDER_V2).encode({**GOOD_ORDER, "channel": "app"})),
            id="another-schema-version",
        ),
        pytest.param(
            lambda first, second: framed(first, b"\x80" * 9 + b"\x7f" + b"\x00" * 60), id="varint-past-64-bits"
        ),
    ],
)
def test_values_the_column_cannot_hold_alone_take_the_per_record_way(
    served: tuple[str, RegistryState], odd: Any
) -> None:
    url, first, second = served[0], FIRST, SECOND
    values = [good(first, id=1), odd(first, second), good(first, id=3)]

    assert_same(*convert_both_ways(url, values))


def test_invalid_utf8_in_a_string_fails_its_record_as_the_per_record_path_words_it(
    served: tuple[str, RegistryState],
) -> None:
    url, first = served[0], FIRST
    body = bytearray(AvroCodec(ORDER).encode(GOOD_ORDER))
    body[3:6] = b"a\xffa"  # inside "ada"
    values = [good(first, id=1), framed(first, bytes(body)), good(first, id=3)]

    column_run, per_record_run, by_columns, per_record = convert_both_ways(url, values)

    assert by_columns[1] == [0, 2] and len(column_run.dead) == 1
    assert_same(column_run, per_record_run, by_columns, per_record)


def test_a_clean_batch_is_read_by_the_column_plan_and_bad_values_by_the_converter(
    served: tuple[str, RegistryState],
) -> None:
    (url, state), first = served, FIRST
    values = [good(first, id=row, note=None if row % 2 else f"n{row}") for row in range(6)]
    values[4] = b'{"id": 4}'
    values[5] = framed(UNKNOWN_ID, b"")
    before = len(state.requests)

    column_run, per_record_run, by_columns, per_record = convert_both_ways(url, values)

    column, kept = by_columns
    assert kept == [0, 1, 2, 3]
    assert column.type == pa.struct(
        [
            ("id", pa.int64()),
            ("qty", pa.int64()),
            ("customer", pa.string()),
            ("digest", pa.binary()),
            ("amount", pa.float64()),
            ("rate", pa.float64()),
            ("paid", pa.bool_()),
            ("nothing", pa.null()),
            ("status", pa.string()),
            ("code", pa.binary()),
            ("note", pa.string()),
            ("count", pa.int64()),
            ("at", pa.int64()),
            ("line", pa.struct([("sku", pa.string())])),
            ("again", pa.null()),  # no value but nulls in this batch: what pyarrow infers from the dicts
        ]
    )
    assert [order["note"] for order in column.to_pylist()] == ["n0", None, "n2", None]
    # The plan was used: one column read, and the two bad values through the converter (one registry request
    # each path for the unknown id, none for the known schema once loaded).
    assert column_run.stages.avro_converters[Stage.VALUE_CONVERTER].plans
    assert [record.headers[-2][1] for record in column_run.dead] == [
        b"Failed to deserialize data for topic orders to Avro: "
    ] * 2
    assert sum(f"/schemas/ids/{UNKNOWN_ID}" in request for request in state.requests[before:]) == 2
    assert_same(column_run, per_record_run, by_columns, per_record)


def test_schemas_the_column_decoder_cannot_read_have_no_plan() -> None:
    header = framed(1, b"")
    record = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}
    assert column_plan(record, header) is not None
    for field_type in (
        {"type": "array", "items": "long"},
        {"type": "map", "values": "long"},
        ["long", "string"],
        ["null", {"type": "record", "name": "Inner", "fields": [{"name": "b", "type": "long"}]}],
        "R",  # recursive
    ):
        schema = {**record, "fields": [*record["fields"], {"name": "b", "type": field_type}]}
        assert column_plan(schema, header) is None, field_type
    assert column_plan("string", header) is None
