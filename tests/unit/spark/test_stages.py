"""The batch runner: failures isolated per record, nothing run twice, the errors.* policy applied."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_kerr.errors import (
    ErrorHandlingConfig,
    ErrorMetrics,
    PipelineStage,
    RetriableError,
    RetryWithTolerance,
    SourceRecord,
    Stage,
    TaskId,
    ToleranceExceeded,
)
from airflow_kerr.errors.stacktrace import format_stacktrace
from airflow_kerr.spark.stages import BatchRunner, decode_json, drop_filtered, make_converter

STAGE = PipelineStage(Stage.VALUE_CONVERTER, "test.Converter")


def runner(now: list[float] | None = None, /, **properties: Any) -> tuple[BatchRunner, ErrorMetrics, list[Any]]:
    """A batch runner whose reports are collected; with ``now``, its clock reads ``now[0]`` and each wait moves it."""
    reported: list[Any] = []

    class Collect:
        def report(self, context: Any) -> None:
            reported.append(context)

    metrics = ErrorMetrics()
    timing: dict[str, Any] = {"sleep": lambda ms: None}
    if now is not None:
        timing = {"clock": lambda: now[0], "sleep": lambda ms: now.__setitem__(0, now[0] + ms)}
    retry = RetryWithTolerance(
        ErrorHandlingConfig.from_properties(properties),
        metrics,
        [Collect()],
        task=TaskId("p", 0),
        stages=[STAGE],
        **timing,
    )
    return BatchRunner(retry), metrics, reported


def source(row: int) -> SourceRecord:
    return SourceRecord("t", 0, row, key=None, value=str(row).encode())


def test_list_extend_keeps_results_made_before_an_exception() -> None:
    """The runner relies on CPython keeping what list.extend appended before the iterator raised."""
    out: list[int] = []

    def fail_at_three(x: int) -> int:
        if x == 3:
            raise ValueError
        return x

    with pytest.raises(ValueError):
        out.extend(map(fail_at_three, range(6)))
    assert out == [0, 1, 2]


def test_bad_records_are_isolated_and_each_good_one_runs_once() -> None:
    batch_runner, metrics, reported = runner(**{"errors.tolerance": "all"})
    calls: list[bytes] = []

    def convert(raw: bytes) -> Any:
        calls.append(raw)
        return decode_json(raw)

    items = [b"1", b"{bad", b"3", b"4", b"[", b"6"]
    values, rows = batch_runner.run(STAGE, convert, items, list(range(6)), source)

    assert values == [1, 3, 4, 6]
    assert rows == [0, 2, 3, 5]
    assert calls == items
    assert [context.record.offset for context in reported] == [1, 4]
    assert metrics.total_records_skipped == 2 and metrics.total_record_failures == 2


def test_a_retriable_failure_continues_from_the_first_attempt() -> None:
    batch_runner, metrics, _ = runner(**{"errors.tolerance": "all", "errors.retry.timeout": "5000"})
    attempts: dict[int, int] = {}

    def flaky(x: int) -> int:
        attempts[x] = attempts.get(x, 0) + 1
        if x == 2 and attempts[x] < 3:
            raise RetriableError("try again")
        return x * 10

    values, rows = batch_runner.run(STAGE, flaky, [1, 2, 3], [0, 1, 2], source)

    assert values == [10, 20, 30] and rows == [0, 1, 2]
    assert attempts == {1: 1, 2: 3, 3: 1}
    assert metrics.total_retries == 2
    assert metrics.total_record_failures == 2
    assert metrics.total_records_skipped == 0


def test_a_retry_that_fails_reports_its_own_exception_unchained() -> None:
    """Each attempt's exception stands alone, as in Connect: the last one is reported, not chained to the first."""
    # A clock the backoff waits move: five seconds of retries, no time spent.
    batch_runner, _, reported = runner([0.0], **{"errors.tolerance": "all", "errors.retry.timeout": "5000"})
    attempts: list[int] = []

    def always(x: int) -> int:
        attempts.append(x)
        raise RetriableError(f"attempt {len(attempts)}")

    batch_runner.run(STAGE, always, [7], [0], source)

    assert len(attempts) == 6  # backoffs of 300, 600, 1200 and 2400 ms, then the 500 left
    assert str(reported[0].error) == f"attempt {len(attempts)}"
    assert reported[0].error.__context__ is None


def test_tolerance_none_raises_on_the_first_bad_record() -> None:
    batch_runner, _, reported = runner()
    with pytest.raises(ToleranceExceeded):
        batch_runner.run(STAGE, decode_json, [b"1", b"x", b"3"], [0, 1, 2], source)
    assert len(reported) == 1 and reported[0].record.offset == 1


