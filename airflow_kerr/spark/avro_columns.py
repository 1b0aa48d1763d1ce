"""Avro values of a whole batch decoded into an Arrow column with numpy, field by field across all records.

The per-record decoder (:class:`~airflow_kerr.formats.avro_codec.AvroCodec`) reads one
value at a time in Python, 2.5 µs for a 7-field order, and the column was then built from
the values' dicts (another µs). Here every record of a batch is read at once: one cursor
per record, and each field of the schema, in order, is one numpy step over all cursors (a
varint is one gather while its bytes have the high bit; a string is its length, its bytes
gathered once at the end). About 0.2 µs a record.

It only sorts values: a value whose bytes do not read as its schema says (not framed,
another schema id, cut short, a bad boolean, union branch, enum index or varint, invalid
UTF-8) is a suspect, and suspects go through the per-record converter, whose outcome,
texts and DLQ record are the record's. One bad datum thus fails its record only, and no
bytes of one record are read as another's: each cursor stops at its own value's end.

The column equals what the per-record path builds from the decoded dicts
(``pyarrow.array``): ``long``/``int`` are ``int64``, ``float``/``double`` ``double``,
``string``/``enum`` ``string``, ``bytes``/``fixed`` ``binary``, a record a struct, a union of
``null`` and one type that type with nulls (``null`` when the batch holds no other). Schemas
with an array, a map, a union of two types or of a record, or a recursive type have no plan
here and keep the per-record decoder.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, Final

import numpy as np
import pyarrow as pa

from airflow_kerr.errors import PipelineStage
from airflow_kerr.formats import RegistryDeserializer
from airflow_kerr.formats.avro_codec import AvroCodec
from airflow_kerr.spark.columns import BatchColumns
from airflow_kerr.spark.stages import BatchRunner, Converter

LOG = logging.getLogger("airflow_kerr.spark.avro_columns")
#: Bytes past the last value, so a cursor at a value's end may read a varint's or a double's width without a check.
_PADDING: Final = 16
_U64: Final = np.uint64
_LEAF_TYPES: Final = {
    "long": pa.int64(),
    "int": pa.int64(),
    "double": pa.float64(),
    "float": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "null": pa.null(),
}


class Unsupported(Exception):
    """The schema (or this batch) has no column plan: the per-record decoder decodes it."""


@dataclass
class _Cursor:
    """One read position per record over the batch's value bytes; ``bad`` marks the records that did not read."""

    data: np.ndarray
    pos: np.ndarray
    end: np.ndarray
    bad: np.ndarray

    def at(self, rows: Any) -> np.ndarray:
        """The cursors of ``rows`` as they are now (a copy: they move on)."""
        return self.pos[rows].copy() if isinstance(rows, slice) else self.pos[rows]

    def settle(self, rows: Any) -> None:
        """Flag the records of ``rows`` read past their value's end, and hold their cursor there."""
        pos, end = self.pos[rows], self.end[rows]
        over = pos > end
        if over.any():
            self.bad[rows] |= over
            self.pos[rows] = np.minimum(pos, end)

    def varint(self, rows: Any) -> np.ndarray:
        """A zigzag varint at each cursor of ``rows`` (as ``_read_long``: at most 10 bytes, else the record is bad)."""
        data = self.data
        start = self.at(rows)
        byte = data[start]
        number = (byte & 0x7F).astype(_U64)
        used = np.ones(len(start), np.int64)
        more = np.flatnonzero(byte >= 0x80)
        for extra in range(1, 10):
            if not more.size:
                break
            byte = data[start[more] + extra]
            number[more] |= (byte & 0x7F).astype(_U64) << _U64(7 * extra)
            used[more] += 1
            if extra == 9:  # the 10th byte: a continuation bit or bits past 64 are not a long
                wide = more[byte > 1]
                if wide.size:
                    bad = np.zeros(len(start), bool)
                    bad[wide] = True
                    self.bad[rows] |= bad
            more = more[byte >= 0x80]
        self.pos[rows] = start + used
        self.settle(rows)
        return ((number >> _U64(1)) ^ (_U64(0) - (number & _U64(1)))).view(np.int64)

    def fixed(self, rows: Any, width: int) -> np.ndarray:
        """The cursors of ``rows``, each then moved ``width`` bytes on (past its end: the record is bad)."""
        start = self.at(rows)
        self.pos[rows] = start + width
        self.settle(rows)
        return start

    def gather(self, start: np.ndarray, width: int) -> np.ndarray:
        """``width`` bytes at each start, one row of a 2-D array each."""
        return self.data[start[:, None] + np.arange(width)]

    def sized(self, rows: Any) -> tuple[np.ndarray, np.ndarray]:
        """A length then as many bytes (a string, bytes): their start and length; a negative or long one is bad."""
        size = self.varint(rows)
        start = self.at(rows)
        room = self.end[rows] - start
        wrong = (size < 0) | (size > room)
        if wrong.any():
            self.bad[rows] |= wrong
            size = np.where(wrong, 0, size)
        self.pos[rows] = start + size
        return start, size


