"""Pipeline stages and the batch runner that applies ``errors.*`` record by record at batch speed.

How a batch goes through a stage: the stage's function is mapped over the whole
batch by ``list.extend(map(fn, items))``, a loop that runs in C and keeps the
results produced before an exception. When record *i* raises, the results for
``0..i-1`` are kept, record *i* alone goes to :class:`RetryWithTolerance` (which
continues from the failure already seen: the first attempt is not run twice),
and the loop resumes at *i+1*. So a clean batch pays one C loop per stage and no
per-record error handling, a bad record costs its own retries and report, and no
work is done twice. Converters that need no per-record work (``bytes``) run once
per batch. The :class:`SourceRecord` that error contexts and DLQ records need is
built only for a record that failed.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat, starmap
from typing import Any, Final

from airflow_kerr.callables import import_callable
from airflow_kerr.errors import SKIPPED, PipelineStage, RetryWithTolerance, SourceRecord, Stage
from airflow_kerr.errors.record import Header
from airflow_kerr.formats import RegistryDeserializer, RegistrySettings, registry_client_for
from airflow_kerr.formats.registry_settings import FORMATS

BUILTIN_CLASS = "airflow_kerr.spark.stages"
BATCH_KIND_ATTRIBUTE: Final = "__kerr_batch__"
BATCH_KINDS: Final = ("arrow", "pandas")
#: The class each registry converter names in error contexts and DLQ headers: Confluent's, whose texts it writes.
REGISTRY_CONVERTER_CLASSES: Final = {
    "avro": "io.confluent.connect.avro.AvroConverter",
    "protobuf": "io.confluent.connect.protobuf.ProtobufConverter",
    "json_schema": "io.confluent.connect.json.JsonSchemaConverter",
}


@dataclass(slots=True)
class PipelineRecord:
    """What a transformation receives and returns: the converted key and value plus the source coordinates.

    A transformation returns the record (changed or not), a new one, or ``None`` to
    drop it on purpose (a filter, not an error).
    """

    key: Any
    value: Any
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    headers: list[Header] = field(default_factory=list)


def decode_string(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8")


def decode_json(raw: bytes | None) -> Any:
    return None if raw is None else json.loads(raw)


def fast_json_decoder() -> Callable[[bytes], Any] | None:
    """msgspec's JSON decoder: ``json.loads``'s value for every text it accepts, about seven times faster.

    2.1 against 0.3 µs on a 100-byte order (``decode_json`` and this, each mapped over 8,192
    of them). It is a C function, so mapping it over a batch runs no Python frame per record, and it
    accepts strictly less than ``json.loads``: ``NaN``, ``Infinity``, numbers beyond a
    double, lone surrogates and a UTF-8 byte order mark are refused (json.loads accepts
    them), as are all invalid texts. A value it refuses goes to :func:`decode_json`, whose
    result or exception is the record's, so a DLQ record names ``json.loads``'s error.
    None without msgspec (a bare Spark executor): the converter is then ``json.loads`` alone.
    """
    try:
        import msgspec
    except ImportError:  # pragma: no cover - msgspec comes with Airflow; a bare Spark executor may lack it
        return None
    decode: Callable[[bytes], Any] = msgspec.json.Decoder().decode
    return decode


#: The JSON converter's fast function (:func:`fast_json_decoder`), one for the process.
FAST_DECODE_JSON: Final = fast_json_decoder()
#: The string converter's: :func:`decode_string` for bytes (UTF-8, strict), a C method; a null goes to decode_string.
FAST_DECODE_STRING: Final = bytes.decode


@dataclass(frozen=True)
class Converter:
    """A key or value converter: a per-record function, or None when the raw bytes pass through.

    ``fast``, when set, is a C function that returns ``fn``'s result for every input it
    accepts and raises for the others, which then go to ``fn``: the per-record path maps it
    over a batch (see :meth:`BatchRunner.run`), and only ``fn``'s outcome ever counts.
    """

    stage: PipelineStage
    fn: Callable[[bytes | None], Any] | None
    fast: Callable[[bytes], Any] | None = None


def make_converter(spec: str, stage: Stage, registry: RegistrySettings | None = None) -> Converter:
    """The converter named ``bytes``, ``string``, ``json``, ``avro``, ``protobuf``, ``json_schema`` or a callable.

    A registry converter is a :class:`RegistryDeserializer` over the process's registry client,
    so every task of an executor process shares its cache of compiled schemas; its ``topic``
    (named in failure texts) is set by the task from its first batch.
    """
    if spec in FORMATS:
        if registry is None:
            raise ValueError(f"{stage.name.lower()}={spec!r} needs the schema_registry settings")
        converter = RegistryDeserializer(
            spec,
            registry_client_for(registry),
            is_key=stage is Stage.KEY_CONVERTER,
            validate_json=registry.json_fail_invalid_schema,
        )
        # Avro's fast function is fastavro's compiled read of a schema already loaded (RegistryDeserializer.fast).
        fast = converter.fast if spec == "avro" else None
        return Converter(PipelineStage(stage, REGISTRY_CONVERTER_CLASSES[spec]), converter, fast)
    if spec == "bytes":
        return Converter(PipelineStage(stage, f"{BUILTIN_CLASS}.ByteArrayConverter"), None)
    if spec == "string":
        return Converter(PipelineStage(stage, f"{BUILTIN_CLASS}.StringConverter"), decode_string, FAST_DECODE_STRING)
    if spec == "json":
        return Converter(PipelineStage(stage, f"{BUILTIN_CLASS}.JsonConverter"), decode_json, FAST_DECODE_JSON)
    return Converter(PipelineStage(stage, spec), import_callable(spec))


def batch_transformation(fn: Callable[..., Any] | None = None, *, kind: str = "arrow") -> Any:
    """Mark a transformation as vectorized: ``RecordBatch`` in and out (``kind="arrow"``), or ``DataFrame``.

    Use as ``@batch_transformation`` or ``@batch_transformation(kind="pandas")``; the job
    reads the mark when it imports the function by its dotted path.
    """
    if kind not in BATCH_KINDS:
        raise ValueError(f"batch_transformation(kind={kind!r}): expected one of {', '.join(BATCH_KINDS)}")

    def mark(function: Callable[..., Any]) -> Callable[..., Any]:
        setattr(function, BATCH_KIND_ATTRIBUTE, kind)
        return function

    return mark if fn is None else mark(fn)


def batch_kind(fn: Callable[..., Any]) -> str | None:
    """``"arrow"`` or ``"pandas"`` for a function marked with :func:`batch_transformation`, else None."""
    kind = getattr(fn, BATCH_KIND_ATTRIBUTE, None)
    return kind if kind in BATCH_KINDS else None


def make_transformation(path: str) -> tuple[PipelineStage, Callable[[PipelineRecord], PipelineRecord | None]]:
    return PipelineStage(Stage.TRANSFORMATION, path), import_callable(path)


class BatchRunner:
    """Runs one stage over a batch under the retry/tolerance policy, isolating the records that fail.

    ``source_record(i)`` builds the :class:`SourceRecord` of row ``i`` of the current
    batch; it is called only for a failed record. When retries are on, the clock is read
    as each record is handed to the stage, as Connect reads it before every operation:
    the retry deadline of a record that fails runs from the start of its first attempt.
    """

    def __init__(self, retry: RetryWithTolerance) -> None:
        self.retry = retry
        #: Positions (in the items of the last :meth:`run`) of the records that failed and were left out.
        self.dropped: list[int] = []

    def run(
        self,
        stage: PipelineStage,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        rows: Sequence[int],
        source_record: Callable[[int], SourceRecord],
        *,
        fast: Callable[..., Any] | None = None,
        star: bool = False,
    ) -> tuple[list[Any], list[int]]:
        """Return the stage's results and the row numbers they belong to; tolerated failures are left out.

        ``fast``, when given, is ``fn`` without its slow path, called with an item
        (``fast(*item)`` with ``star``) so a C function runs in the C loop with no Python
        frame per record. An item ``fast`` raises for gets ``fn`` as its first attempt, and
        only ``fn``'s outcome counts: a Kafka producer's ``produce`` raises ``BufferError`` on
        a full local queue, which the sink's ``fn`` waits out rather than fail the record;
        msgspec refuses ``NaN``, which ``json.loads`` reads. :attr:`dropped` says which items
        were left out, for lists that must stay aligned with the results.
        """
        failed: list[int] = []
        stamp = [0.0]
        clock = self.retry.clock if self.retry.config.retry_enabled else None

        def handle(position: int, error: Exception) -> Any:
            failed.append(position)
            record = source_record(rows[position])
            return self.retry.execute_after_failure(stage, fn, record, error, stamp[0], items[position])

        def first_attempt(position: int, _fast_error: Exception) -> Any:
            try:
                return fn(items[position])
            except Exception as error:
                return handle(position, error)

        stamped = items if clock is None else _stamped(items, clock, stamp)
        if fast is None:
            results = map_past_failures(fn, stamped, handle)
        else:
            results = map_past_failures(fast, stamped, first_attempt, star=star)
        # A failed item whose retry succeeded keeps its place; only the skipped ones go.
        self.dropped = [position for position in failed if results[position] is SKIPPED]
        if not self.dropped:
            return results, list(rows)
        return without_positions(results, self.dropped), without_positions(rows, self.dropped)


def without_positions(items: Sequence[Any], positions: Sequence[int]) -> list[Any]:
    """``items`` less the given positions, kept in order by C-level ``compress`` (no Python step per item)."""
    keep = [True] * len(items)
    for position in positions:
        keep[position] = False
    return list(compress(items, keep))


def map_past_failures(
    fn: Callable[..., Any], items: Iterable[Any], on_failure: Callable[[int, Exception], Any], *, star: bool = False
) -> list[Any]:
    """``[fn(item) for item in items]`` in a C-level ``map`` loop; a failed item gets ``on_failure(index, error)``.

    One iterator serves the whole run: when ``fn`` raises, ``map`` has taken exactly the
    failed item from it, so the loop resumes after it without copying what is left.
    ``on_failure``'s return value takes the failed item's place in the results; it runs after
    the failure is handled, not during, so nothing it raises is chained to the failure. With
    ``star`` each item is a tuple of arguments (``itertools.starmap``).
    """
    results: list[Any] = []
    remaining = iter(items)
    apply = starmap if star else map
    while True:
        try:
            results.extend(apply(fn, remaining))
            return results
        except Exception as error:
            failed = error
        # Outside the except block: an exception raised under on_failure (a first attempt after a
        # fast function refused the item, a retry) is not chained to ``failed`` as its __context__,
        # so its stack trace in the DLQ is the one the record's own call raised.
        try:
            results.append(on_failure(len(results), failed))
        finally:
            del failed  # its traceback holds this frame: leave no reference cycle behind


def _stamped(items: Sequence[Any], clock: Callable[[], float], stamp: list[float]) -> Iterator[Any]:
    """Yield ``items``, noting in ``stamp[0]`` the clock as each is taken: ``map`` takes one right before calling."""
    for item in items:
        stamp[0] = clock()
        yield item


def drop_filtered(records: list[Any], rows: list[int]) -> tuple[list[Any], list[int]]:
    """Remove the records a transformation dropped on purpose (returned None)."""
    # By identity: "None in records" would call each record's dataclass __eq__.
    if not any(map(operator.is_, records, repeat(None))):
        return records, rows
    kept = [i for i, record in enumerate(records) if record is not None]
    return [records[i] for i in kept], [rows[i] for i in kept]