def test_transformations_may_drop_records_on_purpose() -> None:
    records, rows = drop_filtered(["a", None, "c"], [0, 1, 2])
    assert records == ["a", "c"] and rows == [0, 2]


def test_bytes_converter_does_no_per_record_work() -> None:
    assert make_converter("bytes", Stage.VALUE_CONVERTER).fn is None
    assert make_converter("string", Stage.KEY_CONVERTER).fn is not None
    with pytest.raises(ImportError, match="no callable named 'nope'"):
        make_converter("airflow_kerr.spark.stages.nope", Stage.VALUE_CONVERTER)


# Texts msgspec refuses and json.loads reads (or fails on differently): each must get json.loads's outcome.
JSON_EDGES: list[bytes | None] = [
    b"NaN",
    b"-Infinity",
    b'{"amount": Infinity}',
    b"1e400",
    b'"\\ud800"',
    b'"\xed\xa0\x80"',
    b"\xef\xbb\xbf{}",
    b"1" * 5000,
    b'{"a": 1, "a": 2}',
    b"-0.0",
    b"123456789012345678901234567890",
    b"",
    b"\xff",
    None,
]


def _outcomes(spec: str, fast: bool, values: list[bytes | None]) -> tuple[str, list[tuple[int, str, str]]]:
    """A converter's values (their repr keeps types: 1 is not 1.0) and each failure's row, class and message."""
    batch_runner, _, reported = runner(**{"errors.tolerance": "all"})
    converter = make_converter(spec, Stage.VALUE_CONVERTER)
    assert converter.fn is not None
    converted, rows = batch_runner.run(
        STAGE, converter.fn, values, list(range(len(values))), source, fast=converter.fast if fast else None
    )
    failures = [(c.record.offset, type(c.error).__name__, str(c.error)) for c in reported]
    return repr(list(zip(rows, converted, strict=True))), failures


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@st.composite
def json_texts(draw: st.DrawFn) -> bytes | None:
    """JSON as json.dumps writes it (NaN and Infinity included), cut short or with bytes spliced in, or an edge."""
    kind = draw(st.sampled_from(["json", "cut", "spliced", "edge"]))
    if kind == "edge":
        return draw(st.sampled_from(JSON_EDGES))
    text = json.dumps(draw(json_values), ensure_ascii=draw(st.booleans())).encode("utf-8")
    if kind == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "spliced":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.binary(min_size=1, max_size=3)) + text[at:]
    return text


@settings(max_examples=300, deadline=None)
@given(st.lists(json_texts(), min_size=1, max_size=12))
def test_the_json_converters_fast_path_gives_json_loads_outcome_for_every_value(values: list[bytes | None]) -> None:
    """msgspec decodes what it accepts, json.loads the rest: values, failures and their messages are json.loads's."""
    assert _outcomes("json", True, values) == _outcomes("json", False, values)


def test_the_json_converter_runs_json_loads_only_for_what_msgspec_refuses() -> None:
    """Positive evidence of the fast path: the per-record function sees only the values msgspec refused."""
    batch_runner, _, reported = runner(**{"errors.tolerance": "all"})
    converter = make_converter("json", Stage.VALUE_CONVERTER)
    assert converter.fast is not None
    assert converter.fn is not None
    per_record: list[bytes | None] = []

    def counted(raw: bytes | None) -> Any:
        per_record.append(raw)
        return decode_json(raw)

    values = [b'{"a": 1}', b"NaN", b"[1, 2]", b"{bad", None, b'"x"']
    converted, rows = batch_runner.run(STAGE, counted, values, list(range(6)), source, fast=converter.fast)

    assert per_record == [b"NaN", b"{bad", None]
    assert rows == [0, 1, 2, 4, 5]
    assert repr(converted) == "[{'a': 1}, nan, [1, 2], None, 'x']"
    assert [(c.record.offset, type(c.error).__name__) for c in reported] == [(3, "JSONDecodeError")]
    # Reported as json.loads raised it: not chained to msgspec's refusal, so its DLQ stack trace is json.loads's alone.
    assert reported[0].error.__context__ is None
    assert "msgspec" not in format_stacktrace(reported[0].error)


@given(st.lists(st.none() | st.binary(max_size=8) | st.text(max_size=4).map(str.encode), min_size=1, max_size=10))
def test_the_string_converters_fast_path_is_decode_string(values: list[bytes | None]) -> None:
    """bytes.decode in the C loop, decode_string for a null: the same strings, the same UnicodeDecodeErrors."""
    assert _outcomes("string", True, values) == _outcomes("string", False, values)