class _Node:
    """One schema type's reader over the cursors and the builder of its column from what was read."""

    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        raise NotImplementedError

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        raise NotImplementedError


def _full(count: int, rows: Any, values: np.ndarray, dtype: Any) -> np.ndarray:
    """``values`` of ``rows`` spread over an array of every record (zeros elsewhere)."""
    if isinstance(rows, slice):
        return values
    out = np.zeros(count, dtype)
    out[rows] = values
    return out


def _mask(valid: np.ndarray | None, good: np.ndarray) -> Any:
    """pyarrow's ``mask`` (True where null) for the good records, or None when every one is valid."""
    if valid is None:
        return None
    chosen = valid[good]
    return None if chosen.all() else ~chosen


class _Long(_Node):
    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        return _full(count, rows, cursor.varint(rows), np.int64)

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        return pa.array(read[good], pa.int64(), mask=_mask(valid, good))


class _Real(_Node):
    def __init__(self, width: int) -> None:
        self.width = width
        self.dtype = np.dtype("<f8" if width == 8 else "<f4")

    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        return _full(count, rows, cursor.fixed(rows, self.width), np.int64)

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        values = cursor.gather(read[good], self.width).view(self.dtype).reshape(-1).astype(np.float64)
        return pa.array(values, pa.float64(), mask=_mask(valid, good))


class _Boolean(_Node):
    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        start = cursor.at(rows)
        byte = cursor.data[start]
        wrong = byte > 1
        if wrong.any():
            cursor.bad[rows] |= wrong
        cursor.pos[rows] = start + 1
        cursor.settle(rows)
        return _full(count, rows, byte == 1, bool)

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        return pa.array(read[good], pa.bool_(), mask=_mask(valid, good))


class _Null(_Node):
    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        return None

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        return pa.nulls(int(good.sum()))


class _Sized(_Node):
    """``string``, ``bytes`` and ``fixed``: where each value's bytes are, gathered into one buffer at the end."""

    def __init__(self, kind: pa.DataType, size: int | None = None) -> None:
        self.kind = kind
        self.size = size

    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        if self.size is None:
            start, size = cursor.sized(rows)
        else:
            start = cursor.fixed(rows, self.size)
            size = np.full(len(start), self.size, np.int64)
        return _full(count, rows, start, np.int64), _full(count, rows, size, np.int64)

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        start, size = read[0][good], read[1][good]
        if valid is not None:
            size = np.where(valid[good], size, 0)
        offsets = np.zeros(len(size) + 1, np.int64)
        np.cumsum(size, out=offsets[1:])
        total = int(offsets[-1])
        if total >= 2**31:
            raise Unsupported("over 2 GiB of text in one batch")
        picks = np.repeat(start - offsets[:-1], size) + np.arange(total, dtype=np.int64)
        data = cursor.data[picks]
        mask = _mask(valid, good)
        validity = None if mask is None else pa.array(~mask).buffers()[1]
        column = pa.Array.from_buffers(
            self.kind,
            len(size),
            [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
            null_count=0 if mask is None else int(mask.sum()),
        )
        if self.kind == pa.string():
            try:
                column.validate(full=True)  # UTF-8, as str(..., "utf-8") checks it
            except pa.ArrowInvalid as error:
                raise Unsupported(f"a value holds invalid UTF-8: {error}") from None
        return column


class _Enum(_Node):
    def __init__(self, symbols: list[str]) -> None:
        self.symbols = pa.array(symbols, pa.string())

    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        index = cursor.varint(rows)
        wrong = (index < 0) | (index >= len(self.symbols))
        if wrong.any():
            cursor.bad[rows] |= wrong
            index = np.where(wrong, 0, index)
        return _full(count, rows, index, np.int64)

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        return self.symbols.take(pa.array(read[good], pa.int64(), mask=_mask(valid, good)))


class _Union(_Node):
    """A union of ``null`` (any number of times) and at most one other leaf type: that type with nulls."""

    def __init__(self, branches: list[_Node]) -> None:
        self.branches = branches
        self.value_branch = next((i for i, node in enumerate(branches) if not isinstance(node, _Null)), None)

    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        branch = cursor.varint(rows)
        wrong = (branch < 0) | (branch >= len(self.branches))
        if wrong.any():
            cursor.bad[rows] |= wrong
        value_branch = self.value_branch
        if value_branch is None:
            return None, None
        chosen = _full(count, rows, branch == value_branch, bool)
        return chosen, self.branches[value_branch].read(cursor, np.flatnonzero(chosen), count)

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        chosen, values = read
        if self.value_branch is None or not chosen[good].any():
            return pa.nulls(int(good.sum()))  # no value but nulls: pyarrow infers the null type
        return self.branches[self.value_branch].build(values, cursor, good, chosen)


class _Record(_Node):
    def __init__(self, fields: list[tuple[str, _Node]]) -> None:
        self.fields = fields

    def read(self, cursor: _Cursor, rows: Any, count: int) -> Any:
        return [node.read(cursor, rows, count) for _, node in self.fields]

    def build(self, read: Any, cursor: _Cursor, good: np.ndarray, valid: np.ndarray | None) -> pa.Array:
        children = [node.build(part, cursor, good, None) for (_, node), part in zip(self.fields, read, strict=True)]
        return pa.StructArray.from_arrays(children, names=[name for name, _ in self.fields])


@dataclass
class AvroColumnPlan:
    """The column reader of one record schema: :meth:`decode` sorts a batch's framed values into good and suspect."""

    root: _Record
    header: bytes

    def decode(self, values: pa.Array) -> tuple[np.ndarray, pa.Array]:
        """``(good, column)``: which values read as this schema (framed with :attr:`header`), and their column.

        ``values`` is a binary column; a null, another header, a value shorter than its
        header or one that does not read is not good. :class:`Unsupported` when the batch
        cannot be built here (invalid UTF-8 in a string): the per-record decoder then takes it.
        """
        count = len(values)
        if values.type != pa.binary():
            raise Unsupported(f"values of type {values.type}")
        _, offsets_buffer, data_buffer = values.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int32, count + 1, values.offset * 4).astype(np.int64)
        raw = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
        data = np.zeros(raw.size + _PADDING, np.uint8)
        data[: raw.size] = raw
        start, end = offsets[:-1], offsets[1:]
        framed = end - start >= len(self.header)
        head = data[start[:, None] + np.arange(len(self.header))]
        bad = ~(framed & (head == np.frombuffer(self.header, np.uint8)).all(axis=1))
        if values.null_count:
            bad |= ~np.asarray(values.is_valid())
        cursor = _Cursor(data, np.where(bad, end, start + len(self.header)), end, bad)
        read = self.root.read(cursor, slice(None), count)
        good = ~cursor.bad
        return good, self.root.build(read, cursor, good, None)


