"""Converters over whole Arrow columns: JSON decode (one pyarrow parse per batch), string decode, JSON encode.

The JSON converter (:class:`VectorizedJsonConverter`) parses a batch's values in one
pyarrow call; when a batch holds malformed values, those values alone go through the
per-record converter, so their DLQ records equal the per-record path's to the byte. A
number a column cannot hold exactly fails on its own (:class:`InexactJsonNumber`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from itertools import compress
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from airflow_kerr.errors import PipelineStage, SourceRecord
from airflow_kerr.spark.batch import BatchStageRunner, positions_of
from airflow_kerr.spark.columns import BatchColumns
from airflow_kerr.spark.stages import (
    FAST_DECODE_JSON,
    FAST_DECODE_STRING,
    BatchRunner,
    decode_json,
    decode_string,
    map_past_failures,
)

__all__ = ["InexactJsonNumber", "VectorizedJsonConverter", "decode_string_column", "encode_json_column"]

# The JSON reader's unit of work: a batch is parsed as one block (a value never spans two blocks).
_MIN_BLOCK_BYTES: Final = 1 << 16
_NEWLINE: Final = ord("\n")
_OPEN_BRACE: Final = ord("{")
_CLOSE_BRACE: Final = ord("}")
#: The shape sieve gives way to the full sieve when more than one value in this many is not shaped like an object.
SHAPE_SIEVE_MAX_SHARE: Final = 8


class VectorizedJsonConverter:
    """The ``json`` converter over a whole batch: one pyarrow parse, malformed values isolated per record.

    Each value is parsed as ``{"r": <row>, "v": <value>}`` lines; the ``r`` column must
    come back as ``0..n-1``, so a truncated value that swallows the next line can never
    shift values between records. When the parse fails, every value is checked on its own
    with a fast parser (msgspec, when installed); those it rejects go through
    :class:`BatchRunner` with the per-record converter, whose exception, error context and
    DLQ record are therefore the per-record path's, and the rest is parsed again. The
    pieces of a split batch are held to the first piece's types, so a value only pyarrow
    rejects (a field whose type clashes with the batch's, a duplicate key, a number beyond
    a double) fails on its own with pyarrow's error, found by bisection.

    A column has one type, so a field that holds both integers and fractions is a double
    (``1`` reads as ``1.0``, equal in value), and so is a field with an integer beyond
    int64. A double holds an integer exactly only up to 2**53: a value with such an
    integer (one of 16 digits or more) in a double field would change silently, so it is
    checked against ``json.loads`` and, when its column cannot hold it exactly, fails on
    its own with :class:`InexactJsonNumber` (stage ``VALUE_CONVERTER``, the DLQ as for any
    bad value). A field some values lack is null in theirs (written as ``null`` when a
    transformation changed the value).
    """

    def __init__(self, stage: PipelineStage, runner: BatchRunner, batch_runner: BatchStageRunner) -> None:
        self.stage = stage
        self.runner = runner
        self.batch_runner = batch_runner
        self.check = _fast_json_check()
        self.check_or_null = partial(_unless_null, self.check)
        self.sieve_first = False
        #: Try :meth:`sieve_by_shape` before the full sieve; off once a batch's bad value was broken inside.
        self.shape_first = True

    def convert(
        self,
        raw: pa.Array,
        rows: list[int],
        source_record: Callable[[int], SourceRecord],
        columns: BatchColumns | None = None,
    ) -> tuple[pa.Array, list[int]]:
        """Decode ``raw`` (binary values of ``rows``); return the decoded column and the rows that decoded.

        After a batch that held a bad value the next one is sieved first: a stream with some
        bad records has them in most batches, and the whole-batch attempt would fail again.
        ``columns``, the batch's, builds the source records of a few failed values from
        their rows alone (:meth:`BatchColumns.source_records_of`).
        """
        if not self.sieve_first:
            try:
                column = parse_json_column(raw)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass  # some value is bad: sieve this batch
            else:
                return self.exact_only(column, raw, rows, source_record)
        if self.shape_first:
            shaped = self.sieve_by_shape(raw, rows, source_record, columns)
            if shaped is not None:
                return shaped
        values = raw.to_pylist()
        suspects = failing_items(self.check if raw.null_count == 0 else self.check_or_null, values)
        self.sieve_first = bool(suspects)
        if suspects:
            raw, rows = self.without_rejected(
                raw, rows, suspects, [values[i] for i in suspects], source_record, columns
            )
        return self.parse_sieved(raw, rows, source_record)

    def parse_sieved(
        self, raw: pa.Array, rows: list[int], source_record: Callable[[int], SourceRecord]
    ) -> tuple[pa.Array, list[int]]:
        """Parse what a sieve left, each value valid JSON: a value only pyarrow rejects fails alone, by bisection."""
        if not rows:
            return pa.nulls(0), []
        batch = pa.RecordBatch.from_arrays([raw], ["raw"])
        parsed_rows = rows
        decoded, rows = self.batch_runner.run(self.stage, SchemaLockedParse(), batch, rows, source_record)
        if len(rows) != len(parsed_rows):
            raw = raw.take(positions_of(parsed_rows, rows))
        return self.exact_only(decoded.column("value"), raw, rows, source_record)

    def sieve_by_shape(
        self,
        raw: pa.Array,
        rows: list[int],
        source_record: Callable[[int], SourceRecord],
        columns: BatchColumns | None,
    ) -> tuple[pa.Array, list[int]] | None:
        """The sieve's fast first try: only values not shaped like one JSON object go through the per-record converter.

        A bad value in a stream of objects is most often cut short or not JSON at all, so
        its first byte is not ``{`` or its last not ``}``: two byte reads per value, in
        numpy, where the full sieve checks every value with a parser (about 0.2 µs a value).
        The other values are parsed first, so nothing is reported when this gives way to the
        full sieve: it returns None when many values are not objects (this would send them
        all through ``json.loads``) or when the others fail to parse (a value broken inside;
        the task's later batches then go to the full sieve directly). Then the per-record
        converter decides on each suspect, in row order, as in the full sieve; one it accepts
        (an array, an object with a trailing space) is parsed with the rest once more.
        """
        suspects = _not_object_shaped(raw)
        if len(suspects) * SHAPE_SIEVE_MAX_SHARE > len(raw):
            return None
        others, other_rows = _without(raw, rows, suspects)
        try:
            column = parse_json_column(others) if other_rows else pa.nulls(0)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            self.shape_first = False
            return None
        self.sieve_first = bool(suspects)
        if suspects:
            picked = raw.take(pa.array(suspects, pa.int64())).to_pylist()
            accepted = self.accepted_suspects(rows, suspects, picked, source_record, columns)
            if accepted:  # a suspect the per-record converter took stays: parsed with the others once more
                raw, rows = _without(raw, rows, [i for i in suspects if rows[i] not in accepted])
                return self.parse_sieved(raw, rows, source_record)
        if not other_rows:
            return pa.nulls(0), []
        return self.exact_only(column, others, other_rows, source_record)

    def without_rejected(
        self,
        raw: pa.Array,
        rows: list[int],
        suspects: list[int],
        values: list[Any],
        source_record: Callable[[int], SourceRecord],
        columns: BatchColumns | None,
    ) -> tuple[pa.Array, list[int]]:
        """``raw`` and ``rows`` less the suspects (positions in ``raw``; ``values`` are theirs) that fail to convert."""
        accepted = self.accepted_suspects(rows, suspects, values, source_record, columns)
        return _without(raw, rows, [i for i in suspects if rows[i] not in accepted])

    def accepted_suspects(
        self,
        rows: list[int],
        suspects: list[int],
        values: list[Any],
        source_record: Callable[[int], SourceRecord],
        columns: BatchColumns | None,
    ) -> set[int]:
        """The rows of the suspects the per-record converter takes; the others fail (and are reported) as it fails them.

        Each suspect fails exactly as it would record by record; one Python accepts (NaN, a
        huge number) stays for pyarrow's parse.
        """
        suspect_rows = [rows[i] for i in suspects]
        source = source_record if columns is None else columns.source_records_of(suspect_rows)
        _, accepted = self.runner.run(self.stage, decode_json, values, suspect_rows, source, fast=FAST_DECODE_JSON)
        return set(accepted)

    def exact_only(
        self, column: pa.Array, raw: pa.Array, rows: list[int], source_record: Callable[[int], SourceRecord]
    ) -> tuple[pa.Array, list[int]]:
        """``column`` without the values it does not hold exactly; those fail with :class:`InexactJsonNumber`.

        Only a double field can lose an integer, and only one beyond 2**53, which it then reads
        as a double of at least that magnitude. So a batch whose doubles are all smaller costs
        one look at their largest; only the rest pay a regex pass over their bytes.
        """
        if not _holds_large_floats(column):
            return column, rows
        suspects = pc.indices_nonzero(pc.fill_null(pc.match_substring_regex(raw, _LONG_INTEGER), False))
        problems: dict[int, str] = {}
        for index in suspects.to_pylist():
            try:
                problem = _inexact(json.loads(raw[index].as_py()), column[index].as_py(), "value")
            except ValueError as error:  # pyarrow took a text json.loads refuses: not what the per-record path reads
                problem = f"json.loads refuses the value pyarrow read: {error}"
            if problem is not None:
                problems[index] = problem
        if not problems:
            return column, rows
        self.runner.run(
            self.stage, _refuse_inexact, list(problems.values()), [rows[i] for i in problems], source_record
        )
        keep = [i for i in range(len(rows)) if i not in problems]
        return column.take(pa.array(keep, pa.int64())), [rows[i] for i in keep]


class InexactJsonNumber(ValueError):
    """A JSON value holds a number its batch's Arrow column cannot hold exactly (an integer in a double field).

    The per-record path keeps such a number exactly (``json.loads``); a batch's column has
    one type, so the record fails rather than reach a transformation or the sink changed.
    """


def _refuse_inexact(problem: str) -> None:
    raise InexactJsonNumber(problem)


#: An integer a double may not hold exactly: 2**53 has 16 digits. A longer run of digits in a string matches too,
#: and is then found exact by :func:`_inexact`.
_LONG_INTEGER: Final = "[0-9]{16}"
#: Every integer up to this magnitude is a double exactly.
_EXACT_DOUBLE_INTEGERS: Final = 2.0**53


def _holds_large_floats(column: pa.Array) -> bool:
    """Whether a floating-point field anywhere in ``column`` (in structs and lists too) reaches 2**53 in magnitude."""
    kind = column.type
    if pa.types.is_floating(kind):
        largest = pc.max(pc.abs(column)).as_py()
        return largest is not None and not largest < _EXACT_DOUBLE_INTEGERS
    if pa.types.is_struct(kind):
        return any(_holds_large_floats(column.field(i)) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _holds_large_floats(column.flatten())
    return False


def _inexact(original: Any, decoded: Any, where: str) -> str | None:
    """Where ``decoded`` (the column's value) differs from ``original`` (``json.loads``'s), or None when it does not.

    ``1 == 1.0`` in Python, so an integer read as a double of the same value is exact; a
    field the record lacks is null in the column, which is not a difference.
    """
    if isinstance(original, dict) and isinstance(decoded, dict):
        for name, value in original.items():
            problem = _inexact(value, decoded.get(name), f"{where}.{name}")
            if problem is not None:
                return problem
        return None
    if isinstance(original, list) and isinstance(decoded, list) and len(original) == len(decoded):
        for index, (value, read) in enumerate(zip(original, decoded, strict=True)):
            problem = _inexact(value, read, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    if type(original) is int and not (type(decoded) in (int, float) and original == decoded):
        return (
            f"{where} is the integer {original}, which the batch's column (a double field) reads as {decoded!r}; "
            f"a double holds integers exactly up to 2**53 only. Decode it with the per-record json converter"
        )
    return None


class SchemaLockedParse:
    """Parses pieces of one batch to one type: the first piece's, so a value whose type clashes fails on its own.

    Without the lock each half of a split batch infers its own types, and a field that is
    a number in one half and text in the other could not be put back together.
    """

    def __init__(self) -> None:
        self.value_type: pa.DataType | None = None

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        value = parse_json_column(batch.column("raw"), self.value_type)
        if self.value_type is None:
            self.value_type = value.type
        return pa.RecordBatch.from_arrays([value], ["value"])


def parse_json_column(raw: pa.Array, value_type: pa.DataType | None = None) -> pa.Array:
    """Parse a binary column of JSON texts (null stays null) in one pyarrow call; raise on any bad value.

    ``value_type`` holds the values to a type (as ``explicit_schema``) instead of inferring one.
    """
    count = len(raw)
    if count == 0:
        return pa.nulls(0)
    objects = _parse_json_objects(raw, value_type)
    if objects is not None:
        return objects
    numbers = pa.array(range(count), pa.int64())
    prefixes = pc.binary_join_element_wise(
        pa.scalar(b'{"r":'), pc.cast(pc.cast(numbers, pa.string()), pa.binary()), pa.scalar(b',"v":'), b""
    )
    texts = pc.cast(raw, pa.binary()).fill_null(b"null")
    lines = pc.binary_join_element_wise(prefixes, texts, pa.scalar(b"}"), b"")
    schema = None if value_type is None else pa.schema([("r", pa.int64()), ("v", value_type)])
    table = _read_json_lines(_joined(lines), schema)
    if table.num_rows != count or not table.column("r").combine_chunks().equals(numbers):
        raise pa.ArrowInvalid(f"JSON values did not parse one per record: {table.num_rows} rows for {count} values")
    if "v" not in table.column_names:
        return pa.nulls(count)
    return table.column("v").combine_chunks()


def _parse_json_objects(raw: pa.Array, value_type: pa.DataType | None) -> pa.Array | None:
    """The common case in one parse of the values as they are, or None when only the wrapped parse can say.

    Wrapping each value as ``{"r": <row>, "v": <value>}`` guards against a truncated value
    swallowing the next line, and costs about as much as the parse itself. It is not needed
    when no value holds a newline and each starts with ``{``: a joined text with exactly
    ``n - 1`` newlines can only break where the values meet, so line ``i`` is value ``i``;
    no line is blank, so none gives no row, and ``n`` rows back means every line held one
    object. (A blank value beside one holding two objects, ``{..}{..}``, also gave ``n``
    rows, shifting values between records: Hypothesis found it.) Nulls, values that are not
    objects, and any parse failure are left to the wrapped parse, which names the failure.
    """
    count = len(raw)
    if raw.null_count or (value_type is not None and not pa.types.is_struct(value_type)):
        return None
    values = pc.cast(raw, pa.binary())
    if not pc.all(pc.starts_with(values, pattern="{")).as_py():
        return None
    text = _joined(values)
    if int(np.count_nonzero(np.frombuffer(text, np.uint8) == _NEWLINE)) != count - 1:
        return None
    schema = None if value_type is None else pa.schema(list(value_type))
    try:
        table = _read_json_lines(text, schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if table.num_rows != count or table.num_columns == 0:
        return None
    return pa.StructArray.from_arrays([column.combine_chunks() for column in table.columns], fields=list(table.schema))


def _joined(lines: pa.Array) -> pa.Buffer:
    """The values of a binary column as one newline-separated text, joined in Arrow."""
    whole = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)
    return pc.binary_join(whole, b"\n")[0].as_buffer()


def _read_json_lines(text: pa.Buffer, schema: pa.Schema | None) -> pa.Table:
    """One pyarrow JSON read of ``text`` as a single block, one thread (the task already has a core)."""
    options = pa_json.ReadOptions(use_threads=False, block_size=max(_MIN_BLOCK_BYTES, text.size + 1))
    parse = None if schema is None else pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
    return pa_json.read_json(pa.BufferReader(text), read_options=options, parse_options=parse)


def _without(raw: pa.Array, rows: list[int], positions: list[int]) -> tuple[pa.Array, list[int]]:
    """``raw`` and ``rows`` less the given positions (ascending), with a mask rather than a Python step per row."""
    if not positions:
        return raw, rows
    keep = np.ones(len(rows), bool)
    keep[positions] = False
    return raw.filter(pa.array(keep)), list(compress(rows, keep.tolist()))


def _not_object_shaped(raw: pa.Array) -> list[int]:
    """Positions of the non-null values whose first byte is not ``{`` or whose last is not ``}`` (empty ones too)."""
    values = pc.cast(raw, pa.binary()) if not pa.types.is_binary(raw.type) else raw
    count = len(values)
    if count == 0:
        return []
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32, count + 1, values.offset * 4)
    starts, ends = offsets[:-1], offsets[1:]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    empty = starts >= ends
    if data.size == 0:
        shaped = np.zeros(count, bool)
    else:
        first = data[np.minimum(starts, data.size - 1)]
        last = data[np.clip(ends - 1, 0, data.size - 1)]
        shaped = ~empty & (first == _OPEN_BRACE) & (last == _CLOSE_BRACE)
    if values.null_count:
        shaped |= ~np.asarray(values.is_valid())
    return np.flatnonzero(~shaped).tolist()


def failing_items(check: Callable[[Any], Any], items: list[Any]) -> list[int]:
    """Indices of the items ``check`` raises for; clean runs are checked in one C-level ``map`` loop."""
    failing: list[int] = []
    map_past_failures(check, items, lambda index, _error: failing.append(index))
    return failing


def _unless_null(check: Callable[[Any], Any], raw: Any) -> Any:
    """A null value is a null record, never a failure."""
    return None if raw is None else check(raw)


def _fast_json_check() -> Callable[[Any], Any]:
    """A check that raises for a value that is not one JSON document, about 20x faster than ``json.loads``.

    msgspec's decoder into ``msgspec.Raw`` validates the whole text (syntax, escapes,
    UTF-8, trailing data) without building a Python object, which costs three times as
    much and is not needed here: pyarrow builds the values. Without msgspec (a bare Spark
    executor) the per-record decoder checks.
    """
    try:
        import msgspec
    except ImportError:  # pragma: no cover - msgspec comes with Airflow; a bare Spark executor may lack it
        return decode_json
    decode: Callable[[Any], Any] = msgspec.json.Decoder(msgspec.Raw).decode
    return decode


def decode_string_column(
    raw: pa.Array,
    rows: list[int],
    stage: PipelineStage,
    runner: BatchRunner,
    source_record: Callable[[int], SourceRecord],
) -> tuple[pa.Array, list[int]]:
    """UTF-8 text in one cast; when some value is not UTF-8, the per-record converter finds and reports it."""
    try:
        return pc.cast(raw, pa.string()), rows
    except pa.ArrowInvalid:
        texts, kept = runner.run(stage, decode_string, raw.to_pylist(), rows, source_record, fast=FAST_DECODE_STRING)
        return pa.array(texts, pa.string()), kept


def encode_json_column(column: pa.Array) -> list[bytes | None]:
    """Each value as compact JSON bytes, as the per-record sink writes it (``json.dumps``, no spaces).

    Flat structs of text, numbers and booleans are encoded with Arrow string kernels; any
    other shape (nested values, text with control characters, NaN) falls back to
    ``json.dumps`` per value.
    """
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if text is None else text.encode("utf-8") for text in column.to_pylist()]
    encoded = _encode_flat_struct(column) if pa.types.is_struct(column.type) else None
    if encoded is not None:
        return encoded
    return [None if value is None else _dumps(value) for value in column.to_pylist()]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _encode_flat_struct(column: pa.StructArray) -> list[bytes | None] | None:
    parts: list[Any] = []
    for index, field in enumerate(column.type):
        text = _encode_scalar_column(pc.struct_field(column, [index]), field.type)
        if text is None:
            return None
        parts.extend([pa.scalar(("," if index else "{") + json.dumps(field.name) + ":"), text])
    if not parts:
        return [None if empty is None else b"{}" for empty in column.to_pylist()]
    parts.append(pa.scalar("}"))
    rows = pc.binary_join_element_wise(*parts, "")
    if column.null_count:
        rows = pc.if_else(column.is_valid(), rows, pa.scalar(None, pa.string()))
    return [None if text is None else text.encode("utf-8") for text in rows.to_pylist()]


def _encode_scalar_column(values: pa.Array, kind: pa.DataType) -> pa.Array | None:
    """JSON text of one primitive column (null as ``null``), or None when only ``json.dumps`` can say it."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if pc.any(pc.match_substring_regex(values, r"[\x00-\x1f]|[^\x00-\x7e]")).as_py():
            return None  # json.dumps escapes control and non-ASCII characters
        escaped = pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')
        text = pc.binary_join_element_wise(pa.scalar('"'), escaped, pa.scalar('"'), "")
    elif pa.types.is_boolean(kind) or pa.types.is_integer(kind):
        text = pc.cast(values, pa.string())
    elif pa.types.is_floating(kind):
        # Arrow and Python spell a float alike only for fractional magnitudes in [1e-4, 1e10):
        # outside it Arrow switches to exponents at other points, and Python writes 2.0 where Arrow writes 2.
        magnitude = pc.abs(values)
        same_spelling = pc.and_(
            pc.and_(pc.greater_equal(magnitude, 1e-4), pc.less(magnitude, 1e10)), pc.not_equal(values, pc.floor(values))
        )
        if not pc.all(same_spelling).as_py():
            return None
        text = pc.cast(values, pa.string())
    elif pa.types.is_null(kind):
        text = pa.array(["null"] * len(values), pa.string())
    else:
        return None
    return pc.fill_null(text, "null")