@dataclass
class _Compiler:
    named: dict[str, _Node | None] = field(default_factory=dict)

    def compile(self, schema: Any, namespace: str | None, in_union: bool = False) -> _Node:
        if isinstance(schema, str):
            return self.by_name(schema, namespace, in_union)
        if isinstance(schema, list):
            if in_union:
                raise Unsupported("a union in a union")
            branches = [self.compile(branch, namespace, in_union=True) for branch in schema]
            if sum(not isinstance(node, _Null) for node in branches) > 1:
                raise Unsupported("a union of two types")
            return _Union(branches)
        if not isinstance(schema, Mapping):
            raise Unsupported(f"schema {schema!r}")
        kind = schema["type"]
        if kind in _LEAF_TYPES or not isinstance(kind, str):
            return self.compile(kind, namespace, in_union)
        if kind in ("record", "error"):
            if in_union:
                raise Unsupported("a record in a union")
            return self.record(schema, namespace)
        if kind in ("enum", "fixed"):
            full = _full_name(schema["name"], schema.get("namespace", namespace))
            node: _Node = _Enum(list(schema["symbols"])) if kind == "enum" else _Sized(pa.binary(), int(schema["size"]))
            self.named[full] = node
            return node
        if kind in ("array", "map"):
            raise Unsupported(kind)
        return self.compile(kind, namespace, in_union)

    def by_name(self, name: str, namespace: str | None, in_union: bool) -> _Node:
        """A primitive, or a named type defined before (as ``AvroCodec`` looks it up)."""
        if name in _LEAF_TYPES:
            return _leaf(name)
        full = _full_name(name, namespace)
        if full not in self.named and name in self.named:
            full = name
        node = self.named.get(full)
        if node is None:  # unknown, or a type that names itself (a linked list)
            raise Unsupported(f"type {name!r}")
        if in_union and isinstance(node, _Record):
            raise Unsupported("a record in a union")
        return node

    def record(self, schema: Mapping[str, Any], namespace: str | None) -> _Record:
        full = _full_name(schema["name"], schema.get("namespace", namespace))
        self.named[full] = None  # in progress: a field naming it is recursive
        inner = full.rpartition(".")[0] or None
        fields = [(str(spec["name"]), self.compile(spec["type"], inner)) for spec in schema["fields"]]
        names = [name for name, _ in fields]
        if not fields or len(set(names)) != len(names):
            raise Unsupported("a record without fields, or with a field name twice")
        node = _Record(fields)
        self.named[full] = node
        return node


def _leaf(kind: str) -> _Node:
    if kind in ("long", "int"):
        return _Long()
    if kind in ("double", "float"):
        return _Real(8 if kind == "double" else 4)
    if kind == "boolean":
        return _Boolean()
    if kind == "null":
        return _Null()
    return _Sized(_LEAF_TYPES[kind])


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def column_plan(schema: Any, header: bytes) -> AvroColumnPlan | None:
    """The plan for a top-level record schema (parsed JSON) framed by ``header``, or None when it has none."""
    try:
        root = _Compiler().compile(schema, None)
    except (Unsupported, KeyError, TypeError, ValueError):
        return None
    if not isinstance(root, _Record):
        return None
    return AvroColumnPlan(root, header)


#: How many values of a batch are looked at to find the header most of them carry.
HEADER_SAMPLE: Final = 64
#: Plans kept per converter at most; past it the cache starts over (a topic has a few schema versions).
PLANS_CACHE_SIZE: Final = 64


class VectorizedAvroConverter:
    """The ``avro`` converter over a whole batch: the values of its most common schema in one column read.

    The values that do not read as that schema (see :class:`AvroColumnPlan`) go through
    :class:`BatchRunner` with the per-record converter, in row order, so their exception,
    error context and DLQ record are the per-record path's to the byte. When it accepts one
    (a value of another schema version, a tombstone), the batch's values are handed back
    as the per-record path's Python values, and its column is built as that path builds it.
    """

    def __init__(self, stage: PipelineStage, converter: Converter, runner: BatchRunner) -> None:
        deserializer = converter.fn
        assert isinstance(deserializer, RegistryDeserializer)
        self.stage = stage
        self.converter = converter
        self.deserializer = deserializer
        self.runner = runner
        #: Each header's codec and plan (None: the schema has no plan), checked against the loaded codec.
        self.plans: dict[bytes, tuple[Any, AvroColumnPlan | None]] = {}
        self.warned = False

    def plan_for(self, raw: pa.Array) -> AvroColumnPlan | None:
        """The plan of the header most of the batch's first values carry, when its schema is loaded and has one."""
        headers = [value[:5] for value in raw.slice(0, HEADER_SAMPLE).to_pylist() if value and value[:1] == b"\x00"]
        if not headers:
            return None
        header = max(set(headers), key=headers.count)
        if len(header) < 5:
            return None
        codec = self.deserializer.loaded_codec(int.from_bytes(header[1:5], "big"))
        if not isinstance(codec, AvroCodec):
            return None
        known = self.plans.get(header)
        if known is not None and known[0] is codec:
            return known[1]
        if len(self.plans) >= PLANS_CACHE_SIZE:
            self.plans.clear()
        plan = column_plan(codec.schema, header)
        self.plans[header] = (codec, plan)
        return plan

    def convert(
        self, raw: pa.Array, rows: list[int], columns: BatchColumns
    ) -> tuple[pa.Array | list[Any], list[int]] | None:
        """Decode ``raw`` (the binary values of ``rows``): the column or the values, and the rows that decoded.

        None when the batch has no plan (its schema is not loaded yet, or has an array, a map...):
        the caller decodes it record by record.
        """
        plan = self.plan_for(raw)
        if plan is None:
            return None
        try:
            good, column = plan.decode(raw)
        except Unsupported:
            return None
        except Exception:  # a defect here must cost speed, never a record: the per-record decoder takes the batch
            if not self.warned:
                self.warned = True
                LOG.warning("the Avro column decoder failed on a batch; decoding it record by record", exc_info=True)
            return None
        if good.all():
            return column, rows
        suspects = np.flatnonzero(~good).tolist()
        suspect_rows = [rows[i] for i in suspects]
        values = raw.take(pa.array(suspects, pa.int64())).to_pylist()
        source = columns.source_records_of(suspect_rows)
        fn = self.deserializer
        converted, accepted = self.runner.run(self.stage, fn, values, suspect_rows, source, fast=self.converter.fast)
        kept = list(compress(rows, good.tolist()))
        if not accepted:
            return (column, kept) if kept else (pa.array([]), [])  # no value at all: what pyarrow makes of none
        # A value the column did not read and the per-record converter did: the batch as the per-record path has it.
        by_row = dict(zip(kept, column.to_pylist(), strict=True))
        by_row.update(zip(accepted, converted, strict=True))
        ordered = [row for row in rows if row in by_row]
        return [by_row[row] for row in ordered], ordered
